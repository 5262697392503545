"""Cost-aware adaptive K (``k="auto"``): each round, draft the K that maximises expected tokens per second.

The model (Leviathan et al. 2022, section 3, with measured costs and two acceptance rates):

    E(K) = 1 + a (1 - b^K) / (1 - b)          expected tokens of a round (acceptance.py)
    T(K) = K t_draft + t_verify(K + 1)        seconds of a round (costs.py: t_verify(n) = t_verify(1) r(n)); a plain
                                              round, T(0), also pays t_label: one guess for a drafter whose label is
                                              its first guess's work (the EAGLE head), else 0
    K*   = argmax_{0 <= K <= k_max} E(K) / T(K)

K = 0 is a plain decoding step, so the chosen K never plans to be slower than plain decoding. Two
guards keep noisy estimates from costing time: a drafter starts from a low acceptance (acceptance.PRIOR;
probes and rounds raise it; a drafter whose label is its own confidence, the EAGLE head, starts each label from
what it claims: acceptance.py), and a drafting K is chosen only when it expects to beat plain decoding by
MARGIN = 5% (``minispec bench auto`` measures both: docs/policy.md).
Dividing by t_verify(1), E(K) / T(K) is the papers' speedup E(K) / (K c + r(K + 1)).

Probes. While K = 0 the estimates of a and b would get no news. So a plain round may draft one
guess that is never verified: the plain round computes the target's distribution p for that
position anyway, and the rule's own acceptance of a guess drawn from q (``rejection.guess_acceptance``:
sum_x min(p(x), q(x)) token-wise, ``keyed.coupled_acceptance`` for the coupled rule) is exactly the
probability that the rule would have accepted it. It costs no target work, only the guess and the drafter
catching up on tokens it has not seen. When a probe's guess was certain (one-hot q) and the plain
round emitted that very token, the round went exactly as if the guess had been accepted (both
happen with probability p(x), and leave the same sequence), so the next probe stands for a later
guess (b). Probes are paid from a budget that earns 1% of the time of plain rounds; a drafter that
could not beat plain decoding even if every guess were accepted is never probed. After a label that is the
first guess's work (the EAGLE head's), a probe costs nothing more: the label caught the drafter up and read the
logits its guess is drawn from, so such a drafter is probed in every plain round its budget is not overdrawn.

Early stop (``AutoK.keep``). K is an upper bound: before guess j >= 2 a draft model asks whether
the guess is worth its row in the verification pass. Its belief that guesses 1..j are all right
is the product of its top probabilities, read from each guess's distribution *before* drawing
from it (drafters.DraftModel.propose says why a rule that looks at the drawn token is not
lossless). The row costs t_verify(j + 1) - t_verify(j) seconds, which at the round's planned rate
would have bought that many tokens: that is the threshold, so it follows the cost curve r(n).

Runs that notice (``learn``). A run that may follow its own clock (unseeded, or greedy or keyed, whose
output does not depend on K) refines t_verify(1) from its plain rounds (the same low quantile), and keeps ``slowdown``: how much
slower its drafting rounds ran than the calibrated cost model predicted for them (the 0.25 quantile of measured /
predicted seconds over its last 16 drafting rounds: load only ever slows a round, so a burst does not move it, and a
lasting slowdown does). It covers what no calibration sees: re-reading the text in a
draft's own tokens, catching up on features, a machine that got busy. Every drafting K's expected time
is multiplied by it, so when drafting rounds run slower than predicted, plain rounds win and the run
falls back to them: "never slower" kept at run time, not only at calibration. A seeded run at T > 0
keeps its calibrated costs instead, so that its choices, and with them its random draws, repeat.

The policy only chooses how many guesses to draft: every token still comes from the same rejection
rule, so the output distribution is unchanged. Measurements: docs/policy.md.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from ..drafters.protocol import ClaimsAcceptance, has
from .acceptance import Acceptance, PerContext, expected_tokens
from .costs import drafter_calibration, verify_calibration

RECENT = 16  # rounds a learning run reads its costs from
QUANTILE = 0.25  # of those rounds' figures: load only ever slows a round, so a low quantile, not the mean


def low_quantile(figures: list[float], before: float) -> float:
    """The QUANTILE of the last rounds' figures, once there are 3; ``before`` until then."""
    return float(np.quantile(figures, QUANTILE)) if len(figures) >= 3 else before


