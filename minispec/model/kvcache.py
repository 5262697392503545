"""A preallocated key/value cache: fixed arrays plus one integer, as in llama2.c.

Positions ``0 .. length-1`` hold valid keys and values. Going back is O(1): ``crop(length)`` only
moves ``length`` (the name of transformers' ``DynamicCache.crop``); the stale entries past it are
overwritten by the next forward.
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

    def crop(self, length: int) -> None:
        """Keep positions 0 .. length-1; forget the rest."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a cache of length {self.length} to {length}")
        self.length = int(length)

    def keep(self, start: int, offsets) -> None:
        """Keep positions ``start + offsets`` (ascending) and move them to ``start, start+1, ..``.

        Used after tree verification: the accepted path's entries are scattered among the
        rejected siblings and are compacted into a contiguous prefix.
        """
        idx = start + np.asarray(offsets, dtype=np.int64)
        n = len(idx)
        if not 0 <= start <= self.length or (n and (idx[0] < start or idx[-1] >= self.length or np.any(np.diff(idx) <= 0))):
            raise ValueError(f"keep: offsets must be ascending, >= 0 and inside the cache (length {self.length}), from "
                             f"a start inside it, got start {start}")  # (bug: a negative offset, or a start past the
            # end, which made unwritten slots count, passed)
        src = backend.asarray(idx)
        self.k[:, :, start:start + n] = self.k[:, :, src]
        self.v[:, :, start:start + n] = self.v[:, :, src]
        self.length = start + n

    def with_room(self, length: int, limit: int) -> "KVCache":
        """This cache if it has room for ``length`` positions, else a copy with at least twice the room (at most
        ``limit``: a ``length`` past it gets ``limit``, and the pass that needs more refuses it, by name): the valid
        entries move over, nothing is computed again."""
        if length <= self.max_len:
            return self
        L, KVH, _, HD = self.k.shape
        grown = KVCache(L, KVH, min(limit, max(2 * self.max_len, length)), HD)
        grown.k[:, :, : self.length] = self.k[:, :, : self.length]
        grown.v[:, :, : self.length] = self.v[:, :, : self.length]
        grown.length = self.length
        return grown


def kept_prefix(cached: list[int], tokens: list[int], cache_length: int) -> int:
    """How many positions a cache holding ``cached`` can keep to hold ``tokens`` instead: their common prefix,
    at most ``cache_length``, and at most len(tokens) - 1 so that at least one token is fed for its logits.
    Then ``cache.crop(n)`` and feed ``tokens[n:]``."""
    return min(common_prefix(cached, tokens), len(tokens) - 1, cache_length)


def common_prefix(a, b) -> int:
    """The length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n
