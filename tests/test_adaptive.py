"""Cost-aware adaptive K: the choice follows the cost model, and losslessness is unchanged."""


import numpy as np
import pytest

from minispec import generate, load_model, rejection
from minispec.drafters import DraftModel, PromptLookup
from minispec.drafters.dynamic_tree import DynamicTree
from minispec.harness.exact_loop import loop_law
from minispec.model.tiny import tiny_config, write_random_model
from minispec.policy import (
    Acceptance,
    AutoDynamicTree,
    AutoK,
    Calibrated,
    ChoosesByCost,
    ChoosesK,
    ChoosesTrees,
    FixedK,
    StoppedK,
    TreePolicy,
    calibrations_of,
    expected_tokens,
    k_policy,
)
from minispec.sampling import Stream, Warp, top_probability, warp
from minispec.speculative import speculative_generate

from .helpers import V, broken_residual, exact_three_tokens, exact_two_tokens

CPU_LIKE = {n: 0.010 * (1.0 if n == 1 else 2.2 + 0.02 * n) for n in range(1, 10)}  # r(2) = 2.2, flat after
FLAT = {n: 0.010 * (1 + 0.05 * (n - 1)) for n in range(1, 10)}  # verification nearly free


def policy(costs, draft_time, prior=0.5, **kw):
    return AutoK(costs, draft_time, k_max=8, learn=False, acceptance=Acceptance(prior), **kw)


def test_expected_tokens():
    assert expected_tokens(0.0, 5) == 1.0 and expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.5, 1) == pytest.approx(1.5)
    assert expected_tokens(0.5, 3) == pytest.approx((1 - 0.5 ** 4) / 0.5)  # b = a: Leviathan et al.
    assert expected_tokens(0.3, 3, b=0.9) == pytest.approx(1 + 0.3 * (1 + 0.9 + 0.81))


def test_every_shipped_policy_declares_what_its_callers_read():
    """policy/protocol.py: the loops, a run's result and the CLI ask a policy for capabilities, never for a class."""
    chains = [FixedK(3), policy(CPU_LIKE, 0.001), StoppedK(2, CPU_LIKE, 0.001)]
    trees = [TreePolicy.fixed(2, 3), TreePolicy(CPU_LIKE, {w: 0.001 for w in range(1, 5)}, max_nodes=8)]
    assert all(isinstance(p, ChoosesK) and not isinstance(p, ChoosesTrees) for p in chains)
    assert all(isinstance(p, ChoosesTrees) and not isinstance(p, ChoosesK) for p in trees)
    assert all(isinstance(p, Calibrated) and p.slowdown == 1.0 and calibrations_of(p) == [] for p in chains + trees)
    assert [isinstance(p, ChoosesByCost) for p in chains + trees] == [False, True, True, True, True]
    assert [p.max_room for p in trees] == [6, 8] and [p.auto for p in trees] == [False, True]

    class Bare:  # a caller's own chain policy: the loop's four members only
        keep = None

        def next_k(self, unseen=1, context=0):
            return 1

        def probe(self):
            return False

        def observe(self, *a, **kw):
            pass

    bare = Bare()
    assert k_policy(bare, None, None) is bare and calibrations_of(bare) == [] and not isinstance(bare, Calibrated)
    with pytest.raises(ValueError, match="policy object"):
        k_policy(object(), None, None)


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
    sticky = AutoK(CPU_LIKE, 0.0, learn=False, acceptance=Acceptance(prior=0.3, prior_next=0.95))  # 30%, then runs
    assert sticky.next_k() >= 6
    iid = policy(CPU_LIKE, draft_time=0.0, prior=0.3)  # one rate of 0.3 for every guess
    assert iid.next_k() == 0


def plain_rounds_with_probes(p, rounds: int):
    """Drive a policy whose probes always find a rejected guess -> (rounds that probed, probe cost / plain time)."""
    probed, seen, spent, plain = [], 0, 0.0, 0.0
    for i in range(rounds):
        assert p.next_k(i + 1 - seen) == 0
        plain += p.verify_time[1]
        probe = p.probe()
        if probe:
            spent += p.probe_cost(i + 1 - seen)
            probed.append(i)
            seen = i + 1
        p.observe(0, 0, p.draft_time if probe else 0.0, p.verify_time[1], (0.0, False) if probe else None)
    return probed, spent / plain