class TimedRound(NamedTuple):
    """A timed round: the guesses it drafted, and the cost model's predicted seconds beside the measured ones, in all
    and for its drafting side alone (guesses, the label, a probe, catching up; the rest is the target's pass and the
    rule)."""

    drafted: int
    predicted: float
    measured: float
    predicted_drafting: float
    measured_drafting: float


MARGIN = 0.05  # a drafting K must expect to beat plain decoding by this much: estimates of a few rounds are noisy


class FixedK:
    """The textbook policy: always K."""

    keep = None  # every guess is verified: no early stop
    reads_context = False  # the loop need not ask the drafter for its label (protocol.py)

    def __init__(self, k: int):
        self.k = k
        self.calibrations: list = []  # it never looks at costs (protocol.py: Calibrated)
        self.slowdown = 1.0  # it never predicts a round's time

    def next_k(self, unseen: int = 1, context: int = 0) -> int:
        return self.k

    def probe(self) -> bool:
        return False

    def observe(self, drafted: int, accepted: int, t_draft: float, t_verify: float | None, probed=None, nodes=None) -> None:
        pass


def best(options, rate) -> tuple:
    """(the option with the highest ``rate``, that rate): the cost model's argmax (the first of equals wins), for
    chains (K) and trees (width, depth) alike."""
    option = max(options, key=rate)
    return option, rate(option)


def probe_cost(unseen: int, feed_time: float, guess_time: float) -> float:
    """Seconds a probe adds to a plain round: the drafter catching up on the ``unseen`` - 1 tokens it
    skipped (the last one it feeds anyway), then one guess."""
    return max(unseen - 1, 0) * feed_time + guess_time


def check_costs(verify_time: dict, ns, what: str) -> None:
    """Refuse a t(n) table that lacks a pass the policy may price, or holds one that is not a positive time."""
    missing = [n for n in ns if n not in verify_time]
    if missing:
        raise ValueError(f"verify_time needs t(n) for every n a round of {what} may verify; it lacks n = {missing}")
    bad = {n: t for n, t in verify_time.items() if not (isinstance(t, (int, float, np.floating)) and t > 0)}
    if bad:
        raise ValueError(f"verify_time must hold positive seconds; got {bad}")


class ProbeBudget:
    """Exploration paid from what plain rounds earn: ``share`` of their time."""

    def __init__(self, share: float = 0.01):
        self.share, self.saved = share, 0.0

    def earn(self, seconds: float) -> None:
        self.saved += self.share * seconds

    def afford(self, cost: float) -> bool:
        if self.share == 0 or self.saved < cost:  # no share, no probes: even one that costs nothing (StoppedK's)
            return False
        self.saved -= cost
        return True


