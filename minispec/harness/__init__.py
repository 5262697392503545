"""The measuring harness: everything that checks or measures the library, never used by it.

    check.py        ``minispec check``: level-4 losslessness on the real target
    equivalence.py  exact output distributions, chi-square tests and a deliberately broken rule
    study.py        ``minispec bench``: acceptance, speedup, r(n), c and memory per drafter and K
    bench.py        the ``minispec bench`` commands (study, forward, decode, draft, stop)
    draft_eval.py   ``minispec bench draft``: a draft model's acceptance by position and confidence
    stop_eval.py    ``minispec bench stop``: the early stop, measured
    measure.py      timing side by side, the weight-streaming floor, memory
    prompts.py      the evaluation prompt sets (minispec/data/)
    first_guess.py  a drafter's teacher-forced first guess, for level 4's acceptance statistic

The recipes that trained the shipped drafters are in recipes/.
"""
