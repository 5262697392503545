"""Keyed sampling: a token drawn by a race on noise that depends on (seed, position) alone.

Daliri, Musco & Suresh 2024, "Coupling without Communication and Drafter-Invariant Speculative Decoding"
(arXiv 2408.07978), Gumbel sampling. Names here -> the paper:

    seed                what both sides share instead of communicating: the key of the public random numbers
    position t          the index in the sequence of the token being drawn (prompt included); a KeyedNoise
                        seen from ``start`` takes offsets i, t = start + i (a round's first new token is i = 0)
    exponentials(i, V)  E_t(x) ~ Exp(1), one per token x, i.i.d., from a NumPy generator seeded by (seed, t)
                        (E = -ln u for the paper's public uniforms u; the Gumbel noise is g = -ln E)
    race(p, i)          argmin_x E_t(x) / p(x), over the x with p(x) > 0
                        = argmax_x ln p(x) + g_t(x): the Gumbel-max trick
    tree.add_children   W races at t, each on what is left of p once the tokens before it are taken out
      (keyed noise)     (``tree.without``): the (j+1)-th is the (j+1)-th smallest E_t(x) / p(x), so the W are the
                        Gumbel top-W, W draws from p without replacement (Kool et al. 2019; Gumbel-max list
                        sampling, arXiv 2506.05632)

**Why a race follows p.** E(x) / p(x) is exponential with rate p(x), and the first of independent
exponential clocks to ring is x with probability rate(x) / sum of the rates = p(x). The race needs no
stream: the token at position t is a function of p_t and of the noise keyed by (seed, t), whatever was
drawn before, in whichever order and by whom. A drafter that races q_t on the same noise guesses the
target's own token with probability sum_x 1 / (1 + sum_{y != x} max(p(y)/p(x), q(y)/q(x)))
(``coupled_acceptance``, derived here by conditioning the race on E(x)), at least (1 - TV) / (1 + TV) (the
paper's bound for Gumbel sampling).

``KeyedNoise`` is the noise for one run, seen from the round's first position: ``race(p, i)`` is the race at
position ``start + i``, and ``draw(p, i)`` is ``race(p, i)`` under the name every drafter calls (``sampling.Draws``).
``random()`` reads the run's own generator (``keyed_noise`` passes it as ``side``), for a drafter that samples by
itself (``sampling.sample``): its guesses are then not coupled, and the target's tokens are the same.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

KEPT_POSITIONS = 64  # noise rows kept per run: a round re-reads the positions of the round before


class Keyed(Protocol):
    """Randomness keyed by position: what a keyed rule races on (rejection.coupled_verify, tree.accept_tree_coupled).
    A drafter draws with ``KeyedNoise.draw``, as with any ``sampling.Draws``."""

    def race(self, probs: np.ndarray, i: int) -> int: ...


class KeyedNoise:
    """E_t(x) for one run's ``seed``, seen from position ``start`` (module docstring)."""

    def __init__(self, seed: int, start: int = 0, side: np.random.Generator | None = None, rows: dict | None = None):
        if not (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0):
            raise ValueError(f"keyed noise needs a non-negative integer seed, got {seed!r}")
        self.seed, self.start = int(seed), int(start)
        self.side = side if side is not None else np.random.default_rng((self.seed, 2 ** 32))  # not a position's key
        self.rows = rows if rows is not None else {}  # (position, V) -> E_t: shared by every view of the run

    def at(self, start: int) -> "KeyedNoise":
        """The same run's noise, seen from position ``start`` (a round's first new token)."""
        return KeyedNoise(self.seed, start, self.side, self.rows)

    def exponentials(self, i: int, V: int) -> np.ndarray:  # -> [V] float64
        """E_t(x) for t = start + i: made when first asked for, from a generator seeded by (seed, t)."""
        key = (self.start + i, V)
        if key not in self.rows:
            if len(self.rows) >= KEPT_POSITIONS:
                self.rows.pop(min(self.rows))  # the oldest position: rounds move forward
            self.rows[key] = np.random.default_rng((self.seed, key[0])).standard_exponential(V)
        return self.rows[key]

    def times(self, probs: np.ndarray, i: int) -> np.ndarray:  # [V] -> [V]
        """E_t(x) / p(x): when each token's clock rings (never, for p(x) = 0)."""
        probs = np.asarray(probs, dtype=np.float64)  # float64 clocks stay inside the race: only token ids leave it
        if probs.ndim != 1 or not probs.sum() > 0:
            raise ValueError(f"a race needs one probability row with some mass, got shape {probs.shape}")
        with np.errstate(divide="ignore", over="ignore"):  # a mass near 1e-308 rings at inf: it never wins
            return np.where(probs > 0, self.exponentials(i, len(probs)) / probs, np.inf)

    def race(self, probs: np.ndarray, i: int) -> int:
        """argmin_x E_t(x) / p(x) at t = start + i: one token distributed as ``probs``."""
        return int(np.argmin(self.times(probs, i)))

    def draw(self, probs: np.ndarray, i: int) -> int:
        """A drafter's guess at position start + i (sampling.Draws): the race there, on the noise the target's own
        token races on, so that the two coincide as often as they can."""
        return self.race(probs, i)

    def random(self) -> float:
        """A uniform from the run's side stream, for a drafter that samples by itself (not coupled)."""
        return float(self.side.random())


def coupled_acceptance(target_row: np.ndarray, draft_row: np.ndarray) -> float:
    """P(race(p, t) == race(q, t)) over the noise: sum_x 1 / (1 + sum_{y != x} max(p(y)/p(x), q(y)/q(x))).

    Both races pick x when, given E(x) = e, every other clock rings later on both sides: E(y) > e m_y with
    m_y = max(p(y)/p(x), q(y)/q(x)), probability prod_y exp(-e m_y); integrated against e^{-e} de that is
    1 / (1 + sum_y m_y). Computed in O(V log V): with r(y) = q(y)/p(y), m_y p(x) = p(y) where r(y) <= r(x), and
    m_y q(x) = q(y) where r(y) > r(x), so each x's sum is a prefix sum over the tokens sorted by r."""
    p, q = np.asarray(target_row, dtype=np.float64), np.asarray(draft_row, dtype=np.float64)  # a float leaves, for planning
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(p > 0, q / p, np.inf)  # [V]; p = q = 0 never wins either race (excluded below)
    order = np.argsort(r, kind="stable")
    r_sorted = r[order]
    p_le = np.cumsum(p[order])  # [V] sum of p(y) over r(y) <= r_sorted[j] (ties completed below)
    q_le = np.cumsum(q[order])
    last_tie = np.searchsorted(r_sorted, r_sorted, side="right") - 1  # the last y with r(y) == r(x)
    P, Q = p_le[last_tie], q.sum() - q_le[last_tie]
    both = (p[order] > 0) & (q[order] > 0)  # x must have mass on both sides to win both races
    with np.errstate(over="ignore"):  # a token of tiny mass on one side: its term is ~0
        return float(np.sum(1.0 / (P[both] / p[order][both] + Q[both] / q[order][both])))


def keyed_noise(seed: int | None, stream: np.random.Generator) -> KeyedNoise:
    """A run's keyed noise: keyed by ``seed``, or without one by a seed drawn from the run's ``stream`` (the run is
    then drafter-invariant within itself, and not repeatable); ``stream`` also feeds its ``random()``."""
    return KeyedNoise(int(stream.integers(2 ** 63)) if seed is None else seed, side=stream)
