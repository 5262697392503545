"""What a Monte Carlo check states beside its verdict: the total-variation distance it saw, how much of that is
noise, and the smallest distance it would have caught.

Counts of N outcomes over cells are tested against the exact law with the chi-square goodness of fit
(``equivalence.chisquare_gof``: cells expected fewer than 5 times pooled, a pool still under 5 joined to the smallest
cell, a draw the law forbids fails outright).

    tv          0.5 sum |counts / N - law| on the cells: the plug-in distance (biased up by noise)
    tv_noise    the mean plug-in distance of N draws from the law itself: what a correct peer shows
    tv_se       its bootstrap standard error (counts redrawn from their own frequencies)
    tv_80       the power statement: any departure whose distance on the pooled cells is at least tv_80 is caught
                with probability >= 0.8 at the test's alpha. A departure of chi-square divergence D gives a
                noncentral chi-square with noncentrality N D; TV <= sqrt(D) / 2, so TV >= tv_80 = sqrt(lambda_80 / N) / 2
                forces D >= lambda_80 / N, whatever its shape (the large-N approximation of the chi-square test).
    no_power    too few draws for the test: pooling left one cell where the law has several, so only a draw the
                law forbids can fail it; tv_80 is then 1 (a departure with all its mass where the law has none)
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, stats

from ..equivalence import chisquare_gof

MIN_EXPECTED = 5.0


def pooled_cells(law: np.ndarray, n: int) -> int:
    """How many cells the test keeps at ``n`` draws (those expected fewer than 5 times pooled into one)."""
    expected = law * n
    small = (expected < MIN_EXPECTED) & (expected > 0)
    return int((expected >= MIN_EXPECTED).sum() + (small.sum() > 0))


def detectable_tv(df: int, n: int, alpha: float, power: float = 0.8) -> float:
    """tv_80 (module docstring) for a chi-square test with ``df`` degrees of freedom on ``n`` draws."""
    if df < 1:
        return float("nan")
    crit = stats.chi2.ppf(1 - alpha, df)
    lam = optimize.brentq(lambda x: stats.ncx2.sf(crit, df, x) - power, 1e-6, 1e6)
    return float(np.sqrt(lam / n) / 2)


def compare_counts(counts: np.ndarray, law: np.ndarray, alpha: float, seed: int = 0, repeats: int = 200) -> dict:
    """The test of ``counts`` [C] against ``law`` [C], and the figures of the module docstring."""
    n = int(counts.sum())
    chi2, df, p = chisquare_gof(counts, law, MIN_EXPECTED)
    no_power = bool(np.isnan(p)) and int((law > 0).sum()) > 1  # (bug: stated the power of a test of two cells)
    if np.isnan(p):  # one cell after pooling: no test but that of a draw the law forbids (chi2 inf, p 0)
        p = 1.0
    freq = counts / n
    g = np.random.default_rng(seed)
    noise = 0.5 * np.abs(g.multinomial(n, law / law.sum(), size=repeats) / n - law).sum(-1)
    boot = 0.5 * np.abs(g.multinomial(n, freq, size=repeats) / n - law).sum(-1)
    df_expected = max(pooled_cells(law, n) - 1, 1)
    return dict(draws=n, chi2=chi2, df=df, p_value=p, passed=bool(p > alpha), alpha=alpha,
                tv=float(0.5 * np.abs(freq - law).sum()), tv_noise=float(noise.mean()), tv_se=float(boot.std()),
                tv_80=1.0 if no_power else detectable_tv(df_expected, n, alpha), no_power=no_power)
