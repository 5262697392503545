"""Plain autoregressive decoding: one target forward per token. The baseline speculation must beat."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .keyed import keyed_noise
from .model import Model
from .sampling import check_warp_args, is_integer, sample, warp


def check_generate_args(model: Model, prompt_ids, max_new_tokens: int, temperature, top_k, top_p,
                        seed=None, stop_ids=None) -> np.ndarray:
    """Check every argument of a run before any work -> the prompt as an int64 array."""
    check_warp_args(temperature, top_k, top_p)
    if not (is_integer(max_new_tokens) and max_new_tokens >= 0):
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    if seed is not None and not (is_integer(seed) and seed >= 0):
        raise ValueError(f"seed must be None or a non-negative integer, got {seed!r}")
    check_stop_ids(model, stop_ids)
    ids = model.check_tokens(prompt_ids)
    limit = model.cfg.max_position_embeddings
    if len(ids) + max_new_tokens > limit:
        raise ValueError(f"prompt ({len(ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
                         f"context of {limit} positions")
    return ids


def stop_set(stop_ids) -> set[int]:
    """The checked ``stop_ids`` (``check_stop_ids``) as a set of ints; None: no stop token."""
    return set() if stop_ids is None else {int(t) for t in stop_ids}


def check_stop_ids(model: Model, stop_ids) -> None:
    """None, or a list/tuple/set of token ids of the model's vocabulary (a bare int or a string is refused)."""
    if stop_ids is None:
        return
    if not isinstance(stop_ids, (list, tuple, set, frozenset, np.ndarray)):
        raise TypeError(f"stop_ids must be None or a list of token ids, got {type(stop_ids).__name__} {stop_ids!r}")
    bad = [t for t in stop_ids if not (is_integer(t) and 0 <= t < model.cfg.vocab_size)]
    if bad:
        raise ValueError(f"stop_ids must be token ids in 0..{model.cfg.vocab_size - 1}, got {bad[0]!r}")


def generate(model: Model, prompt_ids, max_new_tokens: int, *, temperature: float = 0.0, top_k: int | None = None,
             top_p: float | None = None, seed: int | None = None, stop_ids=None,
             on_token: Callable[[int], None] | None = None, keyed: bool = False) -> list[int]:
    """New token ids after ``prompt_ids``; stops after a token in ``stop_ids`` (which is included). ``keyed``: each
    token is the race on noise keyed by (seed, its position) (keyed.py) instead of a draw from one stream: the
    sampler whose tokens every run of the coupled rule (``rule="coupled"``) reproduces, whatever its drafter."""
    ids = check_generate_args(model, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, stop_ids)
    rng = np.random.default_rng(seed)
    noise = keyed_noise(seed, rng) if keyed else None
    stop = stop_set(stop_ids)
    out: list[int] = []
    if max_new_tokens == 0:
        return out
    cache = model.new_cache(len(ids) + max_new_tokens)
    logits = model.forward(ids, cache, last=1)[0]  # [V]: prefill
    while True:
        probs = warp(logits, temperature, top_k, top_p)  # [V]
        token = noise.race(probs, len(ids) + len(out)) if keyed else sample(probs, rng)
        out.append(token)
        if on_token:
            on_token(token)
        if token in stop or len(out) == max_new_tokens:
            return out
        logits = model.forward([token], cache)[0]  # [V]
