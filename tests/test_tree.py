"""Tree verification: exact, Monte Carlo and sequence-level losslessness, greedy identity, cache compaction."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minispec import generate, rejection
from minispec.drafters import DraftModel, PromptLookup
from minispec.harness.equivalence import chisquare_gof
from minispec.harness.exact_law import tree_first_token_law
from minispec.harness.exact_loop import loop_law
from minispec.policy import Acceptance, AutoK, TreePolicy, auto_tree_policy, calibration, timing
from minispec.policy.acceptance import PRIOR
from minispec.sampling import Stream, Warp, sample, warp
from minispec.speculative import tree_speculative_generate
from minispec.tree import Tree, accept_tree, top_indices, tree_mask, verify_tree, without

from .helpers import V, exact_two_tokens
from .helpers import broken_residual as broken


def test_tree_mask_sees_context_and_ancestors_only():
    parents = [-1, 0, 0, 1, 2]  # root; two children; one grandchild under each
    m = tree_mask(parents, prefix=3) == 0
    assert m[:, :3].all()
    assert m[3, 3 + np.array([0, 1, 3])].all() and not m[3, 3 + 2] and not m[3, 3 + 4]
    assert m[4, 3 + np.array([0, 2, 4])].all() and not m[4, 3 + 1]
    assert tree_mask(parents, prefix=3).dtype == np.float32  # added to float32 scores: no silent float64


def test_greedy_candidates_among_tied_logits_are_the_lowest_ids():
    """At T = 0 the top W logits are the candidates, ties going to the lowest ids as argmax's do (bug: a sort that is
    not stable, which reorders ties past 16 entries, so the tree depends on the sort)."""
    from minispec.tree import add_children

    logits = np.where(np.random.default_rng(0).integers(0, 2, 100) == 1, 1.0, 0.0)
    tree = Tree()
    kids = add_children(tree, 0, logits, 5, Warp(0.0), Stream(np.random.PCG64(0)))
    assert [tree.tokens[c] for c in kids] == list(np.flatnonzero(logits == 1.0)[:5])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([-np.inf, -1.0, 0.0, 0.5, 2.0, np.inf]), min_size=1, max_size=40),
       st.integers(1, 45))
def test_top_indices_equal_the_stable_argsort(values, width):
    """Children chosen by a partition, not a sort of the vocabulary: the same indices in the same order as a stable
    argsort, ties and infinities included (few distinct values, so ties are the rule)."""
    z = np.array(values, np.float32)
    assert top_indices(z, width).tolist() == np.argsort(-z, kind="stable")[:width].tolist()


def test_siblings_are_drawn_without_replacement():
    """add_children at T = 1 draws distinct children, each from q with the siblings before it removed (bug: a drawn
    token put back with all the mass; still lossless, as each child keeps its own q, but it wastes the tree)."""
    from minispec.tree import add_children

    logits = np.array([2.0, 1.5, 1.0, 0.5, 0.0])
    for seed in range(30):
        tree = Tree()
        kids = add_children(tree, 0, logits, 4, Warp(1.0), Stream(np.random.PCG64(seed)))
        toks = [tree.tokens[c] for c in kids]
        assert len(set(toks)) == 4
        for j, c in enumerate(kids):
            q = tree.draft_probs[c]
            assert q[toks[:j]].sum() == 0 and q.sum() == pytest.approx(1.0)
            np.testing.assert_allclose(q, without(warp(logits, 1.0), toks[:j]))


@st.composite
def pq(draw):
    n = draw(st.integers(2, 9))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    p, q = rng.dirichlet(np.ones(n) * 0.7), rng.dirichlet(np.ones(n) * 0.7)
    if draw(st.booleans()):
        p[rng.random(n) < 0.4] = 0
        p[rng.integers(n)] += 0.2
    return p / p.sum(), q


@settings(max_examples=25, deadline=None)
@given(pq(), st.booleans())
def test_level1_tree_rule_is_exact(dists, deterministic):
    p, q = dists
    out = tree_first_token_law(accept_tree, p, q, deterministic)
    np.testing.assert_allclose(out, p, atol=1e-9)


def test_level1_tree_rule_catches_broken_residual(monkeypatch):
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.1, 0.3, 0.6])
    monkeypatch.setattr(rejection, "residual", broken)
    out = tree_first_token_law(accept_tree, p, q)
    assert np.abs(out - p).max() > 0.05


def tree_mc_counts(n=20_000, seed=3):
    """Root with 3 children sampled without replacement, each with one child: first two tokens."""
    rng = np.random.default_rng(seed)
    p0, q0 = np.array([0.5, 0.2, 0.2, 0.1]), np.array([0.1, 0.4, 0.3, 0.2])
    p1 = np.array([[0.7, 0.1, 0.1, 0.1], [0.1, 0.6, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25], [0.1, 0.1, 0.1, 0.7]])
    q1 = np.array([[0.3, 0.3, 0.2, 0.2], [0.5, 0.1, 0.2, 0.2], [0.1, 0.1, 0.1, 0.7], [0.25, 0.25, 0.25, 0.25]])
    p2 = np.array([0.4, 0.3, 0.2, 0.1])  # any position-2 distribution (independent of context here)
    counts = np.zeros(16)
    for _ in range(n):
        tree, q, kids = Tree(), q0, []
        while len(kids) < 3 and q is not None:
            x = sample(q, rng)
            kids.append(tree.add(0, x, q))
            q = without(q, [x])
        for c in kids:
            tree.add(c, sample(q1[tree.tokens[c]], rng), q1[tree.tokens[c]])
        rows = [p0] + [p1[tree.tokens[i]] if tree.parents[i] == 0 else p2 for i in range(1, len(tree.tokens))]
        path, t = accept_tree(np.stack(rows), tree, rng)
        seq = [tree.tokens[i] for i in path] + [t]
        if len(seq) < 2:  # the second token comes from the next round: the target's own conditional
            seq.append(sample(p1[seq[0]], rng))
        counts[seq[0] * 4 + seq[1]] += 1
    return counts, (p0[:, None] * p1).ravel()


def test_level2_tree_monte_carlo(monkeypatch):
    counts, exact = tree_mc_counts()
    chi2, dof, p = chisquare_gof(counts, exact)
    assert p > 1e-3, (chi2, dof, p)
    monkeypatch.setattr(rejection, "residual", broken)
    counts, exact = tree_mc_counts()
    chi2, dof, p = chisquare_gof(counts, exact)
    assert p < 1e-6, (chi2, dof, p)


@pytest.mark.parametrize("w", [dict(temperature=1.0), dict(temperature=0.8, top_k=4), dict(temperature=1.2, top_p=0.85)],
                         ids=["T=1", "top_k", "top_p"])
def test_level3_exact_tree_law(pair, w):
    """Level 3, exact: tree_speculative_generate with a 3x2 tree (children drawn without replacement), walked over
    every branch of its randomness, emits its first 2 tokens with the target's law. (3 tokens: over 10 minutes
    of paths; the EAGLE head's trees are walked for 3 tokens, test_eagle.py.)"""
    target, draft = pair
    law, paths = loop_law(target, lambda: DraftModel(draft), [1, 4, 2], 2, V, generate=tree_speculative_generate,
                          shape=(3, 2), **w)
    assert paths > 10
    np.testing.assert_allclose(law, exact_two_tokens(target, [1, 4, 2], **w), rtol=1e-5, atol=1e-7)


