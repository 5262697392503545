"""Cost-aware adaptive K: each round, draft the K that maximises expected tokens per second.

The Leviathan et al. model with measured costs instead of assumed ones, and two acceptance rates
instead of one: ``a`` for the first guess and ``b`` for each later guess given the one before it
was accepted (Leviathan et al. assume b = a):

    expected tokens of a round   E(K) = 1 + a (1 - b^K) / (1 - b)     (K = 0: exactly 1; b = a: (1 - a^(K+1)) / (1 - a))
    time of a round              T(K) = K * t_draft + t_verify(K + 1)
    choose                       K* = argmax_{0 <= K <= k_max} E(K) / T(K)

Guesses are not independent: a prompt-lookup guess that is right usually starts a copied run. In
the study at K = 8 its first guess was accepted 34% of the time, each next one 82-100% of the time
given the one before; for the shipped draft, 22% and 23%. One rate would make prompt lookup look
hopeless on the very prompts where it gives 2x.

``t_verify(n)`` comes from a short calibration of the target (cached per model) and is refined by
the timings of real rounds, from the start of the pass over n tokens to the accepted tokens: warping
n rows of a 49,152-token vocabulary into float64 probabilities is part of the price (at T = 1 about
0.6 ms for 8 rows, 1.3 ms for 17: 4-8% of a pass). ``t_draft`` is refined likewise. ``a`` and
``b`` are decaying estimates over recent rounds (``Acceptance``), kept per *context*: a label the
drafter gives cheaply before drafting (``drafter.context(tokens)``). Prompt lookup labels a round
with the length of the n-gram it matched: on our prompts a 1-gram match's first guess is accepted
17-26% of the time, a 3-gram match's 75-92%, so one estimate for both would be wrong for each.
Labels are ordered: a higher one says the drafter has more reason to be right, so a context not
seen before starts from the prior raised to the best first-guess estimate of a lower context seen
so far (a 3-gram match is at least as good as a 2-gram one; on grounded greedy prompts this saved
the ramp-up of K over a context's first rounds: 1.39x -> 1.46x, K = 7 fixed 1.47x). Starting it
from the estimate over all contexts was tried: one failed 1-gram round then held back the 3-gram
rounds for several rounds. K = 0 means "do not speculate" (plain decoding).

While K = 0 the estimate would get no news, so a plain round may *probe*: the drafter proposes one
guess that is not verified, and the target's distribution p for that token, which the plain round
computes anyway, says how likely the rule would have accepted it: sum_x min(p(x), q(x))
(``rejection.overlap``). That is the exact acceptance probability, not a coin flip, and it costs no
target work: only the guess and the drafter's catching up on every token it has not seen (a draft
model must feed them: for layer skip most of a target pass per token). Probes measure ``b`` too:
when a probe's guess was certain (one-hot q: prompt lookup, or any drafter when greedy) and the
plain round emitted that very token, the round went exactly as if the guess had been accepted
(both happen with probability p(x), and leave the same sequence), so the next probe stands for the
second guess of a chain, and so on. Probes are paid from a budget (``ProbeBudget``) that earns
``share`` (1%) of the time spent in plain rounds, so exploring can never cost more than that;
prompt lookup's guess costs microseconds, so it probes every plain round, and a drafter that could
not beat plain decoding even if every guess were accepted is never probed.
(Probing with a verified K = 1 round, as this module first did, cost one more verified row, a third
of a target step on a CPU, for one coin flip.)

Early stop (``AutoK.keep``): K is an upper bound. A draft model asks before each guess j >= 2
whether it is worth its row in the verification pass, given its own belief that guesses 1..j are
all right (the product of its top probabilities). The threshold is the row's price in tokens at the
round's planned rate, so it follows r(n) instead of being one fixed number. The belief must come
from the distribution a guess is drawn from, never from the drawn token: dropping unlikely *draws*
would skew the guesses that remain and break losslessness (a test shows it). Later guesses that
were stopped are never verified, so ``b`` is measured on the ones the draft believed in.

The policy only picks K: the tokens still come from the same rejection rule, so the output
distribution is unchanged.
"""

from __future__ import annotations

import json
import os
import platform
import time

import numpy as np

_CALIBRATION: dict = {}  # (id(model), ns) -> {n: seconds}


def run_length(b: float, k: int) -> float:
    """1 + b + ... + b^(k-1): the expected accepted run of up to k guesses after an accepted first one."""
    return float(k) if b >= 1.0 else (1.0 - b ** k) / (1.0 - b)


def expected_tokens(a: float, k: int, b: float | None = None) -> float:
    """Expected tokens of a round with k guesses: first accepted with probability a, each later one with b
    given the one before (default b = a), plus the target's own token."""
    return 1.0 + a * run_length(a if b is None else b, k) if k else 1.0


