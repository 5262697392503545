"""The rule check: a peer's rule on every generated case (cases.py), by its exact law where it draws from the
generator it is given, else by Monte Carlo of stated power.

What is compared, for either mode: the law of the first m tokens of the output when a round's emitted tokens
(the kept guesses, then next_token) are continued by sampling the target. Losslessness says it is the target's own
law of m tokens, whatever the rule keeps (exact_law.py: ``continued_law`` against ``joint_law``). m = K + 1 covers
every token a round can emit, the bonus included.

    exact        exact_law.round_law with the peer given a SymbolicGenerator (symbolic.py): every branch of its
                 draws followed, so the distance is exact; it passes when TV <= EXACT_TOL (float rounding). Used when
                 the peer is deterministic given its generator (two calls with equal seeds agree; on each case the
                 generators it can name keep their state, and a failing case walked again gives the same law) and
                 the walk can follow how it draws; otherwise the reason is stated and
    monte carlo  N rounds per case, guesses drawn from q by the kit, the peer given a seeded Generator; the counts
                 of the first m tokens (V^m <= MAX_CELLS) against the exact law (stats.py), Bonferroni over the cases
                 at ALPHA overall, with the distance each case would have caught (tv_80).

A call that raises, runs past ``limit_s``, or returns the wrong shape, type or a token outside the vocabulary fails
its case with what happened (contract.py). Cases run smallest first, so the first failing case is the smallest.
"""

from __future__ import annotations

import pickle
import random
import time
from contextlib import nullcontext

import numpy as np

from ... import sampling
from ..check import ALPHA
from ..exact_law import continued_law, joint_law, round_law, samples_recorded
from ..progress import Progress
from .cases import Case, generated_cases
from .contract import PeerFault, guarded, rule_outcome
from .stats import compare_counts
from .symbolic import NotSymbolic, SymbolicGenerator

EXACT_TOL = 1e-6  # float rounding in a peer's arithmetic; a planted bug's distance is 1e-3 or more
MAX_CELLS = 81
DRAWS = {False: 2000, True: 20000}  # Monte Carlo rounds per case: default, --thorough
PROBES = 8  # calls per case, each made twice, in ``deterministic``
CONFIRMING_WALKS = 4  # more exact walks of a failing case, each a chance for randomness of the rule's own to show


def exact_tv(rule, case: Case, limit_s) -> tuple[float, float]:
    """-> (TV of the continued law from the target's, expected guesses kept) for one case, exactly. Raises
    NotSymbolic or PeerFault when the walk cannot follow the peer, and NotSymbolic when the rule draws randomness of
    its own, which ``deterministic``'s calls can miss (bug: the draws of such a rule were taken for its law, and a
    lossless rule failed exactly): the case then goes to Monte Carlo. Seen two ways:
        a generator the rule can name (``generator_states``) is in another state after the walk;
        a case whose TV is over EXACT_TOL is walked CONFIRMING_WALKS times more, and one of them gives another law.
    A rule whose hidden draws happen to agree on every walk is taken for deterministic there: each walk makes that
    less likely. A passing law needs no second walk: draws of its own would have had to land on the target's law."""
    K, V = case.K, case.V

    def walked(target_probs, draft_probs, draft_tokens, rng):
        out = guarded(rule, (target_probs, draft_probs, draft_tokens, SymbolicGenerator(rng)), limit_s,
                      passthrough=(NotSymbolic,))
        if rng.refused:  # the peer caught the walk's NotSymbolic and answered anyway
            raise NotSymbolic(rng.refused)
        return rule_outcome(out, K, V, allow_recorded=rng.sampled is not None)

    own = getattr(rule, "__globals__", {}).get("sample") is sampling.sample  # the peer samples with minispec's sample
    before = generator_states(rule)
    with samples_recorded(rule) if own else nullcontext():
        law, kept = round_law(walked, case.p_of, case.q_of, K, V)
        if generator_states(rule) != before:
            raise NotSymbolic("it drew from a generator of its own (its module's, its closure's, or NumPy's or Python's "
                              "global one)")
        tv = 0.5 * float(np.abs(continued_law(law, case.p_of, K + 1, V) - joint_law(case.p_of, K + 1, V)).sum())
        for _ in range(CONFIRMING_WALKS if tv > EXACT_TOL else 0):
            again, _ = round_law(walked, case.p_of, case.q_of, K, V)
            if again.keys() != law.keys() or any(not np.allclose(again[k], law[k], rtol=0, atol=1e-12) for k in law):
                raise NotSymbolic("two exact walks of one case gave two laws: it draws randomness of its own")
    return tv, kept


def generator_states(rule) -> bytes:
    """The states of the random generators ``rule`` can name, pickled: NumPy's and Python's in its module's globals
    and its closure, and the global ones of both."""
    names = list(getattr(rule, "__globals__", {}).values())
    for cell in getattr(rule, "__closure__", None) or ():
        try:
            names.append(cell.cell_contents)
        except ValueError:  # a cell not filled yet
            pass
    kinds = (np.random.Generator, np.random.RandomState, random.Random)
    return pickle.dumps(([x for x in names if isinstance(x, kinds)], np.random.get_state(), random.getstate()))