def test_level3_exact_tree_catches_broken_rule(pair, monkeypatch):
    target, draft = pair
    monkeypatch.setattr(rejection, "residual", broken)
    law, _ = loop_law(target, lambda: DraftModel(draft), [1, 4, 2], 2, V, generate=tree_speculative_generate,
                      shape=(3, 2), temperature=1.0)
    tv = 0.5 * np.abs(law - exact_two_tokens(target, [1, 4, 2], temperature=1.0)).sum()
    assert tv > 0.01, tv


@pytest.fixture(scope="module")
def models(big_pair):
    return big_pair


@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (4, 4), "auto"])
def test_tree_greedy_equals_plain(models, shape):
    target, draft = models
    for prompt in ([5, 6, 7], [9] * 12, list(range(20)) + list(range(10))):
        want = generate(target, prompt, 40)
        for d in (DraftModel(draft), PromptLookup(), DraftModel(target)):
            got = []
            res = tree_speculative_generate(target, d, prompt, 40, shape=shape, on_token=got.append)
            assert res.tokens == want == got, (d.name, shape)


def test_tree_stops_exactly(models):
    target, _ = models
    full = generate(target, [2, 7, 1, 8], 30)
    stop = full[6]
    res = tree_speculative_generate(target, DraftModel(target), [2, 7, 1, 8], 30, shape=(2, 4), stop_ids=[stop])
    assert res.tokens == full[: full.index(stop) + 1]
    for n in (1, 2, 7):
        assert len(tree_speculative_generate(target, DraftModel(target), [2, 7], n, shape=(3, 4)).tokens) == n


