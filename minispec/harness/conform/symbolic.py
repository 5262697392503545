"""A generator whose draws are symbolic, for a peer's rule: the exact law where the rule draws from the generator it
is given (exact_law.py walks every branch).

``SymbolicGenerator(branching)`` stands in for the ``numpy.random.Generator`` a rule is given:
    random()           a uniform whose comparisons branch (exact_law.SymbolicUniform); scaling it by a positive
                       number (``u * total``, an inverse CDF by hand) keeps it symbolic
    uniform(lo, hi)    the same, on [lo, hi)
    choice(n, p=row)   a categorical draw: every option is a branch. ``p`` is checked as ``Generator.choice`` checks
                       it (``choice_probabilities``), and a p it refuses raises its ValueError: the walk never
                       follows a draw that a real generator would refuse
Anything else (``integers``, ``random(size)``, ``float(u)``: a draw that leaves the generator as a number, or
seeds another generator) raises ``NotSymbolic``: the kit then checks the rule by Monte Carlo. Every NotSymbolic is
noted on the walk's BranchingRng (``refuse``), so a rule that catches it is refused after its call all the same.
"""

from __future__ import annotations

import operator

import numpy as np

from ..exact_law import NotSymbolic, SymbolicUniform


class SymbolicDraw(SymbolicUniform):
    def __mul__(self, c):
        return Scaled(self, float(c))

    __rmul__ = __mul__

    def __float__(self):
        raise self.rng.refuse("a uniform was turned into a number")

    __int__ = __index__ = __float__

    def __array__(self, *a, **k):
        raise self.rng.refuse("a uniform was put in an array")

    def __add__(self, other):
        raise self.rng.refuse("arithmetic on a uniform other than scaling")

    __radd__ = __sub__ = __rsub__ = __truediv__ = __rtruediv__ = __neg__ = __add__

    def item(self):
        raise self.rng.refuse("a uniform was turned into a number")


class Scaled:
    """c * u for a symbolic u and c > 0: c * u < h is u < h / c."""

    def __init__(self, u, c):
        if not c > 0:
            raise u.rng.refuse("a uniform scaled by a number <= 0")
        self.u, self.c = u, c

    def __lt__(self, h):
        return self.u < float(h) / self.c

    __le__ = __lt__

    def __gt__(self, h):
        return not self < h

    __ge__ = __gt__

    def __mul__(self, c):
        return Scaled(self.u, self.c * float(c))

    __rmul__ = __mul__

    def __float__(self):
        raise self.u.rng.refuse("a uniform was turned into a number")

    __int__ = __index__ = __float__


def choice_probabilities(a, p) -> np.ndarray:
    """``p`` as ``numpy.random.Generator.choice(a, p=p)`` takes it, with the ValueErrors it raises: ``a`` a positive
    integer or a sequence, p one-dimensional with one entry per option, no NaN, none negative, summing to 1 within
    sqrt(eps) of float64 (of p's own float type, if coarser). A real generator then draws from p scaled by its sum,
    as BranchingRng.choose does (bug: p was divided by its sum unchecked, so a rule that passed an unnormalised
    residual, which a real generator refuses, was walked as if it had normalised it, and passed exactly)."""
    if np.ndim(a) == 0:
        try:
            n = operator.index(a)
        except TypeError:
            raise ValueError(f"a must be a sequence or an integer, not {type(a)}") from None
        if n <= 0:
            raise ValueError("a must be a positive integer unless no samples are taken")
    else:
        n = len(a)
    atol = np.sqrt(np.finfo(np.float64).eps)
    if isinstance(p, np.ndarray) and np.issubdtype(p.dtype, np.floating):
        atol = max(atol, np.sqrt(np.finfo(p.dtype).eps))
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError("p must be 1-dimensional")
    if p.size != n:
        raise ValueError("a and p must have same size")
    total = p.sum()
    if np.isnan(total):
        raise ValueError("Probabilities contain NaN")
    if (p < 0).any():
        raise ValueError("Probabilities are not non-negative")
    if abs(total - 1.0) > atol:
        raise ValueError(f"Probabilities do not sum to 1 (they sum to {total!r}; numpy.random.Generator.choice "
                         "refuses this row)")
    return p


class SymbolicGenerator:
    """What a peer's rule is given in the exact walk (module docstring). ``branching``: exact_law.BranchingRng."""

    def __init__(self, branching):
        self._b = branching

    @property
    def sampled(self):  # exact_law.record_sample's row, when a rule samples with minispec's ``sample``
        return self._b.sampled

    @sampled.setter
    def sampled(self, row):
        self._b.sampled = row

    def refuse(self, why: str) -> NotSymbolic:  # for exact_law.record_sample, when a rule samples with ``sample``
        return self._b.refuse(why)

    def random(self, size=None, dtype=None, out=None):
        if size is not None or out is not None:
            raise self._b.refuse("random(size): an array of draws")
        return SymbolicDraw(self._b)

    def uniform(self, low=0.0, high=1.0, size=None):
        if size is not None or low != 0.0:
            raise self._b.refuse("uniform with a size or a low bound other than 0")
        return Scaled(SymbolicDraw(self._b), high) if high != 1.0 else SymbolicDraw(self._b)

    def choice(self, a, size=None, replace=True, p=None, **kw):
        if size is not None or p is None:
            raise self._b.refuse("choice without p, or with a size")
        p = choice_probabilities(a, p)  # a ValueError, as a real generator raises: the peer's own fault
        options = np.arange(a) if np.ndim(a) == 0 else np.asarray(a)
        return options[self._b.choose(p)]

    def __getattr__(self, name):
        raise self._b.refuse(f"the rule called rng.{name}")
