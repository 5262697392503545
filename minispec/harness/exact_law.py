"""Level 1 for a whole round: the exact law of the tokens a rule emits, integrated over every random draw.

A rule (``rejection.accept_reject``'s signature) draws uniforms and compares them with thresholds it computes,
then samples next_token (the correction or the bonus) from a row. Here every uniform is *symbolic*: comparing it with a threshold h
branches (true with probability h, false with 1 - h; a second comparison of the same draw is conditioned on
the first), and every branch is followed; the final ``sample`` records the row it would draw from instead of
drawing. So the law is exact, and the thresholds are the code's own: no
formula is written twice. The draft's guesses are enumerated with their probabilities under q.

Tables are context dependent: ``p_of(prefix)`` and ``q_of(prefix)`` give the target's and the draft's [V] row
after a tuple of earlier tokens. A round's emitted tokens, continued by the target itself, must have the
target's joint law (``joint_law``); ``round_law`` also gives the mean number of guesses kept. With fixed rows,
``first_token_law`` is the law of a K = 1 round's first token, which must be p; ``tree_first_token_law`` is the
same for the tree rule over two children of the root.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from contextlib import contextmanager

import numpy as np

from .. import rejection
from ..sampling import one_hot_rows
from ..tree import Tree, without


class SymbolicUniform:
    """u ~ U(0, 1) whose comparisons are decided by the caller's script (``BranchingRng``). It keeps the interval
    [lo, hi) that its earlier comparisons left it in, so that comparing one draw twice (a CDF inverted by hand)
    is exact: u < h is certain below lo, impossible above hi, and else true with probability
    (h - lo) / (hi - lo)."""

    def __init__(self, rng):
        self.rng, self.lo, self.hi = rng, 0.0, 1.0

    def __lt__(self, h):
        h = float(h)
        if h <= self.lo:
            return False
        if h >= self.hi:
            return True
        if self.rng.decide((h - self.lo) / (self.hi - self.lo)):
            self.hi = h
            return True
        self.lo = h
        return False

    __le__ = __lt__  # for a continuous u, u < h and u <= h have the same probability

    def __gt__(self, h):
        return not self < h

    __ge__ = __gt__


class NotSymbolic(BaseException):
    """The rule used its generator, or minispec's ``sample``, in a way the exact walk cannot follow (the conformance
    kit then checks it by Monte Carlo: conform/symbolic.py). A BaseException, as KeyboardInterrupt is: a rule's
    ``except Exception`` does not catch it (bug: it was an Exception, and a rule that caught it went on down a branch
    a real generator never takes, and was walked there). A rule that catches even BaseException is caught after the
    call: the walk notes every refusal on its BranchingRng (``refuse``)."""


class BranchingRng:
    """``random()`` -> a SymbolicUniform whose comparisons are decisions; ``choose(probs)`` (and a drafter's
    ``draw(probs, i)``) -> a token, a categorical decision. Decisions follow ``script`` (a list of chosen indices), then take the first
    possible option and record it, so that a walk (``paths``) can come back for the others."""

    def __init__(self, script):
        self.script, self.taken = list(script), []
        self.sampled = None  # the row of the last ``record_sample``
        self.refused = None  # why the walk could not follow the rule on this branch, once it said so (``refuse``)

    def refuse(self, why: str) -> NotSymbolic:
        """NotSymbolic(why), noted: a rule that swallows it is still refused after its call (``rule_branches``)."""
        self.refused = self.refused or why
        return NotSymbolic(why)

    def random(self):
        return SymbolicUniform(self)

    def _decide(self, probs: np.ndarray) -> int:
        j = len(self.taken)
        c = self.script[j] if j < len(self.script) else int(np.flatnonzero(probs > 0)[0])
        self.taken.append((probs, c))
        return c

    def decide(self, h: float) -> bool:  # SymbolicUniform's comparison: option 0 is "true", probability h
        h = min(1.0, max(0.0, h))
        return self._decide(np.array([h, 1.0 - h])) == 0

    def choose(self, probs) -> int:
        """A token from ``probs`` divided by their sum, as ``sampling.sample`` draws (it inverts the CDF scaled by its
        last entry). Whether the row was a valid one is the caller's to check: conform/symbolic.py checks a peer's
        ``rng.choice(p=...)`` as NumPy's Generator does."""
        probs = np.asarray(probs, dtype=np.float64)
        return self._decide(probs / probs.sum())

    def draw(self, probs, i: int) -> int:  # a drafter's guess (sampling.Draws), a categorical decision
        return self.choose(probs)


