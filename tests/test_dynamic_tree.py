"""EAGLE-2's dynamic tree (minispec/drafters/dynamic_tree.py) with the EAGLE head on tiny models: its growth and
reranking, greedy identity, level 3 exactly for the whole loop, and three twins caught exactly: a tree whose q is
renormalised over the kept children, the residual bug in the tree's walk (level 4's twin), and the paper's
reranking applied at T > 0."""

import numpy as np
import pytest

from minispec import generate, load_eagle
from minispec.drafters import DraftModel, dynamic_tree
from minispec.drafters.dynamic_tree import DynamicTree, grow, rerank
from minispec.harness.equivalence import broken_accept_tree, renormalised_tree
from minispec.harness.exact_loop import loop_law
from minispec.sampling import Stream, Warp, warp
from minispec.speculative import tree_speculative_generate
from minispec.tree import Tree

from .helpers import V, exact_three_tokens
from .test_eagle import big_eagle_dir, small_eagle, small_eagle_dir  # noqa: F401 (fixtures)


def fake_level(V_, seed=0):
    """A drafter's ``run_level`` with fixed random logits per node, and the frontiers it was asked for."""
    rng, asked = np.random.default_rng(seed), []

    def run_level(tree, frontier):
        asked.append(list(frontier))
        return rng.standard_normal((len(frontier), V_)) * 2
    return run_level, asked


def test_greedy_growth_expands_the_best_nodes_and_reranks_to_n():
    root = np.random.default_rng(1).standard_normal(12) * 2
    run_level, asked = fake_level(12)
    tree, scores = grow([], root, run_level, DynamicTree(top_k=3, depth=4, nodes=7), Warp(0.0), None)
    assert len(tree) == 7 and len(asked) == 3 and all(len(f) == 3 for f in asked)
    depths = tree.depths()
    for n in range(1, len(tree.tokens)):
        assert tree.parents[n] < n  # parents before children
        if tree.parents[n]:
            assert scores[n] <= scores[tree.parents[n]]  # a child's value is at most its parent's
        assert np.count_nonzero(tree.draft_probs[n]) == 1  # greedy: one-hot q
    assert depths.max() <= 4
    top = [int(t) for t in np.argsort(-root)[:3]]  # the root's top_k tokens, best first
    few, _ = grow([], root, fake_level(12)[0], DynamicTree(top_k=3, depth=4, nodes=2), Warp(0.0), None)
    for grown, want in ((tree, 3), (few, 2)):  # all three kept; reranked to 2 nodes, one dropped
        kept = [grown.tokens[c] for c in grown.children(0)]
        assert len(kept) == want
        assert set(kept) <= set(top)  # the root's children are among its top_k tokens
        assert sorted(kept) == sorted(top[: len(kept)])  # and those the rerank kept are the best of them


def test_rerank_keeps_the_best_nodes_with_their_ancestors():
    tree = Tree()
    a = tree.add(0, 5, np.eye(8)[5])
    b = tree.add(0, 6, np.eye(8)[6])
    c = tree.add(a, 7, np.eye(8)[7])
    d = tree.add(b, 1, np.eye(8)[1])
    scores = np.array([0.0, -0.1, -2.0, -0.3, -2.5])
    out, kept = rerank(tree, scores, 2)
    assert out.tokens == [-1, 5, 7] and out.parents == [-1, 0, 1] and list(kept) == [0.0, -0.1, -0.3]
    assert d == 4 and c == 3


def test_sampled_growth_stays_within_its_budget_and_never_reranks(monkeypatch):
    root = np.random.default_rng(2).standard_normal(12)
    called = []
    monkeypatch.setattr(dynamic_tree, "rerank", lambda *a: called.append(a))
    for nodes in (1, 2, 5, 9):
        run_level, _ = fake_level(12, nodes)
        tree, scores = grow([], root, run_level, DynamicTree(top_k=3, depth=4, nodes=nodes), Warp(1.0),
                            Stream(np.random.PCG64(nodes)))
        assert 1 <= len(tree) <= nodes and len(scores) == len(tree.tokens)
    assert called == []


def test_a_drafter_without_grow_tree_is_refused(small_pair):
    target, draft = small_pair
    with pytest.raises(ValueError, match="does not grow dynamic trees"):
        tree_speculative_generate(target, DraftModel(draft), [1, 2], 4, shape=DynamicTree(2, 2, 3))


