"""Level 1 for keyed races: a decision made by races on exponential noise (keyed.py), integrated exactly.

``exact_law.py`` integrates a rule that draws uniforms and compares them with thresholds. A keyed rule draws
nothing: it races, comparing E(x) / row(x) across tokens, with E(x) i.i.d. Exp(1). Each comparison
E(a) / row(a) < E(b) / row(b) is a homogeneous linear inequality in the noise E = (E(0), ..., E(V-1)), so:

  * E / sum(E) is uniform on the simplex (a Dirichlet(1, ..., 1)) and no comparison changes when E is scaled;
  * fixing, for every row, the order in which its tokens' clocks ring cuts the simplex into convex cells, the
    cells of those orders that can hold together; on each cell every race of those rows has one answer;
  * so the probability of a cell is its volume over the simplex's, and a decision made only by those races is
    integrated exactly by running the real code once per cell, on noise from inside it, weighed by that volume.

Volumes come from qhull (``scipy.spatial``), and a point inside each cell from a linear program (the centre of the
largest ball it holds); a cell without one has volume 0. Independent noises (a twin whose draft races on noise of
its own) are independent groups: their cells multiply. Tokens with row(x) = 0 never ring, and take no part in an
order. The cells of V tokens and R rows number at most (V!)^R: ``cells`` refuses V > MAX_V = 4.
"""

from __future__ import annotations

from itertools import permutations, product
from math import factorial

import numpy as np
from scipy.optimize import linprog
from scipy.spatial import ConvexHull, HalfspaceIntersection

from ..keyed import KeyedNoise


class FixedNoise(KeyedNoise):
    """Keyed noise with E given per position: ``noise[i]`` is E at the round's i-th position (missing: all ones).
    ``rows``: {position: the rows whose cells E was taken from}; then racing another row, or at a position not
    given, is refused: its answer would not be constant on the cell, and the integral would be wrong."""

    def __init__(self, noise: dict, rows: dict | None = None):
        super().__init__(0)
        self.given, self.cut_by = noise, rows

    def exponentials(self, i: int, V: int) -> np.ndarray:
        return np.asarray(self.given.get(i, np.ones(V)), dtype=np.float64)

    def race(self, probs, i: int) -> int:
        if self.cut_by is not None and not any(np.array_equal(probs, r) for r in self.cut_by.get(i, [])):
            raise ValueError(f"the rule races a row at position {i} that the cells of that position were not cut by "
                             "(exact_race integrates rules that race only p_i and q_i at position i)")
        return super().race(probs, i)


def order_halfspaces(row: np.ndarray, order) -> list[np.ndarray]:
    """g with g . E <= 0 for each consecutive pair (a, b) of ``order``: E(a) / row(a) <= E(b) / row(b)."""
    out = []
    for a, b in zip(order, order[1:]):
        g = np.zeros(len(row))
        g[a], g[b] = row[b], -row[a]
        out.append(g)
    return out


def cell(constraints: list[np.ndarray], V: int) -> tuple[np.ndarray, float] | None:
    """(E inside the cell, its probability) of the simplex cut by g . E <= 0 for each g; None for a cell of volume 0.
    Coordinates: x = E[:V-1], E[V-1] = 1 - sum(x)."""
    M = np.vstack([np.eye(V - 1), -np.ones(V - 1)])  # [V, V-1]: E = M x + c
    c = np.zeros(V)
    c[-1] = 1.0
    G = np.array(constraints + [-np.eye(V)[i] for i in range(V)])  # the order's cuts, then E >= 0
    A, b = G @ M, G @ c  # A x + b <= 0
    norms = np.linalg.norm(A, axis=1)
    keep = norms > 1e-15  # a cut of the form 0 <= const (both tokens fixed) only says the cell is empty or whole
    if np.any(b[~keep] > 1e-15):
        return None
    A, b = A[keep] / norms[keep, None], b[keep] / norms[keep]  # unit normals: the LP's slack is a distance
    lp = linprog(np.r_[np.zeros(V - 1), -1.0], A_ub=np.c_[A, np.ones(len(A))], b_ub=-b,
                 bounds=[(None, None)] * (V - 1) + [(0, 1)])
    if not lp.success or lp.x[-1] < 1e-9:
        return None
    inside = lp.x[:-1]
    if V == 2:  # an interval (qhull needs two dimensions): a x + b <= 0 bounds x above for a > 0, below for a < 0
        bound = -b / A[:, 0]
        volume = float(bound[A[:, 0] > 0].min() - bound[A[:, 0] < 0].max())
    else:
        volume = ConvexHull(HalfspaceIntersection(np.c_[A, b], inside).intersections).volume
    return M @ inside + c, volume * factorial(V - 1)


MAX_V = 4  # (V!)^2 orders for two rows: 576 linear programs at V = 4, 14,400 at V = 5


