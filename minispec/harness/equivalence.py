"""Statistics of losslessness: exact output distributions and chi-square tests.

``exact_first_token_distribution`` integrates a rule over its uniform draws *exactly*: the rule's
output is piecewise constant in each draw, so evaluating it once per interval between the
breakpoints where any candidate CDF (of p, q, the residual, p_{K+1}) or acceptance threshold
jumps, weighted by the interval's length, gives the distribution with no sampling error.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from .. import rejection
from ..sampling import one_hot_rows, sample
from ..tree import Tree, without


def broken_residual(target_row, draft_row):
    """The classic bug, the one broken rule every level plants: resample from p, not norm(max(0, p - q)).
    The tests put it in place of ``rejection.residual`` (monkeypatch); ``broken_accept_reject`` uses it."""
    return target_row / target_row.sum()


def broken_accept_reject(target_probs, draft_probs, draft_tokens, rng: np.random.Generator) -> tuple[int, int]:
    """A deliberately broken twin of ``rejection.accept_reject``: after a rejection it samples from
    ``broken_residual``. Its output is not the target's distribution; the checks run it to show they can fail."""
    for i, x in enumerate(draft_tokens):
        if rng.random() < rejection.acceptance_probability(target_probs[i, x], draft_probs[i, x]):
            continue
        return i, sample(broken_residual(target_probs[i], draft_probs[i]), rng)  # the bug
    return len(draft_tokens), sample(target_probs[len(draft_tokens)], rng)


def block_verify_with(residual):
    """``rejection.block_verify`` with its weighted residual replaced by ``residual(p_row, q_row, weight, real)``:
    the one place the block-verification twins change the rule."""
    def rule(target_probs, draft_probs, draft_tokens, rng: np.random.Generator) -> tuple[int, int]:
        real = rejection.weighted_residual
        rejection.weighted_residual = lambda target_row, draft_row, weight: residual(target_row, draft_row, weight, real)
        try:
            return rejection.block_verify(target_probs, draft_probs, draft_tokens, rng)
        finally:
            rejection.weighted_residual = real
    return rule


broken_block_verify = block_verify_with(lambda p, q, weight, real: real(p, q, 1.0))
broken_block_verify.__name__ = "broken_block_verify"
broken_block_verify.__doc__ = """A deliberately broken twin of ``rejection.block_verify``: its residual ignores the
running weight, norm(max(0, p - q)) instead of norm(max(0, p_tau p - q)). It looks right on the paper's binary example
(there the weight is 1 wherever a stop can happen) and is wrong elsewhere."""

block_residual_bug = block_verify_with(lambda p, q, weight, real: broken_residual(p, q))
block_residual_bug.__name__ = "block_residual_bug"
block_residual_bug.__doc__ = """Block verification with the classic bug of ``broken_accept_reject``: after a stop
before the last guess it resamples from p, not from the weighted residual norm(max(0, p_tau p - q)). Level 4's twin
for block verification (``broken_block_verify``'s error is too small for 192 runs to see)."""


def prefix_match(target_bytes):
    """The broken twin of SLEM's verification (drafters/slem.py), the real hazard of string-level drafting: a
    guess is kept when the target's sample y_i *starts with* its text, a string-level match where only a token
    match is valid. At the boundary token, where the draft stopped inside a word (" wor" for the target's
    " world"), that is the mistake a verifier of text makes; this twin makes it at every guess. Run it with
    ``SLEM.keeping_boundary()`` (drafters/slem.py), which proposes the boundary token."""
    def prefix_match_rule(target_probs, draft_probs, draft_tokens, rng):
        for i, x in enumerate(draft_tokens):
            y = sample(target_probs[i], rng)
            if y != x and not target_bytes[y].startswith(target_bytes[x]):
                return i, y
        return len(draft_tokens), sample(target_probs[len(draft_tokens)], rng)
    return prefix_match_rule


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


def token_bins(runs: list[list[int]], n_bins: int = 200, min_count: int = 10) -> np.ndarray:
    """The token ids that get a bin of their own: the ``n_bins`` most frequent in ``runs`` (both samples
    pooled), among those seen at least ``min_count`` times; every other token goes to one "other" bin.
    Pooling the rare ids keeps every cell's expected count near 5 or more."""
    pooled = np.bincount(np.concatenate([np.asarray(r, dtype=np.int64) for r in runs if len(r)]))
    top = np.argsort(-pooled, kind="stable")[:n_bins]
    return np.sort(top[pooled[top] >= min_count])