def test_picks_zero_when_nothing_pays_and_probes_within_budget():
    p = policy(CPU_LIKE, draft_time=0.005, prior=0.3)
    probed, overhead = plain_rounds_with_probes(p, 1000)
    assert p.history[0] == 0 and len(probed) >= 5  # plain decoding, with probes now and then
    assert overhead <= 0.01  # probes never cost more than 1% of the plain rounds' time


def test_catching_up_is_part_of_a_probe_cost():
    cheap = policy(CPU_LIKE, draft_time=0.005, prior=0.3, feed_time=0.00002)
    dear = policy(CPU_LIKE, draft_time=0.005, prior=0.3, feed_time=0.001)  # a lagging drafter feeds 1 ms per token
    assert cheap.probe_cost(50) < dear.probe_cost(50)
    few, overhead = plain_rounds_with_probes(cheap, 1000)
    none, _ = plain_rounds_with_probes(dear, 1000)  # catching up grows faster than the budget: never worth it
    assert len(few) >= 2 and overhead <= 0.01 and none == []


def test_a_free_drafter_is_probed_every_plain_round_and_probes_lift_k():
    p = policy(CPU_LIKE, draft_time=0.0, prior=0.3)  # prompt lookup: a guess costs (almost) nothing
    assert p.next_k() == 0 and p.probe()
    for _ in range(6):  # its guesses would have been accepted: no verified round needed to learn that
        p.observe(0, 0, 0.0, 0.010, probed=(1.0, False))
        assert p.probe()
    assert p.estimate.first > 0.7 and p.next_k() >= 4


def test_a_probe_counts_as_a_fraction_of_a_success():
    """A probe that would have been accepted with probability 0.3 weighs as 0.3 of an accepted first guess
    and 0.7 of a rejected one: the estimate is linear in it."""
    est = {}
    for beta in (0.0, 0.3, 1.0):
        p = policy(CPU_LIKE, draft_time=0.0, prior=0.5)
        for _ in range(30):
            p.next_k()
            p.observe(0, 0, 0.0, 0.010, probed=(beta, False))
        est[beta] = p.estimate.first
    assert est[0.0] < est[0.3] < est[1.0]
    assert est[0.3] == pytest.approx(0.3 * est[1.0] + 0.7 * est[0.0])


def test_a_drafter_whose_label_is_its_first_guess_is_probed_for_nothing_more():
    """After the label (the EAGLE head's confidence: a catch-up and the first guess's logits, which a plain round pays
    anyway, ``label_time``), a probe adds no drafting: it is free, and asked in every plain round from the first (bug:
    priced as a catch-up and a guess on top, it waited for the budget like a drafter without a label)."""
    labelled = policy(CPU_LIKE, draft_time=0.005, prior=0.3, feed_time=0.001, claims=lambda label: 0.3)
    plain = policy(CPU_LIKE, draft_time=0.005, prior=0.3, feed_time=0.001)
    assert labelled.probe_cost(50) == 0.0 < plain.probe_cost(50)
    probed, overhead = plain_rounds_with_probes(labelled, 200)
    assert len(probed) == 200 and overhead == 0.0
    assert plain_rounds_with_probes(plain, 200)[0] == []  # catching up on 50 ms of tokens: never within 1% of 200 rounds


def test_never_probes_a_drafter_as_slow_as_the_target():
    p = policy(CPU_LIKE, draft_time=0.010, prior=0.3)  # c = 1: even a = 1 cannot pay
    assert p.hopeless()
    for _ in range(300):  # plain rounds earn the budget a probe would cost: still none
        assert p.next_k() == 0 and not p.probe()
        p.observe(0, 0, 0.0, 0.010)
    assert p.budget.saved >= p.probe_cost(1) and p.probes == 0


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