@pytest.mark.parametrize("shape", [DynamicTree(2, 3, 4), DynamicTree(3, 4, 8), DynamicTree(4, 6, 16)],
                         ids=["2-3-4", "3-4-8", "4-6-16"])
def test_greedy_dynamic_tree_equals_plain(big_pair, big_eagle_dir, shape):  # noqa: F811
    target = big_pair[0]
    prompt = [3, 17, 5, 9]
    eagle = load_eagle(big_eagle_dir, target)
    res = tree_speculative_generate(target, eagle, prompt, 40, shape=shape)
    assert res.tokens == generate(target, prompt, 40)
    assert res.stats.drafted > 0 and eagle.forwards > 0


W = [pytest.param(dict(temperature=1.0), id="T=1"), pytest.param(dict(temperature=1.3, top_p=0.8), id="T=1.3,top_p=0.8")]
SHAPE = DynamicTree(top_k=2, depth=2, nodes=3)


def law(target, make, shape=SHAPE, **w):
    """The loop's exact law of 3 tokens with the dynamic tree (round 1 is the prefill: round 2 drafts tokens 2, 3)."""
    return loop_law(target, make, [1, 4, 2], 3, V, generate=tree_speculative_generate, shape=shape, **w)


@pytest.mark.parametrize("w", W)
def test_level3_exact_dynamic_tree_law(small_pair, small_eagle, w):  # noqa: F811
    target = small_pair[0]
    got, paths = law(target, small_eagle, **w)
    assert paths > 10
    np.testing.assert_allclose(got, exact_three_tokens(target, [1, 4, 2], **w), rtol=1e-5, atol=1e-7)


def caught(got, want) -> bool:
    """The exact comparison the correct loop passes (test_level3_exact_dynamic_tree_law) fails: an exact check
    catches any departure above float rounding."""
    return not np.allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_level3_exact_catches_q_renormalised_over_the_kept_children(small_pair, small_eagle):  # noqa: F811
    """Small here (a lone child's renormalised q is one-hot, which is lossless): only the first of two siblings
    is biased, TV about 5e-4, and exactly seen."""
    target = small_pair[0]
    got, _ = law(target, lambda: renormalised_tree(small_eagle()), temperature=1.0)
    want = exact_three_tokens(target, [1, 4, 2], temperature=1.0)
    assert caught(got, want), 0.5 * np.abs(got - want).sum()


def test_level3_exact_catches_the_residual_bug_in_the_trees_walk(small_pair, small_eagle):  # noqa: F811
    """Level 4's tree twin (``equivalence.broken_accept_tree``: p, not the residual, after a rejected child), seen
    exactly here, with its total variation from the target's law (large: the bug the chain's level 4 also plants)."""
    from minispec import rejection
    target, real_residual = small_pair[0], rejection.residual
    got, _ = law(target, small_eagle, temperature=1.0, rule=broken_accept_tree)
    want = exact_three_tokens(target, [1, 4, 2], temperature=1.0)
    assert 0.5 * np.abs(got - want).sum() > 0.05  # 0.18 here: large, unlike the renormalised q's 5e-4
    assert rejection.residual is real_residual  # the twin put the real residual back


@pytest.mark.slow
def test_level3_exact_catches_the_papers_rerank_at_t1(small_pair, small_eagle, monkeypatch):  # noqa: F811
    """EAGLE-2's reranking keeps a drawn child or drops it by its own value: at T > 0 that biases the tree's
    candidates (why dynamic_tree.py does not rerank there). Forced here by calling every q one-hot."""
    target = small_pair[0]
    monkeypatch.setattr(dynamic_tree, "one_hot", lambda row: True)
    got, _ = law(target, small_eagle, DynamicTree(top_k=3, depth=2, nodes=2), temperature=1.0)
    want = exact_three_tokens(target, [1, 4, 2], temperature=1.0)
    assert caught(got, want), 0.5 * np.abs(got - want).sum()


