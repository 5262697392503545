"""What a drafter is, declared: the protocol every drafter implements, and the optional capabilities that the
loops, the policy and the harness ask for by name (``has(drafter, ReadsFeatures)``), never by class; and
``as_drafter``, which checks what a caller passes in as a drafter (a Model becomes a ``DraftModel``).

``typing.Protocol`` with ``runtime_checkable``: a drafter need not inherit from anything; ``has`` asks whether it
has the capability's methods (or attributes), and refuses to be asked for anything but a capability listed in
``CAPABILITIES``. A new kind of drafter implements ``Drafter`` and the capabilities it has, and the rest of
minispec uses it as it is (tests/test_protocol.py drives one that minispec has never seen through the loops, the
policy, ``minispec check`` and ``minispec bench``).

Names: ``draft_tokens`` x_1..x_k, ``draft_probs`` q_1..q_k (rejection.py's), ``warp`` the sampling warps (sampling.py).

``warp`` is a ``sampling.Warp``: a drafter calls ``warp(logits, prefix)`` for each row it draws from, ``prefix`` being
the tokens before that row (the sequence and the guesses drawn before it; in a tree, ``tree.prefix(tokens, node)``),
so that logits processors (processors.py) see what the target's row at the same position sees. Without processors
the prefix is not read, and ``warp(logits)`` still works; with them, leaving it out is an error that says so.
``first_guess_rows`` calls ``warp.chain(rows, tokens[:start], tokens[start:], strict=False)``, and a tree's
``tree.add_children`` needs ``warp.process`` (the processed logits whose top W are the greedy children).
"""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

import numpy as np

from ..sampling import Draws


@runtime_checkable
class Drafter(Protocol):
    """Every drafter. ``propose(tokens, k, warp, draws, keep=None) -> (draft_tokens, draft_probs)``: ``tokens`` is the
    whole sequence so far; ``draws`` (sampling.Draws) draws each guess, ``draws.draw(q, i)`` for the round's i-th
    new position; ``draft_probs`` [k', V] are exactly the distributions the k' <= k guesses were drawn from
    (one-hot for a deterministic drafter); ``keep(j, reach)`` may stop drafting before guess j (the early stop).
    ``context(tokens) -> int`` labels the next round before any drafting (0: nothing to say); ``forwards`` counts
    the drafter's model passes; ``name`` names it in reports and calibrations."""

    name: str
    forwards: int

    def propose(self, tokens, k: int, warp: Callable, draws: Draws, keep=None) -> tuple[list[int], np.ndarray]: ...

    def context(self, tokens) -> int: ...


@runtime_checkable
class ClaimsAcceptance(Protocol):
    """A drafter whose ``context`` label is its own confidence in the round's first guess:
    ``claimed_acceptance(label)`` is the acceptance that label claims, from which an automatic policy starts its
    estimate for the label (policy/acceptance.py's ``PerContext``) instead of the low prior. Finding the label is
    the first guess's work: it catches the drafter up on the whole sequence, and costs a plain round about one guess
    (policy/auto_k.py prices it). The EAGLE head's labels are its top probability in tenths (drafters/eagle.py)."""

    def claimed_acceptance(self, label: int) -> float: ...


@runtime_checkable
class Forgets(Protocol):
    """A drafter that keeps state between proposals (a KV cache, the target's features): ``forget()`` drops it all,
    leaving the drafter as it was loaded. Every run starts so (rounds.start_run): what a drafter read in an earlier run
    neither shifts a seeded run's draws nor makes a later run cheaper than its first."""

    def forget(self) -> None: ...


@runtime_checkable
class HasRoom(Protocol):
    """A drafter with a context of its own: ``room(tokens)`` guesses still fit (at 0 the run goes on with plain rounds)."""

    def room(self, tokens) -> int: ...


