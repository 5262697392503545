"""The cost model's inputs for a target and a drafter: each one calibration (calibration.py) of one timing
(timing.py).

    t_verify(n)   seconds of one target pass over n new tokens (the last token plus K = n - 1 guesses):
                  ``verify_calibration(model, ns)``, {n: seconds}
    r(n)          t_verify(n) / t_verify(1): how much dearer verifying n - 1 guesses is than one step
    t_draft       seconds per guess, and per token the drafter catches up on: ``drafter_calibration(drafter)``,
                  {"guess": seconds, "fed": seconds}; ``drafter_costs(drafter)`` reads the two
    c             t_draft / t_verify(1), the cost ratio of the papers
    a tree level  seconds of one level of w nodes of a drafter's tree: ``level_calibration(drafter)``, {w: seconds}

Measured, never assumed, and validated before use (calibration.py).
"""

from __future__ import annotations

import numpy as np

from ..drafters.protocol import HasModel, TimesItsTreeLevels, has
from .calibration import REPEATS, Calibration, calibrated, calibration_key, check_drafter, check_verify
from .timing import forward_times, guess_time, self_timed_costs, tree_level_times

SELF_TIMED = ("guess", "fed", "in a round")  # the key of a drafter's own timings (TimesItself); "in a round": named
# when the EAGLE head's hook began to time its guesses as a round of the loop runs them, label and early stop included
# (drafters/eagle.py), so that figures stored before, timed the old way, are not reused (every drafter that times
# itself is timed afresh once)

__all__ = ["drafter_calibration", "drafter_costs", "level_calibration", "verify_calibration"]


def verify_calibration(model, ns, fresh: bool = False) -> Calibration:
    """t(n) of a pass over n new tokens after 64 cached ones, for each n in ``ns`` (module docstring)."""
    ns = tuple(int(n) for n in ns)
    probe_ns = tuple(sorted({ns[0], ns[-1]}))
    return calibrated(calibration_key(model, ns), f"t(n) of {model.name}",
                      lambda: forward_times(model, ns, context=64, repeats=REPEATS, warmup=1), check_verify,
                      lambda: forward_times(model, probe_ns, context=64, repeats=2, warmup=1), ns, fresh)


def drafter_calibration(drafter, fresh: bool = False) -> Calibration | None:
    """{"guess": seconds per guess, "fed": seconds per token caught up} of a drafter with a model, keyed by its
    model (a new drafter around the same model reuses the figures); None for one without (prompt lookup
    costs microseconds: its rounds measure it)."""
    timed = self_timed_costs(drafter)  # an EAGLE head, a draft with its own tokenizer: timed on their own inputs
    if timed is not None:
        return calibrated(calibration_key(drafter, SELF_TIMED), f"guesses of {drafter.name}",
                          lambda: dict(zip(("guess", "fed"), timed(REPEATS))), check_drafter,
                          lambda: dict(zip(("guess", "fed"), timed(1))), ("guess", "fed"), fresh)
    model = drafter.model if has(drafter, HasModel) else None
    if model is None:
        return None
    n = min(64, model.cfg.max_position_embeddings // 2)
    context = [int(t) for t in np.random.default_rng(0).integers(0, model.cfg.vocab_size, n)]
    fed_n = min(32, model.cfg.max_position_embeddings)  # a pass over fed_n tokens, per token

    def measure(repeats):
        fed = forward_times(model, (fed_n,), context=64, repeats=repeats, warmup=1)[fed_n] / fed_n
        return dict(guess=guess_time(drafter, context, repeats=repeats, warmup=1), fed=fed)

    return calibrated(calibration_key(model, ("guess", "fed")), f"guesses of {drafter.name}", lambda: measure(REPEATS),
                      check_drafter, lambda: measure(2), ("guess", "fed"), fresh)


def level_calibration(drafter, fresh: bool = False) -> Calibration | None:
    """{w: seconds} of one tree level of w nodes, w = 1..4: a drafter's own level times (its cost hook; an EAGLE head
    times itself on random features), or else its model's pass over w tokens; None for a drafter with neither (its
    levels are then costed by its guesses: policy/tree_policy.py)."""
    if has(drafter, TimesItsTreeLevels):
        return calibrated(calibration_key(drafter, ("level", 1, 2, 3, 4)), f"tree levels of {drafter.name}",
                          lambda: tree_level_times(drafter, range(1, 5), REPEATS), check_verify,
                          lambda: tree_level_times(drafter, (1, 4), 1), range(1, 5), fresh)
    return verify_calibration(drafter.model, range(1, 5), fresh) if has(drafter, HasModel) else None


def drafter_costs(drafter) -> tuple[float, float]:
    """(seconds per guess, seconds per token fed when catching up) of ``drafter_calibration``; zeros without one."""
    cal = drafter_calibration(drafter)
    return (0.0, 0.0) if cal is None else (float(cal.times["guess"]), float(cal.times["fed"]))
