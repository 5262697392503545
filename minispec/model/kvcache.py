"""A preallocated key/value cache: fixed arrays plus one integer, as in llama2.c.

Positions ``0 .. length-1`` hold valid keys and values. Going back is O(1): ``rollback(length)``
only moves ``length``; the stale entries past it are overwritten by the next forward.
"""

from __future__ import annotations

import numpy as np

from . import backend


class KVCache:
    def __init__(self, num_layers: int, num_kv_heads: int, max_len: int, head_dim: int):
        shape = (num_layers, num_kv_heads, max_len, head_dim)  # [L, KVH, S_max, HD]
        self.k = backend.xp.zeros(shape, dtype=np.float32)
        self.v = backend.xp.zeros(shape, dtype=np.float32)
        self.length = 0

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    def rollback(self, length: int) -> None:
        """Forget every position >= length."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot roll back a cache of length {self.length} to {length}")
        self.length = int(length)

    def keep(self, start: int, offsets) -> None:
        """Keep positions ``start + offsets`` (ascending) and move them to ``start, start+1, ..``.

        Used after tree verification: the accepted path's entries are scattered among the
        rejected siblings and are compacted into a contiguous prefix.
        """
        idx = start + np.asarray(offsets, dtype=np.int64)
        n = len(idx)
        if n and (idx[-1] >= self.length or np.any(np.diff(idx) <= 0)):
            raise ValueError(f"keep: offsets must be ascending and inside the cache (length {self.length})")
        src = backend.asarray(idx)
        self.k[:, :, start:start + n] = self.k[:, :, src]
        self.v[:, :, start:start + n] = self.v[:, :, src]
        self.length = start + n


def kept_prefix(cached: list[int], tokens: list[int], cache_length: int) -> int:
    """How many positions a cache holding ``cached`` can keep to hold ``tokens`` instead: their common prefix,
    at most ``cache_length``, and at most len(tokens) - 1 so that at least one token is fed for its logits.
    Then ``cache.rollback(n)`` and feed ``tokens[n:]``."""
    n = 0
    for a, b in zip(cached, tokens):
        if a != b:
            break
        n += 1
    return min(n, len(tokens) - 1, cache_length)