@runtime_checkable
class ProposesTrees(Protocol):
    """A drafter that proposes token trees: ``propose_tree(tokens, width, depth, warp, draws) -> tree.Tree``."""

    def propose_tree(self, tokens, width: int, depth: int, warp: Callable, draws: Draws): ...


@runtime_checkable
class GrowsTrees(Protocol):
    """A drafter that grows EAGLE-2's dynamic tree by its own confidence (dynamic_tree.py):
    ``grow_tree(tokens, shape, warp, draws) -> tree.Tree`` for a ``dynamic_tree.DynamicTree`` shape."""

    def grow_tree(self, tokens, shape, warp: Callable, draws: Draws): ...


@runtime_checkable
class ReadsFeatures(Protocol):
    """A drafter that drafts from the target's features: the loop asks the target pass for them and hands them over
    with ``see_features(tokens, features)`` (eagle.py)."""

    def see_features(self, tokens, features) -> None: ...


@runtime_checkable
class ReadsLowerLayers(Protocol):
    """A feature drafter that may read the outputs of some of the target's layers too (EAGLE-3's fused features):
    ``lower_layers``, their indices (() for none); the features it sees are then [n, D * (1 + len(lower_layers))],
    the top feature and those layers' outputs side by side, in that order (``feature_tap``)."""
    lower_layers: tuple


class FeatureTap:
    """``Model.forward``'s ``on_features`` that asks for the outputs of ``lower_layers`` beside the top feature: calls
    ``call`` with the features."""

    def __init__(self, call: Callable, lower_layers: tuple):
        self.call, self.lower_layers = call, tuple(lower_layers)

    def __call__(self, features) -> None:
        self.call(features)


def lower_layers_of(drafter) -> tuple:
    """The target layers ``drafter``'s features carry beside the top one: () for none."""
    return tuple(drafter.lower_layers) if has(drafter, ReadsLowerLayers) else ()


def feature_tap(drafter, call: Callable) -> Callable:
    """What a target pass should hand ``drafter``'s features to: ``call`` itself, or a ``FeatureTap`` of the lower
    layers it reads."""
    lower_layers = lower_layers_of(drafter)
    return FeatureTap(call, lower_layers) if lower_layers else call


@runtime_checkable
class HasModel(Protocol):
    """A drafter that runs a model of the target's tokenizer, ``model``: the cost model times its passes and its
    ``propose`` (policy/costs.py)."""

    model: object


@runtime_checkable
class TimesItself(Protocol):
    """A drafter that cannot be timed through ``propose`` alone (a feature head needs the target's features; a draft
    with its own tokenizer reads text): ``measure_costs(clock, repeats) -> (seconds per guess, seconds per token
    caught up)``, on inputs it makes itself; it may leave itself empty, as loaded (the next proposal reads its text
    afresh: policy/timing.py says what each timing leaves behind). ``clock`` is the policy's
    (policy/timing.py), so that a test can script it. ``kernel`` names the kernel its passes run on (model/kernel.py):
    its timings are stored under its ``name`` and that kernel (policy/calibration.py)."""

    kernel: str

    def measure_costs(self, clock: Callable[[], float], repeats: int) -> tuple[float, float]: ...


@runtime_checkable
class TimesItsTreeLevels(Protocol):
    """A tree drafter whose tree levels cost what its own passes cost, not a model's: ``level_times(clock, widths,
    repeats) -> {w: seconds of one level of w nodes}``, stored under its ``name`` and ``kernel`` as ``TimesItself``'s."""

    kernel: str

    def level_times(self, clock: Callable[[], float], widths, repeats: int) -> dict[int, float]: ...


