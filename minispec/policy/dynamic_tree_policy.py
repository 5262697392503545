"""EAGLE-2's dynamic tree as a policy: ``DynamicTreePolicy`` grows one shape every round, ``AutoDynamicTree``
(``tree="auto"`` for a drafter that grows trees) sizes it each round by the cost model, from the target's t(n)
(``tree_policy.tree_verify_ns``) and the drafter's timed levels. The tree itself, and how it grows, is the
drafter's (drafters/dynamic_tree.py)."""

from __future__ import annotations

import numpy as np

from ..drafters.dynamic_tree import DynamicTree
from .auto_k import MARGIN, RECENT, check_costs, low_quantile
from .costs import level_calibration, verify_calibration
from .tree_policy import learn_pass, tree_verify_ns


class DynamicTreePolicy:
    """EAGLE-2's dynamic tree (drafters/dynamic_tree.py) of one shape every round: its growth is the drafter's."""

    reads_context = False  # the loop need not ask the drafter for its label (protocol.py); nor does AutoDynamicTree

    def __init__(self, shape):
        self.shape, self.max_room, self.calibrations, self.slowdown = shape, shape.nodes, [], 1.0

    def next_shape(self, unseen: int = 1, context: int = 0):
        return self.shape

    def probe(self) -> bool:
        return False

    def observe(self, depth: int, accepted: int, t_draft: float, t_verify: float | None, probed=None,
                nodes: int = 0, width: int = 0) -> None:
        pass


REGROW_SHARE = 0.03  # a growth that looks again after growing did not pay costs at most this share of the plain time
MAX_WAIT = 64  # ... unless that takes more plain rounds than this
WORTH_WEIGHT = 0.2  # the newest growth's weight in what growths are expected to be worth (AutoDynamicTree.worth)
LOOK_EVERY = 8  # growths below the shape's depth between two that grow it in full, to look deeper (AutoDynamicTree)
SAMPLED_SIZES = ((2, 4), (2, 6), (3, 8), (4, 16))  # (top_k, nodes): the budgets a sampled tree may be grown within
# (AutoDynamicTree at T > 0): the small trees timed in docs/eagle/scaling.md ("Small trees, timed") and the default


def grown_size(top_k: int, nodes: int, depth: int) -> tuple[int, int]:
    """(top_k, nodes) as the tree a budget grows within ``depth`` levels: top_k no more than nodes, nodes no more
    than its levels can hold (top_k, then top_k frontier nodes of top_k children each), so that two budgets that grow
    the same tree are one size."""
    top_k = min(top_k, nodes)
    return top_k, min(nodes, top_k + (depth - 1) * top_k * top_k)


