"""The run a speculative loop drives: the sequence, the caches, K, and the record of each round.

``speculative.py`` makes the algorithm's calls itself (one target pass, the rule, the rollback); the rest sits
behind ``start_run`` and two calls on its ``Run`` each round:

    run = start_run(...)   check the arguments like ``generate``, wrap the drafter, size the cache; a fixed K, or
                           a policy that chooses it (policy/)
    run.draft()            K (never more than the tokens still wanted, nor than the draft's context holds), then
                           the drafter catches up on the tokens it has not seen and proposes x_1..x_K
    run.emit(...)          append the round's tokens (never past a stop token or max_new_tokens) and record the
                           round: a ``RoundRecord`` in the run's log (stats.py), handed to its observers (a trace)

Besides, ``run.unread`` is what the target's cache lacks (the last token; in round 1 the prompt before it).

What the textbook round (textbook.py) does not have, each in its own method, entered only when used:

    a policy             ``k="auto"`` or a policy object: ``adaptive_k`` asks it for K and lets it ``probe`` a plain
                         round (one unverified guess, measured: ``measure_probe``); ``emit`` tells it how the
                         round went (policy/)
    features             a drafter that reads the target's features (drafters/eagle.py) gets them from the same
                         pass: ``on_features`` catches them, ``hand_on_features`` gives it the rows the cache kept
    keyed noise          ``rule="coupled"``: the rule and the drafter draw from noise keyed by position (keyed.py)
                         instead of the run's generator: ``rng``
    trees                ``draft_tree``, and ``emit``'s ``feature_rows`` (tree.py)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import numpy as np

from .drafters.dynamic_tree import DynamicTree
from .drafters.protocol import (
    ClaimsAcceptance,
    Forgets,
    GrowsTrees,
    HasOwnTokenizer,
    HasRoom,
    ProposesTrees,
    ReadsFeatures,
    as_drafter,
    feature_tap,
    has,
)
from .keyed import KeyedNoise, keyed_noise
from .model import Model, backend
from .rejection import guess_acceptance, is_keyed, overlap
from .sampling import Stream, Warp, check_generate_args, is_integer, stop_set
from .stats import RoundRecord, SpecStats
from .tree import Tree, propose_tree


@dataclass
class SpecResult:
    tokens: list[int]
    stats: SpecStats
    calibration: list = field(default_factory=list)  # the calibrations an automatic policy chose from, described


@dataclass
class Run:
    target: Model
    drafter: object
    k: int  # guesses per round when there is no policy
    policy: object  # None: a fixed K; else what chooses K (or the tree) each round (policy/)
    tokens: list  # prompt + everything emitted so far
    out: list  # what was emitted
    cache: object  # the target's KV cache: every token but the last (round 1: nothing yet)
    stop: set
    max_new_tokens: int
    warp: Warp  # (logits, prefix) -> the probabilities to sample from: the same for draft and target (sampling.py)
    stream: Stream  # the run's random stream (seeded by ``seed``): a numpy Generator that draws guesses too
    on_token: Callable | None
    observers: list  # what is told of each round (stats.Observer: a trace)
    reads_features: bool  # the drafter drafts from the target's features (eagle.py)
    verify: Callable  # the rule (rejection.py), seen by the observers that watch its decisions (a trace)
    log: list = field(default_factory=list)  # a RoundRecord per round (stats.py)
    clock: tuple = ()  # (start of drafting, end of drafting)
    drafted: int = 0  # this round's guesses (a tree: its depth)
    plain_cause: str = ""  # why this round drafted nothing: "policy", "end", "room", "nothing" ("": it drafted)
    prefill: bool = True  # this round's target pass also reads the prompt
    forwards0: int = 0  # the drafter's pass count at the start
    noise: KeyedNoise | None = None  # a keyed rule's noise (keyed.py): positions, not a stream, decide its draws
    # a policy's round (adaptive_k, measure_probe):
    keep: Callable | None = None  # the policy's early stop, handed to ``propose`` (None: draft all K)
    seen: int = 0  # len(tokens) when the drafter last proposed: it has the rest to catch up on
    nodes: int = 0  # this round's draft tokens in the target pass
    probe: np.ndarray | None = None  # this round's unverified guess: the [V] row it was drawn from
    probe_came_true: bool = False  # the last round probed a certain guess and emitted that very token
    accepts: Callable = overlap  # (p, q) -> P(the rule keeps a guess drawn from q): what a probe measures
    # features (on_features, hand_on_features) and trees (draft_tree):
    features: object = None  # the last target pass's features [T, D], for a drafter that reads them
    features_at: int = 0  # the cache position of their first row
    tree: Tree | None = None  # this round's token tree

    @property
    def rng(self):
        """This round's randomness: the run's generator (a ``sampling.Stream``), or, for a keyed rule, its noise seen
        from the round's first new position. The drafter gets it as its ``draws`` (``draw(q, i)``); the rule reads
        ``random()`` from the generator, or races on the noise (race(p, i) at position len(tokens) + i)."""
        return self.stream if self.noise is None else self.noise.at(len(self.tokens))

    @property
    def done(self) -> bool:
        return len(self.out) == self.max_new_tokens or (bool(self.out) and self.out[-1] in self.stop)

    @property
    def unread(self) -> list[int]:
        """What the target's cache lacks, and the next target pass starts with: the last token (in round 1 the
        prompt before it too)."""
        return self.tokens[self.cache.length:]

    @cached_property
    def on_features(self):
        """The target pass's ``on_features``: None unless the drafter reads the target's features (made once)."""
        return feature_tap(self.drafter, self.keep_features) if self.reads_features else None

    def draft(self) -> tuple[list[int], np.ndarray]:
        """This round's guesses x_1..x_K and the [K, V] rows q_1..q_K they were drawn from."""
        t0 = time.perf_counter()
        wanted = self.k if self.policy is None else self.adaptive_k()
        capped = min(wanted, self.max_new_tokens - len(self.out) - 1)  # never more than the tokens still wanted
        k = min(capped, self.drafter_room()) if capped else 0  # a full draft context: plain rounds
        draft_tokens, draft_probs = self.drafter.propose(self.tokens, k, self.warp, self.rng, self.keep)
        self.drafted, self.prefill, self.plain_cause = len(draft_tokens), self.cache.length == 0, ""
        if not draft_tokens:
            self.plain_cause = why_plain(wanted, capped, k)
        if self.policy is not None:
            self.drafted_now(k, len(draft_tokens), t0, may_probe=wanted == 0)
        self.clock = (t0, time.perf_counter())
        return [int(t) for t in draft_tokens], draft_probs

    def emit(self, new_tokens: list[int], accepted: int, target_probs: np.ndarray, feature_rows=None) -> None:
        """Append the round's tokens (the accepted guesses and the rule's next_token: the correction or the bonus)
        and record the round. ``target_probs[0]`` is p for the first new position (what a probe is measured
        against); ``feature_rows``: a tree's kept rows (``tree.kept_rows``), None for a chain."""
        t_verify = time.perf_counter() - self.clock[1]
        probed = self.measure_probe(target_probs[0], new_tokens[accepted]) if self.policy is not None else None
        emitted = self.append(new_tokens)
        if self.features is not None:
            self.hand_on_features(feature_rows)
        tree = None if feature_rows is None else self.walked(feature_rows, accepted)
        record = RoundRecord(self.drafted, accepted, emitted, self.clock[1] - self.clock[0], t_verify, self.prefill,
                             self.plain_cause, tree)
        self.log.append(record)
        for observer in self.observers:
            observer.round_done(record)
        if self.policy is not None:
            # (``width``, a tree's first level, goes to tree policies only)
            self.policy.observe(self.drafted, accepted, record.t_draft, None if self.prefill else t_verify, probed,
                                nodes=self.nodes, **({} if self.width is None else {"width": self.width}))

    def append(self, new_tokens: list[int]) -> list[int]:
        """Add ``new_tokens`` to the sequence, one by one, up to a stop token or ``max_new_tokens`` -> those added."""
        emitted = []
        for t in map(int, new_tokens):
            self.tokens.append(t)
            self.out.append(t)
            emitted.append(t)
            if self.on_token:
                self.on_token(t)
            if self.done:
                break
        return emitted

    def result(self) -> SpecResult:
        forwards = self.drafter.forwards - self.forwards0
        used = [] if self.policy is None else [c.describe() for c in calibrations_of(self.policy)]
        return SpecResult(self.out, SpecStats(self.log, forwards), used)

    # ---- what the textbook round does not have -------------------------------------------------------------

    def drafter_room(self) -> int:
        """How many draft tokens the drafter can still make after ``tokens`` (``Drafter.room``): a draft model
        with a shorter context than the target's runs out before the target does. Unbounded without ``HasRoom``."""
        return max(0, self.drafter.room(self.tokens)) if has(self.drafter, HasRoom) else self.max_new_tokens

    def adaptive_k(self) -> int:
        """The policy's K for this round, from what the drafter has not seen and its label of the context."""
        unseen = len(self.tokens) - self.seen  # before the label, which may catch the drafter up (``context``)
        return self.policy.next_k(unseen, self.context())

    def context(self) -> int:
        """The drafter's label of this round, if the policy reads it (policy/protocol.py: ``reads_context``; a policy
        without the attribute reads it), else 0. A label that claims an acceptance is the first guess's work
        (drafters/protocol.py: ``ClaimsAcceptance``), so after it the drafter has seen every token, except in the first
        round, which has nothing to catch up from (the prompt rides on its pass)."""
        if not getattr(self.policy, "reads_context", True):
            return 0
        label = self.drafter.context(self.tokens)
        if has(self.drafter, ClaimsAcceptance) and self.cache.length > 0:
            self.seen = len(self.tokens)
        return label

    def drafted_now(self, asked: int, drafted: int, t0: float, nodes: int | None = None, may_probe: bool = True,
                    width: int | None = None) -> None:
        """A policy's round, after proposing: ``asked`` guesses were asked for (0: a plain round), ``drafted`` made (a
        tree: its depth), ``nodes`` draft tokens go into the target pass (a tree: ``width`` of them its first level,
        which the tree policy is told). In a round the policy chose plain
        (``may_probe``: not one cut to plain by the end of the output or the draft's room) it may ask for one guess,
        never verified, only measured (a probe), where the drafter has room for it."""
        self.drafted, self.nodes, self.width = drafted, drafted if nodes is None else nodes, width
        if asked:
            self.seen = len(self.tokens)
        self.probe = None
        if asked == 0 and may_probe and self.drafter_room() >= 1 and self.policy.probe():  # room checked before the
            # policy is asked, so that it pays only for probes that are made
            _, draft_probs = self.drafter.propose(self.tokens, 1, self.warp, self.rng)
            self.probe = draft_probs[0] if len(draft_probs) else None
            if self.probe is not None:  # a drafter that drew nothing (the EAGLE head before any features) saw nothing
                self.seen = len(self.tokens)

    def measure_probe(self, target_row: np.ndarray, emitted: int) -> tuple[float, bool] | None:
        """-> (P(the rule accepts the probe's guess): ``accepts``, sum min(p, q) token-wise and ``coupled_acceptance``
        for the coupled rule; whether it stands for a later guess of a chain), or None when the round did not probe.
        A certain guess (one-hot q) that the plain round emitted is as good as accepted: then the next probe is a
        later guess."""
        if self.probe is None:
            self.probe_came_true = False
            return None
        measured = (self.accepts(target_row, self.probe), self.probe_came_true)
        self.probe_came_true = bool(self.probe[emitted] == 1.0)
        return measured

    def keep_features(self, features) -> None:
        """Called by the target pass (``Model.forward``) with its features [T, D] ([T, D'] with the drafter's lower
        layers: ``feature_tap``), of cache positions ending at its new length."""
        self.features, self.features_at = features, self.cache.length - len(features)

    def hand_on_features(self, feature_rows) -> None:
        """A drafter that reads features gets those of the tokens the cache kept: the pass's first rows up to the
        cache's length (a chain), or ``feature_rows`` (a tree, whose kept nodes the cache compacted); not once the
        run is done (a stop token among the accepted guesses leaves rows without tokens)."""
        if not self.done:
            rows = slice(0, self.cache.length - self.features_at) if feature_rows is None else backend.asarray(feature_rows)
            self.drafter.see_features(self.tokens[: self.cache.length], self.features[rows])
        self.features = None

    def draft_tree(self) -> Tree:
        """This round's token tree (tree.py), of the shape the policy chose and that fits the cache."""
        t0 = time.perf_counter()
        unseen = len(self.tokens) - self.seen  # before the label, as in ``adaptive_k``
        shape = self.policy.next_shape(unseen, self.context())
        room = min(self.cache.max_len - self.cache.length - len(self.unread), self.drafter_room())
        remaining = self.max_new_tokens - len(self.out)
        if isinstance(shape, DynamicTree):  # EAGLE-2's tree, grown by the drafter's confidence (dynamic_tree.py)
            asked = True  # the policy chose a tree (before the end of the output or the room cut it)
            shape = shape.within(remaining - 1, room)
            tree = self.tree = self.drafter.grow_tree(self.tokens, shape, self.warp, self.rng) if shape else Tree()
        else:
            width, depth = shape
            asked = width * depth > 0  # the policy chose a tree (before the end of the output or the room cut it)
            depth = min(depth, remaining - 1, room // width if width else 0)
            tree = self.tree = propose_tree(self.drafter, self.tokens, width, depth, self.warp, self.rng)
        self.plain_cause = "" if len(tree) else "end" if remaining == 1 else "policy" if not asked else "nothing"
        self.prefill = self.cache.length == 0
        self.drafted_now(len(tree), int(tree.depths().max()) if len(tree) else 0, t0, nodes=len(tree), may_probe=not asked,
                         width=len(tree.children(0)))
        self.clock = (t0, time.perf_counter())
        return tree

    def walked(self, kept, accepted: int) -> tuple[int, bool]:
        """A tree round's (nodes verified, whether the walk ended at a leaf: its next_token is then the bonus), read
        from the kept rows (``tree.kept_rows``: the last kept node is the last row, node i at row head - 1 + i)."""
        last = int(kept[-1]) - (len(kept) - accepted) + 1 if accepted else 0
        return len(self.tree), not self.tree.children(last)


def why_plain(wanted: int, capped: int, k: int) -> str:
    """Why a round drafted nothing (stats.SpecStats.plain_causes), from the K asked for, capped by the tokens still
    wanted, and by the draft's room."""
    return "policy" if wanted == 0 else "end" if capped == 0 else "room" if k == 0 else "nothing"


def calibrations_of(policy) -> list:
    from .policy import calibrations_of as of  # the policy package loads only with a policy
    return of(policy)


NOT_A_TREE = object()  # start_run's default ``shape``: a chain of ``k`` guesses (``shape=None`` is a bad tree shape)


def start_run(target: Model, drafter, prompt_ids, max_new_tokens: int, *, k=None, shape=NOT_A_TREE,
              temperature: float = 0.0, top_k=None, top_p=None, seed=None, stop_ids=None, on_token=None,
              trace=None, rule=None, processors=()) -> Run:
    """Check the arguments like ``generate`` and set up a run: a chain of ``k`` guesses per round (an integer, or a
    policy: ``choose_policy``), or a tree of ``shape``. The cache has room for the prompt, the output and the
    largest tree. ``rule``: the verification rule (rejection.py). ``trace``: an observer (stats.Observer) of every
    round, and of the rule's decisions (``trace.observe(rule)``). ``processors``: logits processors (processors.py),
    applied to draft and target rows alike by the run's ``warp``."""
    ids = check_generate_args(target, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, stop_ids)
    if on_token is not None and not callable(on_token):
        raise TypeError(f"on_token must be None or a function of one token id, got {type(on_token).__name__}")
    drafter, stream = as_drafter(drafter, target), Stream(np.random.PCG64(seed))  # default_rng(seed), with draw()
    if has(drafter, Forgets):  # a run starts from the drafter as loaded: nothing an earlier run left in it counts
        drafter.forget()
    processors = check_processors(processors, drafter) if processors else ()
    fixed = shape is NOT_A_TREE and is_integer(k) and k >= 0  # the textbook's fixed K: no policy
    policy, room = (None, 0) if fixed else choose_policy(target, drafter, k, shape, seed, temperature, rule)
    cache = target.new_cache(min(len(ids) + max_new_tokens + room, target.cfg.max_position_embeddings))
    run = Run(target=target, drafter=drafter, k=int(k) if fixed else 0, policy=policy, tokens=[int(t) for t in ids],
              out=[], cache=cache, stop=stop_set(stop_ids), max_new_tokens=max_new_tokens,
              warp=Warp(temperature, top_k, top_p, processors, len(ids)), stream=stream, on_token=on_token,
              observers=[] if trace is None else [trace], reads_features=has(drafter, ReadsFeatures),
              verify=rule if trace is None else trace.observe(rule), forwards0=drafter.forwards)
    if is_keyed(rule):
        run.noise = keyed_noise(seed, stream)
    if policy is not None:
        run.accepts, run.keep = guess_acceptance(rule), policy.keep if shape is NOT_A_TREE else None
    return run


def check_processors(processors, drafter) -> tuple:
    """The run's logits processors as a tuple; refused for a draft of its own tokenizer, whose rows are not the
    target's vocabulary (a processor reads and masks the target's token ids)."""
    processors = tuple(processors or ())
    if any(not callable(p) for p in processors):
        raise TypeError("processors must be logits processors: functions (logits, prefix, prompt_len) -> logits "
                        "(processors.py)")
    if processors and has(drafter, HasOwnTokenizer):
        raise ValueError(f"logits processors need a drafter of the target's tokenizer; {drafter.algorithm} "
                         f"({drafter.name}) drafts in its own tokens: use another drafter, or no processors")
    return processors


def choose_policy(target: Model, drafter, k, shape, seed, temperature: float, rule) -> tuple[object, int]:
    """-> (the policy, the most tree nodes it puts in the cache at once). With a ``seed`` at T > 0, an automatic
    policy keeps its calibrated costs (``learn=False``), so that the run's choices, and with them its random draws,
    repeat: see "Seeds" in policy/__init__.py. Greedy output does not depend on K, so a greedy run follows its own
    clock whatever its seed, and so does a run of a keyed ``rule`` (the verification rule, rejection.py), whose
    output depends on the seed alone."""
    from .policy import follows_clock, k_policy, shape_policy
    learn = follows_clock(seed, temperature, is_keyed(rule))
    if shape is NOT_A_TREE:
        return k_policy(k, target, drafter, learn=learn), 0
    if not has(drafter, ProposesTrees):
        raise ValueError(f"drafter {drafter.name} drafts chains only, not trees "
                         "(it has no propose_tree; a draft with its own tokenizer has none)")
    if isinstance(shape, DynamicTree) and not has(drafter, GrowsTrees):
        raise ValueError(f"drafter {drafter.name} does not grow dynamic trees (it has no grow_tree: the EAGLE head "
                         "does); give it a (width, depth) shape")
    policy = shape_policy(shape, target, drafter, learn=learn, sampled=temperature > 0)
    return policy, policy.max_room  # a tree's nodes sit in the cache during its pass
