"""What the speculative loops keep besides the algorithm: the sequence, the cache, the policy, the clock.

``speculative.py`` makes the algorithm's calls itself (one target pass, the rule, the rollback).
Everything else sits behind the three calls a loop makes on its ``Run``, once each per round:

    run = start_run(...)   check the arguments like ``generate``, wrap the drafter, choose the policy
                           (policy/), size the cache
    run.draft()            ask the policy for K, let the drafter catch up on the tokens it has not
                           seen and propose; in a plain round (K = 0) the policy may ask for one
                           unverified *probe* guess (policy/auto_k.py). ``run.draft_tree()`` likewise
    run.emit(...)          append the round's tokens (never past a stop token or max_new_tokens), hand
                           a feature drafter the target's features of the tokens its cache kept, and
                           tell the statistics (stats.py) and the policy what happened and how long it took

Besides, ``run.unread`` is what the target's cache lacks (the last token; in round 1 the prompt before
it), and ``run.on_features`` is what the target pass hands its features to: None unless the drafter
reads them (drafters/eagle.py).

A reader of the algorithm can skip this file on a first read; what it adds to the round is K's caps (never
more guesses than the tokens still wanted, nor than the draft's context holds) and the cut at a stop token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .drafters import as_drafter
from .drafters.dynamic_tree import DynamicTree
from .drafters.protocol import GrowsTrees, HasRoom, ProposesTrees, ReadsFeatures, has
from .generate import check_generate_args, stop_set
from .keyed import KeyedNoise, keyed_noise
from .model import Model, backend
from .policy import calibrations_of, follows_clock, k_policy, shape_policy
from .rejection import guess_acceptance, is_keyed, overlap
from .sampling import warp
from .stats import SpecStats
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
    policy: object
    tokens: list  # prompt + everything emitted so far
    out: list  # what was emitted
    cache: object  # the target's KV cache: every token but the last (round 1: nothing yet)
    stop: set
    max_new_tokens: int
    warp: Callable  # logits -> the probabilities to sample from (the same warp for draft and target)
    stream: np.random.Generator  # the run's random stream (seeded by ``seed``)
    on_token: Callable | None
    stats: SpecStats
    trace: object = None  # a trace.Trace that records each round, or None
    seen: int = 0  # len(tokens) when the drafter last proposed: it has the rest to catch up on
    drafted: int = 0  # this round's guesses (a tree: its depth)
    nodes: int = 0  # this round's draft tokens in the target pass
    probe: np.ndarray | None = None  # this round's unverified guess: the [V] row it was drawn from
    probe_came_true: bool = False  # the last round probed a certain guess and emitted that very token
    forwards0: int = 0  # the drafter's pass count at the start
    clock: tuple = ()  # (start of drafting, end of drafting)
    prefill: bool = True  # this round's target pass also reads the prompt
    plain_cause: str = ""  # why this round drafted nothing: "policy", "end", "room", "nothing" ("": it drafted)
    features: object = None  # the last target pass's features [T, D], for a drafter that reads them
    features_at: int = 0  # the cache position of their first row
    tree: Tree | None = None  # this round's token tree (a tree run), for the trace
    noise: KeyedNoise | None = None  # a keyed rule's noise (keyed.py): positions, not a stream, decide its draws
    accepts: Callable = overlap  # (p, q) -> P(the rule keeps a guess drawn from q): what a probe measures

    @property
    def rng(self):
        """This round's randomness, for the drafter and the rule: the run's generator, or, for a keyed rule, its
        noise seen from the round's first new position (race(p, i) at position len(tokens) + i)."""
        return self.stream if self.noise is None else self.noise.at(len(self.tokens))

    @property
    def done(self) -> bool:
        return len(self.out) == self.max_new_tokens or (bool(self.out) and self.out[-1] in self.stop)

    @property
    def unread(self) -> list[int]:
        """What the target's cache lacks, and the next target pass starts with: the last token (in round 1 the
        prompt before it too)."""
        return self.tokens[self.cache.length:]

    @property
    def on_features(self):
        """The target pass's ``on_features``: None unless the drafter reads the target's features (eagle.py)."""
        return self.keep_features if has(self.drafter, ReadsFeatures) else None

    def keep_features(self, features) -> None:
        """Called by the target pass (``Model.forward``) with its features [T, D], of cache positions ending at
        its new length; ``emit`` hands on the rows the cache keeps."""
        self.features, self.features_at = features, self.cache.length - len(features)

    def draft(self) -> tuple[list[int], np.ndarray]:
        """This round's guesses x_1..x_K and the [K, V] rows q_1..q_K they were drawn from."""
        t0 = time.perf_counter()
        wanted = self.policy.next_k(len(self.tokens) - self.seen, self.drafter.context(self.tokens))
        k = min(wanted, self.max_new_tokens - len(self.out) - 1)  # never more than the tokens still wanted
        capped = k
        k = min(k, self.drafter_room()) if k else 0  # a full draft context: plain rounds (asked only when drafting:
        # a draft with its own tokenizer must re-read the whole text to answer)
        draft_tokens, draft_probs = self.drafter.propose(self.tokens, k, self.warp, self.rng, self.policy.keep)
        self.plain_cause = ("" if draft_tokens else "policy" if wanted == 0 else "end" if capped == 0
                            else "room" if k == 0 else "nothing")  # why a round drafted nothing (stats.plain_causes)
        self.drafted_now(k, len(draft_tokens), len(draft_tokens), t0)
        return [int(t) for t in draft_tokens], draft_probs

    def draft_tree(self) -> Tree:
        """This round's token tree (tree.py), of the shape the policy chose and that fits the cache."""
        t0 = time.perf_counter()
        shape = self.policy.next_shape(len(self.tokens) - self.seen, self.drafter.context(self.tokens))
        room = min(self.cache.max_len - self.cache.length - len(self.unread), self.drafter_room())
        remaining = self.max_new_tokens - len(self.out)
        if isinstance(shape, DynamicTree):  # EAGLE-2's tree, grown by the drafter's confidence (dynamic_tree.py)
            shape = shape.within(remaining - 1, room)
            tree = self.tree = self.drafter.grow_tree(self.tokens, shape, self.warp, self.rng) if shape else Tree()
            asked = shape is not None
        else:
            width, depth = shape
            depth = min(depth, remaining - 1, room // width if width else 0)
            tree = self.tree = propose_tree(self.drafter, self.tokens, width, depth, self.warp, self.rng)
            asked = width * depth > 0
        self.plain_cause = "" if len(tree) else "end" if remaining == 1 else "policy" if not asked else "nothing"
        self.drafted_now(len(tree), int(tree.depths().max()) if len(tree) else 0, len(tree), t0)
        return tree

    def drafter_room(self) -> int:
        """How many draft tokens the drafter can still make after ``tokens`` (``Drafter.room``): a draft model
        with a shorter context than the target's runs out before the target does. Unbounded without ``HasRoom``."""
        return max(0, self.drafter.room(self.tokens)) if has(self.drafter, HasRoom) else self.max_new_tokens

    def drafted_now(self, asked: int, drafted: int, nodes: int, t0: float) -> None:
        """After proposing: ``asked`` guesses were asked for (0: a plain round), ``drafted`` made (a tree: its
        depth), ``nodes`` draft tokens go into the target pass."""
        self.drafted, self.nodes, self.prefill = drafted, nodes, self.cache.length == 0
        if asked:
            self.seen = len(self.tokens)
        self.probe = None
        if asked == 0 and self.policy.probe() and self.drafter_room() >= 1:  # a plain round: one guess, never verified, only measured
            _, draft_probs = self.drafter.propose(self.tokens, 1, self.warp, self.rng)
            self.seen = len(self.tokens)
            self.probe = draft_probs[0] if len(draft_probs) else None
        self.clock = (t0, time.perf_counter())

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

    def emit(self, new_tokens: list[int], accepted: int, target_probs: np.ndarray, feature_rows=None) -> None:
        """Append the round's tokens (the accepted guesses and the rule's next_token: the correction or the bonus) and record the round.
        ``target_probs[0]`` is p for the first new position: what a probe is measured against. A drafter that
        reads features gets those of the tokens the cache kept: the pass's first rows up to the cache's length
        (a chain), or ``feature_rows`` (a tree, whose kept nodes the cache compacted); not once the run is done
        (a stop token among the accepted guesses leaves rows without tokens)."""
        t_draft, t_verify = self.clock[1] - self.clock[0], time.perf_counter() - self.clock[1]
        probed = self.measure_probe(target_probs[0], new_tokens[accepted])
        emitted = 0
        for t in new_tokens:
            self.tokens.append(int(t))
            self.out.append(int(t))
            emitted += 1
            if self.on_token:
                self.on_token(int(t))
            if self.done:
                break
        if self.features is not None and not self.done:  # (done: no more drafting, and a stop may have cut the rows)
            rows = slice(0, self.cache.length - self.features_at) if feature_rows is None else backend.asarray(feature_rows)
            self.drafter.see_features(self.tokens[: self.cache.length], self.features[rows])
        self.features = None
        self.stats.record(self.drafted, accepted, emitted, t_draft, t_verify, self.prefill, self.plain_cause)
        if self.trace is not None:
            self.trace.round_done(new_tokens[:emitted], accepted, t_draft, t_verify, tree=self.walked(feature_rows, accepted))
        self.policy.observe(self.drafted, accepted, t_draft, None if self.prefill else t_verify, probed, nodes=self.nodes)

    def walked(self, kept, accepted: int) -> tuple[int, bool] | None:
        """A tree round's (nodes verified, whether the walk ended at a leaf: its next_token is then the bonus), read
        from the kept rows (``tree.kept_rows``: the last kept node is the last row, node i at row head - 1 + i);
        None for a chain round."""
        if kept is None:
            return None
        last = int(kept[-1]) - (len(kept) - accepted) + 1 if accepted else 0
        return len(self.tree), not self.tree.children(last)

    def result(self) -> SpecResult:
        self.stats.draft_forwards = (self.drafter.forwards if self.drafter is not None else 0) - self.forwards0
        used = [c.describe() for c in calibrations_of(self.policy)]
        return SpecResult(self.out, self.stats, used)


NOT_A_TREE = object()  # start_run's default ``shape``: a chain of ``k`` guesses (``shape=None`` is a bad tree shape)


def start_run(target: Model, drafter, prompt_ids, max_new_tokens: int, *, k=None, shape=NOT_A_TREE,
              temperature: float = 0.0, top_k=None, top_p=None, seed=None, stop_ids=None, on_token=None,
              trace=None, rule=None) -> Run:
    """Check the arguments like ``generate`` and set up a run: a chain of ``k`` guesses per round, or a
    tree of ``shape``. The cache has room for the prompt, the output and the largest tree. With a
    ``seed`` at T > 0, an automatic policy keeps its calibrated costs (``learn=False``), so that the run's
    choices, and with them its random draws, repeat: see "Seeds" in policy/__init__.py. Greedy output does
    not depend on K, so a greedy run follows its own clock whatever its seed, and so does a run of a keyed
    ``rule`` (the verification rule, rejection.py), whose output depends on the seed alone."""
    ids = check_generate_args(target, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, stop_ids)
    if on_token is not None and not callable(on_token):
        raise TypeError(f"on_token must be None or a function of one token id, got {type(on_token).__name__}")
    drafter = as_drafter(drafter, target)
    keyed = is_keyed(rule)
    learn = follows_clock(seed, temperature, keyed)  # greedy or keyed output does not depend on K: it may follow the clock
    if shape is NOT_A_TREE:
        policy, room = k_policy(k, target, drafter, learn=learn), 0
    else:
        if not has(drafter, ProposesTrees):
            raise ValueError(f"drafter {drafter.name} drafts chains only, not trees "
                             "(it has no propose_tree; a draft with its own tokenizer has none)")
        if isinstance(shape, DynamicTree) and not has(drafter, GrowsTrees):
            raise ValueError(f"drafter {drafter.name} does not grow dynamic trees (it has no grow_tree: the EAGLE head "
                             "does); give it a (width, depth) shape")
        policy = shape_policy(shape, target, drafter, learn=learn)
        room = policy.max_room  # a tree's nodes sit in the cache during its pass
    cache = target.new_cache(min(len(ids) + max_new_tokens + room, target.cfg.max_position_embeddings))
    stream = np.random.default_rng(seed)
    return Run(target=target, drafter=drafter, policy=policy, tokens=[int(t) for t in ids], out=[], cache=cache,
               stop=stop_set(stop_ids), max_new_tokens=max_new_tokens,
               warp=lambda logits: warp(logits, temperature, top_k, top_p), stream=stream,
               on_token=on_token, stats=SpecStats(), forwards0=drafter.forwards if drafter is not None else 0, trace=trace,
               noise=keyed_noise(seed, stream) if keyed else None, accepts=guess_acceptance(rule))