class AutoK:
    """Choose K per round from the cost model (module docstring). Costs in seconds: ``verify_time``
    {n: one target pass over n tokens}, ``draft_time`` per guess, ``feed_time`` per token the drafter
    must catch up on. ``learn=False`` keeps the given costs (deterministic, for tests)."""

    auto = True  # it chooses K each round (protocol.py: ChoosesByCost)

    def __init__(self, verify_time: dict[int, float], draft_time: float = 0.0, k_max: int = 8, feed_time: float = 0.0,
                 acceptance: Acceptance | None = None, probe_share: float = 0.01, learn: bool = True,
                 margin: float = MARGIN, claims: Callable[[int], float] | None = None):
        """``claims``: the drafter's ``claimed_acceptance``, where its labels are its confidence (acceptance.py). Its
        label is its first guess's work: a drafting round has paid it within K guesses, a plain round pays it on top
        (``label_time``, one guess), so that plain decoding is priced as it runs."""
        if not (isinstance(k_max, (int, np.integer)) and not isinstance(k_max, bool) and k_max >= 1):
            raise ValueError(f"k_max must be an integer of at least 1, got {k_max!r}")
        check_costs(verify_time, range(1, k_max + 2), f"K up to k_max = {k_max}")
        self.verify_time = dict(verify_time)
        self.draft_time, self.feed_time, self.k_max = draft_time, feed_time, k_max
        self.label_time = draft_time if claims is not None else 0.0  # seconds a plain round spends on the label: a
        # drafter that claims an acceptance finds its label by its first guess's work (drafters/protocol.py)
        self.acc = PerContext(acceptance or Acceptance(), claims)  # context -> its estimate
        self.context = 0
        self.budget = ProbeBudget(probe_share)
        self.learn = learn
        self.unseen = 1  # tokens the drafter has not seen at this round's start
        self.history: list[int] = []  # K of every round
        self.probes = 0  # plain rounds that probed
        self.planned = 1.0 / self.verify_time[1]  # tokens per second this round expects (``rate`` of its K, >= plain)
        self.slowdown = 1.0  # measured / predicted seconds of this run's drafting rounds (learning only)
        self.slowdowns: list[float] = []  # the last RECENT of them
        self.plain_steps: list[float] = []  # seconds of the last RECENT plain steps (learning only)
        self.margin = margin
        self.timed: list[TimedRound] = []  # every timed round's predicted and measured seconds
        self.calibrations: list = []  # the Calibration records its costs came from (calibration.py), if any

    @property
    def estimate(self) -> Acceptance:
        """The estimate for the current context."""
        return self.acc[self.context]

    def round_time(self, k: int) -> float:
        """Predicted seconds of a round with K guesses, once the drafter is caught up (K = 0: a plain step, and the
        label where finding it costs a guess: ``label_time``)."""
        return k * self.draft_time + self.verify_time[k + 1] + (0.0 if k else self.label_time)

    def rate(self, k: int) -> float:
        """Expected tokens per second at K, once the drafter is caught up; a drafting K pays the run's slowdown.
        rate(0) is the plain round's, label included."""
        e = self.estimate
        return expected_tokens(e.first, k, e.next) / (self.round_time(k) * (self.slowdown if k else 1.0))

    def best_drafting(self) -> tuple[int, float]:
        """(K >= 1, its expected tokens per second) with the best rate under the current estimates."""
        return best(range(1, self.k_max + 1), self.rate)

    def hopeless(self) -> bool:
        """True when no K could beat plain decoding even if every guess were accepted."""
        best = max(float(k + 1) / (k * self.draft_time + self.verify_time[k + 1]) for k in range(1, self.k_max + 1))
        return best <= 1.0 / self.round_time(0)

    def probe_cost(self, unseen: int) -> float:
        """Seconds a probe adds to this plain round: none after a label (``label_time``), which caught the drafter up
        and read the logits the probe's guess is drawn from (bug: priced as a catch-up and a guess on top, so a head
        that labels its rounds was probed as seldom as one that does not)."""
        return 0.0 if self.label_time else probe_cost(unseen, self.feed_time, self.draft_time)

    def next_k(self, unseen: int = 1, context: int = 0) -> int:
        """``unseen``: tokens emitted since the drafter last proposed (the whole prompt at first);
        ``context``: the drafter's label for this round."""
        self.unseen, self.context = unseen, context
        k = self.choose()
        self.planned = max(self.rate(k), self.rate(0))  # at least plain decoding's rate
        self.history.append(k)
        return k

    def choose(self) -> int:
        """The K with the highest expected rate (K = 0 is plain decoding, so ``planned`` is never below it); a
        drafting K only when it expects to beat plain decoding by ``margin``."""
        k, rate = self.best_drafting()
        return k if rate > (1 + self.margin) * self.rate(0) else 0

    def keep(self, j: int, reach: float) -> bool:
        """Early stop: is guess j (2 <= j <= K) worth its row in the verification pass? It adds a token only
        if guesses 1..j are all accepted; ``reach`` is the draft's own belief in that (the product of its
        top probabilities). The row costs t_verify(j + 1) - t_verify(j) seconds, which at the round's
        planned rate would have bought that many tokens. So the threshold is not a fixed guess (like
        transformers' ``assistant_confidence_threshold`` or llama.cpp's ``--draft-p-min``): it follows the
        cost curve, high where a row is dear and near zero where rows are almost free (where r(n) is flat).
        The first guess is always kept: K >= 1 already says it pays, and keeping it keeps the estimate of
        ``a`` a measure of every first guess."""
        if j == 1:
            return True
        return reach >= (self.verify_time[j + 1] - self.verify_time[j]) * self.planned

    def probe(self) -> bool:
        """Asked when ``next_k`` said 0: should this plain round still draft one guess, only to measure it?"""
        if self.hopeless() or not self.budget.afford(self.probe_cost(self.unseen)):
            return False
        self.probes += 1
        return True

    def observe(self, drafted: int, accepted: int, t_draft: float, t_verify: float | None,
                probed: tuple[float, bool] | None = None, nodes: int | None = None) -> None:
        """A round's outcome and timings (``t_verify`` None: that pass also carried the prompt); ``probed``:
        for a plain round that probed, (the probability that the rule would have accepted the guess,
        whether it stands for a later guess: see ``rounds.Run.measure_probe``); ``nodes``: for trees only."""
        if t_verify is not None:  # (None: the pass also carried the prompt)
            label = 0.0 if drafted else self.label_time  # a plain round's label
            worked = drafted or probed is not None or label > 0  # the drafter caught up this round
            catch_up = max(self.unseen - 1, 0) * self.feed_time if worked else 0.0
            probe = self.draft_time if probed is not None and not label else 0.0  # after a label, a probe's guess is
            # drawn from the logits the label read (the label is the first guess's work)
            predicted_drafting = catch_up + drafted * self.draft_time + probe + label
            predicted = predicted_drafting + self.verify_time[drafted + 1]  # round_time(drafted), catch-up, a probe
            if self.learn and probed is not None:  # a probe is paid what it really cost, not what was modelled
                self.budget.saved -= max(0.0, t_draft - predicted_drafting)
            self.timed.append(TimedRound(drafted, predicted, t_draft + t_verify, predicted_drafting, t_draft))  # (`minispec
            # bench auto` shows them)
            if self.learn and drafted:  # measured against what the cost model predicted for this round
                self.slowdowns = (self.slowdowns + [(t_draft + t_verify) / predicted])[-RECENT:]
                self.slowdown = low_quantile(self.slowdowns, self.slowdown)
            elif self.learn:  # a plain step: the rate every K is compared with
                self.plain_steps = (self.plain_steps + [t_verify])[-RECENT:]
                self.verify_time[1] = low_quantile(self.plain_steps, self.verify_time[1])
        if drafted:
            self.estimate.update(drafted, accepted)
            return
        self.budget.earn(self.round_time(0))  # the modelled plain round (t(1) refined by timings when learning)
        if probed is not None:
            self.estimate.update_probe(*probed)


