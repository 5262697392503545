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


def exact_tree_first_token_distribution(accept, p: np.ndarray, q: np.ndarray, deterministic: bool = False) -> np.ndarray:
    """P(first emitted token = y) for a one-level tree of 2 children of the root, verified by ``accept``
    (``tree.accept_tree``'s signature). Children are sampled without replacement from q, or
    (``deterministic``) are q's top 2 with one-hot rows. Exact integration over the uniform draws."""
    from . import rejection
    from .tree import Tree, one_hot, without

    V = len(p)
    leaf = np.full(V, 1.0 / V)  # children's own distributions only matter for the bonus token
    if deterministic:
        top = np.argsort(-q, kind="stable")[:2]
        pairs = [((int(top[0]), int(top[1])), 1.0, one_hot(int(top[0]), V), one_hot(int(top[1]), V))]
    else:
        pairs = []
        for x1 in np.flatnonzero(q):
            q2 = without(q, [x1])
            for x2 in (np.flatnonzero(q2) if q2 is not None else []):
                pairs.append(((int(x1), int(x2)), q[x1] * q2[x2], q, q2))
    out = np.zeros(V)
    for (x1, x2), weight, q1, q2 in pairs:
        tree = Tree()
        tree.add(0, x1, q1)
        tree.add(0, x2, q2)
        r1 = rejection.residual(p, q1)
        rows = [p, r1, rejection.residual(r1, q2), leaf]
        breaks = [b for row in rows if row.sum() > 0 for b in np.cumsum(row) / row.sum()]
        u1, w1 = _midpoints([min(1.0, p[x1] / q1[x1])])
        u2, w2 = _midpoints([min(1.0, r1[x2] / q2[x2]), min(1.0, p[x2] / q2[x2])])
        u3, w3 = _midpoints(breaks)
        target_probs = np.stack([p, leaf, leaf])
        for a, wa in zip(u1, w1):
            for b, wb in zip(u2, w2):
                for c, wc in zip(u3, w3):
                    path, t = accept(target_probs, tree, ScriptedRng([a, b, c]))
                    out[tree.tokens[path[0]] if path else t] += weight * wa * wb * wc
    return out