def _disk_key(model, ns: tuple) -> str:
    from . import backend

    c = model.cfg
    return (f"{model.name}|{model.weight_bytes}|{c.num_layers}x{c.hidden_size}|{backend.DEVICE}|{','.join(map(str, ns))}|"
            f"{platform.node()}|{os.cpu_count()}|numpy {np.__version__}")


def _disk_file():
    from .convert import cache_dir

    return cache_dir() / "calibration.json"


def calibrate_verify(target, n_max: int) -> dict[int, float]:
    """Median seconds of a target pass over n = 1..n_max tokens (see ``calibrate``)."""
    return calibrate(target, range(1, n_max + 1))


def calibrate(target, ns, context: int = 64, repeats: int = 2) -> dict[int, float]:
    """Median seconds of a pass over n new tokens after ``context`` cached ones, for each n in ``ns``.
    Cached per model in memory and on disk (``~/.cache/minispec/calibration.json``, keyed by model,
    machine and NumPy), since it takes about a second; rounds then refine it as they are timed."""
    ns = tuple(ns)
    n_max = max(ns)
    key = (id(target), ns)
    if key not in _CALIBRATION and os.environ.get("MINISPEC_NO_CALIBRATION_CACHE") is None:
        try:
            stored = json.loads(_disk_file().read_text()).get(_disk_key(target, ns))
            if stored:
                _CALIBRATION[key] = {int(n): float(t) for n, t in stored.items()}
        except (OSError, ValueError):
            pass
    if key not in _CALIBRATION:
        rng = np.random.default_rng(0)
        cache = target.new_cache(context + n_max)
        target.forward(rng.integers(0, target.cfg.vocab_size, context), cache)
        times = {n: [] for n in ns}
        for _ in range(repeats + 1):
            for n in times:
                cache.rollback(context)
                t0 = time.perf_counter()
                target.forward(rng.integers(0, target.cfg.vocab_size, n), cache)
                times[n].append(time.perf_counter() - t0)
        _CALIBRATION[key] = {n: float(np.median(t[1:])) for n, t in times.items()}
        try:
            f = _disk_file()
            data = json.loads(f.read_text()) if f.exists() else {}
            data[_disk_key(target, ns)] = _CALIBRATION[key]
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(data, indent=1))
        except (OSError, ValueError):
            pass
    return dict(_CALIBRATION[key])


class FixedK:
    """The textbook policy: always K."""

    keep = None  # every guess is verified: no early stop

    def __init__(self, k: int):
        self.k = k

    def next_k(self, unseen: int = 1, context: int = 0) -> int:
        return self.k

    def probe(self) -> bool:
        return False

    def observe(self, drafted: int, accepted: int, t_draft: float, t_verify: float | None, probed=None) -> None:
        pass


class Acceptance:
    """Decaying estimates of ``first`` = P(the first guess is accepted) and ``next`` = P(a later guess is
    accepted | the one before it was). A round that accepted n of K guesses: the first guess counts as a
    success iff n >= 1; the later ones add n - 1 successes and, if 1 <= n < K, one failure. Older rounds
    weigh ``decay`` less per round; the prior weighs as much as ``weight`` fresh observations."""

    def __init__(self, prior: float = 0.5, weight: float = 2.0, decay: float = 0.8, prior_next: float | None = None):
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

    def fresh_copy(self) -> "Acceptance":
        """A new estimate with the same prior and no observations."""
        return Acceptance(self.prior, self.weight, self.decay, self.prior_next)


class PerContext(dict):
    """context -> Acceptance. A context not seen before starts from ``prior``, raised to the best
    first-guess estimate of a lower context already observed (labels are ordered: module docstring)."""

    def __init__(self, prior: Acceptance):
        super().__init__()
        self.prior = prior

    def __missing__(self, context: int) -> Acceptance:
        estimate = self.prior.fresh_copy()
        lower = [e.first for c, e in self.items() if c < context and e.counts[0].sum() > 0]
        estimate.prior = max([estimate.prior] + lower)
        self[context] = estimate
        return estimate


def probe_cost(unseen: int, feed_time: float, guess_time: float) -> float:
    """Seconds a probe adds to a plain round: the drafter catching up on the ``unseen`` - 1 tokens it
    skipped (the last one it feeds anyway), then one guess."""
    return max(unseen - 1, 0) * feed_time + guess_time


class ProbeBudget:
    """Exploration paid from what plain rounds earn: ``share`` of their time."""

    def __init__(self, share: float = 0.01):
        self.share, self.saved = share, 0.0

    def earn(self, seconds: float) -> None:
        self.saved += self.share * seconds

    def afford(self, cost: float) -> bool:
        if self.saved < cost:
            return False
        self.saved -= cost
        return True