def test_a_new_context_starts_from_the_best_lower_one():
    p = policy(CPU_LIKE, draft_time=0.0, prior=0.5)
    p.next_k(1, context=1)
    p.observe(4, 0, 0.0, 0.0)  # 1-gram: rejected
    p.next_k(1, context=2)
    for _ in range(3):
        p.observe(4, 4, 0.0, 0.0)  # 2-gram: copied runs
    assert p.acc[3].prior == pytest.approx(p.acc[2].first) and p.acc[2].first > 0.75
    assert p.acc[3].first == p.acc[3].prior and p.next_k(1, context=3) >= 6  # no ramp-up from 0.5
    q = policy(CPU_LIKE, draft_time=0.0, prior=0.5)
    q.next_k(1, context=1)
    q.observe(4, 0, 0.0, 0.0)
    assert q.acc[3].prior == 0.5 and q.acc[0].prior == 0.5  # a failed 1-gram round lowers nothing


def test_prompt_lookup_context_is_the_matched_ngram_length():
    pl = PromptLookup(max_ngram=3, vocab_size=20)
    assert pl.context([1, 2, 3, 4]) == 0
    assert pl.context([1, 2, 3, 9, 3]) == 1
    assert pl.context([1, 2, 3, 9, 2, 3]) == 2
    assert pl.context([1, 2, 3, 9, 1, 2, 3]) == 3
    for seq in ([1, 2, 3, 9, 3], [5, 5, 5, 5], [1, 2, 1, 2, 1]):
        assert bool(pl.context(seq)) == bool(pl.continuation(seq, 4))


# K in 0..3 varies from round to round with these costs and acceptances around 0.5-0.8
MIXED = {n: 0.010 * (1 + 0.35 * (n - 1)) for n in range(1, 10)}


def auto_policy():
    return AutoK(MIXED, 0.002, k_max=3, learn=False, probe_share=1.0, margin=0.0,
                 acceptance=Acceptance(prior=0.6, weight=1.0, decay=0.5, prior_next=0.8))


def exact_with_policy(target, draft, prompt, make_policy, m=3, make_drafter=None):
    """The loop's exact law of its first m tokens (harness/exact_loop.py) with a fresh policy per path; and the
    policies, for what they did."""
    made = []

    def fresh():
        made.append(make_policy())
        return dict(k=made[-1])
    law, _ = loop_law(target, make_drafter or (lambda: DraftModel(draft)), prompt, m, V, fresh=fresh, temperature=1.0)
    return law, made


@pytest.mark.slow
def test_level3_exact_with_auto_k(pair):
    """Level 3, exact, under a policy that varies K and probes between rounds (a probe draws from the rng and
    moves the draft's cache): the law of 3 tokens is the target's."""
    target, draft = pair
    law, made = exact_with_policy(target, draft, [1, 4, 2], auto_policy)
    assert len({k for p in made for k in p.history}) >= 3  # the policy really varied K
    assert sum(p.probes for p in made) > len(made) // 4  # and probed
    np.testing.assert_allclose(law, exact_three_tokens(target, [1, 4, 2], temperature=1.0), rtol=1e-5, atol=1e-7)


class ProbeThenK(FixedK):
    """Plain rounds that probe, alternating with K = 2 rounds: probes draw from the rng and move the
    draft's cache between real rounds."""

    def __init__(self):
        super().__init__(2)
        self.rounds = 0

    def next_k(self, unseen=1, context=0):
        self.rounds += 1
        return 0 if self.rounds % 2 else 2

    def probe(self):
        return True


