"""What a drafter is, declared: the protocol every drafter implements, and the optional capabilities that the
loops, the policy and the harness ask for by name (``isinstance(drafter, ReadsFeatures)``), never by class.

``typing.Protocol`` with ``runtime_checkable``: a drafter need not inherit from anything; an ``isinstance`` check
asks whether it has the capability's methods (or attributes). A new kind of drafter implements ``Drafter`` and the
capabilities it has, and the rest of minispec uses it as it is.

Names: ``draft_tokens`` x_1..x_k, ``draft_probs`` q_1..q_k (rejection.py's), ``warp`` the sampling warps (sampling.py).
"""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Drafter(Protocol):
    """Every drafter. ``propose(tokens, k, warp, rng, keep=None) -> (draft_tokens, draft_probs)``: ``tokens`` is the
    whole sequence so far; ``draft_probs`` [k', V] are exactly the distributions the k' <= k guesses were drawn from
    (one-hot for a deterministic drafter); ``keep(j, reach)`` may stop drafting before guess j (the early stop).
    ``context(tokens) -> int`` labels the next round before any drafting (0: nothing to say); ``forwards`` counts
    the drafter's model passes; ``name`` names it in reports and calibrations."""

    name: str
    forwards: int

    def propose(self, tokens, k: int, warp: Callable, rng: np.random.Generator, keep=None) -> tuple[list[int], np.ndarray]: ...

    def context(self, tokens) -> int: ...


@runtime_checkable
class HasRoom(Protocol):
    """A drafter with a context of its own: ``room(tokens)`` guesses still fit (at 0 the run goes on with plain rounds)."""

    def room(self, tokens) -> int: ...


@runtime_checkable
class ProposesTrees(Protocol):
    """A drafter that proposes token trees: ``propose_tree(tokens, width, depth, warp, rng) -> tree.Tree``."""

    def propose_tree(self, tokens, width: int, depth: int, warp: Callable, rng: np.random.Generator): ...


@runtime_checkable
class ReadsFeatures(Protocol):
    """A drafter that drafts from the target's features: the loop asks the target pass for them and hands them over
    with ``see_features(tokens, features)`` (eagle.py)."""

    def see_features(self, tokens, features) -> None: ...


@runtime_checkable
class HasModel(Protocol):
    """A drafter that runs a model of the target's tokenizer, ``model``: the cost model times its passes and its
    ``propose`` (policy/costs.py)."""

    model: object


@runtime_checkable
class TimesItself(Protocol):
    """A drafter that cannot be timed through ``propose`` alone (a feature head needs the target's features; a draft
    with its own tokenizer reads text): ``measure_costs(clock, repeats) -> (seconds per guess, seconds per token
    caught up)``, on inputs it makes itself, leaving itself as it found it. ``clock`` is the policy's
    (policy/timing.py), so that a test can script it."""

    def measure_costs(self, clock: Callable[[], float], repeats: int) -> tuple[float, float]: ...


@runtime_checkable
class TimesItsTreeLevels(Protocol):
    """A tree drafter whose tree levels cost what its own passes cost, not a model's: ``level_times(clock, widths,
    repeats) -> {w: seconds of one level of w nodes}``."""

    def level_times(self, clock: Callable[[], float], widths, repeats: int) -> dict[int, float]: ...
