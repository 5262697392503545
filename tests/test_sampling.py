"""The warps against an independent reference: top-k keeps exactly the k most likely tokens, top-p the smallest
set whose mass reaches p. (The level-3 tables apply the same warp on both sides, so they cannot see a warp that
keeps one token too many: these tests can.)"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minispec.sampling import sample, top_probability, warp


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), V=st.integers(2, 40), k=st.integers(1, 45), T=st.sampled_from([0.5, 1.0, 2.0]))
def test_top_k_keeps_exactly_the_k_largest(seed, V, k, T):
    logits = np.random.default_rng(seed).permutation(V).astype(float) * 0.37  # distinct values: no ties
    probs = warp(logits, T, top_k=k)
    keep = np.argsort(-logits)[: min(k, V)]
    want = np.zeros(V)
    want[keep] = softmax(logits[keep] / T)
    np.testing.assert_allclose(probs, want, atol=1e-12)
    assert np.count_nonzero(probs) == min(k, V)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), V=st.integers(2, 40), top_p=st.floats(0.05, 1.0), T=st.sampled_from([0.7, 1.0]))
def test_top_p_keeps_the_smallest_set_that_reaches_p(seed, V, top_p, T):
    logits = np.random.default_rng(seed).normal(size=V) * 2
    full = softmax(logits / T)
    order = np.argsort(-full, kind="stable")
    n = 1
    while full[order[:n]].sum() < top_p and n < V:  # the smallest n whose mass reaches top_p
        n += 1
    want = np.zeros(V)
    want[order[:n]] = full[order[:n]] / full[order[:n]].sum()
    np.testing.assert_allclose(warp(logits, T, top_p=top_p), want, atol=1e-9)


def test_temperature_zero_is_the_argmax_and_sample_inverts_the_cdf():
    assert list(warp(np.array([0.1, 3.0, 2.0]), 0.0)) == [0.0, 1.0, 0.0]

    class Fixed:
        def __init__(self, u):
            self.u = u

        def random(self):
            return self.u

    p = np.array([0.2, 0.5, 0.3])
    assert [sample(p, Fixed(u)) for u in (0.0, 0.19, 0.2, 0.69, 0.7, 0.999)] == [0, 0, 1, 1, 2, 2]
    # a row that does not sum to 1 is read as its normalised self (bug: the draw divided by the total)
    assert [sample(10 * p, Fixed(u)) for u in (0.0, 0.19, 0.2, 0.69, 0.7, 0.999)] == [0, 0, 1, 1, 2, 2]


def test_bad_warp_arguments_are_refused():
    bad = ((dict(temperature=-1), "temperature"), (dict(temperature=np.inf), "temperature"),
           (dict(temperature="1"), "temperature"), (dict(temperature=True), "temperature"),
           (dict(top_k=0), "top_k"), (dict(top_k=2.5), "top_k"), (dict(top_k=True), "top_k"),
           (dict(top_p=1.5), "top_p"), (dict(top_p=0.0), "top_p"), (dict(top_p=False), "top_p"))
    for kw, msg in bad:
        with pytest.raises(ValueError, match=msg):
            warp(np.zeros(3), **{"temperature": 1.0, **kw})
    warp(np.zeros(3), 0.0, top_k=3, top_p=1.0)  # the edges that are allowed


def test_warp_defaults_and_precision():
    """warp's default is T = 1 and no filter; it works in float64 whatever the logits' dtype (float32 logits from
    a pass; the rule then compares float64 probabilities)."""
    z = np.array([0.5, -1.0, 2.0, 0.0], dtype=np.float32)
    np.testing.assert_array_equal(warp(z), warp(z, 1.0, top_k=None, top_p=None))
    np.testing.assert_allclose(warp(z), np.exp(z) / np.exp(z).sum(), rtol=1e-6)
    assert warp(z).dtype == np.float64 and warp(z, 0.7, top_k=2).dtype == np.float64


def hf_warp(logits, temperature, top_k, top_p):
    """transformers' own warpers, in generate's order (temperature, top-k, top-p), then a softmax."""
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    scores, ids = torch.tensor(np.asarray(logits, dtype=np.float64))[None], torch.zeros((1, 1), dtype=torch.long)
    if temperature != 1.0:
        scores = lp.TemperatureLogitsWarper(temperature)(ids, scores)
    if top_k is not None:
        scores = lp.TopKLogitsWarper(top_k)(ids, scores)
    if top_p is not None:
        scores = lp.TopPLogitsWarper(top_p)(ids, scores)
    return torch.softmax(scores, -1)[0].numpy()


def test_warps_match_transformers_warpers():
    """An independent reference: transformers' TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper on
    the same logits, ties (rounded logits), extreme values and edge parameters included. Where tokens of equal
    probability straddle the top-p boundary, transformers' sort is unstable, so only the kept probabilities are
    compared (as a sorted list); minispec keeps the lower ids, always."""
    rng = np.random.default_rng(0)
    for i in range(400):
        V = int(rng.integers(2, 40))
        z = rng.normal(0, 3, V)
        if i % 3 == 0:
            z = np.round(z)  # ties
        if i % 7 == 0:
            z[rng.integers(V)] = 80.0  # one token far above the rest
        T = float(rng.choice([0.05, 0.3, 0.7, 1.0, 1.5, 3.0]))
        k = None if i % 4 == 0 else int(rng.integers(1, V + 2))
        p = None if i % 5 == 0 else float(rng.choice([1e-6, 0.1, 0.5, 0.8, 0.9, 0.95, 0.999, 1.0]))
        ours, theirs = warp(z, T, k, p), hf_warp(z, T, k, p)
        np.testing.assert_allclose(np.sort(ours), np.sort(theirs), atol=1e-9, err_msg=str((z, T, k, p)))
        if len(set(z)) == V:  # no two tokens tied: the same tokens, too
            np.testing.assert_allclose(ours, theirs, atol=1e-9, err_msg=str((z, T, k, p)))


def test_top_p_ties_keep_the_lower_ids():
    z = np.log([0.4, 0.2, 0.2, 0.2])  # top_p 0.55: one of the three tied tokens must go in
    np.testing.assert_allclose(warp(z, 1.0, top_p=0.55), [2 / 3, 1 / 3, 0, 0])
    # 100 tokens of two values (a sort that is not stable reorders ties past 16 entries): of the likelier tokens,
    # the lowest ids go in
    z = np.where(np.random.default_rng(0).integers(0, 2, 100) == 1, 1.0, 0.0)
    likely = np.flatnonzero(z == 1.0)
    kept = warp(z, 1.0, top_p=0.1) > 0
    assert kept.sum() > 1 and np.array_equal(np.flatnonzero(kept), likely[: kept.sum()])


def test_warp_rows_are_warped_one_by_one():
    """A batch [T, V] is warped row by row: rows of very different scales (a pass's rows) each get their own
    softmax, filters included (bug: one maximum for the whole batch, which underflows every other row)."""
    z = np.array([[0.0, 1.0, -1.0], [1000.0, 1001.0, 999.0], [-800.0, -799.0, -801.0]])
    for kw in (dict(), dict(top_k=2), dict(top_p=0.7)):
        np.testing.assert_allclose(warp(z, 1.0, **kw), np.stack([warp(row, 1.0, **kw) for row in z]))
        np.testing.assert_allclose(warp(z, 1.0, **kw)[1], warp(z[0], 1.0, **kw))


def test_top_p_drops_a_token_whose_mass_before_it_is_exactly_p():
    """The smallest set whose mass *reaches* top_p: with p = (0.5, 0.25, 0.25) and top_p = 0.5 the first token
    alone reaches it (a rule keeping tokens while the mass before them is <= top_p would keep the second too;
    transformers' TopPLogitsWarper also keeps one)."""
    z = np.log([0.5, 0.25, 0.25])
    np.testing.assert_allclose(warp(z, 1.0, top_p=0.5), [1.0, 0.0, 0.0])
    np.testing.assert_allclose(hf_warp(z, 1.0, None, 0.5), [1.0, 0.0, 0.0])


def test_top_probability_is_the_softmax_maximum():
    """The early stop's belief in a guess (drafters/draft_model.py): the largest probability at temperature 1."""
    for p in ([0.7, 0.2, 0.1], [0.25, 0.25, 0.5], [1.0 - 1e-9, 1e-9]):
        assert top_probability(np.log(p) + 3.0) == pytest.approx(max(p), rel=1e-12)
