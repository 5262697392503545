"""What a policy is, declared: what the loops ask a chain policy and a tree policy (rounds.py), and the optional
capabilities that a run's result and the CLI read, asked for by name (``isinstance(policy, Calibrated)``), never
by class. A policy need not inherit from anything: these are ``typing.Protocol`` with ``runtime_checkable``.

Every shipped policy (FixedK, AutoK, StoppedK: auto_k.py; TreePolicy, fixed or automatic: tree_policy.py;
DynamicTreePolicy and AutoDynamicTree: dynamic_tree_policy.py) is ``Calibrated``; AutoK, StoppedK and TreePolicy
also ``ChoosesByCost``. A caller's own policy needs only ``ChoosesK`` or ``ChoosesTrees``.

``context``, the drafter's label of the round, costs the drafter some work (the EAGLE head's catch-up and first
guess: drafters/eagle.py), so a policy that never reads it says so with ``reads_context = False`` (FixedK,
``TreePolicy.fixed``, the dynamic trees), and the loop does not ask for it; without the attribute, it asks. "Context"
and "label" name the same thing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..drafters.dynamic_tree import DynamicTree


@runtime_checkable
class ChoosesK(Protocol):
    """A chain policy: ``next_k(unseen, context) -> K`` guesses to draft (0: a plain round); ``probe() -> bool``,
    asked in a plain round only, drafts one unverified guess to measure it; ``observe(drafted, accepted, t_draft,
    t_verify, probed, nodes)`` hears how the round went; ``keep(j, reach) -> bool`` is the early stop handed to
    ``drafter.propose`` before guess j (None: none)."""

    keep: object

    def next_k(self, unseen: int = 1, context: int = 0) -> int: ...

    def probe(self) -> bool: ...

    def observe(self, drafted: int, accepted: int, t_draft: float, t_verify: float | None, probed=None,
                nodes=None) -> None: ...


@runtime_checkable
class ChoosesTrees(Protocol):
    """A tree policy: ``next_shape(unseen, context) -> (width, depth)``, or a ``DynamicTree`` to grow (the dynamic
    tree's policies, dynamic_tree_policy.py), instead of ``next_k``, and no ``keep``;
    ``max_room``: the most nodes one of its trees takes in the cache (``start_run`` sizes the cache by it). Its
    ``observe`` is also told, in a tree round, the tree's ``nodes`` and its first level's ``width``."""

    max_room: int

    def next_shape(self, unseen: int = 1, context: int = 0) -> tuple[int, int] | DynamicTree: ...

    def probe(self) -> bool: ...

    def observe(self, depth: int, accepted: int, t_draft: float, t_verify: float | None, probed=None,
                nodes: int = 0, width: int = 0) -> None: ...


@runtime_checkable
class Calibrated(Protocol):
    """A policy that reports its costs: ``calibrations``, the Calibration records (calibration.py) it chose from
    (None for a cost it has none for; empty for a policy that never looks at costs), listed in a run's result; and
    ``slowdown``, how much slower its drafting rounds ran than those costs predicted (1.0 for one that does not
    learn it: auto_k.py)."""

    calibrations: list
    slowdown: float


@runtime_checkable
class ChoosesByCost(Protocol):
    """A policy with a cost model: ``auto`` (whether it chooses each round; False for a fixed tree shape),
    ``verify_time`` {n: seconds of one target pass over n tokens} as it now stands, and ``best_drafting() ->
    (choice, expected tokens per second)``, the best drafting choice under its current estimates (the CLI says
    it when a run drafted nothing)."""

    auto: bool
    verify_time: dict

    def best_drafting(self) -> tuple: ...


def calibrations_of(policy) -> list:
    """The calibrations a policy chose from (none for a policy that is not ``Calibrated``)."""
    return [c for c in policy.calibrations if c is not None] if isinstance(policy, Calibrated) else []
