"""Timing: what a target pass over n tokens costs, and what a drafter's guess and catch-up cost.

A model pass is timed by ``forward_times``. A draft model is timed through the drafter protocol
(``guess_time``). An EAGLE head cannot guess before the target has given it features, and a draft with its
own tokenizer reads text, so each is timed on inputs made for it (random features; a random text). Every
function leaves the drafter as it found it: no state. These are the measured inputs of the cost model
(costs.py), kept out of the drafters' classes.

Every timing reads ``clock``: a test puts a scripted clock in its place, so that no test's outcome depends
on how fast the machine was a moment ago.
"""

from __future__ import annotations

import time

import numpy as np

from ..model import backend
from ..sampling import warp

clock = time.perf_counter  # seconds; every timing of the cost model reads it


def forward_times(model, ns=(1, 2, 4, 8, 16), context: int = 256, repeats: int = 20, warmup: int = 3) -> dict[int, float]:
    """Median seconds of ``model.forward`` over n new tokens after ``context`` cached tokens, for each n.

    The n values are interleaved inside each repeat so that machine noise hits them alike. The context
    shrinks to fit a model with few positions."""
    ns = tuple(ns)
    context = max(0, min(context, model.cfg.max_position_embeddings - max(ns)))
    rng = np.random.default_rng(0)
    cache = model.new_cache(context + max(ns))
    if context:
        model.forward(rng.integers(0, model.cfg.vocab_size, context), cache)
    times = {n: [] for n in ns}
    for r in range(warmup + repeats):
        for n in ns:
            ids = rng.integers(0, model.cfg.vocab_size, n)
            cache.crop(context)
            backend.synchronize()
            t0 = clock()
            model.forward(ids, cache)
            backend.synchronize()
            if r >= warmup:
                times[n].append(clock() - t0)
    return {n: float(np.median(t)) for n, t in times.items()}


def greedy(z):
    return warp(z, 0.0)


def guess_time(drafter, tokens: list[int], repeats: int = 20, warmup: int = 2) -> float:
    """Median seconds per guess of ``drafter``: propose(k=4) after ``tokens``, greedy, divided by 4 (a draft
    model re-feeds the last token, so that is 4 draft passes and 4 samplings)."""
    timed = self_timed_costs(drafter)  # a feature drafter cannot guess before the target gives features
    if timed is not None:
        return timed(drafter, n=len(tokens), repeats=repeats)[0]
    rng = np.random.default_rng(0)
    ts = []
    for _ in range(warmup + repeats):
        t0 = clock()
        drafter.propose(tokens, 4, greedy, rng)
        ts.append((clock() - t0) / 4)
    return float(np.median(ts[warmup:]))


def reset_eagle(eagle) -> None:
    eagle.ftokens, eagle.htokens, eagle.f_at = [], [], -1
    eagle.cache.crop(0)


def eagle_costs(eagle, n: int = 64, repeats: int = 5) -> tuple[float, float]:
    """(seconds per guess, seconds per entry caught up) of an EAGLE head (drafters/eagle.py), on random tokens
    and features."""
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in rng.integers(0, eagle.vocab, n + 1)]
    feats = rng.standard_normal((n, eagle.cfg.hidden_size)).astype(np.float32)
    per_guess, per_fed = [], []
    for _ in range(repeats + 1):
        reset_eagle(eagle)
        eagle.see_features(tokens[:n], feats)
        t0 = clock()
        eagle.catch_up(tokens)
        t1 = clock()
        eagle.propose(tokens, 4, greedy, rng)
        t2 = clock()
        per_fed.append((t1 - t0) / n)
        per_guess.append((t2 - t1) / 4)
    reset_eagle(eagle)
    return float(np.median(per_guess[1:])), float(np.median(per_fed[1:]))


def eagle_level_times(eagle, widths, n: int = 64, repeats: int = 5) -> dict[int, float]:
    """Seconds of one tree level of an EAGLE head: a head pass over w entries and their reduced logits, after n."""
    rng = np.random.default_rng(0)
    eagle.ensure_room(n + max(widths))
    eagle.head(rng.integers(0, eagle.vocab, n), rng.standard_normal((n, eagle.cfg.hidden_size)), 0)
    times = {w: [] for w in widths}
    for _ in range(repeats + 1):
        for w in widths:
            t0 = clock()
            eagle.logits(eagle.head(rng.integers(0, eagle.vocab, w), rng.standard_normal((w, eagle.cfg.hidden_size)), n))
            times[w].append(clock() - t0)
    reset_eagle(eagle)
    return {w: float(np.median(t[1:])) for w, t in times.items()}


def cross_vocab_costs(draft, n: int = 64, repeats: int = 5) -> tuple[float, float]:
    """(seconds per guess, seconds per target token caught up) of a draft with its own tokenizer
    (drafters/crossvocab.py), greedy, after a text of about n target tokens made of random draft tokens."""
    rng = np.random.default_rng(0)
    text = draft.cross.draft_text(rng.integers(0, len(draft.cross.draft_bytes), n)).decode(errors="ignore")
    tokens = draft.cross.target_ids(text)[:n] or [0]
    per_guess, per_fed = [], []
    for _ in range(repeats + 1):
        draft.cache, draft.fed, draft._read = None, [], ((), None)
        t0 = clock()
        draft.feed(draft.read(tokens) or [0])
        t1 = clock()
        draft.propose(tokens, 4, greedy, rng)
        t2 = clock()
        per_fed.append((t1 - t0) / len(tokens))
        per_guess.append((t2 - t1) / 4)
    draft.cache, draft.fed, draft._read = None, [], ((), None)
    return float(np.median(per_guess[1:])), float(np.median(per_fed[1:]))


def self_timed_costs(drafter):
    """The timing function of a drafter that cannot be timed through ``propose`` alone, or None."""
    if hasattr(drafter, "see_features"):
        return eagle_costs
    if hasattr(drafter, "cross"):
        return cross_vocab_costs
    return None