class AutoK:
    """Choose K per round from the cost model (module docstring). Costs in seconds: ``verify_time``
    {n: one target pass over n tokens}, ``draft_time`` per guess, ``feed_time`` per token the drafter
    must catch up on. ``learn_costs=False`` keeps the given costs (deterministic, for tests)."""

    def __init__(self, verify_time: dict[int, float], draft_time: float = 0.0, k_max: int = 8, feed_time: float = 0.0,
                 acceptance: Acceptance | None = None, probe_share: float = 0.01, learn_costs: bool = True):
        self.verify_time = dict(verify_time)
        self.draft_time, self.feed_time, self.k_max = draft_time, feed_time, k_max
        self.acc = PerContext(acceptance or Acceptance())  # context -> its estimate
        self.context = 0
        self.budget = ProbeBudget(probe_share)
        self.learn_costs = learn_costs
        self.unseen = 1  # tokens the drafter has not seen at this round's start
        self.history: list[int] = []  # K of every round
        self.probes = 0  # plain rounds that probed
        self.planned = 1.0 / self.verify_time[1]  # tokens per second this round expects (``rate`` of its K, >= plain)

    @property
    def estimate(self) -> Acceptance:
        """The estimate for the current context."""
        return self.acc[self.context]

    def rate(self, k: int) -> float:
        """Expected tokens per second at K, once the drafter is caught up."""
        e = self.estimate
        return expected_tokens(e.first, k, e.next) / (k * self.draft_time + self.verify_time[k + 1])

    def hopeless(self) -> bool:
        """True when no K could beat plain decoding even if every guess were accepted."""
        best = max(float(k + 1) / (k * self.draft_time + self.verify_time[k + 1]) for k in range(1, self.k_max + 1))
        return best <= 1.0 / self.verify_time[1]

    def probe_cost(self, unseen: int) -> float:
        return probe_cost(unseen, self.feed_time, self.draft_time)

    def next_k(self, unseen: int = 1, context: int = 0) -> int:
        """``unseen``: tokens emitted since the drafter last proposed (the whole prompt at first);
        ``context``: the drafter's label for this round."""
        self.unseen, self.context = unseen, context
        k = self.choose()
        self.planned = max(self.rate(k), 1.0 / self.verify_time[1])  # at least plain decoding's rate
        self.history.append(k)
        return k

    def choose(self) -> int:
        """The K with the highest expected rate (K = 0 is plain decoding, so ``planned`` is never below it)."""
        return max(range(self.k_max + 1), key=self.rate)

    def keep(self, j: int, reach: float) -> bool:
        """Early stop: is guess j (2 <= j <= K) worth its row in the verification pass? It adds a token only
        if guesses 1..j are all accepted; ``reach`` is the draft's own belief in that (the product of its
        top probabilities). The row costs t_verify(j + 1) - t_verify(j) seconds, which at the round's
        planned rate would have bought that many tokens. So the threshold is not a fixed guess (like
        transformers' ``assistant_confidence_threshold`` or llama.cpp's ``--draft-p-min``): it follows the
        cost curve, high where a row is dear (2 -> 3 rows: 0.37 of a step here), near zero where rows are
        almost free (5 -> 8 rows), and high again at 9. The first guess is always kept: K >= 1 already
        says it pays, and keeping it keeps the estimate of ``a`` a measure of every first guess."""
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
                probed: tuple[float, bool] | None = None) -> None:
        """A round's outcome and timings (``t_verify`` None: that pass also carried the prompt); ``probed``:
        for a plain round that probed, (the probability that the rule would have accepted the guess,
        whether it stands for a later guess: see ``speculative.measure_probe``)."""
        n = drafted + 1  # tokens in the verification pass
        if t_verify is not None and self.learn_costs and n in self.verify_time:
            self.verify_time[n] = 0.8 * self.verify_time[n] + 0.2 * t_verify
        guesses = drafted or int(probed is not None)
        if self.learn_costs and guesses and self.unseen <= guesses + 1:  # a catch-up round does not time a guess
            self.draft_time = 0.8 * self.draft_time + 0.2 * (t_draft / guesses)
        if drafted:
            self.estimate.update(drafted, accepted)
            return
        self.budget.earn(self.verify_time[1])  # the modelled plain round: refined by timings when learning
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


def drafter_costs(drafter) -> tuple[float, float]:
    """(seconds per guess, seconds per token fed when catching up) of a drafter with a model; zeros
    otherwise (prompt lookup costs microseconds: rounds then measure it)."""
    model = getattr(drafter, "model", None)
    if model is None:
        return 0.0, 0.0
    t = calibrate(model, (1, 32))
    return t[1], t[32] / 32


def auto_k(target, drafter, k_max: int = 8) -> AutoK:
    """An AutoK calibrated for this target and drafter."""
    draft_time, feed_time = drafter_costs(drafter)
    return AutoK(calibrate_verify(target, k_max + 1), draft_time, k_max, feed_time)


def stopped_k(target, drafter, k: int) -> StoppedK:
    """A StoppedK calibrated for this target and drafter."""
    draft_time, feed_time = drafter_costs(drafter)
    return StoppedK(k, calibrate_verify(target, max(k, 8) + 1), draft_time, feed_time=feed_time)
