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

_CALIBRATION: dict = {}  # calibration_key(model, ns) -> {n: seconds}, or seconds per guess


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
            backend.synchronize()
            t0 = time.perf_counter()
            model.forward(ids, cache)
            backend.synchronize()
            if r >= warmup:
                times[n].append(time.perf_counter() - t0)
    return {n: float(np.median(t)) for n, t in times.items()}


def calibration_key(model, ns) -> str:
    """What a measurement depends on: the model (name, size, shape), the device and the machine. It keys
    the cache in memory too, so that a model loaded again (or a new drafter around the same model) finds
    the same figures: a seeded run then chooses the same K (see ``policy/__init__.py``)."""
    c = model.cfg
    return (f"{model.name}|{model.weight_bytes}|{c.num_layers}x{c.hidden_size}|{backend.DEVICE}|{','.join(map(str, ns))}|"
            f"{platform.node()}|{os.cpu_count()}|numpy {np.__version__}")


def cached(key: str, measure):
    """``measure()``, once per key: kept in memory, and on disk in ``$MINISPEC_CACHE/calibration.json``
    unless ``MINISPEC_NO_CALIBRATION_CACHE`` is set. A JSON round trip turns dict keys into strings; the
    caller converts them back."""
    disk = os.environ.get("MINISPEC_NO_CALIBRATION_CACHE") is None
    f = cache_dir() / "calibration.json"
    if key not in _CALIBRATION and disk:
        try:
            stored = json.loads(f.read_text()).get(key)
            if stored is not None:
                _CALIBRATION[key] = stored
        except (OSError, ValueError, AttributeError):
            pass
    if key not in _CALIBRATION:
        _CALIBRATION[key] = measure()
        if disk:
            try:
                data = json.loads(f.read_text()) if f.exists() else {}
                data[key] = _CALIBRATION[key]
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(json.dumps(data, indent=1))
            except (OSError, ValueError, AttributeError, TypeError):
                pass
    return _CALIBRATION[key]


def calibrate(model, ns) -> dict[int, float]:
    """Median seconds of a pass over n new tokens after 64 cached ones, for each n in ``ns``: a short
    ``forward_times`` (about a second for SmolLM2), cached per model in memory and on disk
    (``$MINISPEC_CACHE/calibration.json``; ``MINISPEC_NO_CALIBRATION_CACHE=1`` skips the disk)."""
    ns = tuple(ns)
    times = cached(calibration_key(model, ns), lambda: forward_times(model, ns, context=64, repeats=2, warmup=1))
    return {int(n): float(t) for n, t in times.items()}


def calibrate_verify(target, n_max: int) -> dict[int, float]:
    """t_verify(n) for n = 1..n_max (``calibrate``)."""
    return calibrate(target, range(1, n_max + 1))


def guess_time(drafter, tokens: list[int], repeats: int = 20, warmup: int = 2) -> float:
    """Median seconds per guess of ``drafter``: propose(k=4) after ``tokens``, greedy, divided by 4 (a draft
    model re-feeds the last token, so that is 4 draft passes and 4 samplings)."""
    if hasattr(drafter, "measure_costs"):  # a feature drafter cannot guess before the target gives features
        return drafter.measure_costs(n=len(tokens), repeats=repeats)[0]
    rng = np.random.default_rng(0)
    ts = []
    for _ in range(warmup + repeats):
        t0 = time.perf_counter()
        drafter.propose(tokens, 4, lambda z: warp(z, 0.0), rng)
        ts.append((time.perf_counter() - t0) / 4)
    return float(np.median(ts[warmup:]))


def drafter_costs(drafter) -> tuple[float, float]:
    """(seconds per guess, seconds per token fed when catching up) of a drafter with a model, measured once
    and cached like ``calibrate`` (keyed by the drafter's model, not by the drafter object, so that a new
    drafter around the same model reuses the figure); zeros otherwise (prompt lookup costs microseconds:
    rounds then measure it)."""
    if hasattr(drafter, "measure_costs"):  # a drafter that times itself (eagle.py), keyed like a model
        return tuple(float(t) for t in cached(calibration_key(drafter, ("guess", "fed")), drafter.measure_costs))
    model = getattr(drafter, "model", None)
    if model is None:
        return 0.0, 0.0

    def measure():
        n = min(64, model.cfg.max_position_embeddings // 2)
        context = [int(t) for t in np.random.default_rng(0).integers(0, model.cfg.vocab_size, n)]
        return guess_time(drafter, context, repeats=3, warmup=1)

    per_guess = float(cached(calibration_key(model, ("guess",)), measure))
    n = min(32, model.cfg.max_position_embeddings)  # a pass over n tokens, per token
    return per_guess, calibrate(model, (n,))[n] / n
