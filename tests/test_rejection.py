"""Levels 1 and 2 of losslessness: the rule alone, exactly and by Monte Carlo; each catches a broken rule."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minispec import rejection
from minispec.harness.equivalence import broken_accept_reject as accept_reject_broken
from minispec.harness.equivalence import chisquare_gof
from minispec.harness.exact_law import first_token_law
from minispec.rejection import accept_greedy, accept_reject, residual
from minispec.sampling import sample

# ---- hand-built fixtures: one comment per row says what happens ----------------------------------

def test_one_hot_fixtures():
    V = 4
    eye = np.eye(V)
    target = eye[[2, 0, 3, 1, 0]]  # target wants 2, 0, 3, 1, then bonus 0 (not 1: a bonus from p_K would show)
    draft = eye[[2, 0, 1, 1]]  # draft guesses 2, 0, 1, 1
    rng = np.random.default_rng(0)
    assert accept_reject(target, draft, [2, 0, 1, 1], rng) == (2, 3)  # accepts 2, rejects at 3rd, emits 3
    assert accept_reject(target, eye[[2, 0, 3, 1]], [2, 0, 3, 1], rng) == (4, 0)  # accepts 4, bonus 0 from p_{K+1}
    assert accept_reject(target, eye[[1, 0, 3, 1]], [1, 0, 3, 1], rng) == (0, 2)  # rejects the 1st
    assert accept_greedy(target, [2, 0, 1, 1]) == (2, 3)
    assert accept_greedy(target, [2, 0, 3, 1]) == (4, 0)


def test_k_zero_samples_from_p():
    rng = np.random.default_rng(0)
    target = np.array([[0.0, 1.0, 0.0]])
    assert accept_reject(target, np.zeros((0, 3)), [], rng) == (0, 1)
    assert accept_greedy(target, []) == (0, 1)


def test_zero_draft_probability_raises():
    target = np.array([[0.5, 0.5], [0.5, 0.5]])
    draft = np.array([[1.0, 0.0]])
    with pytest.raises(ValueError, match="drafter bug"):
        accept_reject(target, draft, [1], np.random.default_rng(0))


def test_residual_with_zero_mass_falls_back_to_p():
    p = np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(residual(p, p.copy()), p)
    np.testing.assert_allclose(residual(p, p + 1e-15), p)
    np.testing.assert_allclose(residual(np.array([0.5, 0.5]), np.array([1.0, 0.0])), [0.0, 1.0])


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="K\\+1 target rows"):
        accept_reject(np.ones((2, 3)) / 3, np.ones((2, 3)) / 3, [0, 1], np.random.default_rng(0))


def test_greedy_rule_is_the_one_hot_case_of_accept_reject():
    rng = np.random.default_rng(3)
    for _ in range(200):
        V, K = 6, 3
        logits = rng.standard_normal((K + 1, V))
        guesses = [int(rng.integers(V)) if rng.random() < 0.5 else int(np.argmax(logits[i])) for i in range(K)]
        target = np.eye(V)[np.argmax(logits, axis=-1)]
        draft = np.eye(V)[guesses]
        assert accept_reject(target, draft, guesses, rng) == accept_greedy(logits, guesses)


# ---- level 1: exact distribution, hypothesis-generated p and q -----------------------------------

@st.composite
def distribution_pairs(draw):
    V = draw(st.integers(2, 50))
    kind = draw(st.sampled_from(["random", "sparse", "disjoint", "identical", "near-one-hot"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(V) * 0.5), rng.dirichlet(np.ones(V) * 0.5)
    if kind == "sparse":
        p[rng.random(V) < 0.6] = 0
        q[rng.random(V) < 0.6] = 0
        p[rng.integers(V)] += 0.1
        q[rng.integers(V)] += 0.1
    elif kind == "disjoint":
        half = rng.permutation(V)
        p[half[: V // 2]] = 0
        q[half[V // 2:]] = 0
    elif kind == "identical":
        q = p.copy()
    elif kind == "near-one-hot":
        p = np.full(V, 1e-4)
        p[rng.integers(V)] = 1
        q = np.full(V, 1e-4)
        q[rng.integers(V)] = 1
    p, q = p / p.sum(), q / q.sum()
    bonus = rng.dirichlet(np.ones(V))
    return np.stack([p, bonus]), q[None, :]


@settings(max_examples=60, deadline=None)
@given(distribution_pairs())
def test_level1_exact_output_distribution_is_p(pq):
    target_probs, draft_probs = pq
    out = first_token_law(accept_reject, target_probs, draft_probs)
    np.testing.assert_allclose(out, target_probs[0], atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(distribution_pairs())
def test_overlap_is_the_probability_that_one_guess_is_accepted(pq):
    """What a probe measures (policy/auto_k.py): sum_x q(x) min(1, p(x)/q(x)) = sum_x min(p(x), q(x))."""
    target_probs, draft_probs = pq
    p, q = target_probs[0], draft_probs[0]
    by_rule = sum(q[x] * rejection.acceptance_probability(p[x], q[x]) for x in np.flatnonzero(q))
    assert rejection.overlap(p, q) == pytest.approx(by_rule, abs=1e-12)


def test_overlap_matches_the_acceptance_rate_of_accept_reject():
    rng = np.random.default_rng(3)
    accepted = [accept_reject(P1, Q1, [sample(Q1[0], rng)], rng)[0] for _ in range(20_000)]
    beta = rejection.overlap(P1[0], Q1[0])  # 0.1 + 0.2 + 0.15 + 0.05 = 0.5
    assert beta == pytest.approx(0.5) and abs(np.mean(accepted) - beta) < 4 * np.sqrt(beta * (1 - beta) / 20_000)


def test_level1_catches_resampling_from_p():
    target_probs = np.array([[0.6, 0.3, 0.1], [1 / 3, 1 / 3, 1 / 3]])
    draft_probs = np.array([[0.1, 0.3, 0.6]])
    good = first_token_law(accept_reject, target_probs, draft_probs)
    bad = first_token_law(accept_reject_broken, target_probs, draft_probs)
    np.testing.assert_allclose(good, target_probs[0], atol=1e-12)
    assert np.abs(bad - target_probs[0]).max() > 0.05  # caught: the broken rule over-weights token 2


# ---- level 2: Monte Carlo, one step and a K = 3 round ------------------------------------------

P1 = np.array([[0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25]])
Q1 = np.array([[0.1, 0.2, 0.3, 0.4]])


def one_step_counts(rule, n=20_000, seed=11):
    rng = np.random.default_rng(seed)
    counts = np.zeros(4)
    for _ in range(n):
        x = sample(Q1[0], rng)
        k, t = rule(P1, Q1, [x], rng)
        counts[x if k == 1 else t] += 1
    return counts


def test_level2_one_step_monte_carlo():
    chi2, dof, p = chisquare_gof(one_step_counts(accept_reject), P1[0])
    assert p > 1e-3, (chi2, dof, p)
    chi2, dof, p = chisquare_gof(one_step_counts(accept_reject_broken), P1[0])
    assert p < 1e-6, (chi2, dof, p)


# A toy "model" whose distribution depends only on the position: target p_j, draft q_j.
# Tokens 1..3 of the sequence must be independent draws from p_1, p_2, p_3.
TARGET_POS = np.array([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.5, 0.25, 0.25],
                       [0.2, 0.5, 0.3], [0.4, 0.4, 0.2]])
DRAFT_POS = np.array([[0.2, 0.3, 0.5], [0.5, 0.4, 0.1], [0.3, 0.4, 0.3], [0.6, 0.2, 0.2], [0.1, 0.1, 0.8],
                      [0.3, 0.3, 0.4], [0.2, 0.2, 0.6]])


def three_token_counts(rule, n=20_000, K=3, seed=5):
    """Counts of the first K + 1 = 4 tokens: the bonus token of a round that keeps all 3 guesses is counted too."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((3, 3, 3, 3))
    for _ in range(n):
        seq = []
        while len(seq) < 4:
            j = len(seq)
            guesses = [sample(DRAFT_POS[j + i], rng) for i in range(K)]
            m, t = rule(TARGET_POS[j: j + K + 1], DRAFT_POS[j: j + K], guesses, rng)
            seq += guesses[:m] + [t]
        counts[tuple(seq[:4])] += 1
    return counts.ravel()


def test_level2_k3_rounds_monte_carlo():
    exact = np.einsum("a,b,c,d->abcd", *TARGET_POS[:4]).ravel()
    chi2, dof, p = chisquare_gof(three_token_counts(accept_reject), exact)
    assert p > 1e-3, (chi2, dof, p)
    chi2, dof, p = chisquare_gof(three_token_counts(accept_reject_broken), exact)
    assert p < 1e-6, (chi2, dof, p)


def test_verification_rule_names_and_functions():
    """"token" and "block" name the two rules; a function of their signature is used as it is (the checks pass a
    broken twin that way); anything else is refused."""
    twin = lambda target_probs, draft_probs, draft_tokens, rng: (0, 0)  # noqa: E731
    assert rejection.verification_rule(twin) is twin
    assert rejection.verification_rule("token") is rejection.accept_reject
    assert rejection.verification_rule("block") is rejection.block_verify
    with pytest.raises(ValueError, match="rule must be"):
        rejection.verification_rule("tree")