def cells(rows: list[np.ndarray]) -> list[tuple[np.ndarray, float]]:
    """Every cell of the orders of E(x) / row(x), for the ``rows`` that race on one noise -> [(E inside, probability)]."""
    V = len(rows[0])
    if not 2 <= V <= MAX_V:
        raise ValueError(f"exact_race integrates vocabularies of 2..{MAX_V} tokens, got V = {V}: the cells number (V!)^rows")
    orders = [list(permutations(np.flatnonzero(np.asarray(r) > 0))) for r in rows]
    found = []
    for combo in product(*orders):
        cut = [g for row, order in zip(rows, combo) for g in order_halfspaces(np.asarray(row, dtype=np.float64), order)]
        c = cell(cut, V)
        if c is not None:
            found.append(c)
    total = sum(w for _, w in found)
    if abs(total - 1.0) > 1e-9:
        raise AssertionError(f"the cells' volumes add up to {total}, not 1: the cell decomposition is wrong")
    return found


def race_law(decide, *groups: list[np.ndarray]) -> dict:
    """The exact law of ``decide(E_1, ..., E_n)`` -> {outcome: probability}, where group j's rows race on the noise
    E_j (independent of the others) and ``decide`` compares nothing but those races."""
    law: dict = {}
    for combo in product(*[cells(rows) for rows in groups]):
        outcome = decide(*[e for e, _ in combo])
        law[outcome] = law.get(outcome, 0.0) + float(np.prod([w for _, w in combo]))
    return law


def pair_outcomes(p: np.ndarray, q: np.ndarray) -> dict:
    """{(race(q), race(p)): (probability, a noise E in a cell with that outcome)} for two rows on one noise: what a
    coupled round's position decides (the draft's guess, the target's token)."""
    out: dict = {}
    for E, w in cells([p, q]):
        noise = FixedNoise({0: E})
        key = (noise.race(q, 0), noise.race(p, 0))
        out[key] = (out.get(key, (0.0, E))[0] + w, E)
    return out


def race_outcomes(row: np.ndarray) -> dict:
    """{race(row): (probability, a noise E where it wins)} for one row racing alone on its noise: x wins with
    probability row(x) (the exponential race), and E = 1 but E(x) = row(x) / (2 max(row)) is a point where it wins."""
    out = {}
    for x in np.flatnonzero(row > 0):
        E = np.ones(len(row))
        E[x] = row[x] / (2 * row.max())
        out[int(x)] = (float(row[x]), E)
    return out


def round_law(rule, p_of, q_of, K: int, V: int) -> tuple[dict, float]:
    """``exact_law.round_law`` for a keyed rule: -> ({the kept guesses: [V] law of next_token, times the round's
    probability}, expected guesses kept), integrated exactly over the noise of every position. The draft races
    q_of(prefix) (``KeyedNoise.draw``, as a drafter draws) and the target p_of(prefix) on one noise per position; a position's noise matters
    only through the pair of tokens the two races pick, so the walk branches over those pairs (``pair_outcomes``),
    on from a pair that agrees. Past the first pair that disagrees the draft still guesses, the rest of the round's K
    guesses: the walk branches over each one's race alone (``race_outcomes``; bug: those guesses were pinned to the
    draft's most likely token, so a rule that read them was integrated as if the draft always proposed it), and runs
    ``rule`` itself at the end of every branch, on noise from the branch's cells.
    The rule may race p_i and q_i at the positions the pairs reached, q_i alone past them, and nothing else:
    ``FixedNoise`` refuses any other race, which this integral could not count."""
    law, expected = {}, [0.0]

    def walk(noise: dict, guesses: list, weight: float) -> None:
        i = len(noise)
        if i == K + 1 or (i and guesses[i - 1] != FixedNoise(noise).race(p_of(tuple(guesses[: i - 1])), i - 1)):
            cut_by = {j: [p_of(tuple(guesses[:j]))] + ([q_of(tuple(guesses[:j]))] if j < K else []) for j in noise}
            guess_on(noise, guesses, weight, cut_by)
            return
        p = p_of(tuple(guesses))
        if i == K:  # the bonus position: the target's race alone
            for E, w in cells([p]):
                walk({**noise, i: E}, guesses, weight * w)
            return
        for (x, _), (w, E) in pair_outcomes(p, q_of(tuple(guesses))).items():
            walk({**noise, i: E}, guesses + [x], weight * w)

    def guess_on(noise: dict, xs: list, weight: float, cut_by: dict) -> None:
        j = len(xs)
        if j < K:  # a guess past the round's end: the draft's race alone on its position's noise
            q = q_of(tuple(xs))
            for x, (w, E) in race_outcomes(q).items():
                guess_on({**noise, j: E}, xs + [x], weight * w, {**cut_by, j: [q]})
            return
        target_probs = np.array([p_of(tuple(xs[:j])) for j in range(K + 1)])  # [K+1, V]
        draft_probs = np.array([q_of(tuple(xs[:j])) for j in range(K)]).reshape(K, V)  # [K, V]
        n, next_token = rule(target_probs, draft_probs, list(xs), FixedNoise(noise, cut_by))
        row = law.setdefault(tuple(xs[:n]), np.zeros(V))
        row[next_token] += weight
        expected[0] += weight * n

    walk({}, [], 1.0)
    return law, expected[0]
