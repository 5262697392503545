"""What the tree policies (minispec/policy/tree_policy.py, dynamic_tree_policy.py) charge a round against what it
really does: a tree's levels against the passes its drafter makes, a sampled growth at the depth it was asked for,
and the values a round verified against what it accepted."""

import numpy as np
import pytest

from minispec import load_eagle
from minispec.drafters import DraftModel
from minispec.drafters.dynamic_tree import DynamicTree, grow
from minispec.policy.auto_k import MARGIN
from minispec.policy.dynamic_tree_policy import AutoDynamicTree
from minispec.policy.tree_policy import TreePolicy
from minispec.sampling import Stream, Warp

from .test_eagle import big_eagle_dir  # noqa: F401 (fixture)

LEVELS = {1: 0.0010, 2: 0.0013, 3: 0.0017, 4: 0.0020}  # seconds of one tree level of w nodes: any, a wider dearer


def fed(eagle, target, tokens):
    """``eagle`` after the target's pass over tokens[:-1], as the loop leaves it."""
    target.forward(tokens[:-1], target.new_cache(len(tokens)), on_features=lambda f: eagle.see_features(tokens[:-1], f))
    return eagle


def eagle_levels(eagle, monkeypatch) -> list[int]:
    """The levels the head runs from now on, each as its node count: a head pass over w entries and the logits of its
    w rows (what ``Eagle.level_times`` times as a level of w nodes)."""
    passes, head, logits = [], eagle.head, eagle.logits
    monkeypatch.setattr(eagle, "head", lambda ids, *a, **k: passes.append(("head", len(ids))) or head(ids, *a, **k))
    monkeypatch.setattr(eagle, "logits", lambda f: passes.append(("logits", len(f))) or logits(f))

    def levels():
        assert [kind for kind, _ in passes] == ["head", "logits"] * (len(passes) // 2), passes  # each pass a level
        assert all(passes[i][1] == passes[i + 1][1] for i in range(0, len(passes), 2)), passes
        return [n for _, n in passes[::2]]
    return levels


def model_levels(model, monkeypatch) -> list[int]:
    """The model's passes from now on, each as its token count (a level of w nodes: its pass over w tokens)."""
    passes, real = [], model.forward_masked  # (``forward`` runs through ``forward_masked``)
    monkeypatch.setattr(model, "forward_masked", lambda ids, *a, **k: passes.append(len(ids)) or real(ids, *a, **k))
    return passes


SHAPES = [(1, 3), (2, 3), (4, 2), (3, 4)]


@pytest.mark.parametrize("labelled", [True, False], ids=["label read first", "no label"])
def test_a_tree_is_priced_as_the_passes_the_eagle_head_makes(big_pair, big_eagle_dir, monkeypatch, labelled):  # noqa: F811
    """A round of a width x depth tree, caught up on one new token: the head's catch-up and its first guess's row
    (one level of one node, which the label pays where it is read), then depth - 1 levels of width nodes. The policy's
    cost, less the target's pass, is those levels' time (bug: depth levels of width nodes, so every tree wider than
    one paid level(width) - level(1) a round too much against a chain and plain decoding)."""
    target = big_pair[0]
    prompt = [3, 17, 5, 9, 11]
    tokens = prompt + [7]
    for width, depth in SHAPES:
        eagle = load_eagle(big_eagle_dir, target)
        policy = TreePolicy({n: 0.010 for n in range(1, 18)}, LEVELS, learn=False,
                            claims=eagle.claimed_acceptance if labelled else None)
        fed(eagle, target, prompt).context(prompt)  # the round before: the head caught up on the prompt
        fed(eagle, target, tokens)  # that round's target pass handed on one more token's features
        levels = eagle_levels(eagle, monkeypatch)
        if labelled:
            eagle.context(tokens)  # the round's label, read before the policy chooses
            assert sum(LEVELS[w] for w in levels()) == pytest.approx(policy.cost(0, 0) - policy.verify_time[1])
        tree = eagle.propose_tree(tokens, width, depth, Warp(0.0), Stream(np.random.PCG64(0)))
        assert len(tree) == width * depth
        spent = sum(LEVELS[w] for w in levels())  # the label's levels too, where it was read
        assert spent == pytest.approx(policy.cost(width, depth) - policy.verify_time[width * depth + 1]), (width, depth)
        monkeypatch.undo()


def test_a_tree_is_priced_as_the_passes_a_draft_model_makes(big_pair, monkeypatch):
    """The same for a draft model, whose level of w nodes is its pass over w tokens (costs.py:
    ``level_calibration``): one pass over the one new token (its ``feed``), then depth - 1 masked passes."""
    target, model = big_pair
    prompt = [3, 17, 5, 9, 11]
    policy = TreePolicy({n: 0.010 for n in range(1, 18)}, LEVELS, learn=False)
    for width, depth in SHAPES:
        drafter = DraftModel(model)
        drafter.propose_tree(prompt, width, depth, Warp(0.0), Stream(np.random.PCG64(0)))  # caught up on the prompt
        passes = model_levels(model, monkeypatch)
        tree = drafter.propose_tree(prompt + [7], width, depth, Warp(0.0), Stream(np.random.PCG64(0)))
        monkeypatch.undo()
        assert len(tree) == width * depth
        spent = sum(LEVELS[w] for w in passes)
        assert spent == pytest.approx(policy.cost(width, depth) - policy.verify_time[width * depth + 1]), (width, depth)


def test_a_sampled_growth_is_priced_at_the_depth_a_one_hot_root_chose():
    """A one-hot root chooses depth 1 (its deeper nodes are worth little); the next root is sampled (T > 0), and
    its growth of that one level, 2 tokens emitted, pays at its own price but not at the full depth's (bug: it was
    priced at the full depth, so the trees stopped). Calibrated (a seeded run) and timed (a run that follows its clock:
    a level of 3 ms, at depth 1 timed at 6 ms)."""
    verify = {n: 0.010 * (1 + 0.05 * (n - 1)) for n in range(1, 18)}
    shape = DynamicTree(4, 5, 16)
    for learn in (False, True):
        pol = AutoDynamicTree(shape, verify, 0.003, learn=learn)
        assert pol.next_shape().depth == shape.depth
        pol.choose(np.array([0.9, 0.05, 0.04, 0.03, 0.02]), np.array([1, 2, 3, 4, 5]))
        pol.observe(1, 1, 0.010, None, nodes=1)  # the first growth: not timed (it caught the head up on the prompt)
        assert pol.depth == 1 and pol.wait == 0
        grown = pol.next_shape()
        assert grown.depth == 1
        pol.observe(1, 1, 0.006, None, nodes=grown.top_k)  # sampled: no choose; 1 accepted, 2 tokens emitted
        t_grow = 0.003 if not learn else 0.006  # this growth as calibrated, or as timed
        threshold = (1 + MARGIN) / verify[1]
        assert 2 / (t_grow + verify[grown.top_k + 1]) > threshold  # pays at its own price
        assert 2 / (t_grow * shape.depth + verify[grown.top_k + 1]) < threshold  # not at the full depth's
        assert pol.wait == 0 and isinstance(pol.next_shape(), DynamicTree), learn


def test_trust_learns_from_the_values_of_the_nodes_verified_near_the_end_of_the_context():
    """Near the end of the context the loop cuts the tree to the room left (``DynamicTree.within``, as
    rounds.draft_tree): the cost model chose more nodes than the tree verified, and trust learns from the promise of
    those verified (bug: of all it chose, so trust fell as if the values had overpromised)."""
    rng = np.random.default_rng(0)
    root = rng.standard_normal(12) * 4  # a confident drafter: its best few nodes promise about a token

    def run_level(tree, frontier):  # [len(frontier), V]
        return rng.standard_normal((len(frontier), 12)) * 4

    pol = AutoDynamicTree(DynamicTree(4, 5, 16), {n: 0.010 for n in range(1, 18)}, 0.0)  # every node pays
    chosen = []
    real = pol.choose
    pol.choose = lambda values, depths: chosen.append(real(values, depths)) or chosen[-1]
    room = 3
    shape = pol.next_shape().within(5, room)
    tree, scores = grow([], root, run_level, shape, Warp(0.0), Stream(np.random.PCG64(0)))
    assert len(tree) == room < chosen[0]  # the room cut the tree the cost model sized
    promise = float(np.exp(scores[1:]).sum())  # the values of the nodes the round verifies
    accepted = 1
    assert 0.05 < accepted / promise < 2.0  # inside trust's clip
    pol.observe(1, accepted, 0.0, 0.010, nodes=len(tree))
    assert pol.trust == pytest.approx(accepted / promise)