@runtime_checkable
class HasFirstGuessRows(Protocol):
    """A drafter that can say, for every position of a text at once, what its first guess there would be drawn
    from: ``first_guess_rows(tokens, start, warp, features=None) -> [len(tokens) - start, V]`` (or None when it has
    no such distribution), row i the distribution of the first guess after ``tokens[:start + i]``, teacher-forced.
    It may move the drafter's own cache (a draft that reads each prefix in its own tokens, TLI, leaves it where a
    proposal after the text would) and count its passes in ``forwards``; the next proposal starts from there as
    from any other text. ``features`` [len(tokens), D] are the target's, for a drafter that
    ``ReadsFeatures``. Level 4's acceptance statistic reads it (harness/check.py)."""

    def first_guess_rows(self, tokens, start: int, warp: Callable, features=None) -> np.ndarray | None: ...


@runtime_checkable
class HasOwnTokenizer(Protocol):
    """A draft with a tokenizer of its own that follows the target's text (crossvocab.py): ``cross`` spells both
    vocabularies (a ``CrossVocab``), ``draft_model`` is its model, and ``algorithm`` says how it proposes ("SLEM"
    or "TLI", the CLI's ``slem:``/``tli:`` spec in capitals); ``summary()`` says in a line how it drafts (the CLI
    prints it)."""

    cross: object
    draft_model: object
    algorithm: str

    def summary(self) -> str: ...


@runtime_checkable
class DraftsText(Protocol):
    """A drafter that proposes the target's tokens of a text its draft wrote (slem.py), so its last guess may be
    a boundary token cut inside a word: ``keeping_boundary()`` is the same drafter proposing that token too, the
    first half of the hazard level 4 plants (harness/check.py pairs it with a verifier that trusts it by prefix, and
    reads the target's token bytes from ``cross``, the ``CrossVocab`` that spells both vocabularies)."""

    cross: object

    def keeping_boundary(self): ...


@runtime_checkable
class ReportsMemory(Protocol):
    """A drafter whose memory is not a model's (a feature head): ``weight_bytes`` its weights add, and
    ``kv_bytes_per_token`` what its own cache and the features it keeps add per token of context (the study's
    memory table, harness/study.py)."""

    weight_bytes: int
    kv_bytes_per_token: int


CAPABILITIES = (Drafter, ClaimsAcceptance, Forgets, HasRoom, ProposesTrees, GrowsTrees, ReadsFeatures, ReadsLowerLayers, HasModel,
                TimesItself, TimesItsTreeLevels, HasFirstGuessRows, HasOwnTokenizer, DraftsText, ReportsMemory)


def has(drafter, capability) -> bool:
    """Whether ``drafter`` has ``capability``, one of ``CAPABILITIES``: the one way the rest of minispec asks about
    a drafter. Asking for a class is refused (TypeError), so that a new kind of drafter with the same methods is
    served as the shipped ones are."""
    if capability not in CAPABILITIES:
        raise TypeError(f"has(drafter, {getattr(capability, '__name__', capability)!r}): ask for a capability "
                        f"({', '.join(c.__name__ for c in CAPABILITIES)}), not a class")
    return isinstance(drafter, capability)


def as_drafter(drafter, target):
    """A Model becomes a DraftModel; a drafter object passes through, and a drafter without a vocabulary
    (prompt lookup) takes the target's. A drafter's vocabulary must be the target's: its q rows are compared
    with the target's p rows, entry by entry."""
    from ..model import Model
    if isinstance(drafter, Model):
        from .draft_model import DraftModel
        return DraftModel(drafter, target.cfg.vocab_size)
    if not (hasattr(drafter, "propose") and hasattr(drafter, "context")):
        raise TypeError("drafter must be a Model or have propose(tokens, k, warp, draws) and context(tokens), "
                        f"got {type(drafter).__name__}")
    if getattr(drafter, "vocab", 0) is None:
        drafter.vocab = target.cfg.vocab_size
    vocab = getattr(drafter, "vocab", target.cfg.vocab_size)
    if vocab != target.cfg.vocab_size:
        raise ValueError(f"drafter {getattr(drafter, 'name', type(drafter).__name__)} has vocabulary size {vocab}, "
                         f"expected the target's {target.cfg.vocab_size}")
    return drafter
