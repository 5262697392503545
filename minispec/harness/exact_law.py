"""Level 1 for a whole round: the exact law of the tokens a rule emits, integrated over every random draw.

A rule (``rejection.accept_reject``'s signature) draws uniforms and compares them with thresholds it computes,
then samples next_token (the correction or the bonus) from a row. Here every uniform is *symbolic*: comparing it with a threshold h
branches (true with probability h, false with 1 - h; a second comparison of the same draw is conditioned on
the first), and every branch is followed; the final ``sample`` records the row it would draw from instead of
drawing. So the law is exact, and the thresholds are the code's own: no
formula is written twice. The draft's guesses are enumerated with their probabilities under q.

Tables are context dependent: ``p_of(prefix)`` and ``q_of(prefix)`` give the target's and the draft's [V] row
after a tuple of earlier tokens. A round's emitted tokens, continued by the target itself, must have the
target's joint law (``joint_law``); ``expected_accepted`` is the mean number of guesses kept.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np

from .. import rejection


class SymbolicUniform:
    """u ~ U(0, 1) whose comparisons are decided by the caller's script (``BranchingRng``). It keeps the interval
    [lo, hi) that its earlier comparisons left it in, so that comparing one draw twice (a CDF inverted by hand)
    is exact: u < h is certain below lo, impossible above hi, and else true with probability
    (h - lo) / (hi - lo)."""

    def __init__(self, rng):
        self.rng, self.lo, self.hi = rng, 0.0, 1.0

    def __lt__(self, h):
        h = float(h)
        if h <= self.lo:
            return False
        if h >= self.hi:
            return True
        if self.rng.decide((h - self.lo) / (self.hi - self.lo)):
            self.hi = h
            return True
        self.lo = h
        return False

    __le__ = __lt__  # for a continuous u, u < h and u <= h have the same probability

    def __gt__(self, h):
        return not self < h

    __ge__ = __gt__


class BranchingRng:
    """``random()`` -> a SymbolicUniform whose comparisons are decisions; ``choose(probs)`` -> a token, a
    categorical decision. Decisions follow ``script`` (a list of chosen indices), then take the first
    possible option and record it, so that a walk (``paths``) can come back for the others."""

    def __init__(self, script):
        self.script, self.taken = list(script), []

    def random(self):
        return SymbolicUniform(self)

    def _decide(self, probs: np.ndarray) -> int:
        j = len(self.taken)
        c = self.script[j] if j < len(self.script) else int(np.flatnonzero(probs > 0)[0])
        self.taken.append((probs, c))
        return c

    def decide(self, h: float) -> bool:  # SymbolicUniform's comparison: option 0 is "true", probability h
        h = min(1.0, max(0.0, h))
        return self._decide(np.array([h, 1.0 - h])) == 0

    def choose(self, probs) -> int:
        probs = np.asarray(probs, dtype=np.float64)
        return self._decide(probs / probs.sum())


def paths(run):
    """Every outcome of ``run(rng)`` over its decisions, with its probability: [(outcome, probability)]."""
    out, stack = [], [[]]
    while stack:
        script = stack.pop()
        rng = BranchingRng(script)
        outcome = run(rng)
        for j in range(len(script), len(rng.taken)):  # the other options of every decision made past the script
            probs, chosen = rng.taken[j]
            prefix = [c for _, c in rng.taken[:j]]
            stack.extend(prefix + [c] for c in np.flatnonzero(probs > 0) if c != chosen)
        prob = float(np.prod([probs[c] for probs, c in rng.taken]))
        if prob > 0:
            out.append((outcome, prob))
    return out


def round_law(rule, p_of, q_of, K: int, V: int) -> tuple[dict, float]:
    """-> ({the kept guesses (a tuple): [V] the law of the token after them, times the probability of the round},
    expected guesses kept) for one round of ``rule`` with K guesses drawn from ``q_of``."""
    law, expected, rows = defaultdict(lambda: np.zeros(V)), 0.0, []
    modules = [rule.__globals__, rejection.__dict__]  # a twin defined elsewhere may call the rule of rejection.py
    real_sample = [m.get("sample") for m in modules]

    def record(probs, rng):  # the final sample: keep the row, draw nothing
        rows.append(np.asarray(probs) / np.sum(probs))
        return -1

    def run(rng, target_probs, draft_probs, guesses):
        rows.clear()
        n, t = rule(target_probs, draft_probs, guesses, rng)
        return n, rows[-1] if rows else np.eye(V)[t]  # a token decided by comparisons alone: all mass on it

    try:
        for m in modules:
            m["sample"] = record
        for xs in itertools.product(range(V), repeat=K):
            qx = float(np.prod([q_of(xs[:i])[xs[i]] for i in range(K)]))
            if qx == 0:
                continue
            target_probs = np.array([p_of(xs[:i]) for i in range(K + 1)])  # [K+1, V]
            draft_probs = np.array([q_of(xs[:i]) for i in range(K)]).reshape(K, V)  # [K, V]
            for (n, row), prob in paths(lambda rng, t=target_probs, d=draft_probs, g=list(xs): run(rng, t, d, g)):
                law[xs[:n]] += qx * prob * row  # the kept guesses, then next_token from ``row``
                expected += qx * prob * n
    finally:
        for m, real in zip(modules, real_sample):
            if real is not None:
                m["sample"] = real
    return dict(law), expected


def continued_law(law: dict, p_of, m: int, V: int) -> np.ndarray:
    """P(the first m tokens = y) [V^m] when the round's output is continued by sampling the target."""
    out = np.zeros(V ** m)
    for y in itertools.product(range(V), repeat=m):
        total = 0.0
        for kept, last in law.items():
            n = len(kept)
            if n + 1 > m or tuple(y[:n]) != kept:
                continue
            pr = last[y[n]]
            for j in range(n + 1, m):
                pr *= p_of(tuple(y[:j]))[y[j]]
            total += pr
        out[np.ravel_multi_index(y, (V,) * m)] = total
    return out


def joint_law(p_of, m: int, V: int) -> np.ndarray:
    """The target's own law of its first m tokens [V^m]."""
    out = np.zeros(V ** m)
    for y in itertools.product(range(V), repeat=m):
        out[np.ravel_multi_index(y, (V,) * m)] = np.prod([p_of(tuple(y[:j]))[y[j]] for j in range(m)])
    return out