def deterministic(rule, cases, limit_s) -> bool:
    """Two calls with generators of equal seed agree, PROBES times on every case, with guesses drawn from the draft's
    q: the rule seems to draw only from its generator (bug: 7 calls, each with the draft's most likely guesses, missed
    a rule that draws from a generator of its own only after a late rejection). Randomness of its own on a branch
    that these calls miss is left to ``exact_tv``, case by case."""
    kit = np.random.default_rng(0)
    for j, case in enumerate(cases):
        for r in range(PROBES):
            xs = []
            for _ in range(case.K):
                xs.append(sampling.sample(case.q_of(tuple(xs)), kit))
            t, d = case.tables(xs)
            answers = [guarded(rule, (t, d, list(xs), np.random.default_rng([j, r])), limit_s) for _ in range(2)]
            if repr(answers[0]) != repr(answers[1]):
                return False
    return True


def tokens_of(V: int, K: int) -> int:
    """m for Monte Carlo: K + 1 tokens, or fewer where V^m would pass MAX_CELLS."""
    m = K + 1
    while m > 1 and V ** m > MAX_CELLS:
        m -= 1
    return m


def mc_case(rule, case: Case, draws: int, alpha: float, seed: int, limit_s) -> dict:
    """One case by Monte Carlo (module docstring)."""
    K, V = case.K, case.V
    m = tokens_of(V, K)
    kit, peer_rng = np.random.default_rng([seed, K, V, 0]), np.random.default_rng([seed, K, V, 1])
    counts = np.zeros(V ** m)
    for _ in range(draws):
        xs = []
        for _ in range(K):
            xs.append(sampling.sample(case.q_of(tuple(xs)), kit))
        t, d = case.tables(xs)
        out = guarded(rule, (t, d, list(xs), peer_rng), limit_s)
        n, nxt = rule_outcome(out, K, V)
        seq = xs[:n] + [nxt]
        while len(seq) < m:
            seq.append(sampling.sample(case.p_of(tuple(seq)), kit))
        counts[np.ravel_multi_index(tuple(seq[:m]), (V,) * m)] += 1
    return dict(tokens=m, **compare_counts(counts, joint_law(case.p_of, m, V), alpha, seed))


def check_rule(rule, thorough: bool = False, limit_s: float | None = 10.0, seed: int = 0, progress: bool = True,
               mode: str = "auto", cases: list[Case] | None = None, draws: int | None = None) -> dict:
    """The rule check's report (report.py formats it). ``mode``: "auto" (exact where possible) or "mc". A case whose
    exact walk fails (the peer drew in a way the walk cannot follow there, or failed on a symbolic draw) is run by
    Monte Carlo instead, with a real generator: a fault is then the peer's own, and the row says why."""
    cases = cases if cases is not None else generated_cases(thorough)
    t0 = time.perf_counter()
    name = getattr(rule, "__qualname__", getattr(rule, "__name__", repr(rule)))
    why = None
    if mode == "auto":
        try:
            why = None if deterministic(rule, cases, limit_s) else "two calls with equal seeds disagree: it draws " \
                                                                   "randomness of its own"
        except PeerFault as e:
            why = f"a call with a real generator failed ({e})"
        if why is None:
            try:
                exact_tv(rule, cases[0], limit_s)
            except NotSymbolic as e:
                why = f"it uses its generator in a way the exact walk cannot follow ({e})"
            except PeerFault as e:
                why = f"the exact walk failed ({e})"
    exact = mode == "auto" and why is None
    draws = draws or DRAWS[thorough]
    alpha = ALPHA / len(cases)
    bar = Progress(len(cases), f"conform rule {name} ({'exact' if exact else 'monte carlo'})", quiet=not progress)
    rows, timeouts = [], 0
    for case in cases:
        c0 = time.perf_counter()
        row = dict(case=case.describe())
        try:
            if exact:
                try:
                    tv, kept = exact_tv(rule, case, limit_s)
                    row.update(tv=tv, expected_kept=kept, passed=tv <= EXACT_TOL)
                except (PeerFault, NotSymbolic) as e:
                    row.update(mc_case(rule, case, draws, alpha, seed, limit_s), monte_carlo_because=str(e))
            else:
                row.update(mc_case(rule, case, draws, alpha, seed, limit_s))
        except PeerFault as e:
            row.update(passed=False, fault=e.kind, detail=e.detail)
            timeouts += e.kind == "timeout"
        row["seconds"] = time.perf_counter() - c0
        rows.append(row)
        bar.update()
        if timeouts >= 3:
            break
    bar.close()
    failing = [r for r in rows if not r["passed"]]
    tvs = [r["tv"] for r in rows if "tv" in r and not (exact and "monte_carlo_because" in r)]  # exact ones, if exact
    return dict(level="rule", function=name, mode="exact" if exact else "monte carlo", mode_reason=why,
                passed=not failing and len(rows) == len(cases), cases=len(cases), cases_run=len(rows),
                failed=len(failing), alpha=ALPHA, exact_tol=EXACT_TOL if exact else None,
                draws_per_case=draws if not exact or any("monte_carlo_because" in r for r in rows) else None, max_tv=max(tvs) if tvs else None,
                tv_80_max=max((r["tv_80"] for r in rows if "tv_80" in r), default=None),
                smallest_failing=failing[0] if failing else None, seconds=time.perf_counter() - t0, results=rows)
