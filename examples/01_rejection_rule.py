"""The rejection rule on a toy vocabulary: the exact output distribution, and a sampled one, equal p.

    python examples/01_rejection_rule.py [--draws 20000]

A draft q that disagrees with the target p proposes a token; accept_reject keeps it with
probability min(1, p/q) or resamples from norm(max(0, p - q)). Whatever q is, the emitted token
is distributed as p. Resampling from p instead (a classic bug) is not.
"""

import argparse

import numpy as np

from minispec import rejection
from minispec.equivalence import chisquare_gof, exact_first_token_distribution
from minispec.rejection import accept_reject
from minispec.sampling import sample

p = np.array([0.50, 0.30, 0.15, 0.05])  # the target's distribution
q = np.array([0.10, 0.20, 0.30, 0.40])  # a draft that disagrees with it
target_probs = np.stack([p, np.full(4, 0.25)])  # K = 1: p_1, and p_2 for the bonus token
draft_probs = q[None, :]


def broken(target_row, draft_row):
    return target_row / target_row.sum()


def sampled(draws, rng):
    counts = np.zeros(4)
    for _ in range(draws):
        x = sample(q, rng)
        n, t = accept_reject(target_probs, draft_probs, [x], rng)
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
    print("acceptance E[min(p,q)] =", np.minimum(p, q).sum())
    print("exact output        ", exact_first_token_distribution(accept_reject, target_probs, draft_probs))
    counts = sampled(args.draws, rng)
    chi2, dof, pv = chisquare_gof(counts, p)
    print(f"sampled ({args.draws})  ", counts / counts.sum(), f" chi2={chi2:.1f} dof={dof} p={pv:.3g}")
    real, rejection.residual = rejection.residual, broken
    try:
        print("BROKEN rule, exact  ", exact_first_token_distribution(accept_reject, target_probs, draft_probs))
        counts = sampled(args.draws, rng)
    finally:
        rejection.residual = real
    chi2, dof, pv = chisquare_gof(counts, p)
    print("BROKEN rule, sampled", counts / counts.sum(), f" chi2={chi2:.1f} dof={dof} p={pv:.3g}")


if __name__ == "__main__":
    main()