def test_self_draft_tree_accepts_full_depth(models):
    target, _ = models
    res = tree_speculative_generate(target, DraftModel(target), [1, 2, 3], 30, shape=(3, 4))
    assert res.stats.tokens_per_pass == {5: 6}


def test_cache_keep_compacts_accepted_path(models):
    target, _ = models
    rng = np.random.default_rng(0)
    ids = [int(t) for t in rng.integers(0, 64, 10)]
    cache = target.new_cache(40)
    target.forward(ids[:-1], cache)  # the root (ids[-1]) is not in the cache yet
    tree = Tree()
    a, b = tree.add(0, 11, None), tree.add(0, 12, None)  # two children of the root
    a1, b1 = tree.add(a, 13, None), tree.add(b, 14, None)
    b2 = tree.add(b1, 15, None)
    logits = verify_tree(target, cache, [ids[-1]], tree)
    for node in (a, b, a1, b1, b2):  # each node's logits equal a plain forward of its own path
        seq = ids + [tree.tokens[n] for n in tree.path(node)]
        np.testing.assert_allclose(logits[node], target.forward(seq, target.new_cache(40))[-1], atol=1e-5)
    cache.keep(9, [0] + tree.path(b2))  # keep the root and the path 12 -> 14 -> 15
    assert cache.length == 13
    nxt = target.forward([5], cache)
    want = target.forward(ids + [12, 14, 15, 5], target.new_cache(40))[-1:]
    np.testing.assert_allclose(nxt, want, atol=1e-5)


def test_auto_shape_prefers_wide_trees_when_nodes_are_free():
    flat = {n: 0.01 * (1 + 0.02 * n) for n in range(1, 18)}
    pol = TreePolicy(flat, {w: 0.0005 for w in range(1, 5)}, learn=False)
    w, d = pol.next_shape()
    assert w * d >= 8
    steep = {n: 0.01 * n for n in range(1, 18)}  # every node costs a full pass
    pol = TreePolicy(steep, {w: 0.005 for w in range(1, 5)}, learn=False)
    pol.acc[0] = Acceptance(prior=0.0, weight=20.0)  # context 0: nothing is ever accepted
    assert pol.next_shape() == (0, 0)


class SelfTimedTrees(PromptLookup):
    """A tree drafter that times its guesses itself (TimesItself: 2 ms a guess, whatever the clock) but not its tree
    levels (no TimesItsTreeLevels), and has no model."""

    name, kernel = "self-timed-trees", "numpy"

    def measure_costs(self, clock, repeats: int) -> tuple[float, float]:
        return 0.002, 0.0001


def test_a_tree_level_without_its_own_timing_costs_its_guesses(small_pair, monkeypatch):
    """docs/drafters.md: only a drafter without any cost hook costs nothing. One that times its guesses but not its
    levels pays w guesses per level of w nodes (bug: such a tree level cost 0 s, so every tree looked free)."""
    monkeypatch.setattr(calibration, "_MEMORY", {})
    ticks = iter(np.arange(0.0, 1e3, 0.01))
    monkeypatch.setattr(timing, "clock", lambda: float(next(ticks)))  # every target pass takes 10 ms
    target = small_pair[0]
    pol = auto_tree_policy(target, SelfTimedTrees(), learn=False)
    assert pol.level_time == pytest.approx({w: 0.002 * w for w in range(1, 5)})
    assert pol.cost(2, 3) == pytest.approx(0.002 + 2 * 0.004 + pol.verify_time[7])  # level 1 from one row
    assert pol.feed_time == pytest.approx(0.0001)
    assert auto_tree_policy(target, PromptLookup(), learn=False).level_time == {w: 0.0 for w in range(1, 5)}


def test_chains_and_trees_start_from_one_prior_and_wait_for_measurements():
    """Both policies start from acceptance.PRIOR: on costs where one guess pays only above it, neither drafts before a
    round or a probe has measured the drafter (bug: a tree policy starting from 0.5 drafted a 1 x 1 tree on the
    prior's word, where a chain did not)."""
    steep = {n: 0.010 * (1 + 0.3 * (n - 1)) for n in range(1, 18)}  # r(2) = 1.3: one free guess pays at a > 0.3
    chain = AutoK(steep, 0.0, learn=False)
    tree = TreePolicy(steep, {w: 0.0 for w in range(1, 5)}, learn=False)
    assert chain.estimate.first == tree.acc[0].first == PRIOR
    assert chain.next_k() == 0 and tree.next_shape() == (0, 0)


