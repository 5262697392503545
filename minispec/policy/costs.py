"""The cost model's inputs: what a target pass over n tokens costs, and what a drafter's guess costs.

    t_verify(n)   seconds of one target pass over n new tokens (the last token plus K = n - 1 guesses)
    r(n)          t_verify(n) / t_verify(1): how much dearer verifying n - 1 guesses is than one step
    t_draft       seconds per guess;  c = t_draft / t_verify(1), the cost ratio of the papers

Measured, never assumed: ``forward_times`` runs the model. ``calibrate`` is the same measurement,
short and cached (in memory, and on disk under ``$MINISPEC_CACHE``, keyed by model and machine),
for the adaptive policies; their rounds then refine it as they are timed.
"""

from __future__ import annotations

import json
import os
import platform
import time

import numpy as np

from ..model import backend
from ..model.fetch import cache_dir
from ..sampling import warp

_CALIBRATION: dict = {}  # (id(model), ns) -> {n: seconds}


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
            cache.rollback(context)
            t0 = time.perf_counter()
            model.forward(ids, cache)
            if r >= warmup:
                times[n].append(time.perf_counter() - t0)
    return {n: float(np.median(t)) for n, t in times.items()}


def _disk_key(model, ns: tuple) -> str:
    c = model.cfg
    return (f"{model.name}|{model.weight_bytes}|{c.num_layers}x{c.hidden_size}|{backend.DEVICE}|{','.join(map(str, ns))}|"
            f"{platform.node()}|{os.cpu_count()}|numpy {np.__version__}")


def calibrate(model, ns) -> dict[int, float]:
    """Median seconds of a pass over n new tokens after 64 cached ones, for each n in ``ns``: a short
    ``forward_times`` (about a second for SmolLM2), cached per model in memory and on disk
    (``$MINISPEC_CACHE/calibration.json``; ``MINISPEC_NO_CALIBRATION_CACHE=1`` skips the disk)."""
    ns = tuple(ns)
    key, disk = (id(model), ns), os.environ.get("MINISPEC_NO_CALIBRATION_CACHE") is None
    f = cache_dir() / "calibration.json"
    if key not in _CALIBRATION and disk:
        try:
            stored = json.loads(f.read_text()).get(_disk_key(model, ns))
            if stored:
                _CALIBRATION[key] = {int(n): float(t) for n, t in stored.items()}
        except (OSError, ValueError, AttributeError):
            pass
    if key not in _CALIBRATION:
        _CALIBRATION[key] = forward_times(model, ns, context=64, repeats=2, warmup=1)
        if disk:
            try:
                data = json.loads(f.read_text()) if f.exists() else {}
                data[_disk_key(model, ns)] = _CALIBRATION[key]
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(json.dumps(data, indent=1))
            except (OSError, ValueError, AttributeError):
                pass
    return dict(_CALIBRATION[key])


def calibrate_verify(target, n_max: int) -> dict[int, float]:
    """t_verify(n) for n = 1..n_max (``calibrate``)."""
    return calibrate(target, range(1, n_max + 1))


def guess_time(drafter, tokens: list[int], repeats: int = 20, warmup: int = 2) -> float:
    """Median seconds per guess of ``drafter``: propose(k=4) after ``tokens``, greedy, divided by 4 (a draft
    model re-feeds the last token, so that is 4 draft passes and 4 samplings)."""
    rng = np.random.default_rng(0)
    ts = []
    for _ in range(warmup + repeats):
        t0 = time.perf_counter()
        drafter.propose(tokens, 4, lambda z: warp(z, 0.0), rng)
        ts.append((time.perf_counter() - t0) / 4)
    return float(np.median(ts[warmup:]))


def drafter_costs(drafter) -> tuple[float, float]:
    """(seconds per guess, seconds per token fed when catching up) of a drafter with a model, measured once
    and cached; zeros otherwise (prompt lookup costs microseconds: rounds then measure it)."""
    model = getattr(drafter, "model", None)
    if model is None:
        return 0.0, 0.0
    key = (id(drafter), "guess")
    if key not in _CALIBRATION:
        context = list(np.random.default_rng(0).integers(0, model.cfg.vocab_size, min(64, model.cfg.max_position_embeddings // 2)))
        _CALIBRATION[key] = guess_time(drafter, context, repeats=3, warmup=1)
    return _CALIBRATION[key], calibrate(model, (32,))[32] / 32
