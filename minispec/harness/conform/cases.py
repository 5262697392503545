"""The tables a rule is checked on: generated, each small enough for its exact law.

A case is a target and a draft as tables that depend on the context: ``p_of(prefix)`` and ``q_of(prefix)`` give the
[V] rows after a tuple of earlier tokens (exact_law.py's convention), warped alike (temperature, top-k, top-p: what a
loop hands its rule). The kinds, each at K = 1..4 guesses:

    random      logits drawn per context (a seeded generator keyed by the prefix), warped at temperature 1
    warped      the same logits at temperature 0.7 with top-k 2, and at temperature 1.3 with top-p 0.8
    ties        integer logits, so that tokens tie, with top-k 2 (every token tied with the 2nd kept) and top-p
    equal       p = q: every guess must be kept
    sparse      q(x) = 0 for tokens the draft never proposes (its top-2 only), p over all V
    one-hot     greedy rows: a one-hot target, a one-hot draft (a deterministic proposer), and both

Cases are ordered smallest first (K, then V), so the first that fails is the smallest failing case.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...sampling import warp


@dataclass
class Case:
    name: str
    K: int
    V: int
    p_of: object = field(repr=False)  # prefix tuple -> [V]
    q_of: object = field(repr=False)
    warps: dict = field(default_factory=dict)

    def tables(self, xs) -> tuple[np.ndarray, np.ndarray]:
        """The rule's arguments for the guesses ``xs``: target_probs [K+1, V], draft_probs [K, V]."""
        xs = tuple(xs)
        return (np.array([self.p_of(xs[:i]) for i in range(self.K + 1)]),
                np.array([self.q_of(xs[:i]) for i in range(self.K)]).reshape(self.K, self.V))

    def describe(self) -> dict:
        """The case as a reader reruns it: its kind, K, V, warps and the rows at the empty context."""
        return dict(name=self.name, K=self.K, V=self.V, warps=self.warps,
                    target_row=[round(float(x), 6) for x in self.p_of(())],
                    draft_row=[round(float(x), 6) for x in self.q_of(())])


def table(seed: int, V: int, integer: bool = False, **warps):
    """prefix -> warp(logits(prefix)): logits from a generator keyed by (seed, prefix), memoised."""
    memo = {}

    def row(prefix):
        if prefix not in memo:
            g = np.random.default_rng([seed, len(prefix), *prefix])
            z = g.integers(0, 3, V).astype(float) if integer else 1.5 * g.standard_normal(V)
            memo[prefix] = warp(z, **({"temperature": 1.0} | warps))
        return memo[prefix]
    return row


def one_hot_table(seed: int, V: int):
    base = table(seed, V)
    return lambda prefix: np.eye(V)[int(np.argmax(base(prefix)))]


def top2(row_of):
    def row(prefix):
        r = row_of(prefix).copy()
        r[np.argsort(-r, kind="stable")[2:]] = 0.0
        return r / r.sum()
    return row


def generated_cases(thorough: bool = False) -> list[Case]:
    """Every kind at K = 1..4 (module docstring). V is 3 or 4 (5 with ``thorough`` at K <= 2), so that the exact law
    enumerates every guess: V^K sequences."""
    out = []
    for K in (1, 2, 3, 4):
        sizes = (3,) if K >= 4 else (3, 4) if K == 3 or not thorough else (3, 4, 5)
        for V in sizes:
            s = 1000 * K + 10 * V
            kinds = [
                ("random", table(s, V), table(s + 1, V), {}),
                ("warped T=0.7 top-k 2", table(s + 2, V, temperature=0.7, top_k=2),
                 table(s + 3, V, temperature=0.7, top_k=2), dict(temperature=0.7, top_k=2)),
                ("warped T=1.3 top-p 0.8", table(s + 4, V, temperature=1.3, top_p=0.8),
                 table(s + 5, V, temperature=1.3, top_p=0.8), dict(temperature=1.3, top_p=0.8)),
                ("ties top-k 2", table(s + 6, V, integer=True, top_k=2), table(s + 7, V, integer=True, top_k=2),
                 dict(top_k=2, ties=True)),
                ("ties top-p 0.6", table(s + 8, V, integer=True, top_p=0.6), table(s + 9, V, integer=True, top_p=0.6),
                 dict(top_p=0.6, ties=True)),
                ("equal p = q", table(s + 10, V), table(s + 10, V), {}),
                ("sparse q (its top 2)", table(s + 11, V), top2(table(s + 12, V)), {}),
                ("one-hot target", one_hot_table(s + 13, V), table(s + 14, V), dict(temperature=0)),
                ("one-hot draft", table(s + 15, V), one_hot_table(s + 16, V), {}),
                ("one-hot both", one_hot_table(s + 17, V), one_hot_table(s + 18, V), dict(temperature=0)),
            ]
            out += [Case(name, K, V, p, q, w) for name, p, q, w in kinds]
    return out
