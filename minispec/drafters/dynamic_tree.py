"""EAGLE-2's dynamic draft tree: grown where the drafter is confident, then cut to the best N nodes.

Li et al. 2024, EAGLE-2 (arXiv 2406.16858), section 4. Paper -> code:

    value V_i       the product of the drafter's probabilities along the path to node i (its confidence that the
                    whole path is accepted); ``score``, its log, from the drafter's untempered softmax
    expansion       each level, the drafter runs once on the frontier and every frontier node gets its ``top_k``
                    children (``run_level``: the drafter's one masked pass over those nodes)
    selection       the ``top_k`` nodes of the new level with the highest value are the next frontier
    reranking       after ``depth`` levels, the ``nodes`` nodes of highest value, parents before children. A child's
                    value is at most its parent's, so the kept set holds every kept node's ancestors (``rerank``)
    tree size -1    EAGLE's code's automatic size (total_token=-1): timed target passes choose N. Here ``choose``,
                    the cost model's pick from the values and the measured t(n) (policy/dynamic_tree_policy.py). Departing
                    from the paper's fixed depth, ``choose`` also gets each node's depth, from which that cost model
                    picks the depth of the next growth (``AutoDynamicTree``)

A tree is verified as any tree is (tree.py): in one target pass, walked with the multi-candidate rule.

Lossless. At temperature 0 every candidate is a top-k token with a one-hot q, and the walk keeps the target's
argmax wherever it is among them: which nodes the tree holds changes how far the walk goes, never what it emits.
At T > 0 the children are drawn without replacement from q (tree.add_children), and the walk is exact only when
a drawn child's presence in the tree does not depend on its own value. So, departing from the paper:
    - no reranking at T > 0 (dropping a drawn child because its value is low is the early stop that looks at the
      drawn token: examples/04_early_stop.py); the budget of ``nodes`` is met while growing instead: how many
      children a node gets is decided before they are drawn (``budgeted``);
    - selection stays: whether a node gets children at all may depend on its value and its cousins', because its
      children are drawn after that decision, each from its own q.
    With the default shape (4, 5, 16) a sampled tree spends its budget in two levels (4 children of the root, then
    3 x 4): at T > 0, ``depth`` matters only for larger budgets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..tree import Tree, add_children


@dataclass(frozen=True)
class DynamicTree:
    """The shape of a dynamic tree: ``top_k`` children per expanded node and nodes per frontier, at most ``depth``
    levels, at most ``nodes`` draft tokens (EAGLE-2's defaults are 10, 6 and 60; CPU passes are dearer)."""

    top_k: int = 4
    depth: int = 5
    nodes: int = 16
    choose: Callable | None = field(default=None, compare=False)  # at T = 0: the grown nodes' values, best first,
    # and their depths -> how many to keep (at most ``nodes``; 0: verify none); None keeps ``nodes`` (dynamic_tree_policy.py)

    def __post_init__(self):
        for name in ("top_k", "depth", "nodes"):
            x = getattr(self, name)
            if not (isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 1):
                raise ValueError(f"a dynamic tree's {name} must be a positive integer, got {x!r}")

    def within(self, depth: int, nodes: int) -> "DynamicTree | None":
        """The same shape clipped to ``depth`` levels and ``nodes`` nodes (what the cache and the output have room
        for); None when no node fits."""
        if depth < 1 or nodes < 1:
            return None
        return DynamicTree(self.top_k, min(self.depth, depth), min(self.nodes, nodes), self.choose)


def log_softmax_at(logits: np.ndarray, tokens: list[int]) -> np.ndarray:  # [V], n tokens -> [n]
    """The drafter's untempered log-probabilities of ``tokens``, for scores only: they rank nodes and never reach a
    model. The normaliser is summed in float64 (as sampling.warp's probabilities), the exponentials in the logits'
    own float32: one pass over the vocabulary, whose log-probabilities are never all needed. (A row with no finite
    logit gives NaN, as a full log-softmax would.)"""
    m = np.max(logits)
    lse = float(m) + float(np.log(np.sum(np.exp(logits - m), dtype=np.float64)))
    return np.asarray(logits)[tokens].astype(np.float64) - lse


def one_hot(row) -> bool:
    return int(np.count_nonzero(row)) == 1


def grow(tokens, root_logits: np.ndarray, run_level, shape: DynamicTree, warp, draws) -> tuple[Tree, np.ndarray]:
    """The tree after ``tokens`` (the sequence, the root last) and each node's score (log value; the root's 0).
    ``run_level(tree, frontier)`` -> logits
    [len(frontier), V]: the drafter's rows after each frontier node. Where every row is one-hot (T = 0) grown in
    full and reranked to ``shape.nodes`` (growth stops at a level whose rows are not all one-hot); else grown
    within the budget (module docstring)."""
    tree, scores, levels = Tree(), [0.0], [0]  # levels: each node's depth, the root's 0

    def children(parent: int, logits: np.ndarray, count: int, i: int) -> list[int]:
        kids = add_children(tree, parent, logits, count, warp, draws, i, tree.prefix(tokens, parent))
        value = log_softmax_at(logits, [tree.tokens[c] for c in kids])  # the drafter's own confidence, before the
        scores.extend(scores[parent] + float(v) for v in value)  # processors: it only ranks nodes
        levels.extend([levels[parent] + 1] * len(kids))
        return kids

    deterministic = one_hot(warp(root_logits, tokens))
    budget = None if deterministic else shape.nodes
    level = children(0, root_logits, shape.top_k if budget is None else min(shape.top_k, budget), 0)
    for d in range(1, shape.depth):
        left = None if budget is None else budget - len(tree)
        frontier, count = budgeted(level, scores, shape.top_k, left)
        if not frontier:
            break
        logits = run_level(tree, frontier)  # [len(frontier), V]: one pass of the drafter
        if deterministic and not all(one_hot(warp(row, tree.prefix(tokens, n))) for row, n in zip(logits, frontier)):
            break  # the rows turn random below here (top-p, say): keep the deterministic tree grown so far
        level = [c for i, node in enumerate(frontier) for c in children(node, logits[i], count, d)]
        if not level:
            break
    scores = np.array(scores)
    if deterministic:  # every row was one-hot: which candidates the tree holds cannot bias the walk
        n = shape.nodes
        if shape.choose is not None:  # how many the cost model keeps, from the values (EAGLE-2's tree size -1),
            best = np.argsort(-scores[1:], kind="stable")  # [n] grown nodes, best first; with their depths (it may
            n = max(0, min(n, int(shape.choose(np.exp(scores[1:][best]), np.array(levels[1:])[best]))))  # grow fewer
            # levels next time): [n] values, [n] depths
        return rerank(tree, scores, n)
    return tree, scores


def budgeted(level: list[int], scores, top_k: int, left: int | None) -> tuple[list[int], int]:
    """Selection: the frontier (the ``top_k`` nodes of ``level`` of highest score, ties to the earlier node) and how
    many children each gets; with ``left`` nodes of budget, as many frontier nodes as can have ``top_k`` children,
    or one with what is left. Decided before any child is drawn."""
    best = sorted(level, key=lambda n: (-scores[n], n))[:top_k]
    if left is None:
        return best, top_k
    if left <= 0:
        return [], 0
    if left < top_k:
        return best[:1], left
    return best[: left // top_k], top_k


def rerank(tree: Tree, scores: np.ndarray, nodes: int) -> tuple[Tree, np.ndarray]:
    """Reranking: the ``nodes`` nodes of highest score (ties to the earlier node), as a tree whose parents come
    before their children, in the order they were grown."""
    keep = sorted(range(1, len(tree.tokens)), key=lambda n: (-scores[n], n))[:nodes]
    kept = set(keep)
    assert all(tree.parents[n] == 0 or tree.parents[n] in kept for n in kept), "a kept node lost its parent"
    out, index = Tree(), {0: 0}
    for n in sorted(kept):  # grown order: every parent was grown before its children
        index[n] = out.add(index[tree.parents[n]], tree.tokens[n], tree.draft_probs[n])
    return out, np.concatenate([[0.0], scores[sorted(kept)]])
