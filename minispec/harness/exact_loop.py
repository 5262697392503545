"""Level 3, exact: the law of the first tokens the engine's loop emits, integrated over every random draw.

``exact_law.py`` integrates one round of a rule. This runs the whole loop, ``speculative_generate`` itself,
unchanged, once for every branch of its randomness:
  * every uniform the rule draws is symbolic (``exact_law.SymbolicUniform``): comparing it with a threshold
    h branches, true with probability h;
  * every ``sample(probs, rng)``, the draft's guesses and the rule's next_token alike, branches over each
    token with its probability instead of drawing one.
A depth-first walk over those decisions visits every path the loop can take; the probability of a path is the
product of its decisions' probabilities. So on a model with a tiny vocabulary the law of the first m tokens
is exact, with the loop's own code, drafter, cache and rule: nothing is written twice. It must equal the
target's own law (``exact_law.joint_law``), to rounding; a broken twin differs by an exact amount.

The loop's generator is replaced after ``start_run`` builds it (``run.stream``: the loop asks ``run.rng`` for every draw,
the drafter's ``draw`` included), and ``sample`` is replaced in every module that calls it by that name, for the duration of one ``loop_law`` call.
"""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np

from .. import sampling, speculative
from .exact_law import paths


def branching_sample(probs, rng):
    """``sampling.sample`` for a BranchingRng: every token with its probability, one branch each."""
    return rng.choose(probs)


def _callers_of_sample(real):
    """Every module that calls ``sampling.sample`` by that name (the library's, ``sampling.Stream`` too, and a
    test's drafter)."""
    return [m for m in list(sys.modules.values()) if getattr(m, "sample", None) is real]


def loop_law(target, make_drafter, prompt, m: int, V: int, generate=None, fresh=None, **kw) -> tuple[np.ndarray, int]:
    """-> (P(first m tokens = y) [V^m], paths walked) for ``generate`` (default ``speculative_generate``) from
    ``prompt`` with a fresh ``make_drafter()`` per path and the keyword arguments ``kw`` (k, temperature, rule,
    ...; no seed: every draw is integrated), plus ``fresh()``'s for each path (a policy with state: k=AutoK(...)).
    Anything that decides by the clock would make paths unrepeatable: give such a policy fixed costs."""
    generate = generate or speculative.speculative_generate
    real_start, real_sample = speculative.start_run, sampling.sample
    callers = _callers_of_sample(real_sample)

    def start_with(rng):
        def start(*a, **k):
            run = real_start(*a, **k)
            run.stream = rng
            return run
        return start

    def one(rng):
        speculative.start_run = start_with(rng)
        tokens = generate(target, make_drafter(), prompt, m, **kw, **(fresh() if fresh else {})).tokens
        return tuple(tokens)

    law = defaultdict(float)
    try:
        for mod in callers:
            mod.sample = branching_sample
        walked = paths(one)
    finally:
        speculative.start_run = real_start
        for mod in callers:
            mod.sample = real_sample
    for tokens, prob in walked:
        if len(tokens) != m:
            raise ValueError(f"a path emitted {len(tokens)} tokens, not {m}: a stop token? (pass stop_ids=())")
        law[tokens] += prob
    out = np.zeros(V ** m)
    for tokens, prob in law.items():
        out[np.ravel_multi_index(tokens, (V,) * m)] = prob
    return out, len(walked)
