"""Tree verification: verify several candidate continuations in ONE target pass.

Why: a pass over n tokens costs t_verify(n) = t_verify(1) r(n), and where r(n) rises steeply for
the first extra rows and slowly after (a CPU: model/blas.py), a chain of K guesses pays for a batch
and uses little of it; a tree fills the batch with alternatives, so one wrong first guess no longer
ends the round.

A tree: node 0 is the root (the last emitted token, not yet in the cache); node i > 0 holds
``tokens[i]``, a child of ``parents[i]``, drawn from ``draft_probs[i]`` (a [V] row). One target pass
runs all nodes: node i sits at position ``cache.length + depth[i]`` and attends to the cache and to
its ancestors only (``tree_mask``); ``verify_tree`` runs that pass on the target. Then ``accept_tree``, a pure
function of the pass's rows, the tree and a generator, walks down from the root.

The rule (multi-candidate speculative sampling: SpecInfer, Miao et al. 2023, arXiv 2305.09781; in
the without-replacement form of Recursive Speculative Decoding, Jeon et al. 2024, arXiv 2402.14160):
at a node with target distribution p and children x_1..x_m, where x_j was drawn from q_j (its
``draft_probs`` row, e.g. the draft's q without x_1..x_{j-1}, or one-hot for a deterministic
candidate):
    accept x_j with probability min(1, p(x_j) / q_j(x_j)) and descend into it;
    else p <- norm(max(0, p - q_j)) and try x_{j+1};
    when every child is rejected, emit the correction, sampled from the current p, and stop;
    at a leaf, emit a bonus token sampled from the leaf's p.
Each step is the one-candidate rule of ``rejection.py`` with target p and proposal q_j, applied
given everything drawn before, so the emitted tokens are distributed exactly as the target's.
Greedy decoding is the one-hot case: descend into the child equal to the target's argmax.

The coupled rule (``accept_tree_coupled``, Daliri et al. 2024; rejection.coupled_verify for chains): descend
while the target's own keyed token at the node's position (keyed.py) is one of its children. With children
drawn as the Gumbel top-W of the draft's q on the same noise (``add_children``), the tree holds W chances at it.

The loop is ``speculative.tree_speculative_generate``; the shape per round, ``policy/tree_policy.py`` (EAGLE-2's
dynamic tree: ``policy/dynamic_tree_policy.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import rejection
from .keyed import Keyed
from .model.transformer import causal_mask
from .sampling import one_hot_rows, sample


@dataclass
class Tree:
    tokens: list = field(default_factory=lambda: [-1])  # node 0 is the root
    parents: list = field(default_factory=lambda: [-1])
    draft_probs: list = field(default_factory=lambda: [None])  # [V] row each node was drawn from

    def add(self, parent: int, token: int, probs: np.ndarray) -> int:
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.draft_probs.append(probs)
        return len(self.tokens) - 1

    def __len__(self) -> int:  # draft nodes, root excluded
        return len(self.tokens) - 1

    def children(self, node: int) -> list[int]:
        return [i for i, p in enumerate(self.parents) if p == node]

    def depths(self) -> np.ndarray:
        d = np.zeros(len(self.tokens), dtype=np.int64)
        for i in range(1, len(self.tokens)):
            d[i] = d[self.parents[i]] + 1
        return d

    def path(self, node: int) -> list[int]:
        """Nodes from the root's child down to ``node``."""
        out = []
        while node > 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def prefix(self, tokens, node: int) -> list[int]:
        """The tokens before node ``node``'s children: ``tokens`` (the sequence, the root last) and the path to it."""
        return list(tokens) + [self.tokens[n] for n in self.path(node)]


def tree_mask(parents: list[int], prefix: int) -> np.ndarray:  # -> [N+1, prefix + N+1] additive mask
    n = len(parents)
    visible = np.zeros((n, prefix + n), dtype=bool)
    visible[:, :prefix] = True  # every node sees the committed context
    for i in range(n):
        j = i
        while j >= 0:  # itself and its ancestors
            visible[i, prefix + j] = True
            j = parents[j]
    return np.where(visible, 0.0, -np.inf).astype(np.float32)


def tree_mask_rows(tree: Tree, level: list[int], prefix: int) -> np.ndarray:  # -> [len(level), prefix + last+1]
    """The rows of ``tree_mask`` for the contiguous node ids ``level``, cut after the last of them: the mask
    of a drafter's pass over one level of its own tree, node n sitting in slot prefix + n."""
    return tree_mask(tree.parents, prefix)[level[0]: level[-1] + 1, : prefix + level[-1] + 1]


def verify_tree(target, cache, head: list[int], tree: Tree, on_features=None):
    """One target pass over ``head`` (the tokens not yet cached: the prompt in round 1, then the root, the last
    emitted token) and every node -> logits [N+1, V] of the root and the nodes. The uncached prompt tokens are
    causal among themselves and seen by every node. ``on_features``: as for ``Model.forward``."""
    *fresh, root = head
    F, L = len(fresh), cache.length
    ids = np.array(list(fresh) + [root] + tree.tokens[1:], dtype=np.int64)
    positions = np.concatenate([L + np.arange(F), L + F + tree.depths()])
    causal = np.pad(causal_mask(L, F), ((0, 0), (0, len(tree) + 1)), constant_values=-np.inf)  # [F, S]
    mask = np.concatenate([causal, tree_mask(tree.parents, L + F)])  # [F + N+1, S]
    return target.forward_masked(target.check_tokens(ids), cache, positions, mask, last=len(tree) + 1,
                                 on_features=on_features)