class StoppedK(AutoK):
    """The textbook K every round, cut by AutoK's early stop (``keep``), and no probes: to measure the
    stop on its own (``minispec bench stop``). The opportunity cost of a row is the better of plain
    decoding and the modelled rate of K."""

    def __init__(self, k: int, verify_time: dict[int, float], draft_time: float = 0.0, **kw):
        super().__init__(verify_time, draft_time, k_max=max(k, 1), probe_share=0.0, **kw)
        self.k = k

    def choose(self) -> int:
        return self.k


def claims_of(drafter):
    """The drafter's ``claimed_acceptance`` where its context labels are its confidence, else None."""
    return drafter.claimed_acceptance if has(drafter, ClaimsAcceptance) else None


def calibrated_costs(target, drafter, n_max: int) -> tuple[list, dict, float, float]:
    """(the calibrations read, t(n) for n = 1..n_max, seconds per guess, seconds per token caught up): what a chain
    policy is built from (``drafter_costs``' zeros for a drafter with no cost to measure)."""
    verify, draft = verify_calibration(target, range(1, n_max + 1)), drafter_calibration(drafter)
    guess, fed = (0.0, 0.0) if draft is None else (float(draft.times["guess"]), float(draft.times["fed"]))
    return [verify, draft], verify.times, guess, fed


def auto_k(target, drafter, k_max: int = 8, learn: bool = True) -> AutoK:
    """An AutoK calibrated for this target and drafter; ``learn=False``: it keeps the calibrated costs (a
    seeded run), else it refines them with each round's timings. K stays below the target's context."""
    k_max = max(1, min(k_max, target.cfg.max_position_embeddings - 1))
    calibrations, verify, guess, fed = calibrated_costs(target, drafter, k_max + 1)
    policy = AutoK(verify, guess, k_max, fed, learn=learn, claims=claims_of(drafter))
    policy.calibrations = calibrations
    return policy


def stopped_k(target, drafter, k: int) -> StoppedK:
    """A StoppedK calibrated for this target and drafter."""
    calibrations, verify, guess, fed = calibrated_costs(target, drafter, max(k, 8) + 1)
    policy = StoppedK(k, verify, guess, feed_time=fed, claims=claims_of(drafter))
    policy.calibrations = calibrations
    return policy