@pytest.mark.slow
def test_level3_exact_with_probes_between_rounds(pair):
    target, draft = pair
    law, made = exact_with_policy(target, draft, [1, 4, 2], ProbeThenK)
    np.testing.assert_allclose(law, exact_three_tokens(target, [1, 4, 2], temperature=1.0), rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_level3_exact_with_probes_catches_broken_rule(pair, monkeypatch):
    target, draft = pair
    monkeypatch.setattr(rejection, "residual", broken_residual)
    law, _ = exact_with_policy(target, draft, [1, 4, 2], ProbeThenK)  # tokens 2 and 3: a K = 2 round after a probe
    tv = 0.5 * np.abs(law - exact_three_tokens(target, [1, 4, 2], temperature=1.0)).sum()
    assert tv > 0.02, tv


@pytest.mark.slow
def test_level3_exact_with_auto_k_catches_broken_rule(pair, monkeypatch):
    target, draft = pair
    monkeypatch.setattr(rejection, "residual", broken_residual)
    law, _ = exact_with_policy(target, draft, [1, 4, 2], auto_policy, m=2)
    tv = 0.5 * np.abs(law - exact_two_tokens(target, [1, 4, 2], temperature=1.0)).sum()
    assert tv > 0.02, tv


def test_auto_greedy_equals_plain(tmp_path):
    target = load_model(write_random_model(tmp_path / "t", tiny_config(num_hidden_layers=3), seed=1))
    draft = load_model(write_random_model(tmp_path / "d", tiny_config(num_hidden_layers=1), seed=2))
    for prompt in ([5, 6, 7], [9] * 12):
        want = generate(target, prompt, 40)
        for d in (DraftModel(draft), PromptLookup(), DraftModel(target)):
            assert speculative_generate(target, d, prompt, 40, k="auto").tokens == want
    with pytest.raises(ValueError, match="auto"):
        speculative_generate(target, draft, [1], 3, k="fast")


class ProbeEveryRound(FixedK):
    """K = 0 always, probing every plain round; records what each round's probe measured."""

    def __init__(self):
        super().__init__(0)
        self.probed = []

    def probe(self) -> bool:
        return True

    def observe(self, drafted, accepted, t_draft, t_verify, probed=None, nodes=None) -> None:
        self.probed.append(probed)


def test_a_plain_rounds_probe_is_the_acceptance_probability_of_the_guess(big_pair):
    """The loop measures a probe against the target's distribution for the same position: p(x) for
    prompt lookup's one-hot guess x, sum min(p, q) for a draft model; the output is still plain decoding."""
    target, draft = big_pair
    prompt = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]

    def p_next(model, seq):
        return warp(model.forward(seq, model.new_cache(len(seq)))[-1], 1.0)

    for d in (PromptLookup(), DraftModel(draft)):
        pol = ProbeEveryRound()
        out = speculative_generate(target, d, prompt, 12, k=pol, temperature=1.0, seed=4).tokens
        assert len(pol.probed) == 12
        for i, got in enumerate(pol.probed):
            seq = prompt + out[:i]
            if isinstance(d, PromptLookup):
                guess = d.continuation(seq, 1)
                want = p_next(target, seq)[guess[0]] if guess else None
            else:
                want = rejection.overlap(p_next(target, seq), p_next(draft, seq))
            assert (got is None) == (want is None) and (got is None or got[0] == pytest.approx(want, abs=1e-6)), i
    plain = generate(target, prompt, 12, temperature=1.0, seed=4)  # prompt lookup draws nothing from rng
    assert speculative_generate(target, PromptLookup(), prompt, 12, k=ProbeEveryRound(), temperature=1.0, seed=4).tokens == plain


def test_a_probe_after_a_certain_guess_came_true_is_a_later_guess(big_pair):
    target, draft = big_pair
    prompt = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]
    pl, pol = PromptLookup(), ProbeEveryRound()
    out = speculative_generate(target, pl, prompt, 30, k=pol).tokens  # greedy: a random model falls into loops
    for i in range(1, 30):
        guess = pl.continuation(prompt + out[:i - 1], 1)  # the previous round's probe
        came_true = bool(guess) and guess[0] == out[i - 1]
        assert pol.probed[i] is None or pol.probed[i][1] == came_true, i
    assert any(p and p[1] for p in pol.probed) and any(p and not p[1] for p in pol.probed)
    pol = ProbeEveryRound()  # a sampled guess (q not one-hot) never stands for a later one
    speculative_generate(target, DraftModel(draft), prompt, 16, k=pol, temperature=1.0, seed=1)
    assert not any(p[1] for p in pol.probed)
    acc = Acceptance(prior=0.5)
    acc.update_probe(1.0, later=True)
    assert acc.next > acc.first == 0.5


# Early stop on the draft's own confidence (AutoK.keep, DraftModel.propose(keep=...))

