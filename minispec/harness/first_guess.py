"""A drafter's first guess at every position of a text, teacher-forced: the q that level 4's acceptance
statistic compares with the target's p at the tokens a run emitted (check.py).

A draft model reads the text in one pass. An EAGLE head reads the target's features of the text; a TLI draft
reads its text in its own tokens, one prefix at a time. Neither leaves state in the drafter.
"""

from __future__ import annotations

import numpy as np

from ..model import KVCache


def eagle_first_guess_logits(eagle, tokens, features) -> np.ndarray:  # -> [len(tokens), V]
    """Row j is the head's first guess for x_{j+1} after x_0..x_j, from the target's ``features``
    [len(tokens), D] (row 0, with no feature before it, is uniform over the frequent tokens). One head pass in
    a cache of its own; the drafter's own cache is put back."""
    first = np.full((1, eagle.vocab), -np.inf, np.float32)
    first[0, eagle.tokens_r] = 0.0
    if len(tokens) < 2:
        return first
    own, eagle.cache = eagle.cache, KVCache(1, eagle.cfg.num_kv_heads, len(tokens) - 1, eagle.cfg.head_dim)
    try:
        out = eagle.head(tokens[1:], features[: len(tokens) - 1], 0)  # [n-1, D]: f^_1 .. f^_{n-1}
    finally:
        eagle.cache = own
    return np.concatenate([first, eagle.logits(out)])  # [n, V]


def tli_first_guess_rows(tli, tokens: list[int], start: int, warp) -> np.ndarray:  # -> [len(tokens) - start, V]
    """q' of a first guess at every position j >= start of ``tokens``: what TLI (drafters/tli.py) would draw the
    guess for tokens[j] from, after tokens[:j] (a zero row where the text ends inside a character)."""
    rows = np.zeros((len(tokens) - start, tli.vocab))
    for j in range(start, len(tokens)):
        draft_ids = tli.read(tokens[:j])
        if draft_ids is not None:
            rows[j - start] = tli.target_row(tli.restrict(tli.feed(draft_ids), warp))
    return rows


def draft_first_guess_rows(drafter, tokens: list[int], start: int, warp) -> np.ndarray:  # -> [len(tokens) - start, V]
    """q of a draft model's first guess (a drafter with ``model`` and ``pad``: draft_model.py) at every position
    j >= start of ``tokens``, after tokens[:j]: one pass over the text in a cache of its own."""
    m = drafter.model
    logits = drafter.pad(m.forward(tokens[:-1], m.new_cache(len(tokens) - 1)))  # row j - 1 predicts tokens[j]
    return warp(logits[start - 1:])
