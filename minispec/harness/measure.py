"""Measuring helpers shared by the study and the benchmarks: the settings, plain decoding timed before
and after the runs it is compared with, the weight-streaming floor and peak memory."""

from __future__ import annotations

import json
import math
import resource
import sys
import time

import numpy as np

from ..model import backend
from ..model.threads import load_average  # noqa: F401 (the lab's callers read it here)

SETTINGS = {"greedy": 0.0, "T=1": 1.0}  # setting -> temperature
MEDIAN_FLOOR, PROMPT_FLOOR = 0.97, 0.90  # the floor (../shared/design.md): a prompt set's median speedup, and every
# prompt's (``alternate`` measures them)
BUSY_LOAD = 0.5  # other runnable processes, on average, above which a speed figure is called unreliable
_START = (time.perf_counter(), time.process_time())  # when this process began measuring, and its CPU seconds then


def others_load() -> float | None:
    """The 1-minute load average less what this process has added to it: roughly, how many other processes were
    running; None where the platform has no load average. The kernel's average moves toward the running count with a
    time constant of a minute, so a process that has used u CPUs on average over its w seconds has added about
    u (1 - exp(-w / 60)) to it (bug: u itself was taken off, so a process a few seconds old that had just loaded its
    models took a whole CPU off, and a machine with another process busy throughout read as quiet)."""
    load = load_average()
    if load is None:
        return None
    wall = time.perf_counter() - _START[0]
    own = (time.process_time() - _START[1]) / wall if wall > 1 else 0.0
    return max(0.0, load - own * (1.0 - math.exp(-wall / 60.0)))


def busy_words(*loads: float | None) -> str:
    """What a speed figure says beside it when the machine was busy: the highest of ``loads`` (the load average of the
    other processes, ``others_load()``, as a run began and as it ended; None: unknown) above BUSY_LOAD; "" when quiet
    or unknown."""
    known = [x for x in loads if x is not None]
    load = max(known) if known else None
    if load is None or load <= BUSY_LOAD:
        return ""
    return (f"; the machine was busy (load average {load:.2f} besides this run): the speed figures here are "
            "unreliable")


def speedup_bound(tokens: int, target_passes: int) -> float | None:
    """The most a run of ``tokens`` in ``target_passes`` target passes can gain over plain decoding: its tokens per
    pass. Plain decoding makes one target pass a token; a pass over more tokens costs at least as much as a pass over
    one, and the drafter costs more than nothing. None where the passes are unknown (0: another engine's run, or plain
    decoding as the control)."""
    return tokens / target_passes if target_passes else None


def timed(fn):
    """-> (fn(), seconds), the device synchronised before each clock read (a no-op on NumPy)."""
    backend.synchronize()
    t0 = time.perf_counter()
    out = fn()
    backend.synchronize()
    return out, time.perf_counter() - t0


def side_by_side(plain, runs: list, done=lambda: None) -> tuple[list[int], float, list]:
    """Run ``plain()`` (plain decoding -> tokens), then each of ``runs``, then ``plain()`` again, so that
    machine noise hits both sides alike; ``done()`` after each (a progress bar), outside the timings.
    -> (plain tokens, plain tokens/s over both runs, [(result, seconds)])."""
    results = []
    for run in [plain, *runs, plain]:
        results.append(timed(run))
        done()
    (tokens, t_before), (_, t_after) = results[0], results[-1]
    return tokens, len(tokens) / ((t_before + t_after) / 2), results[1:-1]


def alternate(plain, prepare, repeats: int, done=lambda: None) -> tuple[float, tuple]:
    """The floor's comparison (``../shared/design.md``, "The floor"): plain decoding and the run that ``prepare()``
    sets up (a fresh drafter and policy, made before the clock starts; -> a function of no arguments) alternate,
    ``repeats`` times each, in the order plain, run, run, plain, plain, run, ... (each pair the reverse of the one
    before, so that neither side always runs first after a pause), and each side keeps its faster run. ``done()``
    after each run (a progress bar), outside the timings. -> (plain's fastest seconds, (result, seconds) of the
    run's fastest)."""
    best: dict = {}
    for i in range(repeats):
        for side in (("plain", "run") if i % 2 == 0 else ("run", "plain")):
            out, seconds = timed(plain if side == "plain" else prepare())
            done()
            if side not in best or seconds < best[side][1]:
                best[side] = (out, seconds)
    return best["plain"][1], best["run"]


STREAM_READERS = {"numpy": "BLAS gemv", "numba": "numba read"}  # how each kernel's own loads read the weights


def stream_time(nbytes: int, repeats: int = 7, kernel: str = "numpy") -> float:
    """Seconds to stream ``nbytes`` of float32 weights once with ``kernel``'s own loads: for numpy, BLAS (on the
    active device: NumPy or CuPy) multiplying one vector by a matrix that size (too big for any cache); for numba,
    ``numba_kernel.read_once`` summing it on every core. A 1-token decode step with that kernel cannot beat it."""
    if kernel == "numba":
        from ..model.numba_kernel import read_once

        w = np.ones((max(nbytes // 4 // 576, 1), 576), dtype=np.float32)  # [rows, 576], SmolLM2's width
        read = lambda: read_once(w)  # noqa: E731
    else:
        xp = backend.xp
        w = xp.ones((max(nbytes // 4 // 1536, 1), 1536), dtype=np.float32)  # [rows, 1536]
        x = xp.ones((1, w.shape[0]), dtype=np.float32)
        read = lambda: x @ w  # noqa: E731
    read()
    return float(np.median([timed(read)[1] for _ in range(repeats)]))


def compact_json(result) -> str:
    """A measurement as compact JSON: no indentation, and floats to 6 significant digits, far finer than the noise of
    any timing here (the tracked tree has a size budget: tests/test_weights.py)."""
    def rounded(v):
        if isinstance(v, (float, np.floating)):
            return float(f"{float(v):.6g}")
        if isinstance(v, dict):
            return {k: rounded(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [rounded(x) for x in v]
        return v

    return json.dumps(rounded(result), separators=(",", ":"), default=float) + "\n"


def kv_bytes_per_token(model) -> int:
    c = model.cfg
    return 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4


def peak_rss_bytes() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)