def sampled_levels(top_k: int, nodes: int, depth: int) -> int:
    """The levels a tree grown within ``nodes`` reaches (at most ``depth``), as ``dynamic_tree.budgeted`` spends the
    budget: the root's top_k children, then at each level as many frontier nodes (at most top_k) as can have top_k
    children, or one with what is left."""
    level = total = min(top_k, nodes)
    levels = 1
    while levels < depth and total < nodes:
        left = nodes - total
        level = left if left < top_k else min(level, top_k, left // top_k) * top_k
        total, levels = total + level, levels + 1
    return levels


class AutoDynamicTree(DynamicTreePolicy):
    """EAGLE-2's dynamic tree, sized each round by the cost model (``tree="auto"`` for a drafter that grows trees).

    Where the root's row is one-hot (T = 0) the drafter grows every node of the tree (to the depth chosen below), and
    ``choose`` keeps the N nodes of highest value v_i (the product of the drafter's probabilities on the path: its own
    estimate that node i is accepted, EAGLE-2's premise) that maximise the tokens per second of the round's
    verification,

        E(N) / t(N + 1),   E(N) = 1 + trust * (v_1 + ... + v_N)   (the expected tokens, ``expected_tokens``)

    with t(n) the target's pass over n tokens; N = 0 (a plain step, 1 / t(1)) when none beats it. The growth is paid
    by then, so it is left out of that choice. ``trust`` is the ratio of tokens accepted to tokens the values of the
    nodes verified promised (fewer than N where the room left near the end of the context cut the tree), learned over
    rounds (it starts at 1).

    Whether to grow at all is decided before growing (``plan``, after each grown round), from the growths so far: the
    next tree is expected to be worth what they were, the sum of their best N values a running mean (``worth``,
    WORTH_WEIGHT on the newest: one growth of little worth among good ones does not stop the trees), and growing pays
    when, its time t_grow included,

        max_N E(N) / (t_grow + t(N + 1))  >  (1 + MARGIN) / t(1).

    Departing from EAGLE-2, which grows a fixed depth, the depth is chosen too: for each depth d, the nodes no deeper
    than d give E_d(N) (each growth adds to the running mean of every d up to its own), and the next growth grows the d
    that maximises

        max_N E_d(N) / (g(d) + t(N + 1)),   g(d) = t_grow P(d) / P(shape.depth)     (``growth_time``)

    with P(d) (``growth_passes``) the head's calibrated passes for d levels, one row and d - 1 levels of top_k nodes
    (as ``TreePolicy.cost`` prices a tree; d itself where the calibration has no levels): a growth's time taken as
    proportional to the passes it makes (its catch-up and picking are not, so once t_grow is learned, shallow growths
    are taken for somewhat cheaper than they are),

    the rate ``plan`` then tests. A growth at a depth below the shape's sees no deeper node (the deeper d keep their
    running mean from the looks), so after ``LOOK_EVERY`` growths below it the next grows the full depth, to look. On
    a CPU, where each level of the head and each verified node cost a share of a target step, shallow trees are what
    pay (docs/eagle/scaling.md, "Small trees, timed"); where verification is near free the full depth keeps winning.

    Otherwise (T > 0) the tree is grown within a budget (dynamic_tree.py), with no ``choose`` (a drawn node cannot be
    dropped by its value), so the budget is chosen before growing, among ``SAMPLED_SIZES`` (top_k and nodes, cut to
    the shape's): for each size the tokens its grown rounds emitted (a running mean, weight 0.2 on the newest, like
    WORTH_WEIGHT but its own) stand for E, and the next growth takes the size of the highest

        E_s / (g(L_s) + t(n_s + 1))     (L_s: the levels the budget reaches, ``sampled_levels``; n_s: the nodes its
                                        last growth verified)

    after each size has been grown once (smallest first; the first growth is sampled too where the policy is told the
    run draws its tokens, ``sampled``, else it is asked at the shape's own size), and every LOOK_EVERY-th sampled
    growth takes the size grown longest ago, to look again; the same test then decides whether to grow at all, with
    the best rate. A departure from EAGLE-2, which grows one size: on a CPU a pass over 17 tokens costs 2.5 one-token
    passes, and at T = 1 the small trees pay where the default does not (docs/eagle/scaling.md, "Small trees,
    timed"). Its growths keep the depth the last one-hot root chose (all of them, where none was one-hot: the
    shape's). Approximations: every size's levels are priced as levels of top_k nodes (a small size's are narrower,
    so it is taken for somewhat dearer than it is), and a learned t_grow comes from the growths of every size alike.
    A growth asked for within a size whose root row turns out one-hot (a top-k of 1, say) is grown in full and
    reranked, keeping at most the size's nodes.
    When growing does not pay, the next

        wait = min(max(backoff, ceil(t_grow / (REGROW_SHARE * t(1)))), MAX_WAIT)

    rounds are plain: ``backoff`` doubles each time (1, 2, 4, ... up to 32), and the second term makes the growth
    that looks again cost at most ``REGROW_SHARE`` of their time (a growth of one target step waits 34 rounds); then
    it grows once more, to look again.

    t_grow, the time of a growth of the shape's full depth, starts as the head's calibrated passes: one row (the pass
    that gives the root's children) and ``depth`` - 1 levels, as ``TreePolicy.cost`` prices a tree.
    In a run that follows its clock (``learn``) it becomes the growths it timed, each scaled to the full depth by the
    passes of the levels asked for, P(depth) / P(levels) (at T > 0 the levels its budget reaches; the
    lowest of them until there are 3, then a low quantile; the first growth is not counted: it catches the head up on
    the whole prompt):
    a growth also picks children over the vocabulary and catches the head
    up on the tokens since the last, which the calibration does not time. Such a run learns t(n) from its passes too,
    as ``TreePolicy`` does. A seeded run at T > 0 (``learn=False``) keeps the calibrated costs, so that its choices,
    and with them its draws, repeat; it keeps ``trust`` at 1 too."""

    def __init__(self, shape, verify_time: dict, frontier_time: float, learn: bool = True,
                 row_time: float | None = None, sampled: bool = False):
        """Costs in seconds: ``verify_time`` {n: one target pass over n tokens}, ``frontier_time`` the head's pass over
        a level's frontier of top_k nodes (one float: TreePolicy's ``level_time`` is a table {w: seconds}),
        ``row_time`` its pass over one row (default: ``frontier_time``). ``sampled``: the run draws its tokens
        (T > 0), so its first growth is sampled too and takes the smallest size (class docstring)."""
        super().__init__(shape)
        if not verify_time or not all(isinstance(n, (int, np.integer)) for n in verify_time):
            raise ValueError(f"verify_time needs t(n) for whole n = 1, 2, ...; got keys {sorted(map(repr, verify_time))}")
        self.max_room = min(shape.nodes, max(verify_time) - 1)  # the most nodes a tree of it verifies
        if self.max_room < 1:
            raise ValueError(f"verify_time needs t(2) at least, for a tree of one node; it has n = {sorted(verify_time)}")
        check_costs(verify_time, range(1, self.max_room + 2), f"a tree of at most {self.max_room} nodes")
        self.verify_time, self.frontier_time, self.learn = dict(verify_time), frontier_time, learn
        self.trust, self.promised, self.kept = 1.0, 0.0, 0.0  # promised, kept: decaying sums (weight 0.9 a round)
        self.wait, self.backoff, self.chosen = 0, 1, 0  # chosen: the nodes ``choose`` kept this round
        self.row_time = frontier_time if row_time is None else row_time
        self.t_grow = self.growth_passes(shape.depth)  # seconds of a growth (class docstring; bug: depth levels of
        # top_k nodes, where a growth makes one row's pass and depth - 1 levels)
        self.growths: list | None = None  # seconds of its last RECENT growths; None until the first was skipped
        self.passes: dict = {}  # n -> seconds of its last RECENT passes over n tokens (learning only)
        self.asked = self.chose = False  # this round: a tree was asked for; choose sized it
        own = grown_size(shape.top_k, self.max_room, shape.depth)
        self.sizes = sorted({grown_size(min(k, shape.top_k), min(n, self.max_room), shape.depth)
                             for k, n in SAMPLED_SIZES} | {own}, key=lambda s: (s[1], s[0]))  # T > 0, smallest first
        self.sampled = sampled  # the next growth is grown within ``size``: at first where the run draws its tokens, then
        # where the last growth was sampled (it had no ``choose``)
        self.size = self.sizes[0]  # (top_k, nodes) of the next sampled growth
        self.emitted: dict = {}  # size -> tokens its grown rounds emitted, a running mean (weight 0.2 on the newest)
        self.verified: dict = {}  # size -> the nodes its last growth verified
        self.looked: dict = {}  # size -> the sampled growth that last grew it (``sampled_growths`` then)
        self.sampled_growths = 0
        self.values = np.zeros(0)  # the last growth's values, best first (``choose``)
        self.depths = None  # and their depths, where the growth gave them
        self.worth: dict = {}  # d -> what growths of d levels were worth (``learn_worth``; class docstring)
        self.depth = shape.depth  # the levels the next growth grows (the class docstring's d)
        self.shallow = 0  # growths below the shape's depth since the last that grew it in full (LOOK_EVERY)
        self.grown = shape.depth  # the levels the last growth grew (whose values ``worth`` learns from)
        self.asked_depth = shape.depth  # the levels the last growth was asked for

    def next_shape(self, unseen: int = 1, context: int = 0):
        self.asked = self.chose = False
        if self.wait > 0:
            self.wait -= 1
            return (0, 0)  # a plain round
        self.asked = True
        depth = self.depth if self.shallow < LOOK_EVERY else self.shape.depth  # now and then, look deeper
        self.shallow = self.shallow + 1 if depth < self.shape.depth else 0
        self.asked_depth = depth  # what this growth's time is scaled by (``observe``)
        self.asked_size = self.size if self.sampled else grown_size(self.shape.top_k, self.max_room, self.shape.depth)
        top_k, nodes = self.asked_size
        return DynamicTree(top_k, depth, nodes, self.choose)

    def expected_tokens(self, values: np.ndarray) -> np.ndarray:  # [n] values, best first -> [N+1]: E(0), ..., E(N)
        return 1.0 + self.trust * np.concatenate([[0.0], np.cumsum(values[: self.max_room])])

    def choose(self, values: np.ndarray, depths: np.ndarray | None = None) -> int:
        """How many of the grown nodes (``values``, best first, and their ``depths``) to verify."""
        self.chose, E = True, self.expected_tokens(values)
        rates = [E[n] / self.verify_time[n + 1] for n in range(len(E))]  # the growth is paid already
        n = int(np.argmax(rates))  # 0, a plain pass (rates[0] = 1 / t(1)), unless some tree beats it
        self.chosen = n  # the tree may verify fewer (``observe``)
        self.values, self.depths = values, depths  # what the next growth is expected to be worth (``observe``)
        self.grown = int(depths.max()) if depths is not None and len(depths) else self.shape.depth
        return n

    def growth_passes(self, d: int) -> float:
        """P(d): the head's calibrated seconds for a growth of d levels, one row and d - 1 levels (class docstring)."""
        return self.row_time + (d - 1) * self.frontier_time

    def scale(self, d: int, levels: int) -> float:
        """P(d) / P(levels): a growth of ``levels`` levels' time to one of d; d / levels where the calibration has
        none."""
        return self.growth_passes(d) / self.growth_passes(levels) if self.growth_passes(levels) > 0 else d / levels

    def growth_time(self, d: int) -> float:
        """Seconds of a growth of d levels, g(d): ``t_grow`` is a growth of the shape's full depth (class docstring)."""
        return self.t_grow * self.scale(d, self.shape.depth)

    def growth_rate(self, d: int) -> float:
        """The expected tokens a second of a round that grows d levels, its growth included (class docstring)."""
        E = 1.0 + self.trust * self.worth[d]  # [max_room + 1]: E_d(0), ..., E_d(max_room)
        return max(E[m] / (self.growth_time(d) + self.verify_time[m + 1]) for m in range(len(E)))

    def learn_worth(self, d: int) -> None:
        """Fold this growth's best values no deeper than d into ``worth[d]`` (a running mean, WORTH_WEIGHT on it)."""
        values = self.values if self.depths is None else self.values[self.depths <= d]  # [n] best first
        sums = np.concatenate([[0.0], np.cumsum(values[: self.max_room])])  # the best N values' sum, N = 0, 1, ...
        sums = np.pad(sums, (0, self.max_room + 1 - len(sums)), mode="edge")  # [max_room + 1]
        self.worth[d] = sums if d not in self.worth else (1 - WORTH_WEIGHT) * self.worth[d] + WORTH_WEIGHT * sums

    def plan(self, rate: float) -> None:
        """Whether the next round grows a tree, from a growth's expected tokens per second, its time included."""
        if rate > (1.0 + MARGIN) / self.verify_time[1]:
            self.backoff = 1
        else:  # the wait of the class docstring
            regrow = int(np.ceil(self.t_grow / (REGROW_SHARE * self.verify_time[1])))
            self.wait, self.backoff = min(max(self.backoff, regrow), MAX_WAIT), min(2 * self.backoff, 32)

    def observe(self, depth: int, accepted: int, t_draft: float, t_verify: float | None, probed=None,
                nodes: int = 0, width: int = 0) -> None:  # ``depth``: the round's path length (the loop's), not ``self.depth``
        if t_verify is not None and self.learn and nodes + 1 in self.verify_time:  # a low quantile of its passes
            learn_pass(self.passes, self.verify_time, nodes + 1, t_verify)
        if not (self.chose or (self.asked and nodes)):  # a plain round, or none grown (no room, no features yet)
            return
        levels = self.asked_depth if self.chose else sampled_levels(*self.asked_size, self.asked_depth)
        if self.learn:
            if self.growths is None:
                self.growths = []  # the first growth, not counted (class docstring)
            else:  # scaled to the shape's full depth, by the levels asked for (a growth stopped early paid a pass)
                self.growths = (self.growths + [t_draft * self.scale(self.shape.depth, levels)])[-RECENT:]
                self.t_grow = low_quantile(self.growths, min(self.growths))
            # what the values promised, before trust, for the nodes verified: ``nodes``, fewer than chosen where the
            # room cut the tree near the end of the context (bug: the promise of all chosen, so trust fell there)
            promise = float(self.values[: min(self.chosen, nodes)].sum())
            if promise:
                self.promised, self.kept = 0.9 * self.promised + promise, 0.9 * self.kept + accepted
                self.trust = float(np.clip(self.kept / self.promised, 0.05, 2.0))
        self.sampled = not self.chose
        if self.chose:  # the root's row one-hot: this growth's values, with what this round taught (trust, t_grow)
            for d in (range(1, self.grown + 1) if self.depths is not None else [self.shape.depth]):
                self.learn_worth(d)  # deeper ones keep what the last look taught
            rates = {d: self.growth_rate(d) for d in sorted(self.worth)}
            best = max(rates, key=rates.get)  # the shallowest of equals
            if self.depths is not None:
                self.depth = best
            self.plan(rates[best])
        else:  # T > 0: the tokens the grown rounds of each size emitted
            size, e = self.asked_size, self.emitted.get(self.asked_size)
            self.emitted[size] = accepted + 1.0 if e is None else 0.8 * e + 0.2 * (accepted + 1.0)
            self.verified[size] = min(nodes, self.max_room)
            self.sampled_growths += 1
            self.looked[size] = self.sampled_growths
            rates = {s: self.sampled_rate(s) for s in self.emitted}
            best = max((s for s in self.sizes if s in rates), key=rates.get)  # the smallest of equals
            untried = [s for s in self.sizes if s not in self.emitted]
            look = self.sampled_growths % LOOK_EVERY == 0
            self.size = untried[0] if untried else min(self.sizes, key=self.looked.get) if look else best
            self.plan(rates[best])
        self.chosen = 0

    def sampled_rate(self, size) -> float:
        """The expected tokens a second of a sampled growth within ``size`` (class docstring): priced at the levels
        its budget reaches at the depth of the next growth (bug: at the full depth, so after a one-hot root chose a
        shallow depth a sampled tree looked dearer than it was and backed off)."""
        t_grow = self.growth_time(sampled_levels(*size, self.depth))
        return self.emitted[size] / (t_grow + self.verify_time[self.verified[size] + 1])


def auto_dynamic_tree(target, drafter, shape=None, learn: bool = True, sampled: bool = False) -> AutoDynamicTree:
    """An AutoDynamicTree calibrated for this target and drafter (its t(n) as ``auto_tree_policy``'s; a level's time
    is the head's pass over top_k nodes, the root's children come from its pass over one row)."""
    shape = shape or DynamicTree()
    ns = tree_verify_ns(target, shape.nodes)
    verify = verify_calibration(target, ns)
    levels = level_calibration(drafter)
    frontier_time = float(levels.times.get(min(shape.top_k, 4), 0.0)) if levels else 0.0
    row_time = float(levels.times.get(1, frontier_time)) if levels else 0.0
    policy = AutoDynamicTree(shape, dict(verify.times), frontier_time, learn=learn, row_time=row_time, sampled=sampled)
    policy.calibrations = [verify, levels]
    return policy