def paths(run):
    """Every outcome of ``run(rng)`` over its decisions, with its probability: [(outcome, probability)]."""
    out, stack = [], [[]]
    while stack:
        script = stack.pop()
        rng = BranchingRng(script)
        outcome = run(rng)
        for j in range(len(script), len(rng.taken)):  # the other options of every decision made past the script
            probs, chosen = rng.taken[j]
            prefix = [c for _, c in rng.taken[:j]]
            stack.extend(prefix + [c] for c in np.flatnonzero(probs > 0) if c != chosen)
        prob = float(np.prod([probs[c] for probs, c in rng.taken]))
        if prob > 0:
            out.append((outcome, prob))
    return out


class RecordedDraw:
    """The token ``record_sample`` stands in for: the walk knows its law (``row``, the row its branch recorded), not its
    value, so a rule may only return it, and nothing else stands for it (``recorded_law``). Looking at it (comparing
    it, converting it, testing it) raises NotSymbolic (bug: the stand-in was -1, so a rule that redrew a token equal to
    its last guess was walked as if it never did, and passed with a wrong law)."""

    def __init__(self, rng):
        self.rng, self.row = rng, rng.sampled  # the row it stands for: the law of its branch (``recorded_law``)

    def looked_at(self, *_):
        raise self.rng.refuse("the rule looked at the token it drew with minispec's sample before returning it")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __int__ = __index__ = __float__ = __bool__ = __hash__ = looked_at


def record_sample(probs, rng):
    """``sampling.sample`` at a rule's final draw, for a BranchingRng (or conform's SymbolicGenerator around one): it
    keeps the row it would draw from (``rng.sampled``, normalised) and draws nothing (a ``RecordedDraw``), so the law
    of that token on the branch is the row itself. A second draw on one branch is not a final one: NotSymbolic."""
    if rng.sampled is not None:
        raise rng.refuse("the rule sampled twice on one branch: only a final draw can be recorded")
    rng.sampled = np.asarray(probs) / np.sum(probs)
    return RecordedDraw(rng)


def recorded_law(rng, token, V: int) -> np.ndarray:
    """[V] the law of a rule's next token on a branch: the recorded row when it returned its draw (the RecordedDraw of
    this branch, and nothing else: bug, a -1 stood for it, so a rule that returned -1, vLLM's placeholder id, as its
    bonus token was walked as if it had returned its draw, and passed), else all the mass on ``token``; a rule that
    drew and returned another token used its draw, whose row is then not that token's law (NotSymbolic)."""
    if isinstance(token, RecordedDraw) and token.row is rng.sampled:
        return rng.sampled
    if rng.sampled is not None or isinstance(token, RecordedDraw):
        raise NotSymbolic("the rule drew a token and returned another")
    return np.eye(V)[token]


@contextmanager
def samples_recorded(rule):
    """While open, ``sample`` is ``record_sample`` in ``rule``'s module and in rejection.py (a twin defined
    elsewhere calls the rule of rejection.py)."""
    modules = list({id(m): m for m in (rule.__globals__, rejection.__dict__) if "sample" in m}.values())
    real = [m["sample"] for m in modules]
    try:
        for m in modules:
            m["sample"] = record_sample
        yield
    finally:
        for m, f in zip(modules, real):
            m["sample"] = f


def rule_branches(call, V: int) -> list[tuple]:
    """Every branch of one call of a rule, ``call(rng) -> (kept, next_token)``, run within ``samples_recorded``:
    [(kept, [V] the law of next_token on the branch, probability)]. A next_token decided by comparisons alone
    gets all the mass. A call that the walk refused (``BranchingRng.refuse``) and that returned anyway, the rule
    having caught the NotSymbolic, raises it again."""
    def run(rng):
        kept, t = call(rng)
        if rng.refused:  # the rule caught the walk's NotSymbolic and went on: what it returned is not its law
            raise NotSymbolic(rng.refused)
        return kept, recorded_law(rng, t, V)
    return [(kept, row, prob) for (kept, row), prob in paths(run)]