def test_the_tree_policy_prices_and_chooses_as_the_chain_policy_does():
    """As AutoK: a tree is chosen only when it beats plain decoding by MARGIN; a plain round pays the label of a drafter
    whose label is its first guess's work, and a probe after it costs nothing more; a drafter no tree could make pay
    is never probed (bugs: none of the four held for trees)."""
    from minispec.policy.auto_k import MARGIN

    steep = {n: 0.010 * (1 + 0.3 * (n - 1)) for n in range(1, 18)}  # r(2) = 1.3
    pol = TreePolicy(steep, {w: 0.0 for w in range(1, 5)}, learn=False)
    pol.acc[0] = Acceptance(prior=0.32, weight=1e6)  # a 1 x 1 tree: (1 + 0.32) / 1.3 = 1.015 of plain, under the margin
    (w, d), rate = pol.best_drafting()
    assert 1.0 < rate / pol.rate((0, 0)) < 1 + MARGIN and pol.next_shape() == (0, 0)
    pol.acc[0] = Acceptance(prior=0.6, weight=1e6)
    assert pol.next_shape() != (0, 0)  # well over it
    labelled = TreePolicy(steep, {w: 0.002 * w for w in range(1, 5)}, learn=False, claims=lambda label: 0.3)
    assert labelled.cost(0, 0) == pytest.approx(0.010 + 0.002)  # one level of one node: the label
    labelled.next_shape(unseen=40)
    assert labelled.probe() and labelled.budget.saved == 0.0  # free after the label, from the first round
    learning = TreePolicy(steep, {w: 0.002 * w for w in range(1, 5)}, learn=True, claims=lambda label: 0.3)
    learning.next_shape(unseen=1)
    assert learning.probe()
    learning.observe(0, 0, 0.002 + 0.004, 0.010, probed=(0.3, False))  # drafting took 4 ms more than the label's 2
    assert learning.budget.saved == pytest.approx(0.01 * 0.012 - 0.004)  # earned 1% of the round, paid the overrun
    assert not learning.probe()  # overdrawn: no probe until plain rounds earn it back
    slow = TreePolicy(steep, {w: 0.050 * w for w in range(1, 5)}, learn=False)  # a level costs 5 target steps
    assert slow.hopeless()
    for _ in range(300):
        assert slow.next_shape() == (0, 0) and not slow.probe()
        slow.observe(0, 0, 0.0, 0.010)


def test_tree_plain_rounds_probe_and_probes_lift_the_shape(models):
    """A plain round of the tree loop probes like the chain's: p(x) of prompt lookup's guess x; probes that
    would have been accepted move an auto shape off (0, 0) without a verified round."""
    target, _ = models

    class ProbeEveryRound(TreePolicy):
        def __init__(self):
            super().__init__({}, {}, auto=False, shape=(0, 0))
            self.probed = []

        def probe(self):
            return True

        def observe(self, depth, accepted, t_draft, t_verify, probed=None, nodes=0, width=0):
            self.probed.append(probed)

    pl, prompt, pol = PromptLookup(), [3, 4, 5, 6, 3, 4, 5, 6, 3, 4], ProbeEveryRound()
    out = tree_speculative_generate(target, pl, prompt, 10, shape=pol, temperature=1.0, seed=2).tokens
    assert len(pol.probed) == 10  # ten plain rounds, each observed once
    assert any(got is not None for got in pol.probed), pol.probed  # and the loop really probed (4 of them here)
    for i, got in enumerate(pol.probed):
        seq = prompt + out[:i]
        guess = pl.continuation(seq, 1)
        want = warp(target.forward(seq, target.new_cache(len(seq)))[-1], 1.0)[guess[0]] if guess else None
        assert (got is None) == (want is None) and (got is None or got[0] == pytest.approx(want, abs=1e-6)), i
    cpu_like = {n: 0.010 * (1.0 if n == 1 else 2.2 + 0.02 * n) for n in range(1, 18)}
    auto = TreePolicy(cpu_like, {w: 0.0 for w in range(1, 5)}, learn=False)
    auto.acc[0] = Acceptance(prior=0.0)
    assert auto.next_shape() == (0, 0) and auto.probe()
    for _ in range(10):
        auto.observe(0, 0, 0.0, 0.01, probed=(1.0, False))
    assert auto.next_shape() != (0, 0)


def test_a_tree_has_the_width_and_depth_asked_for(models):
    """propose_tree(W, D) gives W first guesses, each followed by a chain of D - 1: greedy (deterministic top-W
    candidates) and sampled alike; D = 1 is W first guesses, not no tree (bugs: one candidate too many, or a
    depth-1 tree taken for none)."""
    from minispec.tree import propose_tree

    target, draft = models
    for temperature in (0.0, 1.0):
        for width, depth in ((3, 1), (2, 3), (1, 2)):
            tree = propose_tree(DraftModel(draft), [5, 6, 7], width, depth, Warp(temperature),
                                Stream(np.random.PCG64(0)))
            assert len(tree.children(0)) == width and len(tree) == width * depth, (temperature, width, depth)
            assert tree.depths().max() == depth