def run_counts(runs: list[list[int]], bins: np.ndarray) -> np.ndarray:  # -> [N, B+1]
    """Per run, how many of its tokens fall in each bin; the last column is "other"."""
    index = {int(t): j for j, t in enumerate(bins)}
    out = np.zeros((len(runs), len(bins) + 1))
    for i, run in enumerate(runs):
        for t in run:
            out[i, index.get(int(t), len(bins))] += 1
    return out


def chi2_statistic(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The two-sample chi-square statistic of the 2 x B table [a; b], for each row of a and b ([..., B])."""
    total = a + b  # [..., B]
    n_a, n_b = a.sum(-1, keepdims=True), b.sum(-1, keepdims=True)
    n = n_a + n_b
    keep = total > 0
    e_a, e_b = np.where(keep, total * n_a / n, 1.0), np.where(keep, total * n_b / n, 1.0)
    return (np.where(keep, (a - e_a) ** 2 / e_a + (b - e_b) ** 2 / e_b, 0.0)).sum(-1)


def paired_permutation_test(features_a: np.ndarray, features_b: np.ndarray, statistic, permutations: int = 2000,
                            seed: int = 0) -> dict:
    """Do two methods differ? Row i of ``features_a`` and ``features_b`` ([N, F]) describes run i of each
    method, both from the same prompt (token counts per bin, or a sum and a count). ``statistic(sum_a, sum_b)``
    turns the two methods' column sums ([..., F] each) into a number, large when they differ. Its null
    distribution is not assumed but built by swapping the two runs of random pairs, ``permutations`` times:
    when both methods sample the same distribution, the two runs of a pair are exchangeable, so the p-value
    is exact however dependent the tokens within a run are."""
    sum_a, sum_b = features_a.sum(0), features_b.sum(0)  # [F]
    observed = float(statistic(sum_a, sum_b))
    swap = np.random.default_rng(seed).random((permutations, len(features_a))) < 0.5  # [P, N]: pair i exchanged
    perm_a = sum_a + swap @ (features_b - features_a)  # [P, F]
    null = statistic(perm_a, sum_a + sum_b - perm_a)  # [P]
    p = (1 + int((null >= observed - 1e-9).sum())) / (1 + permutations)
    return dict(statistic=observed, p_value=p, permutations=permutations, runs=len(features_a),
                null_median=float(np.median(null)), null_95=float(np.quantile(null, 0.95)))


def token_test(runs_a: list[list[int]], runs_b: list[list[int]], n_bins: int = 200, **kw) -> dict:
    """The two-sample chi-square of token frequencies (bins: ``token_bins``), with a permutation p-value."""
    bins = token_bins(list(runs_a) + list(runs_b), n_bins)
    res = paired_permutation_test(run_counts(runs_a, bins), run_counts(runs_b, bins), chi2_statistic, **kw)
    return dict(res, bins=len(bins) + 1, tokens_a=sum(map(len, runs_a)), tokens_b=sum(map(len, runs_b)))


def mean_difference(sum_a: np.ndarray, sum_b: np.ndarray) -> np.ndarray:
    """|mean_a - mean_b| from [..., 2] sums of (values, counts)."""
    return np.abs(sum_a[..., 0] / sum_a[..., 1] - sum_b[..., 0] / sum_b[..., 1])


def mean_test(values_a: list[np.ndarray], values_b: list[np.ndarray], **kw) -> dict:
    """Do the per-token values of two methods' runs have the same mean? (a permutation p-value)"""
    fa = np.array([[v.sum(), len(v)] for v in values_a])  # [N, 2]
    fb = np.array([[v.sum(), len(v)] for v in values_b])
    res = paired_permutation_test(fa, fb, mean_difference, **kw)
    return dict(res, mean_a=float(fa[:, 0].sum() / fa[:, 1].sum()), mean_b=float(fb[:, 0].sum() / fb[:, 1].sum()))


def exact_tree_first_token_distribution(accept, p: np.ndarray, q: np.ndarray, deterministic: bool = False) -> np.ndarray:
    """P(first emitted token = y) for a one-level tree of 2 children of the root, verified by ``accept``
    (``tree.accept_tree``'s signature). Children are sampled without replacement from q, or
    (``deterministic``) are q's top 2 with one-hot rows. Exact integration over the uniform draws."""

    V = len(p)
    leaf = np.full(V, 1.0 / V)  # children's own distributions only matter for the bonus token
    if deterministic:
        top = np.argsort(-q, kind="stable")[:2]
        pairs = [((int(top[0]), int(top[1])), 1.0, *one_hot_rows([int(top[0]), int(top[1])], V))]
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
