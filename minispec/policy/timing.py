"""Timing: what a target pass over n tokens costs, and what a drafter's guess and catch-up cost.

A model pass is timed by ``forward_times``. A draft model is timed through the drafter protocol
(``guess_time``). A drafter that cannot be timed through ``propose`` alone (an EAGLE head needs the target's
features, a draft with its own tokenizer reads text) times itself through its cost hook
(drafters/protocol.py: ``TimesItself``, ``TimesItsTreeLevels``), on this module's clock. These are the
measured inputs of the cost model (costs.py).

What a timing leaves behind: ``forward_times`` runs on a cache of its own, so the model is as it was. A
drafter timed through ``propose`` keeps what it was timed on in its cache; its next ``propose`` catches up
from there, so its proposals are the same as without the timing. A drafter's own hook decides what it
keeps: the EAGLE head and the drafts with their own tokenizer forget what they were timed on (their caches,
and the head's features, are emptied). Either way a drafter's ``forwards`` counts the timed passes: a run
reads it only after its policy, and with it any calibration, is built (rounds.start_run).

Every timing reads ``clock``: a test puts a scripted clock in its place, so that no test's outcome depends
on how fast the machine was a moment ago.
"""

from __future__ import annotations

import time

import numpy as np

from ..drafters.protocol import TimesItself, has
from ..model import backend
from ..sampling import Stream, Warp

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


greedy = Warp(0.0)  # the warp the timings draft with


def guess_time(drafter, tokens: list[int], repeats: int = 20, warmup: int = 2) -> float:
    """Median seconds per guess of ``drafter``: propose(k=4) after ``tokens``, greedy, divided by 4 (a draft
    model re-feeds the last token, so that is 4 draft passes and 4 samplings)."""
    timed = self_timed_costs(drafter)  # a feature drafter cannot guess before the target gives features
    if timed is not None:
        return timed(repeats)[0]
    draws = Stream(np.random.PCG64(0))  # default_rng(0), a drafter's draws too
    ts = []
    for _ in range(warmup + repeats):
        t0 = clock()
        drafter.propose(tokens, 4, greedy, draws)
        ts.append((clock() - t0) / 4)
    return float(np.median(ts[warmup:]))


def self_timed_costs(drafter):
    """``(repeats) -> (seconds per guess, seconds per token caught up)`` for a drafter that times itself (its cost
    hook, drafters/protocol.py: TimesItself) on this module's clock, or None for one timed through ``propose``."""
    if not has(drafter, TimesItself):
        return None
    return lambda repeats: drafter.measure_costs(clock, repeats)


def tree_level_times(drafter, widths, repeats: int) -> dict[int, float]:
    """Seconds of one tree level of w nodes of a drafter that times its own levels (TimesItsTreeLevels)."""
    return drafter.level_times(clock, widths, repeats)
