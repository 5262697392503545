"""Statistics of losslessness: exact output distributions and chi-square tests.

``exact_first_token_distribution`` integrates a rule over its uniform draws *exactly*: the rule's
output is piecewise constant in each draw, so evaluating it once per interval between the
breakpoints where any candidate CDF (of p, q, the residual, p_{K+1}) or acceptance threshold
jumps, weighted by the interval's length, gives the distribution with no sampling error.
"""

from __future__ import annotations

import numpy as np
from scipy import stats


class ScriptedRng:
    """Stands in for a numpy Generator: ``random()`` returns the scripted values in turn."""

    def __init__(self, values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


def _midpoints(breaks) -> tuple[np.ndarray, np.ndarray]:
    b = np.unique(np.clip(np.concatenate([[0.0, 1.0], np.asarray(breaks, float)]), 0.0, 1.0))
    return (b[:-1] + b[1:]) / 2, np.diff(b)


def exact_first_token_distribution(rule, target_probs, draft_probs) -> np.ndarray:
    """P(first emitted token = y) for one round with K = 1 of ``rule`` (accept_reject's signature)."""
    V = target_probs.shape[1]
    p, q = target_probs[0], draft_probs[0]
    cdf_breaks = []
    for row in (p, q, np.maximum(p - q, 0), target_probs[1]):
        if row.sum() > 0:
            cdf_breaks.extend(np.cumsum(row) / row.sum())
    u2, w2 = _midpoints(cdf_breaks)
    out = np.zeros(V)
    for x in np.flatnonzero(q):  # the draft's guess, with probability q(x)
        u1, w1 = _midpoints([min(1.0, p[x] / q[x])])
        for a, wa in zip(u1, w1):
            for b, wb in zip(u2, w2):
                n, t = rule(target_probs, draft_probs, [x], ScriptedRng([a, b]))
                out[x if n == 1 else t] += q[x] * wa * wb
    return out


def chisquare_gof(counts, probs, min_expected: float = 5.0) -> tuple[float, int, float]:
    """Goodness of fit of observed counts to probabilities; bins with small expectation are pooled."""
    counts, probs = np.asarray(counts, float), np.asarray(probs, float)
    expected = probs * counts.sum()
    if (counts[expected == 0] > 0).any():
        return float("inf"), 0, 0.0  # a draw the distribution forbids
    small = expected < min_expected
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    chi2, p = stats.chisquare(obs, exp * obs.sum() / exp.sum())
    return float(chi2), len(obs) - 1, float(p)


def chisquare_two_sample(counts_a, counts_b) -> tuple[float, int, float]:
    """Two-sample chi-square homogeneity test on two histograms over the same bins."""
    table = np.array([counts_a, counts_b], float)
    table = table[:, table.sum(axis=0) > 0]
    chi2, p, dof, _ = stats.chi2_contingency(table, correction=False)
    return float(chi2), int(dof), float(p)
