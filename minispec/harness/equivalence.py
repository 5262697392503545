"""The deliberately broken rules every level plants, and the statistics of level 4: chi-square tests of token
frequencies and paired permutation tests.

A twin of one of rejection.py's rules (or of tree.py's ``accept_tree``) is that rule's own code with one function of
rejection.py replaced for the call (``twin``), so that it differs from its rule by exactly its bug. Two twins are rules of their own: SLEM's
(``prefix_match``) verifies by text, and the coupled rule's (``coupled_emits_the_guess``) races keyed noise, which
no function of rejection.py draws. The exact laws the twins are held to are in exact_law.py (level 1) and exact_loop.py
(level 3). One twin breaks a drafter instead of a rule: ``renormalised_tree``, a dynamic tree whose q is not the one its
children were drawn from.
"""

from __future__ import annotations

import inspect

import numpy as np
from scipy import stats

from .. import rejection
from ..sampling import sample
from ..tree import accept_tree


def broken_residual(target_row, draft_row):
    """The classic bug, the one broken rule every level plants: resample from p, not norm(max(0, p - q)).
    The tests put it in place of ``rejection.residual`` (monkeypatch); ``broken_accept_reject`` and
    ``broken_accept_tree`` use it."""
    return target_row / target_row.sum()


def twin(rule, replaced: str, replacement, name: str, doc: str = ""):
    """A twin of ``rule`` (a rule of rejection.py, ``accept_reject``'s signature, or of tree.py, ``accept_tree``'s)
    called ``name``: the rule's own code, with ``rejection.<replaced>`` replaced for the call by
    ``replacement(real, rng)`` (``real``: the function replaced; ``rng``: the call's generator, its last argument, for
    a twin that draws). The one way a twin changes a rule."""
    def run(*args):
        real = getattr(rejection, replaced)
        setattr(rejection, replaced, replacement(real, args[-1]))
        try:
            return rule(*args)
        finally:
            setattr(rejection, replaced, real)
    run.__name__, run.__doc__, run.__signature__ = name, doc, inspect.signature(rule)  # the rule's own arguments
    return run


broken_accept_reject = twin(rejection.accept_reject, "residual", lambda real, rng: broken_residual, "broken_accept_reject",
                            """A deliberately broken twin of ``rejection.accept_reject``: after a rejection it samples
from ``broken_residual``. Its output is not the target's distribution; the checks run it to show they can fail.""")

broken_block_verify = twin(rejection.block_verify, "weighted_residual", lambda real, rng: lambda p, q, weight: real(p, q, 1.0),
                           "broken_block_verify", """A deliberately broken twin of ``rejection.block_verify``: its
residual ignores the running weight, norm(max(0, p - q)) instead of norm(max(0, p_tau p - q)). It looks right on the
paper's binary example (there the weight is 1 wherever a stop can happen) and is wrong elsewhere.""")

block_residual_bug = twin(rejection.block_verify, "weighted_residual", lambda real, rng: lambda p, q, weight: broken_residual(p, q),
                          "block_residual_bug", """Block verification with the classic bug of ``broken_accept_reject``:
after a stop before the last guess it resamples from p, not from the weighted residual norm(max(0, p_tau p - q)).
Level 4's twin for block verification (``broken_block_verify``'s error is too small for 192 runs to see).""")


broken_accept_tree = twin(accept_tree, "residual", lambda real, rng: broken_residual, "broken_accept_tree",
                          """A deliberately broken twin of ``tree.accept_tree``, the multi-candidate rule: after a
rejected child it samples from ``broken_residual`` (p, not norm(max(0, p - q))) for the next sibling and for the
correction. Level 4's twin for the dynamic tree (``minispec check --tree``): the classic bug of
``broken_accept_reject``, in the tree's walk.""")


@rejection.declares(joint=False, keyed=True)
def coupled_emits_the_guess(target_probs, draft_probs, draft_tokens, noise) -> tuple[int, int]:
    """A deliberately broken twin of ``rejection.coupled_verify`` with an off-by-one at a mismatch: it emits the
    rejected guess there, not the target's keyed sample. Its tokens follow the draft wherever the draft is wrong."""
    for i, x in enumerate(draft_tokens):
        if x != noise.race(target_probs[i], i):
            return i, int(x)  # the bug: x where coupled_verify returns the target's sample y
    return len(draft_tokens), noise.race(target_probs[-1], len(draft_tokens))


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




def renormalised_tree(drafter):
    """A broken twin of a drafter that grows dynamic trees (``GrowsTrees``): ``drafter`` itself (pass a fresh one, not
    one in use), its ``grow_tree`` replaced on the instance by one whose trees have each node's q renormalised over the
    children its parent kept, as if they were all the draft could have said, while the children were drawn from the
    full q. The multi-candidate rule then removes the wrong mass from the residual. Level 3 catches it exactly
    (tests/test_dynamic_tree.py); at level 4 on SmolLM2 its bias was below what 48 runs can see (docs/eagle.md), so
    ``minispec check --tree`` plants ``broken_accept_tree`` instead."""
    real = drafter.grow_tree

    def grow_tree(tokens, shape, warp, draws):
        tree = real(tokens, shape, warp, draws)
        for node in range(1, len(tree.tokens)):
            kids = [tree.tokens[c] for c in tree.children(tree.parents[node])]
            q = np.zeros_like(tree.draft_probs[node])
            q[kids] = tree.draft_probs[node][kids]
            tree.draft_probs[node] = q / q.sum()  # the bug: the true q is tree.draft_probs[node] as drawn
        return tree

    drafter.grow_tree = grow_tree
    drafter.name = f"{drafter.name}, q renormalised over the kept children"
    return drafter


def chisquare_gof(counts, probs, min_expected: float = 5.0) -> tuple[float, int, float]:
    """Goodness of fit of observed counts to probabilities: cells expected fewer than ``min_expected`` times are pooled
    into one cell, and a pool still expected fewer times than that joins the smallest cell kept."""
    counts, probs = np.asarray(counts, float), np.asarray(probs, float)
    expected = probs * counts.sum()
    if (counts[expected == 0] > 0).any():
        return float("inf"), 0, 0.0  # a draw the distribution forbids
    small = expected < min_expected
    obs, exp = counts[~small], expected[~small]
    rest_obs, rest_exp = counts[small].sum(), expected[small].sum()
    if rest_exp >= min_expected or not len(exp):  # the pooled small bins are a bin of their own
        obs, exp = np.append(obs, rest_obs), np.append(exp, rest_exp)
    elif rest_exp > 0:  # still too small to stand alone: pooled into the smallest bin kept (bug: left alone, a bin
        j = int(np.argmin(exp))  # expected under 1 made the test several times more eager than its alpha)
        obs, exp = obs.copy(), exp.copy()
        obs[j] += rest_obs
        exp[j] += rest_exp
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