def one_round_counts(rounds: int, shape: DynamicTree, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Level 2 for one round deeper than the loop's exact walk reaches: a dynamic tree grown at T = 1 from a fake
    drafter whose rows depend on the path, verified against a fake target whose rows depend on the path; the first
    two tokens counted (a second token past the round drawn from the target's own row) -> (counts, exact law)."""
    from minispec.tree import accept_tree

    Vs = 5

    def row(path, salt):  # a fixed random law per path
        g = np.random.default_rng([salt, len(path), *path])
        return g.dirichlet(np.full(Vs, 0.7))
    rng = Stream(np.random.PCG64(seed))  # default_rng(seed), with draw()
    counts = np.zeros(Vs * Vs)
    for _ in range(rounds):
        def run_level(tree, frontier):
            return np.log(np.stack([row([tree.tokens[a] for a in tree.path(n)], 2) for n in frontier]))
        tree, _ = grow([], np.log(row([], 2)), run_level, shape, Warp(1.0), rng)
        paths = [[tree.tokens[a] for a in tree.path(n)] for n in range(len(tree.tokens))]
        path, t = accept_tree(np.stack([row(p, 1) for p in paths]), tree, rng)
        seq = [tree.tokens[n] for n in path] + [t]
        if len(seq) < 2:
            seq.append(int(rng.choice(Vs, p=row(seq, 1))))
        counts[seq[0] * Vs + seq[1]] += 1
    first = row([], 1)
    return counts, np.concatenate([first[a] * row([a], 1) for a in range(Vs)])


@pytest.mark.slow
def test_level2_a_deep_sampled_tree_selects_by_value_and_stays_lossless(monkeypatch):
    """Depth 3 at T = 1: frontiers chosen by their values, children drawn after; the first two tokens follow the
    target (chi-square, p > 1e-3, 5,000 rounds, seed fixed). The twin, the paper's rerank at T = 1 (TV about 0.2), is caught
    (p < 1e-6) by the same test on the same rounds."""
    from minispec.harness.equivalence import chisquare_gof

    shape = DynamicTree(top_k=3, depth=3, nodes=5)
    counts, exact = one_round_counts(5_000, shape, seed=0)
    assert chisquare_gof(counts, exact)[2] > 1e-3
    monkeypatch.setattr(dynamic_tree, "one_hot", lambda row: True)
    counts, exact = one_round_counts(5_000, shape, seed=0)
    assert chisquare_gof(counts, exact)[2] < 1e-6


def test_the_cost_model_keeps_the_nodes_that_pay_and_backs_off_when_none_do():
    from minispec.policy.dynamic_tree_policy import MAX_WAIT, AutoDynamicTree

    values = np.array([0.9, 0.8, 0.5, 0.2, 0.05, 0.01])
    flat = AutoDynamicTree(DynamicTree(4, 5, 16), {n: 0.010 for n in range(1, 18)}, 0.0)
    assert flat.choose(values) == 6  # verification free: every node with a value pays
    steep = AutoDynamicTree(DynamicTree(4, 5, 16), {n: 0.010 * (1 + 0.3 * (n - 1)) for n in range(1, 18)}, 0.0)
    n = steep.choose(values)
    assert 1 <= n < 6  # each node costs 0.3 of a step: those of value below that do not pay
    assert n == max(range(7), key=lambda m: (1 + values[:m].sum()) / (0.010 * (1 + 0.3 * m)))
    hopeless = AutoDynamicTree(DynamicTree(4, 5, 16), {n: 0.010 * n for n in range(1, 18)}, 0.002)
    assert hopeless.choose(values * 0.1) == 0
    hopeless.observe(0, 0, 0.010, 0.010)  # 5 calibrated levels of 2 ms: a growth of one target step
    shapes = [hopeless.next_shape() for _ in range(35)]
    assert shapes[:34] == [(0, 0)] * 34 and isinstance(shapes[34], DynamicTree)  # 34 plain rounds, as documented
    dearer = AutoDynamicTree(DynamicTree(4, 5, 16), {n: 0.010 * n for n in range(1, 18)}, 0.006, learn=False)
    dearer.choose(values * 0.1)
    dearer.observe(0, 0, 0.030, 0.010)  # a growth of 3 target steps would wait 100 rounds: capped
    assert dearer.wait == MAX_WAIT == 64
    cheap = AutoDynamicTree(DynamicTree(4, 5, 16), {n: 0.010 * n for n in range(1, 18)}, 0.0, learn=False)
    for backoff in (1, 2, 4):  # a growth that costs nothing: plain rounds doubling each time it does not pay
        assert cheap.choose(values * 0.1) == 0
        cheap.observe(0, 0, 0.0, 0.010)
        shapes = [cheap.next_shape() for _ in range(backoff + 1)]
        assert shapes[:backoff] == [(0, 0)] * backoff and isinstance(shapes[backoff], DynamicTree)


def test_a_growth_is_first_priced_as_the_passes_it_makes(monkeypatch):
    """Before any growth is timed, a growth of depth d costs the head's pass over one row (the root's children) and
    d - 1 levels of top_k nodes, as TreePolicy prices a tree (bug: d levels of top_k nodes, and a shallower growth a
    share of the full one by its levels); a learned growth time scales those passes."""
    from types import SimpleNamespace

    from minispec.policy import dynamic_tree_policy

    verify = SimpleNamespace(times={n: 0.010 for n in range(1, 18)})
    monkeypatch.setattr(dynamic_tree_policy, "verify_calibration", lambda target, ns: verify)
    monkeypatch.setattr(dynamic_tree_policy, "level_calibration", lambda drafter: SimpleNamespace(times={1: 0.001, 4: 0.004}))
    target = SimpleNamespace(cfg=SimpleNamespace(max_position_embeddings=2048))
    policy = dynamic_tree_policy.auto_dynamic_tree(target, drafter=None, shape=DynamicTree(4, 5, 16), learn=False)
    assert policy.t_grow == pytest.approx(0.001 + 4 * 0.004)
    assert policy.growth_time(2) == pytest.approx(0.001 + 0.004)  # a shallower growth: the passes it makes
    policy.growths, policy.t_grow = [], 2 * policy.t_grow  # learned: twice the calibrated passes, at every depth
    assert policy.growth_time(2) == pytest.approx(2 * (0.001 + 0.004))


def test_a_paid_growth_is_left_out_of_the_size_but_decides_whether_to_grow_again():
    """choose sizes the tree by verification alone (the growth is paid by then); whether the next round grows is
    decided before growing, the growth's time included (bug: a growth that kept nothing cost 1.5 target steps, paid
    again after every back-off: 0.79x on code)."""
    from minispec.policy.dynamic_tree_policy import AutoDynamicTree

    values = np.array([0.9, 0.8, 0.5])
    verify = {n: 0.010 * (1 + 0.1 * (n - 1)) for n in range(1, 18)}
    cheap = AutoDynamicTree(DynamicTree(4, 5, 16), verify, 0.0001)
    assert cheap.choose(values) == 3  # calibrated: a growth of 0.5 ms (the first timed one is not counted)
    cheap.observe(2, 2, 0.0, 0.013, nodes=3)
    assert cheap.next_shape() != (0, 0)  # pays: grow again
    dear = AutoDynamicTree(DynamicTree(4, 5, 16), verify, 0.010, learn=False)  # 5 levels of a target step each
    assert dear.choose(values) == 3  # paid: verifying its best nodes still beats a plain step
    dear.observe(2, 2, 0.0, 0.013, nodes=3)
    assert dear.next_shape() == (0, 0)  # but the next round is plain


def test_the_growth_time_is_learned_from_the_rounds_unless_the_run_is_seeded():
    """A growth that takes far longer than the head's calibrated levels (the vocabulary's children, the catch-up)
    stops the trees once timed; the first growth (the head's catch-up on the whole prompt) is not counted; a seeded
    run keeps the calibration, so its choices repeat."""
    from minispec.policy.dynamic_tree_policy import AutoDynamicTree

    values = np.array([0.9, 0.8, 0.5])
    verify = {n: 0.010 * (1 + 0.1 * (n - 1)) for n in range(1, 18)}
    plain, policies = {}, {}
    for learn in (True, False):
        pol = policies[learn] = AutoDynamicTree(DynamicTree(4, 5, 16), verify, 0.0001, learn=learn)
        seen = []
        for _ in range(12):
            shape = pol.next_shape()
            seen.append(shape == (0, 0))
            if shape != (0, 0):
                pol.choose(values)
                pol.observe(2, 2, 0.050, 0.013, nodes=3)  # each growth took 50 ms: 5 target steps
            else:
                pol.observe(0, 0, 0.0, 0.010)
        plain[learn] = seen
    assert plain[False] == [False] * 12 and policies[False].t_grow == 5 * 0.0001  # calibrated: every round grows
    assert plain[True] == [False, False] + [True] * 10  # timed from the second growth on: then plain
    assert policies[True].t_grow == 0.050


def test_a_round_that_grew_nothing_teaches_nothing():
    """A tree asked for but not grown (the head has no features yet, or no room), without choose: no growth timed,
    no plan (its draft time is not a growth's)."""
    from minispec.policy.dynamic_tree_policy import AutoDynamicTree

    pol = AutoDynamicTree(DynamicTree(4, 5, 16), {n: 0.010 for n in range(1, 18)}, 0.001)
    for _ in range(5):
        assert pol.next_shape() != (0, 0)
        pol.observe(0, 0, 1.0, 0.010, nodes=0)
    assert pol.growths is None and pol.t_grow == 5 * 0.001 and pol.wait == 0


def test_at_t1_grown_rounds_that_emit_little_back_off_from_their_tokens():
    """At T > 0 there is no choose: the tokens the grown rounds emitted decide, with calibrated costs in a seeded
    run (so the choices depend on the seed's draws, not on the clock), learned ones otherwise."""
    from minispec.policy.dynamic_tree_policy import AutoDynamicTree

    verify = {n: 0.010 * (1 + 0.1 * (n - 1)) for n in range(1, 18)}
    for accepted, grows in ((0, False), (3, True)):  # 1 token for 3.6 steps; 4 tokens for 3.6 steps (t_grow 1)
        pol = AutoDynamicTree(DynamicTree(4, 5, 16), verify, 0.002, learn=False)
        assert pol.next_shape() != (0, 0)
        pol.observe(1, accepted, 0.5, 0.5, nodes=16)  # the clock says nothing to a seeded run
        assert (pol.next_shape() != (0, 0)) == grows
    pol = AutoDynamicTree(DynamicTree(4, 5, 16), verify, 0.002)  # following its clock
    for _ in range(2):
        assert pol.next_shape() != (0, 0)
        pol.observe(1, 3, 0.5, 0.026, nodes=16)  # 4 tokens a round, but each growth took 50 target steps
    assert pol.t_grow == 0.5 * 5 / 2 and pol.next_shape() == (0, 0)  # the second, within 2 x 4 nodes, grew 2 levels
    # of the shape's 5 (``sampled_levels``): t_grow is a growth of all 5


def test_at_t1_the_tree_is_grown_within_the_size_that_pays():
    """At T > 0 the budget is chosen before growing (no values to size it after): each of SAMPLED_SIZES is grown
    once, then the one whose rounds emitted the most tokens per second of growth and verification, and every
    LOOK_EVERY-th sampled growth the size grown longest ago (bug: always the shape's 16 nodes, r(17) = 2.5 target
    steps where 2 x 4 nodes cost r(5) = 1.5 and kept almost as many: 0.92x against the small trees' 1.22x)."""
    from minispec.policy.dynamic_tree_policy import LOOK_EVERY, AutoDynamicTree, sampled_levels

    root = np.random.default_rng(3).standard_normal(64)
    for k, n, d in [(2, 4, 5), (2, 6, 5), (3, 8, 5), (4, 16, 5), (4, 40, 5), (4, 40, 2), (1, 3, 5), (3, 5, 5)]:
        run_level, asked = fake_level(64)  # the levels a sampled growth really reaches, and the passes it makes
        tree, _ = grow([], root, run_level, DynamicTree(top_k=k, depth=d, nodes=n), Warp(1.0), Stream(np.random.PCG64(n)))
        assert sampled_levels(k, n, d) == int(tree.depths().max()) == len(asked) + 1, (k, n, d)
    flat = {n: 0.010 for n in range(1, 18)}  # two budgets that grow the same tree are one size:
    assert AutoDynamicTree(DynamicTree(1, 5, 16), flat, 0.0).sizes == [(1, 4), (1, 5)]  # a chain of 5 at most
    assert AutoDynamicTree(DynamicTree(4, 5, 3), flat, 0.0).sizes == [(2, 3), (3, 3)]  # 3 nodes: top_k 3 at most
    emitted = {(2, 4): 2, (2, 6): 2, (3, 8): 2, (4, 16): 3}  # tokens a round: the widest keeps the most
    for verify, want in [({n: 0.010 * (1 + 0.1 * (n - 1)) for n in range(1, 18)}, (2, 4)),  # r(17) = 2.6
                         ({n: 0.010 for n in range(1, 18)}, (4, 16))]:  # verification free: the widest
        pol = AutoDynamicTree(DynamicTree(4, 5, 16), verify, 0.0008, learn=False)  # a level: 0.08 of a step
        grown = []
        for _ in range(2 * LOOK_EVERY):
            shape = pol.next_shape()
            grown.append((shape.top_k, shape.nodes))
            pol.observe(1, emitted[grown[-1]] - 1, 0.0, 0.010, nodes=grown[-1][1])
        assert grown[:4] == [(4, 16), (2, 4), (2, 6), (3, 8)], grown  # the first before it knows; then each once
        looks = {i for i in range(4, 2 * LOOK_EVERY) if i % LOOK_EVERY == 0}  # after the 8th sampled growth: a look
        assert all(g == want for i, g in enumerate(grown[4:], 4) if i not in looks), grown
        assert all(grown[i] != want for i in looks), grown  # the size grown longest ago, not the best
    told = AutoDynamicTree(DynamicTree(4, 5, 16), verify, 0.0008, learn=False, sampled=True)  # a run at T > 0 says so
    grown = []
    for _ in range(2):
        shape = told.next_shape()
        grown.append((shape.top_k, shape.nodes))
        told.observe(2, 2, 0.0, 0.010, nodes=shape.nodes)
    assert grown == [(2, 4), (2, 6)]  # smallest first, from the first growth on


def test_the_cost_model_chooses_the_depth_of_the_next_growth_and_looks_deeper_now_and_then():
    """Departing from EAGLE-2's fixed depth: from a growth's values and depths, the next growth grows the d that
    maximises max_N E_d(N) / (t_grow d / depth + t(N + 1)); a shallow growth cannot see deeper nodes, so every
    LOOK_EVERY-th grows the full depth again. Cheap levels, cheap passes and valuable deep nodes keep the full depth;
    without depths (a caller that gives none) the depth never changes."""
    from minispec.policy.dynamic_tree_policy import LOOK_EVERY, AutoDynamicTree

    values = np.array([0.8, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02])
    depths = np.array([1, 2, 1, 3, 4, 5, 5])
    verify = {n: 0.010 * (1 + 0.15 * (n - 1)) for n in range(1, 18)}
    pol = AutoDynamicTree(DynamicTree(4, 5, 16), verify, 0.003, learn=False)  # a level: 0.3 of a target step

    def rate(d):  # the docstring's formula, written out again
        kept = values[depths <= d]
        return max((1 + kept[:m].sum()) / (0.003 * d + verify[m + 1]) for m in range(len(kept) + 1))
    want = max(range(1, 6), key=rate)
    assert want < 5  # (the case is one where a shallower tree pays more)
    assert isinstance(pol.next_shape(), DynamicTree)
    pol.choose(values, depths)
    pol.observe(1, 1, 0.0, 0.010, nodes=3)
    assert pol.depth == want and pol.wait == 0
    grown = [pol.next_shape().depth for _ in range(LOOK_EVERY + 2)]  # no choose in between: the plan stands
    assert grown == [want] * LOOK_EVERY + [5, want]  # LOOK_EVERY shallow growths, then a full one to look
    deep = AutoDynamicTree(DynamicTree(4, 5, 16), {n: 0.010 for n in range(1, 18)}, 0.0001, learn=False)
    deep.choose(np.array([0.9, 0.9, 0.9, 0.9, 0.9]), np.array([1, 2, 3, 4, 5]))
    deep.observe(4, 4, 0.0, 0.010, nodes=5)
    assert deep.depth == 5 and deep.next_shape().depth == 5
    legacy = AutoDynamicTree(DynamicTree(4, 5, 16), verify, 0.003, learn=False)
    legacy.choose(values)
    legacy.observe(1, 1, 0.0, 0.010, nodes=3)
    assert legacy.depth == 5


def test_one_growth_of_little_worth_among_good_ones_does_not_stop_the_trees():
    """plan expects the next growth to be worth what the growths so far were (a running mean, WORTH_WEIGHT on the
    newest), not the last one alone (bug: one growth of little worth made the next 16 rounds plain, 1.61 tokens a pass
    where a fixed 2x2x4 tree kept 2.23); growths of little worth, one after another, still stop them."""
    from minispec.policy.dynamic_tree_policy import AutoDynamicTree

    verify = {n: 0.010 * (1 + 0.1 * (n - 1)) for n in range(1, 18)}
    good, poor = np.array([0.9, 0.8, 0.7]), np.array([0.05, 0.02, 0.01])
    pol = AutoDynamicTree(DynamicTree(4, 5, 16), verify, 0.001, learn=False)  # a growth: half a target step
    for values in [good] * 5 + [poor]:
        assert pol.next_shape() != (0, 0)
        pol.choose(values)
        pol.observe(1, 1, 0.0, 0.012, nodes=3)
    assert pol.wait == 0 and pol.next_shape() != (0, 0)  # still growing after the poor one
    for _ in range(30):  # poor ones from now on: the trees stop, plain rounds between looks
        shape = pol.next_shape()
        if shape != (0, 0):
            pol.choose(poor)
            pol.observe(0, 0, 0.0, 0.012, nodes=3)
    assert pol.wait > 0


def test_trust_learns_how_far_the_values_overpromise():
    from minispec.policy.dynamic_tree_policy import AutoDynamicTree

    pol = AutoDynamicTree(DynamicTree(4, 5, 16), {n: 0.010 for n in range(1, 18)}, 0.0)
    for _ in range(30):
        pol.choose(np.array([0.9, 0.9, 0.9, 0.9]))  # promises 3.6 tokens
        pol.observe(2, 1, 0.0, 0.01, nodes=4)  # verifies the 4 (the loop reports the tree's size), keeps 1
    assert 0.2 < pol.trust < 0.35
    fixed = AutoDynamicTree(DynamicTree(4, 5, 16), {n: 0.010 for n in range(1, 18)}, 0.0, learn=False)
    fixed.choose(np.array([0.9]))
    fixed.observe(1, 0, 0.0, 0.01, nodes=1)
    assert fixed.trust == 1.0


def test_greedy_auto_dynamic_tree_equals_plain_and_drafts(big_pair, big_eagle_dir):  # noqa: F811
    from minispec.policy.dynamic_tree_policy import AutoDynamicTree

    target = big_pair[0]
    prompt = [3, 17, 5, 9]
    policy = AutoDynamicTree(DynamicTree(3, 4, 10), {n: 0.010 * (1 + 0.05 * (n - 1)) for n in range(1, 12)}, 0.0005)
    asked = []
    real_choose = policy.choose
    policy.choose = lambda values, depths: asked.append(len(values)) or real_choose(values, depths)
    res = tree_speculative_generate(target, load_eagle(big_eagle_dir, target), prompt, 40, shape=policy)
    assert res.tokens == generate(target, prompt, 40) and res.stats.drafted > 0
    assert asked and max(asked) > 10  # the head's full tree was grown and the cost model sized it (bug: choose dropped)


def test_rows_that_turn_random_below_a_one_hot_root_stop_the_full_growth():
    """A one-hot root (top-p keeps one token there) above rows that top-p does not cut to one: the full growth stops
    where the rows turn random, and the tree fits its budget (bug: grown in full, never reranked, 68 nodes for a
    budget of 16, past the cache)."""
    peaked = np.array([5.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    run_level, _ = fake_level(6)
    tree, _ = grow([], peaked, run_level, DynamicTree(top_k=4, depth=5, nodes=16), Warp(1.3, top_p=0.9),
                   Stream(np.random.PCG64(0)))
    assert 1 <= len(tree) <= 16 and all(np.count_nonzero(r) == 1 for r in tree.draft_probs[1:])


@pytest.mark.slow  # about a minute on a tiny target
def test_minispec_check_tree_runs_the_dynamic_tree_and_its_twin(tmp_path):
    """``minispec check --tree`` through the command on a tiny target with a random head (8 paired runs, seeded):
    the dynamic tree at T = 1 and its twin (the residual bug in the tree's walk) are both run and reported, and the
    real tree is not told apart from plain sampling. Whether the twin is caught is a question of power, which a
    random target's near-uniform p does not have: level 3 catches it exactly (above), and the heavy set runs it on
    SmolLM2 (tests/test_check.py)."""
    import json

    from minispec.harness.check import TREE_TWIN
    from minispec.model.config import ModelConfig

    from .helpers import chat_model_dir, run_cli, write_random_eagle

    target_dir = chat_model_dir(tmp_path / "target", hidden_size=32)
    head = write_random_eagle(tmp_path / "head", ModelConfig.from_dir(target_dir), range(3, 400), seed=3, scale=3.0)
    out = tmp_path / "check.json"
    code, stdout, err = run_cli(["check", "--model", str(target_dir), "--draft", str(head), "--tree", "--quick",
                                 "--runs", "8", "--json", str(out)])
    res = json.loads(out.read_text())
    shape = DynamicTree()
    assert res["tree_sampling"]["tree"] == dict(top_k=shape.top_k, depth=shape.depth, nodes=shape.nodes)
    assert res["tree_sampling"]["rule"] == "accept_tree" and "acceptance" in res["tree_sampling"], stdout
    assert res[TREE_TWIN]["broken_rule"] and not res["tree_sampling"]["broken_rule"]
    assert res["tree_sampling"]["tokens"]["tokens_b"] > 0 and res[TREE_TWIN]["tokens"]["tokens_b"] > 0
    assert res["passed"]["tree_sampling"] and "tree_twin_caught" in res["passed"], stdout
    assert res[TREE_TWIN]["rule"] == "broken_accept_tree" and res["tree_sampling"]["rule"] == "accept_tree"
    assert "T=1, EAGLE-2's dynamic tree" in stdout and "the residual bug in the tree's walk" in stdout


def test_greedy_dynamic_tree_runs_to_the_end_of_the_context(big_pair, big_eagle_dir):  # noqa: F811
    """Near the end of the context the tree grows fewer levels: each level after the first writes up to top_k head
    slots, which must fit in the head's cache (bug: they overflowed it, a broadcast error mid-run)."""
    target = big_pair[0]
    limit = target.cfg.max_position_embeddings
    prompt = [int(x) for x in np.random.default_rng(0).integers(2, 40, limit - 56)]
    res = tree_speculative_generate(target, load_eagle(big_eagle_dir, target), prompt, 56, shape=DynamicTree(4, 5, 16))
    assert res.tokens == generate(target, prompt, 56) and res.stats.drafted > 0


def exact_four_tokens(target, prompt, **w):
    """P(t1..t4) from the target's own conditionals (full forwards), as a flat [V^4] table."""
    def p_next(seq):
        return warp(target.forward(seq, target.new_cache(len(seq)))[-1], **w)
    out = np.zeros(V ** 4)
    for t1, p1 in enumerate(p_next(prompt)):
        for t2, p2 in enumerate(p_next(prompt + [t1])):
            for t3, p3 in enumerate(p_next(prompt + [t1, t2])):
                first = ((t1 * V + t2) * V + t3) * V  # the entries (t1, t2, t3, 0..V-1)
                out[first: first + V] = p1 * p2 * p3 * p_next(prompt + [t1, t2, t3])
    return out


@pytest.mark.slow
def test_level3_exact_the_automatic_tree_whose_size_follows_the_rounds_before(small_pair, small_eagle):  # noqa: F811
    """The loop with the automatic tree at T = 1 (AutoDynamicTree: its sizes (3, 3) then (2, 3) here, in the order it
    tries them, and whether to grow at all from what the rounds before emitted): the law of 4 tokens is exactly the
    target's, a fresh policy per path (seeded: calibrated costs, no clock). Within 4 tokens no path reaches a size
    chosen by its rate (that needs a third growth); that choice is made, as these are, before the round's draws. Its
    twin, the residual bug in the tree's walk, is caught the same way."""
    from minispec.policy.dynamic_tree_policy import AutoDynamicTree

    target, w = small_pair[0], dict(temperature=1.0)

    sizes = set()  # the budgets the paths' trees were grown within

    class Seen(AutoDynamicTree):
        def next_shape(self, unseen: int = 1, context: int = 0):
            shape = super().next_shape(unseen, context)
            if shape != (0, 0):
                sizes.add((shape.top_k, shape.nodes))
            return shape

    def fresh():
        policy = Seen(DynamicTree(3, 2, 3), {n: 0.010 for n in range(1, 5)}, 0.0001, learn=False)
        assert policy.sizes == [(2, 3), (3, 3)]
        return dict(shape=policy)

    want = exact_four_tokens(target, [1, 4, 2], **w)
    got, paths = loop_law(target, small_eagle, [1, 4, 2], 4, V, generate=tree_speculative_generate, fresh=fresh, **w)
    assert paths > 40 and sizes == {(2, 3), (3, 3)}  # both sizes grown, by the paths' histories
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    broken, _ = loop_law(target, small_eagle, [1, 4, 2], 4, V, generate=tree_speculative_generate, fresh=fresh,
                         rule=broken_accept_tree, **w)
    assert caught(broken, want)


def test_a_run_that_draws_its_tokens_tells_the_automatic_tree(small_pair, small_eagle):  # noqa: F811
    """The loop tells ``tree="auto"``'s policy whether the run draws its tokens, so that its first growth is sampled
    within the smallest size (AutoDynamicTree's ``sampled``)."""
    from minispec.rejection import verification_rule
    from minispec.rounds import choose_policy

    target = small_pair[0]
    for temperature in (1.0, 0.0):
        policy, _ = choose_policy(target, small_eagle(), None, "auto", 0, temperature, verification_rule("token"))
        assert policy.sampled == (temperature > 0) and policy.size == policy.sizes[0]
