"""Speculative sampling, the textbook round: a draft model, a fixed K, nothing else. Read it second, after the rule.

Chen et al. 2023 (arXiv 2302.01318), Algorithm 2 "speculative sampling"; Leviathan et al. 2022 (arXiv
2211.17192), Algorithm 1. One round, and the line that does it:

    x_1..x_K ~ q_1..q_K, one after another     draft.forward(...), sample(...)   the draft's own cache
    p_1..p_{K+1} in ONE target pass            target.forward(...)               over the last token and x_1..x_K
    n accepted, then one more token t          accept_reject(...)                rejection.py
    forget the rejected guesses                cache.crop(...)                   both caches: an integer
    emit x_1..x_n, t

After each round the target's cache holds every token except the last (before round 1: nothing), so its pass
feeds what it lacks: the whole prompt in round 1, then the last token. The draft's holds the same, or one token
less when all K guesses were kept (it never fed x_K), and its first pass of a round feeds what it lacks too.

This is the real algorithm, not a sketch: ``speculative_generate(target, DraftModel(draft), ...)``
(speculative.py) makes the same calls and emits the same tokens for the same K, temperature and seed
(tests/test_textbook.py). That loop is this round plus what a real run needs: choosing K, probes,
drafters of every kind, trees, stop tokens and statistics.
"""

from __future__ import annotations

import numpy as np

from .model import Model
from .rejection import accept_reject
from .sampling import sample, warp


def speculative_sampling(target: Model, draft: Model, prompt_ids, max_new_tokens: int, *, k: int = 4,
                         temperature: float = 0.0, seed: int | None = None) -> list[int]:
    """``max_new_tokens`` token ids after ``prompt_ids``, distributed as the target's own (greedy: its tokens)."""
    tokens = [int(t) for t in target.check_tokens(prompt_ids)]
    V = target.cfg.vocab_size
    if draft.cfg.vocab_size != V:
        raise ValueError(f"the draft's vocabulary ({draft.cfg.vocab_size}) must be the target's ({V})")
    rng = np.random.default_rng(seed)
    size = len(tokens) + max_new_tokens + k
    target_cache, draft_cache = target.new_cache(size), draft.new_cache(size)
    out: list[int] = []
    while len(out) < max_new_tokens:
        K = min(k, max_new_tokens - len(out) - 1)  # the round emits at most K + 1 tokens

        draft_tokens, draft_probs = [], np.zeros((K, V))  # x_1..x_K and q_1..q_K
        for i in range(K):
            seen = tokens + draft_tokens
            logits = draft.forward(seen[draft_cache.length:], draft_cache, last=1)[0]  # [V]
            draft_probs[i] = warp(logits, temperature)  # q_i: the same warp as the target's
            draft_tokens.append(sample(draft_probs[i], rng))  # x_i ~ q_i

        # ONE target pass over the tokens its cache lacks and the K guesses: K + 1 rows p_1..p_{K+1}
        target_logits = target.forward(tokens[target_cache.length:] + draft_tokens, target_cache, last=K + 1)
        target_probs = warp(target_logits, temperature)  # [K+1, V]

        n, next_token = accept_reject(target_probs, draft_probs, draft_tokens, rng)

        target_cache.crop(len(tokens) + n)  # keep the tokens and x_1..x_n: every token but the new last one
        draft_cache.crop(min(draft_cache.length, len(tokens) + n))  # (the draft never fed x_K)
        tokens += draft_tokens[:n] + [next_token]
        out += draft_tokens[:n] + [next_token]
    return out
