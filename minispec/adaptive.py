"""Cost-aware adaptive K: each round, draft the K that maximises expected tokens per second.

The Leviathan et al. model with measured costs instead of assumed ones:

    expected tokens of a round   E(K) = (1 - a^(K+1)) / (1 - a)     (K = 0: exactly 1)
    time of a round              T(K) = K * t_draft + t_verify(K + 1)
    choose                       K* = argmax_{0 <= K <= k_max} E(K) / T(K)

``t_verify(n)`` comes from a short calibration of the target (cached per model) and is refined by
the timings of real rounds; ``t_draft`` likewise. The acceptance ``a`` is a decaying estimate over
recent rounds: a round that accepted n of K guesses is n successes and, if n < K, one failure.
K = 0 means "do not speculate" (plain decoding). After ``probe_every`` such rounds one K = 1 round
keeps the acceptance estimate alive; a probe that finds nothing doubles the wait before the next, and
no probe is made at all when even perfect acceptance could not beat plain decoding (a drafter as
slow as the target). The policy only picks K: the tokens still come from
the same rejection rule, so the output distribution is unchanged.
"""

from __future__ import annotations

import json
import os
import platform
import time

import numpy as np

_CALIBRATION: dict = {}  # (id(model), n_max) -> {n: seconds}


def expected_tokens(a: float, k: int) -> float:
    return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def _disk_key(model, n_max: int) -> str:
    from . import backend

    c = model.cfg
    return (f"{model.name}|{model.weight_bytes}|{c.num_layers}x{c.hidden_size}|{backend.DEVICE}|{n_max}|"
            f"{platform.node()}|{os.cpu_count()}|numpy {np.__version__}")


def _disk_file():
    from .convert import cache_dir

    return cache_dir() / "calibration.json"


def calibrate_verify(target, n_max: int, context: int = 64, repeats: int = 2) -> dict[int, float]:
    """Median seconds of a target pass over n = 1..n_max tokens. Cached per model in memory and on disk
    (``~/.cache/minispec/calibration.json``, keyed by model, machine and NumPy), since it takes about a
    second; rounds then refine it as they are timed."""
    key = (id(target), n_max)
    if key not in _CALIBRATION and os.environ.get("MINISPEC_NO_CALIBRATION_CACHE") is None:
        try:
            stored = json.loads(_disk_file().read_text()).get(_disk_key(target, n_max))
            if stored:
                _CALIBRATION[key] = {int(n): float(t) for n, t in stored.items()}
        except (OSError, ValueError):
            pass
    if key not in _CALIBRATION:
        rng = np.random.default_rng(0)
        cache = target.new_cache(context + n_max)
        target.forward(rng.integers(0, target.cfg.vocab_size, context), cache)
        times = {n: [] for n in range(1, n_max + 1)}
        for _ in range(repeats + 1):
            for n in times:
                cache.rollback(context)
                t0 = time.perf_counter()
                target.forward(rng.integers(0, target.cfg.vocab_size, n), cache)
                times[n].append(time.perf_counter() - t0)
        _CALIBRATION[key] = {n: float(np.median(t[1:])) for n, t in times.items()}
        try:
            f = _disk_file()
            data = json.loads(f.read_text()) if f.exists() else {}
            data[_disk_key(target, n_max)] = _CALIBRATION[key]
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(data, indent=1))
        except (OSError, ValueError):
            pass
    return dict(_CALIBRATION[key])


class FixedK:
    """The textbook policy: always K."""

    def __init__(self, k: int):
        self.k = k

    def next_k(self) -> int:
        return self.k

    def observe(self, drafted: int, accepted: int, t_draft: float, t_verify: float) -> None:
        pass


class AutoK:
    def __init__(self, verify_time: dict[int, float], draft_time: float = 0.0, k_max: int = 8, prior: float = 0.5,
                 prior_weight: float = 2.0, decay: float = 0.8, probe_every: int = 8, learn_costs: bool = True):
        self.verify_time = dict(verify_time)  # n -> seconds
        self.draft_time = draft_time  # seconds per drafted token
        self.k_max, self.prior, self.prior_weight, self.decay, self.probe_every = k_max, prior, prior_weight, decay, probe_every
        self.learn_costs = learn_costs  # False: keep the given costs (deterministic, for tests)
        self.successes = self.failures = 0.0
        self.idle = 0  # consecutive K = 0 rounds
        self.wait = probe_every  # K = 0 rounds before the next probe (doubles after a failed probe)
        self.history: list[int] = []

    @property
    def acceptance(self) -> float:
        return (self.successes + self.prior * self.prior_weight) / (self.successes + self.failures + self.prior_weight)

    def rate(self, k: int) -> float:
        """Expected tokens per second at K."""
        return expected_tokens(self.acceptance, k) / (k * self.draft_time + self.verify_time[k + 1])

    def hopeless(self) -> bool:
        """True when no K could beat plain decoding even if every guess were accepted."""
        best = max(float(k + 1) / (k * self.draft_time + self.verify_time[k + 1]) for k in range(1, self.k_max + 1))
        return best <= 1.0 / self.verify_time[1]

    def next_k(self) -> int:
        k = max(range(self.k_max + 1), key=self.rate)
        if k == 0:
            self.idle += 1
            if self.idle >= self.wait and not self.hopeless():
                self.idle, k = 0, 1
        else:
            self.idle, self.wait = 0, self.probe_every
        self.history.append(k)
        return k

    def observe(self, drafted: int, accepted: int, t_draft: float, t_verify: float) -> None:
        n = drafted + 1  # tokens in the verification pass
        if self.learn_costs and n in self.verify_time:
            self.verify_time[n] = 0.8 * self.verify_time[n] + 0.2 * t_verify
        if drafted == 0:
            return
        if self.history and self.history[-1] == 1 and accepted == 0 and self.rate(0) >= self.rate(1):
            self.wait = min(2 * self.wait, 256)  # a failed probe: wait longer for the next one
        if self.learn_costs:
            self.draft_time = 0.8 * self.draft_time + 0.2 * (t_draft / drafted)
        self.successes = self.decay * self.successes + accepted
        self.failures = self.decay * self.failures + (accepted < drafted)


def auto_k(target, drafter, k_max: int = 8) -> AutoK:
    """An AutoK calibrated for this target; the draft cost starts at its measured forward time."""
    verify = calibrate_verify(target, k_max + 1)
    draft_time = 0.0
    model = getattr(drafter, "model", None)
    if model is not None:
        draft_time = calibrate_verify(model, 1)[1]
    return AutoK(verify, draft_time, k_max)
