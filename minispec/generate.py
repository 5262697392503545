"""Plain autoregressive decoding: one target forward per token. The baseline speculation must beat."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .keyed import keyed_noise
from .model import Model
from .sampling import Warp, check_generate_args, sample, stop_set


def generate(model: Model, prompt_ids, max_new_tokens: int, *, temperature: float = 0.0, top_k: int | None = None,
             top_p: float | None = None, seed: int | None = None, stop_ids=None,
             on_token: Callable[[int], None] | None = None, keyed: bool = False, processors=()) -> list[int]:
    """New token ids after ``prompt_ids``; stops after a token in ``stop_ids`` (which is included). ``keyed``: each
    token is the race on noise keyed by (seed, its position) (keyed.py) instead of a draw from one stream: the
    sampler whose tokens every run of the coupled rule (``rule="coupled"``) reproduces, whatever its drafter.
    ``processors``: logits processors (processors.py), applied to each row before the warp (sampling.Warp)."""
    ids = check_generate_args(model, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, stop_ids)
    w = Warp(temperature, top_k, top_p, tuple(processors or ()), len(ids))
    seq = [int(t) for t in ids]  # the prefix the processors read
    rng = np.random.default_rng(seed)
    noise = keyed_noise(seed, rng) if keyed else None
    stop = stop_set(stop_ids)
    out: list[int] = []
    if max_new_tokens == 0:
        return out
    cache = model.new_cache(len(ids) + max_new_tokens)
    logits = model.forward(ids, cache, last=1)[0]  # [V]: prefill
    while True:
        probs = w(logits, seq + out if w.processors else None, strict=True)  # [V]: the prefix only when read
        token = noise.race(probs, len(ids) + len(out)) if keyed else sample(probs, rng)
        out.append(token)
        if on_token:
            on_token(token)
        if token in stop or len(out) == max_new_tokens:
            return out
        logits = model.forward([token], cache)[0]  # [V]
