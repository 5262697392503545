"""The rejection rule on a toy vocabulary: the exact output distribution, and a sampled one, equal p.

    python examples/01_rejection_rule.py [--draws 20000]

A draft q that disagrees with the target p proposes a token; accept_reject keeps it with
probability min(1, p/q) or resamples from norm(max(0, p - q)). Whatever q is, the emitted token
is distributed as p. Resampling from p instead (a classic bug) is not: the example shows both, exactly
and by sampling, and ends with a verdict.
"""

import argparse

import numpy as np

from minispec.harness.equivalence import broken_accept_reject, chisquare_gof
from minispec.harness.exact_law import first_token_law
from minispec.rejection import accept_reject
from minispec.sampling import sample

THRESHOLD = 1e-3  # a sampled check fails when its p-value is below this (the tests use the same)

p = np.array([0.50, 0.30, 0.15, 0.05])  # the target's distribution
q = np.array([0.10, 0.20, 0.30, 0.40])  # a draft that disagrees with it
target_probs = np.stack([p, np.full(4, 0.25)])  # K = 1: p_1, and p_2 for the bonus token
draft_probs = q[None, :]


def sampled(rule, draws, rng):
    counts = np.zeros(4)
    for _ in range(draws):
        x = sample(q, rng)
        n, t = rule(target_probs, draft_probs, [x], rng)
        counts[x if n == 1 else t] += 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=20_000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    np.set_printoptions(precision=4, suppress=True)
    print("target p            ", p)
    print("draft q             ", q)
    print(f"acceptance probability of a guess: sum min(p, q) = {np.minimum(p, q).sum():.2f}")
    results = {}
    for name, rule in (("real rule  ", accept_reject), ("BROKEN rule", broken_accept_reject)):
        exact = first_token_law(rule, target_probs, draft_probs)
        counts = sampled(rule, args.draws, rng)
        chi2, dof, pv = chisquare_gof(counts, p)
        results[name] = (np.abs(exact - p).max(), pv)
        print(f"{name}, exact  ", exact)
        print(f"{name}, sampled", counts / counts.sum(), f" chi2={chi2:.1f} dof={dof} p={pv:.3g}")
    (real_gap, real_p), (broken_gap, broken_p) = results.values()
    print()
    print("What this showed:")
    print(f"- the real rule's exact output equals p (largest difference {real_gap:.1e}); its {args.draws} samples "
          f"give p = {real_p:.3g}: {'PASS' if real_p > THRESHOLD else 'FAIL'} against the threshold {THRESHOLD}. A correct "
          "rule's p-value is uniform on (0, 1): a value this small happens in one run of "
          f"{1 / max(real_p, 1e-12):.0f}, and only p below the threshold is a failure.")
    print(f"- the BROKEN rule samples from p instead of the residual norm(max(0, p - q)) after a rejection. Its exact "
          f"output is off by up to {broken_gap:.3f}, and its samples give p = {broken_p:.3g}: "
          f"{'caught' if broken_p < THRESHOLD else 'NOT caught'} (below {THRESHOLD}).")
    print("- take away: whatever the draft q, accepting with min(1, p/q) and resampling the residual emits exactly p. "
          "The residual is the part of p that q under-covers; resampling p itself counts the covered part twice.")


if __name__ == "__main__":
    main()
