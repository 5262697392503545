"""Tree verification: verify several candidate continuations in ONE target pass.

On a CPU the first extra row of a pass is expensive (OpenBLAS's gemm for 2 rows costs ~2x its gemv)
but the next ones are nearly free (16 rows cost little more than 2). A chain of K guesses pays for
a batch and uses little of it; a tree fills the batch with alternatives.

A tree: node 0 is the root (the last emitted token, not yet in the cache); node i > 0 holds
``tokens[i]``, a child of ``parents[i]``, drawn from ``draft_probs[i]`` (a [V] row). One target pass
runs all nodes: node i sits at position ``cache.length + depth[i]`` and attends to the cache and to
its ancestors only (``tree_mask``). Then ``accept_tree`` walks down from the root.

The rule (multi-candidate speculative sampling: SpecInfer, Miao et al. 2023, arXiv 2305.09781; in
the without-replacement form of Recursive Speculative Decoding, Jeon et al. 2024, arXiv 2402.14160):
at a node with target distribution p and children x_1..x_m, where x_j was drawn from q_j (its
``draft_probs`` row, e.g. the draft's q without x_1..x_{j-1}, or one-hot for a deterministic
candidate):
    accept x_j with probability min(1, p(x_j) / q_j(x_j)) and descend into it;
    else p <- norm(max(0, p - q_j)) and try x_{j+1};
    when every child is rejected, emit a token sampled from the current p and stop;
    at a leaf, emit a bonus token sampled from the leaf's p.
Each step is the one-candidate rule of ``rejection.py`` with target p and proposal q_j, applied
given everything drawn before, so the emitted tokens are distributed exactly as the target's.
Greedy decoding is the one-hot case: descend into the child equal to the target's argmax.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import rejection
from .adaptive import Acceptance, PerContext, ProbeBudget, calibrate_verify, drafter_costs, probe_cost, run_length
from .sampling import sample


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


def verify_tree(target, cache, root_token: int, tree: Tree, fresh=()) -> np.ndarray:
    """One target pass over the root and every node -> logits [N+1, V]. ``fresh``: prompt tokens not yet
    cached, run first in the same pass (causal among themselves, seen by every node)."""
    F, L = len(fresh), cache.length
    ids = np.array(list(fresh) + [root_token] + tree.tokens[1:], dtype=np.int64)
    positions = np.concatenate([L + np.arange(F), L + F + tree.depths()])
    causal = np.where(np.arange(L + F + len(tree) + 1)[None, :] <= (L + np.arange(F))[:, None], 0.0, -np.inf)  # [F, S]
    mask = np.concatenate([causal.astype(np.float32), tree_mask(tree.parents, L + F)])  # [F + N+1, S]
    return target.forward_masked(target.check_tokens(ids), cache, positions, mask, last=len(tree) + 1)


def accept_tree(target_probs: np.ndarray, tree: Tree, rng: np.random.Generator) -> tuple[list[int], int]:
    """Walk the tree with the multi-candidate rule -> (accepted nodes, root to deepest, next token)."""
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


def without(probs: np.ndarray, tokens) -> np.ndarray | None:
    """probs with ``tokens`` removed, renormalised; None when nothing is left."""
    q = probs.copy()
    q[list(tokens)] = 0.0
    s = q.sum()
    return q / s if s > 1e-12 else None


def one_hot(token: int, V: int) -> np.ndarray:
    q = np.zeros(V)
    q[token] = 1.0
    return q


def add_children(tree: Tree, parent: int, logits: np.ndarray, width: int, warp, rng) -> list[int]:
    """``width`` children of ``parent``: sampled without replacement from q = warp(logits), each with the
    q it was drawn from; at temperature 0 (one-hot q) the top ``width`` logits instead, each one-hot."""
    q = warp(logits)
    if width > 1 and np.count_nonzero(q) == 1:  # greedy: deterministic candidates
        return [tree.add(parent, int(t), one_hot(int(t), len(q))) for t in np.argsort(-logits, kind="stable")[:width]]
    nodes = []
    while len(nodes) < width and q is not None:
        x = sample(q, rng)
        nodes.append(tree.add(parent, x, q))
        q = without(q, [x])
    return nodes


def draft_model_tree(drafter, tokens: list[int], width: int, depth: int, warp, rng) -> Tree:
    """``width`` first tokens, each followed by a chain of ``depth - 1`` draft samples. The draft runs
    one masked pass per level over the whole level; its tree entries are scratch (rolled back)."""
    tree = Tree()
    drafter.ensure_cache(len(tokens) + width * depth)
    level = add_children(tree, 0, drafter.feed(tokens), width, warp, rng)
    base = drafter.cache.length  # the draft cache holds every committed token, the root last (slot base-1)
    for _ in range(depth - 1):
        ids = np.array([tree.tokens[n] for n in level], dtype=np.int64)
        mask = tree_mask(tree.parents, base - 1)[level[0]: level[-1] + 1, : base + level[-1]]  # node n: slot base-1+n
        positions = base - 1 + tree.depths()[level]
        drafter.forwards += 1
        logits = drafter.pad(drafter.model.forward_masked(ids, drafter.cache, positions, mask))  # [len(level), V]
        level = [add_children(tree, n, logits[i], 1, warp, rng)[0] for i, n in enumerate(level)]
    drafter.cache.rollback(base)
    return tree


def prompt_lookup_tree(pl, tokens: list[int], width: int, depth: int) -> Tree:
    """Up to ``width`` continuations of distinct earlier matches of the last n-gram, merged into a trie;
    deterministic candidates, so every node's q is one-hot."""
    tree = Tree()
    for cont in pl.continuations(tokens, depth, width):
        node = 0
        for t in cont:
            child = next((c for c in tree.children(node) if tree.tokens[c] == t), None)
            node = child if child is not None else tree.add(node, t, one_hot(t, pl.vocab))
    return tree


