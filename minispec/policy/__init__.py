"""The policy: how many guesses to draft each round (or which tree), and when to stop early.

The loops never look inside a policy; their ``Run`` (rounds.py) asks it four things:

    next_k(unseen, context) -> K         a tree policy: next_shape(unseen, context) -> (width, depth)
    keep(j, reach) -> bool               the early stop before guess j (or ``keep = None``: none)
    probe() -> bool                      in a plain round: draft one unverified guess to measure it?
    observe(drafted, accepted, t_draft, t_verify, probed, nodes)     how the round went

``FixedK`` is the textbook policy. ``AutoK`` (``k="auto"``) and ``TreeShape`` (``tree="auto"``)
choose from a cost model fed by measured costs (costs.py) and acceptance estimates (acceptance.py).
None of them changes the output distribution: every token still comes from the rejection rule.
"""

from __future__ import annotations

import numpy as np

from .acceptance import Acceptance, PerContext, expected_tokens, run_length
from .auto_k import AutoK, FixedK, ProbeBudget, StoppedK, auto_k, probe_cost, stopped_k
from .costs import calibrate, calibrate_verify, drafter_costs, forward_times
from .tree_shape import TreeShape, auto_tree_shape

__all__ = ["Acceptance", "AutoK", "FixedK", "PerContext", "ProbeBudget", "StoppedK", "TreeShape", "auto_k", "auto_tree_shape",
           "calibrate", "calibrate_verify", "drafter_costs", "expected_tokens", "forward_times", "k_policy", "probe_cost",
           "run_length", "stopped_k", "tree_policy"]


def k_policy(k, target, drafter):
    """k: an int (fixed K), "auto" (AutoK, calibrated for this pair), or a policy object."""
    if isinstance(k, str) and k == "auto":
        return auto_k(target, drafter)
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
        if k < 0:
            raise ValueError(f"k must be a non-negative integer or 'auto', got {k}")
        return FixedK(int(k))
    if all(hasattr(k, m) for m in ("next_k", "observe", "probe", "keep")):
        return k
    raise ValueError(f"k must be a non-negative integer or 'auto', got {k!r}")


def tree_policy(shape, target, drafter) -> TreeShape:
    """shape: (width, depth), "auto" (TreeShape chosen per round, calibrated for this pair), or a TreeShape."""
    if isinstance(shape, TreeShape):
        return shape
    if isinstance(shape, str) and shape == "auto":
        return auto_tree_shape(target, drafter)
    ok = (isinstance(shape, (tuple, list)) and len(shape) == 2
          and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0 for x in shape))
    if not ok:
        raise ValueError(f"shape must be (width, depth) with non-negative integers, 'auto' or a TreeShape, got {shape!r}")
    return TreeShape.fixed(int(shape[0]), int(shape[1]))
