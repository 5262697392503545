"""Cost-aware adaptive K: the choice follows the cost model, and losslessness is unchanged."""

import numpy as np
import pytest

from minispec import generate, load_model, rejection
from minispec.adaptive import Acceptance, AutoK, calibrate_verify, expected_tokens
from minispec.drafters import DraftModel, PromptLookup
from minispec.equivalence import chisquare_gof
from minispec.speculative import speculative_generate
from minispec.tiny import tiny_config, write_random_model

from .test_speculative import V, exact_two_tokens  # noqa: F401  (fixtures below reuse the same models)

CPU_LIKE = {n: 0.010 * (1.0 if n == 1 else 2.2 + 0.02 * n) for n in range(1, 10)}  # r(2) = 2.2, flat after
FLAT = {n: 0.010 * (1 + 0.05 * (n - 1)) for n in range(1, 10)}  # verification nearly free


def policy(costs, draft_time, prior=0.5, **kw):
    return AutoK(costs, draft_time, k_max=8, learn_costs=False, acceptance=Acceptance(prior), **kw)


def test_expected_tokens():
    assert expected_tokens(0.0, 5) == 1.0 and expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.5, 1) == pytest.approx(1.5)
    assert expected_tokens(0.5, 3) == pytest.approx((1 - 0.5 ** 4) / 0.5)  # b = a: Leviathan et al.
    assert expected_tokens(0.3, 3, b=0.9) == pytest.approx(1 + 0.3 * (1 + 0.9 + 0.81))


def test_acceptance_separates_first_and_later_guesses():
    acc = Acceptance(prior=0.5, weight=1e-9, decay=1.0)
    for n in (0, 0, 0, 8, 8, 0, 0, 0, 8, 4):  # copy runs: mostly nothing, else nearly everything (K = 8)
        acc.update(8, n)
    assert acc.first == pytest.approx(0.4) and acc.next == pytest.approx(24 / 25)


def test_later_guesses_follow_the_first_until_seen():
    acc = Acceptance(prior=0.5)
    for _ in range(10):
        acc.update(1, 1)  # K = 1 rounds say nothing about later guesses
    assert acc.next == acc.first > 0.8  # so K grows past 1 (a fixed prior of 0.5 would keep it there)
    acc.update(8, 1)
    assert acc.next < acc.first


def test_a_run_drafter_pays_where_one_rate_would_say_it_cannot():
    sticky = AutoK(CPU_LIKE, 0.0, learn_costs=False, acceptance=Acceptance(prior=0.3, prior_next=0.95))  # 30%, then runs
    assert sticky.next_k() >= 6
    iid = policy(CPU_LIKE, draft_time=0.0, prior=0.3)  # one rate of 0.3 for every guess
    assert iid.next_k() == 0


def plain_rounds_with_probes(p, rounds: int):
    """Drive a policy whose probes never find anything -> (rounds that probed, probe cost / plain time)."""
    probed, seen, spent, plain = [], 0, 0.0, 0.0
    for i in range(rounds):
        k = p.next_k(i + 1 - seen)
        if k:
            spent += p.probe_cost(i + 1 - seen)
            probed.append(i)
            seen = i + 1
        else:
            plain += p.verify_time[1]
        p.observe(k, 0, k * p.draft_time, p.verify_time[k + 1])
    return probed, spent / plain


def test_picks_zero_when_nothing_pays_and_probes_within_budget():
    p = policy(CPU_LIKE, draft_time=0.005, prior=0.3)
    probed, overhead = plain_rounds_with_probes(p, 1000)
    assert p.history[0] == 0 and len(probed) >= 5  # plain decoding, with probes now and then
    assert overhead <= 0.02  # probes never cost more than 2% of the plain rounds' time


def test_catching_up_is_part_of_a_probe_cost():
    cheap = policy(CPU_LIKE, draft_time=0.005, prior=0.3, feed_time=0.0001)
    dear = policy(CPU_LIKE, draft_time=0.005, prior=0.3, feed_time=0.001)  # a lagging drafter feeds 1 ms per token
    assert cheap.probe_cost(50) < dear.probe_cost(50)
    few, overhead = plain_rounds_with_probes(cheap, 1000)
    none, _ = plain_rounds_with_probes(dear, 1000)  # catching up grows faster than the budget: never worth it
    assert len(few) >= 2 and overhead <= 0.02 and none == []