def propose_tree(drafter, tokens, width: int, depth: int, warp, rng) -> Tree:
    if width == 0 or depth == 0:
        return Tree()
    if hasattr(drafter, "continuations"):
        return prompt_lookup_tree(drafter, tokens, width, depth)
    return draft_model_tree(drafter, tokens, width, depth, warp, rng)


class TreeShape:
    """Choose (width, depth) per round from the cost model, as AutoK chooses K (see adaptive.py).

    Expected tokens of a ``width`` x ``depth`` tree with first-guess acceptance a and later-guess
    acceptance b (adaptive.Acceptance; the first level tried ``width`` times, independently):
    E = 1 + (1 - (1 - a)^width) (1 - b^depth) / (1 - b).
    Time: depth draft passes over ``width`` rows plus one target pass over width * depth + 1 nodes.
    When no tree pays, (0, 0): a plain round, which may probe the drafter's first guess (adaptive.py).
    A fixed shape is ``TreeShape.fixed(width, depth)``.
    """

    def __init__(self, verify_time: dict, draft_time: dict, max_nodes: int = 16, auto: bool = True,
                 shape: tuple = (2, 4), learn: bool = True, feed_time: float = 0.0, probe_share: float = 0.01):
        self.verify_time, self.draft_time, self.max_nodes, self.auto, self.shape = verify_time, draft_time, max_nodes, auto, shape
        self.feed_time, self.acc, self.budget = feed_time, PerContext(Acceptance()), ProbeBudget(probe_share)
        self.learn, self.history, self.context, self.unseen = learn, [], 0, 1

    @classmethod
    def fixed(cls, width: int, depth: int) -> "TreeShape":
        return cls({}, {}, auto=False, shape=(width, depth))

    def expected(self, w: int, d: int) -> float:
        e = self.acc[self.context]
        if w == 0 or d == 0:
            return 1.0
        return 1.0 + (1 - (1 - e.first) ** w) * run_length(e.next, d)

    def cost(self, w: int, d: int) -> float:
        if w == 0 or d == 0:
            return self.verify_time[1]
        return d * self.draft_time.get(w, self.draft_time.get(1, 0.0) * w) + self.verify_time[w * d + 1]

    def next_shape(self, unseen: int = 1, context: int = 0) -> tuple[int, int]:
        """``unseen``, ``context``: as for AutoK.next_k."""
        self.context = context
        if not self.auto:
            return self.shape
        shapes = [(0, 0)] + [(w, d) for w in range(1, 5) for d in range(1, 9) if w * d <= self.max_nodes]
        self.unseen = unseen
        best = max(shapes, key=lambda s: self.expected(*s) / self.cost(*s))
        self.history.append(best)
        return best

    def probe(self) -> bool:
        """As AutoK.probe: a plain round drafts one unverified guess when the budget pays for it."""
        return self.auto and self.budget.afford(probe_cost(self.unseen, self.feed_time, self.draft_time.get(1, 0.0)))

    def observe(self, depth: int, accepted: int, t_draft: float, t_verify: float | None, n_nodes: int,
                probed: tuple[float, bool] | None = None) -> None:
        if t_verify is not None and self.learn and n_nodes + 1 in self.verify_time:
            self.verify_time[n_nodes + 1] = 0.8 * self.verify_time[n_nodes + 1] + 0.2 * t_verify
        if depth:
            self.acc[self.context].update(depth, accepted)
        elif self.auto:
            self.budget.earn(self.verify_time[1])
            if probed is not None:
                self.acc[self.context].update_probe(*probed)


