"""The tree policy (``tree="auto"``): each round, the tree shape width x depth that maximises expected tokens per
second.

The chain policy's cost model (auto_k.py) for a tree of ``width`` first guesses, each followed by a
chain of ``depth - 1`` guesses, with first-guess acceptance a and later-guess acceptance b
(acceptance.py), the first level tried ``width`` times, independently:

    E = 1 + (1 - (1 - a)^width) (1 - b^depth) / (1 - b)
    T = level(1) + (depth - 1) level(width) + t_verify(width * depth + 1)

level(w): one tree level of w nodes (costs.py: ``level_calibration``). The first level's ``width`` guesses are drawn
from one row, the drafter's catch-up's (EAGLE's ``first_logits``, which the label has paid where it is read; a draft
model's ``feed``): one level of one node, as a chain's first guess; each level below runs ``width`` nodes.

a stays a guess's rate: a round's first level, of ``width`` guesses, tells it through ``Acceptance.update_tree``.

A drafter whose levels have no timing of their own (neither ``TimesItsTreeLevels`` nor a model) pays ``width``
of its guesses (``drafter_costs``) per level of ``width`` nodes: zero only for a drafter without any cost hook.

When no tree pays, (0, 0): a plain round, which may probe the drafter's first guess (auto_k.py). As for chains, a
tree is chosen only when it expects to beat plain decoding by MARGIN, a plain round pays the label of a drafter
whose label is its first guess's work (the EAGLE head's: one level of one node), a probe after such a label costs
nothing more, and a drafter that no tree could make pay even if every guess were kept is never probed.
"""

from __future__ import annotations

import numpy as np

from .acceptance import Acceptance, PerContext, run_length
from .auto_k import MARGIN, RECENT, ProbeBudget, best, check_costs, claims_of, low_quantile, probe_cost
from .costs import drafter_calibration, drafter_costs, level_calibration, verify_calibration


def learn_pass(passes: dict, verify_time: dict, n: int, seconds: float) -> None:
    """A learning policy's t(n): a low quantile of its last RECENT passes over n tokens (``passes``: n -> seconds)."""
    seen = passes[n] = (passes.get(n, []) + [seconds])[-RECENT:]
    verify_time[n] = low_quantile(seen, verify_time[n])