def kept_rows(head: int, path: list[int]) -> np.ndarray:  # -> [head + len(path)] row indices
    """The rows of ``verify_tree``'s pass whose tokens stay in the cache: the ``head`` tokens (uncached prompt
    and root) and the accepted nodes (node i is row head - 1 + i)."""
    return np.array(list(range(head)) + [head - 1 + node for node in path], dtype=np.int64)


def accept_tree(target_probs: np.ndarray, tree: Tree, rng: np.random.Generator) -> tuple[list[int], int]:
    """Walk the tree with the multi-candidate rule -> (accepted nodes, root to deepest, next_token)."""
    node, accepted = 0, []
    while True:
        p = target_probs[node]
        for c in tree.children(node):
            x, q = tree.tokens[c], tree.draft_probs[c]
            if rng.random() < rejection.acceptance_probability(p[x], q[x]):
                accepted.append(c)
                node = c
                break
            p = rejection.residual(p, q)
        else:
            return accepted, sample(p, rng)


@rejection.declares(joint=False, keyed=True)  # passed as a function too, the loop hands it keyed noise
def accept_tree_coupled(target_probs: np.ndarray, tree: Tree, noise: Keyed) -> tuple[list[int], int]:
    """The coupled rule on a tree (rejection.coupled_verify): walk down while the target's own keyed token at the
    node's position, race(p, depth), is one of its children -> (accepted nodes, root to deepest, next_token). The
    target's token where no child has it is the correction; at a leaf it is the bonus. The draft's rows are not read."""
    node, accepted = 0, []
    while True:
        y = noise.race(target_probs[node], len(accepted))  # y_t: the target's keyed sample at this depth
        child = next((c for c in tree.children(node) if tree.tokens[c] == y), None)
        if child is None:
            return accepted, y
        accepted.append(child)
        node = child


def tree_rule(rule):
    """"token" -> ``accept_tree``, "coupled" -> ``accept_tree_coupled`` (a tree's rules, by the names of rejection.RULES);
    a function of their signature passes through (the checks pass a deliberately broken twin)."""
    rules = {"token": accept_tree, "coupled": accept_tree_coupled}
    if callable(rule):
        return rule
    if isinstance(rule, str) and rule in rules:
        return rules[rule]
    raise ValueError(f"a tree's rule must be 'token' or 'coupled', got {rule!r} (block verification decides one chain)")


def without(probs: np.ndarray, tokens) -> np.ndarray | None:
    """probs with ``tokens`` removed, renormalised; None when nothing is left."""
    q = probs.copy()
    q[list(tokens)] = 0.0
    s = q.sum()
    return q / s if s > 1e-12 else None


def top_indices(z: np.ndarray, width: int) -> np.ndarray:  # [V] -> [min(width, V)]
    """The indices of the ``width`` (>= 1) largest entries of ``z`` (no NaN), largest first, ties to the lower index:
    exactly ``np.argsort(-z, kind="stable")[:width]``, without sorting the vocabulary. A partition finds the width-th
    largest value among the entries above -inf, and only those at or above it are sorted. (The -inf entries are set
    apart first: an EAGLE head's row is -inf outside its frequent tokens, and a partition slows tenfold on that many
    ties.)"""
    above = np.flatnonzero(z > -np.inf)  # ascending
    za = z[above]
    if len(above) > width:
        kth = np.partition(za, len(above) - width)[len(above) - width]  # the width-th largest value
        above, za = above[za >= kth], za[za >= kth]  # every tie of it, in index order
    top = above[np.argsort(-za, kind="stable")][:width]
    if len(top) < width:  # fewer entries above -inf than asked for: then the first -inf ones, in index order
        top = np.concatenate([top, np.flatnonzero(z == -np.inf)[: width - len(top)]])
    return top


def add_children(tree: Tree, parent: int, logits: np.ndarray, width: int, warp, draws, i: int = 0,
                 prefix=None) -> list[int]:
    """``width`` children of ``parent``, whose tokens sit at the round's i-th new position (i: the parent's depth):
    drawn without replacement from q = warp(logits, prefix) with ``draws`` (sampling.Draws), each from q without the
    siblings before it, the row it is kept with (with keyed noise these draws are the Gumbel top-W of the race at
    that position: keyed.py); at temperature 0 (one-hot q) the top ``width`` processed logits instead, each one-hot.
    ``prefix``: the tokens before the children (``tree.prefix(tokens, parent)``), for a warp with logits processors."""
    q = warp(logits, prefix)
    if width > 1 and np.count_nonzero(q) == 1:  # greedy: deterministic candidates
        z = warp.process(logits, prefix)  # [V]: the logits after the processors
        top = [int(t) for t in top_indices(z, width) if np.isfinite(z[t])]
        return [tree.add(parent, t, row) for t, row in zip(top, one_hot_rows(top, len(q)))]
    nodes = []
    while len(nodes) < width and q is not None:  # None: what is left has mass below without's floor
        x = draws.draw(q, i)
        nodes.append(tree.add(parent, x, q))
        q = without(q, [x])
    return nodes


def propose_tree(drafter, tokens, width: int, depth: int, warp, draws) -> Tree:
    """The drafter's tree of at most ``width`` x ``depth`` nodes (each drafter builds its own: ``propose_tree``)."""
    if width == 0 or depth == 0:
        return Tree()
    return drafter.propose_tree(tokens, width, depth, warp, draws)
