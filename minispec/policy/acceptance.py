"""The acceptance estimates the adaptive policies plan with: a first-guess rate and a later-guess rate.

    a   P(the first guess of a round is accepted)
    b   P(a later guess is accepted | the guess before it was)   (Leviathan et al. assume b = a)

    expected tokens of a round with K guesses   E(K) = 1 + a (1 - b^K) / (1 - b)    (E(0) = 1)

Guesses are not independent: a prompt-lookup guess that is right usually starts a copied run, so
its b is far above its a. Each estimate decays (recent rounds weigh more), and one is kept per
*context*: a label the drafter gives before drafting (``drafter.context(tokens)``; for
prompt lookup, the length of the n-gram it matched, found cheaply; for the EAGLE head, its confidence in its first
guess, found by the first guess's work). Labels are ordered: a higher one says the
drafter has more reason to be right.

Every estimate starts from PRIOR = 0.3, for chains and trees alike: below the acceptance at which even one
guess pays (at K = 1, a > c + r(2) - 1; docs/speed.md gives the study's figure), so that a policy drafts only
once rounds or probes have measured that drafting pays, not on the prior's word. The exception is a drafter whose
label is its own confidence (drafters/protocol.py's ``ClaimsAcceptance``: the EAGLE head's top probability, in
tenths): each label's estimate starts from what it claims, which the head's measured calibration backs
(docs/eagle.md), and rounds and probes correct it from there.
"""

from __future__ import annotations

import numpy as np

PRIOR = 0.3  # a guess is expected accepted this often until measured (module docstring)


def run_length(b: float, k: int) -> float:
    """1 + b + ... + b^(k-1): the expected accepted run of up to k guesses after an accepted first one."""
    return float(k) if b >= 1.0 else (1.0 - b ** k) / (1.0 - b)


def expected_tokens(a: float, k: int, b: float | None = None) -> float:
    """Expected tokens of a round with k guesses: first accepted with probability a, each later one with b
    given the one before (default b = a), plus next_token (the correction or the bonus)."""
    return 1.0 + a * run_length(a if b is None else b, k) if k else 1.0


class Acceptance:
    """Decaying estimates of ``first`` = P(the first guess is accepted) and ``next`` = P(a later guess is
    accepted | the one before it was). A round that accepted n of K guesses: the first guess counts as a
    success iff n >= 1; the later ones add n - 1 successes and, if 1 <= n < K, one failure. Older rounds
    weigh ``decay`` less per round; the prior weighs as much as ``weight`` fresh observations."""

    def __init__(self, prior: float = PRIOR, weight: float = 2.0, decay: float = 0.8, prior_next: float | None = None):
        self.prior, self.prior_next = prior, prior_next  # prior_next None: b's prior is the current a
        self.weight, self.decay = weight, decay
        self.counts = np.zeros((2, 2))  # [first, next] x [successes, failures]

    def _estimate(self, i: int, prior: float) -> float:
        s, f = self.counts[i]
        return float((s + prior * self.weight) / (s + f + self.weight))

    @property
    def first(self) -> float:
        return self._estimate(0, self.prior)

    @property
    def next(self) -> float:
        """Until later guesses have been seen, they are assumed to do as well as first ones (b = a, as in
        Leviathan et al.): a fixed prior would hold a drafter whose first guesses are always right at K = 1."""
        return self._estimate(1, self.first if self.prior_next is None else self.prior_next)

    def update_probe(self, probability: float, later: bool) -> None:
        """A guess that was not verified, accepted with this ``probability`` (a probe); ``later``: it
        stands for a later guess of a chain (the guess before it was accepted), else for a first one."""
        i = int(later)
        self.counts[i] = self.decay * self.counts[i] + (probability, 1.0 - probability)

    def update(self, drafted: int, accepted: int) -> None:
        self.counts[0] = self.decay * self.counts[0] + (accepted >= 1, accepted == 0)
        if accepted >= 1 and drafted >= 2:
            self.counts[1] = self.decay * self.counts[1] + (accepted - 1, accepted < drafted)

    def update_tree(self, width: int, depth: int, accepted: int) -> None:
        """A tree round of ``width`` first guesses (tree_policy.py's model: tried independently, each followed by a
        chain). A first level that kept none is ``width`` failed first guesses; one that kept a guess adds what that
        says of each guess, the expected successes and failures of ``width`` guesses of which at least one was
        accepted, under the current a (an EM step; bug: counted as one first-guess success, a learned the level's
        rate 1 - (1 - a)^width, and the policy raised that to the width again). Later guesses as in ``update``."""
        if width <= 1:
            return self.update(depth, accepted)
        a = min(max(self.first, 1e-6), 1.0 - 1e-6)
        hits = width * a / (1.0 - (1.0 - a) ** width) if accepted >= 1 else 0.0  # E[successes | at least one]: more
        # than 1 where a is high, since the model takes the guesses as independent (distinct greedy guesses are not)
        self.counts[0] = self.decay * self.counts[0] + (hits, width - hits)
        if accepted >= 1 and depth >= 2:
            self.counts[1] = self.decay * self.counts[1] + (accepted - 1, accepted < depth)

    def fresh_copy(self) -> "Acceptance":
        """A new estimate with the same prior and no observations."""
        return Acceptance(self.prior, self.weight, self.decay, self.prior_next)


class PerContext(dict):
    """context -> Acceptance. A context not seen before starts from ``prior``, raised to the best
    first-guess estimate of a lower context already observed (labels are ordered: module docstring); or, given
    ``claims`` (a drafter's ``claimed_acceptance``: its label is its own confidence), from what the label claims,
    in place of ``prior``'s first-guess rate (its weight, decay and later-guess rule are kept: b starts at a)."""

    def __init__(self, prior: Acceptance, claims=None):
        super().__init__()
        self.prior, self.claims = prior, claims

    def __missing__(self, context: int) -> Acceptance:
        estimate = self.prior.fresh_copy()
        if self.claims is not None:
            estimate.prior = float(self.claims(context))
        else:
            lower = [e.first for c, e in self.items() if c < context and e.counts[0].sum() > 0]
            estimate.prior = max([estimate.prior] + lower)
        self[context] = estimate
        return estimate


def predicted_speedup(a: float, c: float, r_k1: float, k: int, b: float | None = None) -> float:
    """The cost model's speedup of K = k over plain decoding (Leviathan et al., section 3.4, with the later-guess
    rate b; b = None: b = a): ``expected_tokens(a, k, b)`` per round over the round's cost in target steps, k guesses
    at c each and one verification pass of k + 1 tokens at r_k1 = r(k + 1) = t(k + 1) / t(1). k = 0 is plain decoding."""
    if k == 0:
        return 1.0
    return expected_tokens(a, k, b) / (k * c + r_k1)
