"""A generator whose draws are symbolic, for a peer's rule: the exact law where the rule draws from the generator it
is given (exact_law.py walks every branch).

``SymbolicGenerator(branching)`` stands in for the ``numpy.random.Generator`` a rule is given:
    random()           a uniform whose comparisons branch (exact_law.SymbolicUniform); scaling it by a positive
                       number (``u * total``, an inverse CDF by hand) keeps it symbolic
    uniform(lo, hi)    the same, on [lo, hi)
    choice(n, p=row)   a categorical draw: every token is a branch
Anything else (``integers``, ``random(size)``, ``float(u)``: a draw that leaves the generator as a number, or
seeds another generator) raises ``NotSymbolic``: the kit then checks the rule by Monte Carlo.
"""

from __future__ import annotations

import numpy as np

from ..exact_law import NotSymbolic, SymbolicUniform


class SymbolicDraw(SymbolicUniform):
    def __mul__(self, c):
        return Scaled(self, float(c))

    __rmul__ = __mul__

    def __float__(self):
        raise NotSymbolic("a uniform was turned into a number")

    __int__ = __index__ = __float__

    def __array__(self, *a, **k):
        raise NotSymbolic("a uniform was put in an array")

    def __add__(self, other):
        raise NotSymbolic("arithmetic on a uniform other than scaling")

    __radd__ = __sub__ = __rsub__ = __truediv__ = __rtruediv__ = __neg__ = __add__

    def item(self):
        raise NotSymbolic("a uniform was turned into a number")


class Scaled:
    """c * u for a symbolic u and c > 0: c * u < h is u < h / c."""

    def __init__(self, u, c):
        if not c > 0:
            raise NotSymbolic("a uniform scaled by a number <= 0")
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
        raise NotSymbolic("a uniform was turned into a number")

    __int__ = __index__ = __float__


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

    def random(self, size=None, dtype=None, out=None):
        if size is not None or out is not None:
            raise NotSymbolic("random(size): an array of draws")
        return SymbolicDraw(self._b)

    def uniform(self, low=0.0, high=1.0, size=None):
        if size is not None or low != 0.0:
            raise NotSymbolic("uniform with a size or a low bound other than 0")
        return Scaled(SymbolicDraw(self._b), high) if high != 1.0 else SymbolicDraw(self._b)

    def choice(self, a, size=None, replace=True, p=None, **kw):
        if size is not None or p is None:
            raise NotSymbolic("choice without p, or with a size")
        options = np.arange(a) if np.ndim(a) == 0 else np.asarray(a)
        return options[self._b.choose(np.asarray(p, dtype=np.float64))]

    def __getattr__(self, name):
        raise NotSymbolic(f"the rule called rng.{name}")
