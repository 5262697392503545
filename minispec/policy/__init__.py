"""The policy (the core: nothing here imports the lab): how many guesses to draft each round (or which tree), and when
to stop early.

The loops never look inside a policy. Their ``Run`` (rounds.py) asks a chain policy (``ChoosesK``, protocol.py)
three things each round, and hands the drafter a fourth:

    next_k(unseen, context) -> K         how many guesses to draft (0: a plain round)
    probe() -> bool                      asked in a plain round only: draft one unverified guess to measure it?
    observe(drafted, accepted, t_draft, t_verify, probed, nodes)     how the round went
    keep(j, reach) -> bool               handed to ``drafter.propose``: the early stop before guess j (None: none)

A tree policy (``ChoosesTrees``) is asked ``next_shape(unseen, context) -> (width, depth)`` (or, for a dynamic
tree, the ``DynamicTree`` to grow) instead of ``next_k``,
and has no ``keep``; ``start_run`` reads its ``max_room`` (the most nodes a tree takes in the cache). ``Run.result``
lists the ``calibrations`` of a ``Calibrated`` policy (every shipped one); the CLI also reads its ``slowdown``, and
the cost model of one that ``ChoosesByCost``.

``FixedK`` is the textbook policy. ``AutoK`` (``k="auto"``, auto_k.py), ``TreePolicy`` (``tree="auto"``,
tree_policy.py) and, for a drafter that grows EAGLE-2's dynamic tree, ``AutoDynamicTree`` (dynamic_tree_policy.py)
choose from a cost model fed by measured costs (costs.py: each a calibration, calibration.py, of a timing,
timing.py) and acceptance estimates (acceptance.py).
None of them changes the output distribution: every token still comes from the rejection rule.

Seeds. The policy decides how many random numbers a round draws (one per guess drafted, one per
check), so a seeded run reproduces its output only if its policy makes the same choices. With a
``seed`` at T > 0, ``start_run`` (rounds.py) therefore builds the automatic policies with
``learn=False``: they choose from the calibrated costs and the acceptances they observe, never from
this run's clock. Greedy runs (T = 0) follow their clock whatever the seed: their output does not
depend on K. Nor do runs of a keyed rule (``rule="coupled"``, keyed.py), whose tokens are keyed by seed and
position: they follow their clock too. Unseeded runs follow it too, and fall back to plain rounds when drafting runs slower than
predicted (auto_k.py). ``minispec generate`` seeds every run (``--seed``, default 0) and asks the same rule
(``follows_clock``), so at T > 0 its automatic policies keep their calibrated costs.

The calibration a run uses is settled when its process first needs it (calibration.py): from memory; else from the
attached store (the CLI attaches the lab's disk store, harness/calibration_store.py; a library caller may call its
``use_disk_store()``), checked against physics and reconciled with one cheap probe; else measured. The run's result
lists the calibrations it used (``SpecResult.calibration``). So a seeded ``k="auto"`` run repeats its tokens exactly
in the same process, and in another process that uses the same calibration: ``MINISPEC_TRUST_CALIBRATION=1`` uses
the stored one without the probe (the physics checks still apply). What else can change them: another machine, a
cleared store or none attached (``MINISPEC_NO_CALIBRATION_CACHE=1`` keeps the CLI's in memory), another NumPy,
kernel (model/kernel.py: each has its own calibration), thread count or device, and a policy object passed in by the
caller (used as it is). Fixed K and fixed trees never depend on timings. The output *distribution* never depends on
the calibration, nor on K at all: every
token comes from the rejection rule.
"""

from __future__ import annotations

import numpy as np

from ..drafters.dynamic_tree import DynamicTree
from ..drafters.protocol import GrowsTrees, has
from .acceptance import Acceptance, PerContext, expected_tokens, run_length
from .auto_k import AutoK, FixedK, ProbeBudget, StoppedK, auto_k, probe_cost, stopped_k
from .calibration import Calibration, disagreed, notes_of
from .costs import drafter_calibration, drafter_costs, level_calibration, verify_calibration
from .dynamic_tree_policy import AutoDynamicTree, DynamicTreePolicy, auto_dynamic_tree
from .protocol import Calibrated, ChoosesByCost, ChoosesK, ChoosesTrees, calibrations_of
from .timing import forward_times, guess_time
from .tree_policy import TreePolicy, auto_tree_policy

__all__ = ["Acceptance", "AutoDynamicTree", "AutoK", "Calibrated", "Calibration", "ChoosesByCost", "ChoosesK", "ChoosesTrees",
           "DynamicTreePolicy", "FixedK", "PerContext", "ProbeBudget", "StoppedK", "TreePolicy",
           "auto_dynamic_tree", "auto_k", "auto_tree_policy", "calibrations_of", "drafter_calibration",
           "drafter_costs", "expected_tokens", "follows_clock", "forward_times", "guess_time", "k_policy",
           "level_calibration", "disagreed", "notes_of", "probe_cost", "run_length", "shape_policy", "stopped_k",
           "verify_calibration"]


def follows_clock(seed, temperature: float, keyed: bool = False) -> bool:
    """Whether a run's automatic policy may learn from its own clock (``learn``): unless a seed at T > 0 must repeat
    its draws from a stream ("Seeds" above); ``keyed``: the rule races on keyed noise, which no choice of K moves.
    The loops and the CLI both ask this."""
    return seed is None or temperature == 0 or keyed


def k_policy(k, target, drafter, learn: bool = True):
    """k: an int (fixed K), "auto" (AutoK, calibrated for this pair), or a policy object. ``learn=False``:
    an automatic policy keeps its calibrated costs instead of following this run's timings (seeded runs)."""
    if isinstance(k, str) and k == "auto":
        return auto_k(target, drafter, learn=learn)
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
        if k < 0:
            raise ValueError(f"k must be a non-negative integer or 'auto', got {k}")
        return FixedK(int(k))
    if isinstance(k, ChoosesK):
        return k
    raise ValueError(f"k must be a non-negative integer, 'auto' or a policy object, got {k!r}")


def shape_policy(shape, target, drafter, learn: bool = True, sampled: bool = False) -> ChoosesTrees:
    """shape: (width, depth), a ``DynamicTree`` (EAGLE-2's, the same every round), "auto" (TreePolicy chosen per
    round, calibrated for this pair), or a tree policy object (``ChoosesTrees``). ``learn``: as for ``k_policy``;
    ``sampled``: the run draws its tokens (T > 0), which an automatic dynamic tree sizes its first growth by."""
    if isinstance(shape, ChoosesTrees):
        return shape
    if isinstance(shape, DynamicTree):
        return DynamicTreePolicy(shape)
    if isinstance(shape, str) and shape == "auto":  # a drafter that grows EAGLE-2's tree: sized by the cost model
        if has(drafter, GrowsTrees):
            return auto_dynamic_tree(target, drafter, learn=learn, sampled=sampled)
        return auto_tree_policy(target, drafter, learn=learn)
    if not (isinstance(shape, (tuple, list)) and len(shape) == 2):
        raise ValueError(f"tree shape must be (width, depth) with non-negative integers, 'auto' or a tree policy, "
                         f"got {shape!r}")
    return TreePolicy.fixed(shape[0], shape[1])