R = {1: 1.0, 2: 1.36, 3: 1.73, 4: 2.01, 5: 2.15, 6: 2.17, 7: 2.18, 8: 2.20, 9: 2.95}  # r(n) measured here
MEASURED = {n: 0.016 * r for n, r in R.items()}


def test_keep_threshold_follows_the_cost_curve():
    p = policy(MEASURED, draft_time=0.001, prior=0.95)
    k = p.next_k()
    assert k == 7 and p.planned == pytest.approx(p.rate(7)) and p.planned > 1 / MEASURED[1]
    assert p.keep(1, 0.0)  # the first guess is K's decision
    for j in range(2, 9):
        threshold = (MEASURED[j + 1] - MEASURED[j]) * p.planned  # tokens the row would buy at the planned rate
        assert p.keep(j, threshold * 1.001) and not p.keep(j, threshold * 0.999), j
    assert p.keep(6, 0.05) and not p.keep(3, 0.3)  # rows 6 -> 7 are nearly free, 3 -> 4 are not
    assert FixedK(4).keep is None  # the textbook policy verifies every guess


def test_propose_stops_before_the_first_guess_keep_refuses(big_pair):
    target, draft = big_pair
    prompt, greedy = [3, 4, 5, 6], Warp(0.0)
    calls = []

    def keep(j, reach):
        calls.append((j, reach))
        return j < 3

    d = DraftModel(draft)
    tokens, probs = d.propose(prompt, 5, greedy, Stream(np.random.PCG64(0)), keep)
    assert len(tokens) == 2 and probs.shape == (2, 64) and d.forwards == 2  # guess 3 was never computed
    belief, seq = [1.0], list(prompt)
    for x in tokens:  # the draft's belief in guesses 1..j: the product of its top probabilities
        belief.append(belief[-1] * top_probability(draft.forward(seq, draft.new_cache(len(seq)))[-1]))
        seq.append(x)
    # asked for guess j with the belief in 1..j, then for guess j + 1 with the same belief (an upper bound)
    want = [(1, belief[1]), (2, belief[1]), (2, belief[2]), (3, belief[2])]
    assert [j for j, _ in calls] == [j for j, _ in want]
    assert [r for _, r in calls] == pytest.approx([r for _, r in want], rel=1e-5)
    assert d.propose(prompt, 3, greedy, Stream(np.random.PCG64(0)), lambda j, r: False)[0] == []
    assert d.propose(prompt, 3, greedy, Stream(np.random.PCG64(0)))[0] == generate(draft, prompt, 3)  # no keep: all K


class StopWhenUnsure(FixedK):
    """K = 2; guess 2 is verified only when the draft's belief in guesses 1 and 2 reaches 0.3 (on the
    small pair and prompt [5, 1] that drops guess 2 in about 17% of runs, depending on guess 1)."""

    def __init__(self):
        super().__init__(2)
        self.cuts = 0

    def keep(self, j, reach):
        self.cuts += not (j == 1 or reach >= 0.3)
        return j == 1 or reach >= 0.3


class StopOnTheDrawnToken(DraftModel):
    """The broken variant: judge a guess by the probability of the token already drawn (drop unlikely
    draws). The guesses left are then not distributed as the q handed to the rule."""

    def propose(self, tokens, k, warp, draws, keep=None):
        self.ensure_cache(len(tokens) + k)
        logits = self.feed(tokens)
        draft_tokens, draft_probs, reach = [], [], 1.0
        for i in range(k):
            probs = warp(logits)
            x = draws.draw(probs, i)
            reach *= probs[x]
            if not keep(i + 1, reach):
                break
            draft_tokens.append(x)
            draft_probs.append(probs)
            if i < k - 1:
                logits = self.pad(self.model.forward([x], self.cache))[0]
                self.fed.append(x)
        return draft_tokens, np.array(draft_probs).reshape(len(draft_tokens), self.vocab)