def test_trees_at_the_end_of_the_targets_context(tmp_path):
    """A run that fills the target's whole context with trees: every pass fits in the cache (bug: the room for a
    tree counted the uncached tokens once too few), and the output is still plain decoding's."""
    from minispec import load_model
    from minispec.model.tiny import tiny_config, write_random_model

    target = load_model(write_random_model(tmp_path / "t", tiny_config(num_hidden_layers=2, max_position_embeddings=40),
                                           seed=3))
    longer = load_model(write_random_model(tmp_path / "d", tiny_config(num_hidden_layers=1), seed=4))  # context 256
    prompt = list(range(1, 21))
    for shape in ((2, 4), (3, 3)):
        for drafter in (DraftModel(target), DraftModel(longer), PromptLookup()):  # the target's cache the only bound
            res = tree_speculative_generate(target, drafter, prompt, 20, shape=shape)
            assert res.tokens == generate(target, prompt, 20) and len(prompt) + len(res.tokens) == 40


def test_keyed_children_stop_where_the_mass_left_is_below_the_floor():
    """A row whose last tokens hold less than without()'s floor: the keyed race still counts them, but no child is
    drawn from an empty remainder (bug: without(None) raised AttributeError, met by the coupled rule's dynamic tree)."""
    from minispec.keyed import KeyedNoise
    from minispec.tree import Tree, add_children

    logits = np.array([0.0, -1.0, -40.0, -45.0, -np.inf])  # q: two tokens hold all but ~1e-17 of the mass
    tree = Tree()
    nodes = add_children(tree, 0, logits, 4, Warp(1.0), KeyedNoise(3))
    assert 1 <= len(nodes) <= 3 and all(tree.draft_probs[n] is not None for n in nodes)
    assert len(set(tree.tokens[1:])) == len(nodes)


def test_a_tree_policy_learns_a_guess_s_rate_from_levels_of_several_guesses():
    """A level of 4 first guesses, each kept with a = 0.5, keeps one 15 times in 16: the policy learns a = 0.5, the
    rate its model raises to the width (bug: a learned the level's 0.94, and the policy expected 1 - 0.06^4 of a
    level, so it chose wide trees), and a width-1 round counts as a chain's."""
    from minispec.policy.acceptance import PerContext

    p = TreePolicy.fixed(4, 2)
    p.acc = PerContext(Acceptance(decay=1.0))  # no forgetting: the estimate settles where the rounds put it
    for i in range(1600):
        p.next_shape()
        p.observe(2, 0 if i % 16 == 15 else 1, 0.0, None, nodes=8)
    assert abs(p.acc[0].first - 0.5) < 0.02, p.acc[0].first
    assert p.expected(4, 1) == pytest.approx(1 + 15 / 16, abs=0.01)
    one, chain = Acceptance(), Acceptance()
    one.update_tree(1, 3, 2)
    chain.update(3, 2)
    assert (one.counts == chain.counts).all()


class TellsTrees:
    """A tree policy (ChoosesTrees) asking for (2, 3) every round, recording each round's first-level width and
    counting the times it is asked whether to probe."""

    max_room = 6

    def __init__(self):
        self.widths, self.asked = [], 0

    def next_shape(self, unseen=1, context=0):
        return (2, 3)

    def probe(self):
        self.asked += 1
        return True

    def observe(self, depth, accepted, t_draft, t_verify, probed=None, nodes=0, width=0):
        self.widths.append(width)


def test_a_tree_round_tells_its_first_levels_width_and_one_cut_to_plain_asks_no_probe(big_pair):
    """Prompt lookup's two continuations of "3 4" both start with 5: the trie's first level holds one node, not the
    shape's two, and the policy is told 1 (bug: it learned from the width it chose). A tree the end of the output cuts
    to nothing is not a plain round the policy chose: no probe is asked for (bug: it was)."""
    target, _ = big_pair
    pol = TellsTrees()
    tree_speculative_generate(target, PromptLookup(), [3, 4, 5, 3, 4, 5, 3, 4], 4, shape=pol)
    assert pol.widths[0] == 1
    cut = TellsTrees()
    tree_speculative_generate(target, PromptLookup(), [3, 4, 5, 3, 4, 5, 3, 4], 1, shape=cut)  # one token: no tree
    assert cut.widths == [0] and cut.asked == 0