def test_never_probes_a_drafter_as_slow_as_the_target():
    p = policy(CPU_LIKE, draft_time=0.010, prior=0.3)  # c = 1: even a = 1 cannot pay
    assert p.hopeless() and set(p.next_k() for _ in range(100)) == {0}


def test_picks_long_drafts_when_verification_is_cheap_and_acceptance_high():
    p = policy(FLAT, draft_time=0.0005, prior=0.9)
    assert p.next_k() == 8
    for _ in range(10):
        p.observe(8, 1, 0, 0)  # acceptance collapses: every second guess rejected
    assert p.estimate.next < 0.3 and p.next_k() < 3


def test_cpu_like_costs_need_high_acceptance():
    low, high = policy(CPU_LIKE, 0.001, prior=0.6), policy(CPU_LIKE, 0.001, prior=0.95)
    assert low.next_k() == 0 and high.next_k() >= 6


def test_acceptance_is_kept_per_context():
    p = policy(CPU_LIKE, draft_time=0.0, prior=0.5)
    for _ in range(20):  # 1-gram matches always fail, 3-gram matches never do
        p.next_k(1, context=1)
        p.observe(4, 0, 0.0, 0.0)
        p.next_k(1, context=3)
        p.observe(8, 8, 0.0, 0.0)
    assert p.next_k(1, context=1) == 0 and p.next_k(1, context=3) == 8


def test_prompt_lookup_context_is_the_matched_ngram_length():
    pl = PromptLookup(20, max_ngram=3)
    assert pl.context([1, 2, 3, 4]) == 0
    assert pl.context([1, 2, 3, 9, 3]) == 1
    assert pl.context([1, 2, 3, 9, 2, 3]) == 2
    assert pl.context([1, 2, 3, 9, 1, 2, 3]) == 3
    for seq in ([1, 2, 3, 9, 3], [5, 5, 5, 5], [1, 2, 1, 2, 1]):
        assert bool(pl.context(seq)) == bool(pl.continuation(seq, 4))


def test_calibration_is_cached(tmp_path):
    m = load_model(write_random_model(tmp_path / "m"))
    a = calibrate_verify(m, 4)
    assert set(a) == {1, 2, 3, 4} and calibrate_verify(m, 4) == a


@pytest.fixture(scope="module")
def pair(small_pair):
    return small_pair


# K in 0..3 varies from round to round with these costs and acceptances around 0.5-0.8
MIXED = {n: 0.010 * (1 + 0.35 * (n - 1)) for n in range(1, 10)}


def auto_counts(target, draft, runs, prompt):
    counts, ks = np.zeros(V * V), set()
    for seed in range(runs):
        pol = AutoK(MIXED, 0.002, k_max=3, learn_costs=False, acceptance=Acceptance(prior=0.6, weight=1.0, decay=0.5, prior_next=0.8))
        toks = speculative_generate(target, DraftModel(draft), prompt, 3, k=pol, seed=seed, temperature=1.0).tokens
        counts[toks[0] * V + toks[1]] += 1
        ks.update(pol.history)
    return counts, ks


def test_level3_with_auto_k(pair):
    target, draft = pair
    prompt = [1, 4, 2]
    counts, ks = auto_counts(target, draft, 20_000, prompt)
    assert len(ks) >= 3, ks  # the policy really varied K
    chi2, dof, p = chisquare_gof(counts, exact_two_tokens(target, prompt, temperature=1.0))
    assert p > 1e-3, (chi2, dof, p)


def test_level3_with_auto_k_catches_broken_rule(pair, monkeypatch):
    target, draft = pair
    monkeypatch.setattr(rejection, "residual", lambda p, q: p / p.sum())
    counts, _ = auto_counts(target, draft, 20_000, [1, 4, 2])
    chi2, dof, p = chisquare_gof(counts, exact_two_tokens(target, [1, 4, 2], temperature=1.0))
    assert p < 1e-6, (chi2, dof, p)


def test_auto_greedy_equals_plain(tmp_path):
    target = load_model(write_random_model(tmp_path / "t", tiny_config(num_hidden_layers=3), seed=1))
    draft = load_model(write_random_model(tmp_path / "d", tiny_config(num_hidden_layers=1), seed=2))
    for prompt in ([5, 6, 7], [9] * 12):
        want = generate(target, prompt, 40)
        for d in (DraftModel(draft), PromptLookup(64), DraftModel(target)):
            assert speculative_generate(target, d, prompt, 40, k="auto").tokens == want
    with pytest.raises(ValueError, match="auto"):
        speculative_generate(target, draft, [1], 3, k="fast")
