"""Plain autoregressive decoding: one target forward per token. The baseline speculation must beat."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .model import Model
from .sampling import check_warp_args, sample, warp


def check_generate_args(model: Model, prompt_ids, max_new_tokens: int, temperature, top_k, top_p) -> np.ndarray:
    check_warp_args(temperature, top_k, top_p)
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens}")
    ids = model.check_tokens(prompt_ids)
    limit = model.cfg.max_position_embeddings
    if len(ids) + max_new_tokens > limit:
        raise ValueError(f"prompt ({len(ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
                         f"context of {limit} positions")
    return ids


def generate(model: Model, prompt_ids, max_new_tokens: int, *, temperature: float = 0.0, top_k: int | None = None,
             top_p: float | None = None, seed: int | None = None, stop_ids=None,
             on_token: Callable[[int], None] | None = None) -> list[int]:
    """New token ids after ``prompt_ids``; stops after a token in ``stop_ids`` (which is included)."""
    ids = check_generate_args(model, prompt_ids, max_new_tokens, temperature, top_k, top_p)
    rng = np.random.default_rng(seed)
    stop = set(stop_ids or ())
    out: list[int] = []
    if max_new_tokens == 0:
        return out
    cache = model.new_cache(len(ids) + max_new_tokens)
    logits = model.forward(ids, cache, last=1)[0]  # [V]: prefill
    while True:
        token = sample(warp(logits, temperature, top_k, top_p), rng)
        out.append(token)
        if on_token:
            on_token(token)
        if token in stop or len(out) == max_new_tokens:
            return out
        logits = model.forward([token], cache)[0]  # [V]