def auto_tree_shape(target, drafter, max_nodes: int = 16) -> TreeShape:
    verify = calibrate_verify(target, max_nodes + 1)
    model = getattr(drafter, "model", None)
    draft = calibrate_verify(model, 4) if model is not None else {w: 0.0 for w in range(1, 5)}
    return TreeShape(verify, draft, max_nodes, feed_time=drafter_costs(drafter)[1])


def tree_speculative_generate(target, drafter, prompt_ids, max_new_tokens: int, *, shape=(2, 4),
                              temperature: float = 0.0, top_k=None, top_p=None, seed=None, stop_ids=None,
                              on_token=None):
    """Like ``speculative_generate`` but each round verifies a token tree in one target pass.
    ``shape``: (width, depth), "auto" (chosen per round by the cost model), or a TreeShape."""
    import time

    from .drafters import as_drafter
    from .speculative import SpecResult, draft_probe, emit, measure_probe, start_run

    run = start_run(target, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, stop_ids,
                    cache_room=4 * 16 + 1)  # room for a full tree past the end
    drafter = as_drafter(drafter, target)
    policy = (auto_tree_shape(target, drafter) if shape == "auto" else
              shape if isinstance(shape, TreeShape) else TreeShape.fixed(*shape))
    tokens, cache, stats = run.tokens, run.cache, run.stats
    forwards0 = getattr(drafter, "forwards", 0)
    while not run.done:
        width, depth = policy.next_shape(len(tokens) - run.seen, drafter.context(tokens))
        depth = min(depth, max_new_tokens - len(run.out) - 1)
        t0 = time.perf_counter()
        tree = propose_tree(drafter, tokens, width, depth, run.warp, run.rng)
        run.seen = len(tokens) if len(tree) else run.seen
        draft_probe(policy, drafter, run, len(tree))
        t1 = time.perf_counter()
        logits = verify_tree(target, cache, tokens[-1], tree, run.fresh)  # [N+1, V]
        t2 = time.perf_counter()
        target_probs = run.warp(logits)  # [N+1, V]
        path, next_token = accept_tree(target_probs, tree, run.rng)
        cache.keep(len(tokens) - 1, [0] + path)  # the root and the accepted nodes, compacted; siblings dropped
        probed = measure_probe(run, target_probs[0], next_token)
        t3 = time.perf_counter()
        emitted = emit([tree.tokens[n] for n in path] + [next_token], tokens, run.out, run.stop, max_new_tokens, on_token)
        tree_depth = int(tree.depths().max()) if len(tree) else 0
        stats.record(tree_depth, len(path), emitted)
        stats.add_times(t0, t1, t2, t3, prefill=bool(run.fresh))
        policy.observe(tree_depth, len(path), t1 - t0, None if run.fresh else t3 - t1, len(tree), probed)
        run.fresh = []
    stats.draft_forwards = getattr(drafter, "forwards", 0) - forwards0
    return SpecResult(run.out, stats)