def round_law(rule, p_of, q_of, K: int, V: int) -> tuple[dict, float]:
    """-> ({the kept guesses (a tuple): [V] the law of the token after them, times the probability of the round},
    expected guesses kept) for one round of ``rule`` with K guesses drawn from ``q_of``."""
    law, expected = defaultdict(lambda: np.zeros(V)), 0.0
    with samples_recorded(rule):
        for xs in itertools.product(range(V), repeat=K):
            qx = float(np.prod([q_of(xs[:i])[xs[i]] for i in range(K)]))
            if qx == 0:
                continue
            target_probs = np.array([p_of(xs[:i]) for i in range(K + 1)])  # [K+1, V]
            draft_probs = np.array([q_of(xs[:i]) for i in range(K)]).reshape(K, V)  # [K, V]
            guesses = list(xs)
            for n, row, prob in rule_branches(lambda rng, t=target_probs, d=draft_probs, g=guesses: rule(t, d, g, rng), V):
                law[xs[:n]] += qx * prob * row  # the kept guesses, then next_token from ``row``
                expected += qx * prob * n
    return dict(law), expected


def first_token_law(rule, target_probs, draft_probs) -> np.ndarray:
    """P(first emitted token = y) for one round of ``rule`` with K = 1 and the fixed rows target_probs [2, V] and
    draft_probs [1, V]: the kept guess, or next_token (``round_law``)."""
    V = target_probs.shape[1]
    law, _ = round_law(rule, lambda prefix: target_probs[len(prefix)], lambda prefix: draft_probs[len(prefix)], 1, V)
    out = np.zeros(V)
    for kept, row in law.items():
        if kept:
            out[kept[0]] += row.sum()
        else:
            out += row
    return out


def tree_first_token_law(accept, p: np.ndarray, q: np.ndarray, deterministic: bool = False) -> np.ndarray:
    """P(first emitted token = y) for a one-level tree of 2 children of the root, verified by ``accept``
    (``tree.accept_tree``'s signature). Children are sampled without replacement from q, each pair enumerated with
    its probability, or (``deterministic``) are q's top 2 with one-hot rows."""
    V = len(p)
    leaf = np.full(V, 1.0 / V)  # children's own distributions only matter for the bonus token
    if deterministic:
        top = np.argsort(-q, kind="stable")[:2]
        pairs = [((int(top[0]), int(top[1])), 1.0, *one_hot_rows([int(top[0]), int(top[1])], V))]
    else:
        pairs = []
        for x1 in np.flatnonzero(q):
            q2 = without(q, [x1])
            for x2 in (np.flatnonzero(q2) if q2 is not None else []):
                pairs.append(((int(x1), int(x2)), q[x1] * q2[x2], q, q2))
    target_probs, out = np.stack([p, leaf, leaf]), np.zeros(V)
    with samples_recorded(accept):
        for (x1, x2), weight, q1, q2 in pairs:
            tree = Tree()
            tree.add(0, x1, q1)
            tree.add(0, x2, q2)
            for path, row, prob in rule_branches(lambda rng, tree=tree: accept(target_probs, tree, rng), V):
                if path:
                    out[tree.tokens[path[0]]] += weight * prob
                else:
                    out += weight * prob * row
    return out


def continued_law(law: dict, p_of, m: int, V: int) -> np.ndarray:
    """P(the first m tokens = y) [V^m] when the round's output is continued by sampling the target. A round that kept
    m guesses or more gives its first m guesses (bug: it was left out, and with m < K + 1 the law lost its mass)."""
    out = np.zeros(V ** m)
    for y in itertools.product(range(V), repeat=m):
        total = 0.0
        for kept, last in law.items():
            n = len(kept)
            if n >= m:
                total += last.sum() if kept[:m] == y else 0.0
                continue
            if tuple(y[:n]) != kept:
                continue
            pr = last[y[n]]
            for j in range(n + 1, m):
                pr *= p_of(tuple(y[:j]))[y[j]]
            total += pr
        out[np.ravel_multi_index(y, (V,) * m)] = total
    return out


def joint_law(p_of, m: int, V: int) -> np.ndarray:
    """The target's own law of its first m tokens [V^m]."""
    out = np.zeros(V ** m)
    for y in itertools.product(range(V), repeat=m):
        out[np.ravel_multi_index(y, (V,) * m)] = np.prod([p_of(tuple(y[:j]))[y[j]] for j in range(m)])
    return out