class TreePolicy:
    """Choose (width, depth) per round from the cost model (module docstring), as AutoK chooses K.
    A fixed shape is ``TreePolicy.fixed(width, depth)``; ``max_nodes`` bounds width * depth."""

    def __init__(self, verify_time: dict, level_time: dict, max_nodes: int = 16, auto: bool = True,
                 shape: tuple = (2, 4), learn: bool = True, feed_time: float = 0.0, probe_share: float = 0.01,
                 claims=None):
        """Costs in seconds: ``verify_time`` {n: one target pass over n tokens}, ``level_time`` {w: one tree level of
        w nodes}, ``feed_time`` per token the drafter must catch up on; ``claims``: as AutoK's."""
        self.verify_time, self.level_time = dict(verify_time), level_time  # a copy: learning rewrites t(n)
        self.max_nodes, self.auto, self.shape = max_nodes, auto, shape
        if auto:  # every shape it may choose is priced: refused here, not at the first round
            check_costs(verify_time, sorted({w * d + 1 for w, d in self.shapes()}), f"at most max_nodes = {max_nodes} nodes")
        self.feed_time, self.acc, self.budget = feed_time, PerContext(Acceptance(), claims), ProbeBudget(probe_share)
        self.label_time = level_time.get(1, 0.0) if claims is not None and auto else 0.0  # as AutoK's (bug: plain
        # rounds were priced without the label they pay)
        self.learn, self.history, self.context, self.unseen = learn, [], 0, 1
        self.reads_context = auto  # a fixed shape never reads the drafter's label (protocol.py)
        self.calibrations: list = []  # the Calibration records its costs came from (auto_tree_policy), if any
        self.slowdown = 1.0  # it does not learn how much slower its rounds ran than predicted (AutoK does)
        self.passes: dict = {}  # n -> seconds of its last RECENT passes over n tokens (learning only)
        self.width = shape[0]  # the width of the round being played (``observe`` learns a per guess from it)

    @classmethod
    def fixed(cls, width: int, depth: int) -> "TreePolicy":
        """Always (width, depth); (0, d) or (w, 0) is plain decoding."""
        for name, x in (("width", width), ("depth", depth)):
            if not (isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0):
                raise ValueError(f"tree {name} must be a non-negative integer, got {x!r}")
        return cls({}, {}, auto=False, shape=(int(width), int(depth)))

    def expected(self, w: int, d: int) -> float:
        e = self.acc[self.context]
        if w == 0 or d == 0:
            return 1.0
        return 1.0 + (1 - (1 - e.first) ** w) * run_length(e.next, d)

    def level(self, w: int) -> float:
        """Seconds of one tree level of w nodes (w guesses' where it has no timing of its own)."""
        return self.level_time.get(w, self.level_time.get(1, 0.0) * w)

    def cost(self, w: int, d: int) -> float:
        """Seconds of a round of this shape (module docstring), a plain round's label included."""
        if w == 0 or d == 0:
            return self.verify_time[1] + self.label_time
        return self.level(1) + (d - 1) * self.level(w) + self.verify_time[w * d + 1]  # level 1 from one row (bug:
        # d levels of w nodes, so a tree paid level(w) - level(1) a round more than the passes it makes)

    def shapes(self) -> list[tuple[int, int]]:
        """Every shape the policy may choose, (0, 0) (a plain round) first."""
        return [(0, 0)] + [(w, d) for w in range(1, 5) for d in range(1, 9) if w * d <= self.max_nodes]

    def rate(self, shape: tuple[int, int]) -> float:
        """Expected tokens per second of a round of this shape."""
        return self.expected(*shape) / self.cost(*shape)

    def best_drafting(self) -> tuple[tuple[int, int], float]:
        """(shape, its expected tokens per second) of the best tree under the current estimates."""
        return best(self.shapes()[1:], self.rate)

    def next_shape(self, unseen: int = 1, context: int = 0) -> tuple[int, int]:
        """``unseen``, ``context``: as for AutoK.next_k."""
        self.context = context
        if not self.auto:
            return self.shape
        self.unseen = unseen
        shape, rate = self.best_drafting()
        shape = shape if rate > (1 + MARGIN) * self.rate((0, 0)) else (0, 0)  # as AutoK.choose (bug: no margin)
        self.history.append(shape)
        self.width = shape[0]
        return shape

    @property
    def max_room(self) -> int:
        """The most nodes a tree of this policy can hold."""
        return self.max_nodes if self.auto else self.shape[0] * self.shape[1]

    def hopeless(self) -> bool:
        """As AutoK.hopeless: no tree could beat plain decoding even if every guess were kept (bug: such a drafter was
        probed all the same)."""
        return max((d + 1) / self.cost(w, d) for w, d in self.shapes()[1:]) <= 1.0 / self.cost(0, 0)

    def probe(self) -> bool:
        """As AutoK.probe: a plain round drafts one unverified guess when the budget pays for it (nothing after a
        label: ``AutoK.probe_cost``)."""
        cost = 0.0 if self.label_time else probe_cost(self.unseen, self.feed_time, self.level_time.get(1, 0.0))
        return self.auto and not self.hopeless() and self.budget.afford(cost)

    def observe(self, depth: int, accepted: int, t_draft: float, t_verify: float | None,
                probed: tuple[float, bool] | None = None, nodes: int = 0, width: int = 0) -> None:
        """As AutoK.observe; ``nodes``: the tree's size (its pass verified nodes + 1 tokens); ``width``: its first
        level's nodes (fewer than the shape's where continuations share their first token; 0: the shape's)."""
        if t_verify is not None and self.learn and nodes + 1 in self.verify_time:  # a low quantile of its recent passes
            learn_pass(self.passes, self.verify_time, nodes + 1, t_verify)
        if depth:
            self.acc[self.context].update_tree(width or self.width, depth, accepted)
        elif self.auto:
            self.budget.earn(self.cost(0, 0))  # the plain round as priced, label included
            if probed is not None:
                if self.learn:  # as AutoK: a probe is paid what it cost beyond the round's predicted drafting
                    predicted = probe_cost(self.unseen, self.feed_time, self.label_time or self.level_time.get(1, 0.0))
                    self.budget.saved -= max(0.0, t_draft - predicted)
                self.acc[self.context].update_probe(*probed)


MAX_NODES = 16  # the most nodes of an automatic tree


def tree_verify_ns(target, max_nodes: int = MAX_NODES) -> range:
    """The n of the target's t(n) that ``auto_tree_policy`` (and ``auto_dynamic_tree``) calibrates: 1..max_nodes + 1,
    below the target's context."""
    return range(1, max(1, min(max_nodes, target.cfg.max_position_embeddings - 1)) + 2)


def auto_tree_policy(target, drafter, max_nodes: int = MAX_NODES, learn: bool = True) -> TreePolicy:
    """A TreePolicy calibrated for this target and drafter; ``learn=False`` keeps the calibrated costs (a
    seeded run). A tree stays below the target's context."""
    ns = tree_verify_ns(target, max_nodes)
    max_nodes, verify = ns[-1] - 1, verify_calibration(target, ns)
    levels = level_calibration(drafter)  # None: no timing of its own levels
    guess, fed = drafter_costs(drafter)  # zeros for a drafter without any cost hook (prompt lookup)
    level_time = ({int(w): float(t) for w, t in levels.times.items()} if levels
                  else {w: w * guess for w in range(1, 5)})  # else a level of w nodes costs w guesses
    policy = TreePolicy(dict(verify.times), level_time, max_nodes, feed_time=fed, learn=learn, claims=claims_of(drafter))
    policy.calibrations = [verify, levels, drafter_calibration(drafter)]
    return policy