@pytest.mark.slow
def test_level3_exact_with_early_stop(pair):
    target, draft = pair
    law, made = exact_with_policy(target, draft, [5, 1], StopWhenUnsure)
    assert sum(p.cuts for p in made) > len(made) // 10  # the stop really happened
    np.testing.assert_allclose(law, exact_three_tokens(target, [5, 1], temperature=1.0), rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_level3_exact_catches_an_early_stop_that_looks_at_the_drawn_token(pair):
    target, draft = pair
    law, _ = exact_with_policy(target, draft, [5, 1], StopWhenUnsure, make_drafter=lambda: StopOnTheDrawnToken(draft))
    tv = 0.5 * np.abs(law - exact_three_tokens(target, [5, 1], temperature=1.0)).sum()
    assert tv > 1e-3, tv  # 0.0046, exactly: far above float rounding (1e-7)


def test_greedy_with_early_stop_equals_plain(big_pair):
    target, draft = big_pair

    class StopBelow(FixedK):
        def keep(self, j, reach):
            return reach >= 0.01

    for prompt in ([5, 6, 7], [9] * 12):
        res = speculative_generate(target, DraftModel(draft), prompt, 40, k=StopBelow(6))
        assert res.tokens == generate(target, prompt, 40)
        assert {d for d, _ in res.stats.rounds_log} >= {0, 1, 2, 3}  # K = 6 asked, chains cut to 0..3


class AsksProbes(FixedK):
    """K = ``k`` every round; counts the times the loop asks it whether to probe (and always says yes)."""

    def __init__(self, k):
        super().__init__(k)
        self.asked = 0

    def probe(self) -> bool:
        self.asked += 1
        return True


def test_a_probe_is_asked_for_only_in_rounds_the_policy_chose_plain_and_where_the_drafter_has_room(big_pair):
    """(bug: the loop asked the policy first, so a policy paid for probes a full draft context did not make, and was
    asked in rounds it chose to draft but the end of the output cut to plain.)"""
    target, _ = big_pair

    class NoRoom(PromptLookup):  # a drafter whose context is full from the start (HasRoom)
        def room(self, tokens) -> int:
            return 0
    plain = AsksProbes(0)
    speculative_generate(target, PromptLookup(), [3, 4, 5, 3, 4], 6, k=plain)
    assert plain.asked == 6  # every plain round of a drafter with room
    full = AsksProbes(0)
    speculative_generate(target, NoRoom(), [3, 4, 5, 3, 4], 6, k=full)
    assert full.asked == 0
    drafting = AsksProbes(3)
    res = speculative_generate(target, PromptLookup(), [3, 4, 5, 3, 4], 1, k=drafting)  # one token: the round is cut
    assert res.stats.rounds_log[0][0] == 0 and drafting.asked == 0


def test_a_policy_without_a_probe_share_never_probes_even_where_a_probe_costs_nothing():
    """StoppedK (probe share 0) with a drafter that costs nothing to ask (bug: 0 seconds saved afforded 0 seconds)."""
    for p in (StoppedK(4, MEASURED, 0.0, learn=False), policy(MEASURED, 0.0, probe_share=0.0)):
        assert not any(p.probe() for _ in range(3))


@pytest.mark.parametrize("make, says", [
    (lambda: AutoK(CPU_LIKE, 0.001, k_max=0), "k_max must be an integer of at least 1, got 0"),
    (lambda: AutoK(CPU_LIKE, 0.001, k_max=9), "it lacks n = [10]"),
    (lambda: AutoK({**CPU_LIKE, 1: 0.0}, 0.001, k_max=3), "must hold positive seconds; got {1: 0.0}"),
    (lambda: TreePolicy(CPU_LIKE, {w: 0.001 for w in range(1, 5)}), "it lacks n = [10, 11, 13, 15, 16, 17]"),
    (lambda: AutoDynamicTree(DynamicTree(4, 5, 16), {}, 0.001), "verify_time needs t(n) for whole n = 1, 2, ..."),
    (lambda: AutoDynamicTree(DynamicTree(4, 5, 16), {"1": 0.01, "2": 0.02}, 0.001), "got keys ["),
    (lambda: AutoDynamicTree(DynamicTree(4, 5, 16), {1: 0.01}, 0.001), "needs t(2) at least"),
    (lambda: AutoDynamicTree(DynamicTree(4, 5, 16), {1: 0.01, 3: 0.02}, 0.001), "it lacks n = [2]"),
    (lambda: AutoDynamicTree(DynamicTree(4, 5, 4), {n: 0.01 * (n != 3) for n in range(1, 6)}, 0.001),
     "must hold positive seconds; got {3: 0.0}"),
])
def test_a_cost_table_that_cannot_price_every_choice_is_refused_when_the_policy_is_made(make, says):
    """(bug: a bare KeyError, an empty max() or a division by zero at the first round.)"""
    with pytest.raises(ValueError) as e:
        make()
    assert says in str(e.value)


def test_a_learning_policy_leaves_the_callers_cost_table_as_it_was():
    """Learning rewrites the policy's own t(n), not the table it was given (bug: TreePolicy rewrote the caller's)."""
    given = dict(CPU_LIKE)
    rounds = [(AutoK(given, 0.001, k_max=8), dict()),  # a plain step learns t(1)
              (TreePolicy(given, {w: 0.001 for w in range(1, 5)}, max_nodes=8), dict(nodes=1)),  # a pass, its t(2)
              (AutoDynamicTree(DynamicTree(4, 5, 8), given, 0.001), dict(nodes=1))]
    for p, nodes in rounds:
        for _ in range(3):
            p.observe(0, 0, 0.0, 0.5, **nodes)  # the pass took 0.5 s, far from the table's 0.010 and 0.0224
        assert p.verify_time != CPU_LIKE, type(p).__name__  # it learned
        assert given == CPU_LIKE, type(p).__name__  # from its own copy


def test_stopped_k_is_the_textbook_k_cut_by_the_stop():
    p = StoppedK(4, MEASURED, 0.001, learn=False, acceptance=Acceptance(0.2))
    assert [p.next_k() for _ in range(3)] == [4, 4, 4] and not p.probe()
    assert p.planned == 1 / MEASURED[1]  # K = 4 cannot beat plain at a = 0.2: a row is priced at plain's rate
    assert not p.keep(2, 0.3) and p.keep(2, 0.4)  # r(3) - r(2) = 0.37
    rich = StoppedK(4, MEASURED, 0.001, learn=False, acceptance=Acceptance(0.95))
    rich.next_k()
    assert rich.planned == pytest.approx(rich.rate(4)) and rich.planned > 1 / MEASURED[1]


def test_bench_stop_runs_on_tiny_models(big_pair):
    from minispec.harness.stop_eval import run

    target, draft = big_pair
    prompts = {"a": [[5, 6, 7], [9] * 12], "b": [[3, 4, 5, 6, 3, 4]]}
    res = run(target, DraftModel(draft), prompts, 4, [0.0, 1.0], 12)  # greedy: each config equals plain, or it raises
    assert res["near_ties"] == []
    for temp, rows in res["rows"].items():
        assert set(rows) == {"K=1", "K=4", "K=4 + stop", "auto", "auto, no stop"}
        for name, r in rows.items():
            assert [x[0] for x in r] == ["a", "a", "b"] and all(x[1] > 0 for x in r), (temp, name)
        assert all(x[3] <= 1 for x in rows["K=1"]) and max(x[3] for x in rows["K=4 + stop"]) <= 4


def test_bench_stop_builds_its_policies_before_the_clock_and_reports_a_near_tie(big_pair, monkeypatch):
    """Every calibration the policies read is in memory before the first timed run (bug: the first run of each policy
    read, probed or measured it on its own clock); a greedy difference at a near-tie is reported with its margin, one
    at a larger margin fails by name (bug: any difference was an AssertionError that lost every row)."""
    from minispec.harness import stop_eval
    from minispec.policy import calibration

    target, draft = big_pair
    monkeypatch.setattr(calibration, "_MEMORY", {})
    inside = []
    side_by_side = stop_eval.side_by_side
    def timed(plain, runs, **k):
        keys = set(calibration._MEMORY)
        out = side_by_side(plain, runs, **k)
        inside.append(set(calibration._MEMORY) - keys)
        return out
    monkeypatch.setattr(stop_eval, "side_by_side", timed)
    real = stop_eval.speculative_generate
    def off_by_one(*a, **k):  # every speculative run's last token changed: a greedy difference
        res = real(*a, **k)
        res.tokens[-1] = (res.tokens[-1] + 1) % 64
        return res
    monkeypatch.setattr(stop_eval, "speculative_generate", off_by_one)
    monkeypatch.setattr(stop_eval, "margin", lambda target, context: 5e-5)
    res = stop_eval.run(target, DraftModel(draft), {"a": [[5, 6, 7]]}, 4, [0.0], 8)
    assert inside == [set()]
    assert {t["config"] for t in res["near_ties"]} == {"K=1", "K=4", "K=4 + stop", "auto", "auto, no stop"}
    assert all(t["margin"] == 5e-5 and t["position"] == 7 for t in res["near_ties"])
    monkeypatch.setattr(stop_eval, "margin", lambda target, context: 0.2)
    with pytest.raises(ValueError, match="K=1: greedy output differs from plain decoding at token 7 of a a prompt, at "
                                         "a top-2 margin of 0.2"):
        stop_eval.run(target, DraftModel(draft), {"a": [[5, 6, 7]]}, 4, [0.0], 8)


@pytest.mark.parametrize("seed, temperature, learns", [(3, 1.0, False), (None, 1.0, True), (3, 0.0, True)])
def test_only_runs_whose_output_cannot_depend_on_timing_follow_the_clock(big_pair, monkeypatch, seed, temperature,
                                                                        learns):
    """A seeded sampled run keeps its calibrated costs, so that the same seed gives the same tokens on a busy and a
    quiet machine; greedy runs and unseeded ones may follow the clock (bug: a seeded run that learns from timings)."""
    from minispec import policy

    target, draft = big_pair
    seen = []
    real = policy.k_policy
    monkeypatch.setattr(policy, "k_policy", lambda *a, **kw: seen.append(kw["learn"]) or real(*a, **kw))
    speculative_generate(target, DraftModel(draft), [1, 2, 3], 4, k="auto", seed=seed, temperature=temperature)
    assert seen == [learns]


def test_a_timed_round_splits_the_prediction_into_its_drafting_and_its_target_pass():
    """Each timed round records the cost model's seconds for its drafting side (guesses, a plain round's label, a
    probe, catching up) beside the measured ones, and ``bench auto`` reports both sides of drafting rounds apart, so
    that an underprediction is traced to the side it comes from. After a label, a probe's guess is the label's work;
    without one (a drafter whose labels are free), it is a guess."""
    from minispec.harness.auto_eval import round_ratios

    verify = {n: 0.010 * (1 + 0.1 * (n - 1)) for n in range(1, 6)}
    p = AutoK(verify, draft_time=0.001, k_max=4, feed_time=0.0005, learn=False, claims=lambda label: 0.5)
    p.next_k(unseen=3)  # two tokens to catch up on besides the last
    p.observe(2, 1, 0.006, 0.022)  # predicted: drafts 2 x 1 ms + 2 x 0.5 ms, the pass t(3) = 12 ms
    p.next_k(unseen=1)
    p.observe(0, 0, 0.002, 0.011, probed=(0.5, False))  # plain: the label (1 ms), and a probe drawn from its logits
    drafting, plain = p.timed
    assert drafting.drafted == 2 and drafting.predicted_drafting == pytest.approx(0.003)
    assert drafting.predicted == pytest.approx(0.015) and drafting.measured == pytest.approx(0.028)
    assert drafting.measured_drafting == pytest.approx(0.006)
    assert plain.predicted_drafting == pytest.approx(0.001) and plain.predicted == pytest.approx(0.011)
    r = round_ratios(p.timed)
    assert r["drafting_side"] == pytest.approx(2.0) and r["target_pass"] == pytest.approx(0.022 / 0.012)
    assert r["drafting"] == pytest.approx(0.028 / 0.015) and r["plain"] == pytest.approx(0.013 / 0.011)
    assert r["drafted_share"] == 0.5
    free = AutoK(verify, draft_time=0.001, k_max=4, learn=False)  # labels cost nothing: a probe is a guess
    free.next_k(unseen=1)
    free.observe(0, 0, 0.001, 0.010, probed=(0.5, False))
    assert free.timed[0].predicted_drafting == pytest.approx(0.001)

