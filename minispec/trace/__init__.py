"""Seeing speculation happen (the lab: the core never imports it): a trace of every round, recorded by an observer of
the rule's decisions. A run takes it as an observer (stats.Observer) of its rounds.

The loop does not change. ``Trace.observe(rule)`` wraps the verification rule (rejection.py): it hands the rule
a generator that remembers every uniform the rule draws, and afterwards reads, from the rule's own inputs and
answer, what each guess met: p(x), q(x), the threshold its draw was compared with (min(1, p(x)/q(x)) token-wise,
h_i for block verification) and the draw, or, for the coupled rule, the target's keyed sample it was compared
with; where the round stopped; after a rejection, the residual's most likely
tokens; the bonus token after a round that kept every guess. Which rule it is comes from what the rule declares
(``rejection.decides_jointly``), not from its name: a rule that declares nothing is traced as "undeclared", its
draws and thresholds recorded, no residual claimed for it. ``Trace.round_done`` (called by ``rounds.Run.emit``)
adds what the round emitted and how long its drafting and its target pass took. Tracing draws nothing itself, so a traced run emits the same tokens.

Where each emitted token came from (``kind``):

    kept        a guess the rule accepted
    correction  next_token after a rejection (drawn from the residual)
    bonus       next_token after every guess was kept (drawn from p_{K+1})
    plain       a plain round's token (K = 0: no guess was verified)

``to_json`` gives the data; ``write`` saves it as FILE.json, or as FILE.html, a self-contained page (page.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..rejection import decides_jointly, is_keyed, residual, weighted_residual
from .page import html_page

TOP = 5  # residual tokens kept per rejection


class RecordedDraw(float):
    """A uniform draw that remembers the threshold the rule compares it with: the rule's own numbers, not a
    second copy of its formulas."""

    def __new__(cls, u: float, compared: list):
        draw = super().__new__(cls, u)
        draw.compared = compared
        return draw

    def __lt__(self, threshold):
        self.compared.append((float(self), float(threshold)))
        return float(self) < threshold

    def __le__(self, threshold):
        self.compared.append((float(self), float(threshold)))
        return float(self) <= threshold


class RecordingNoise:
    """Passes ``race`` through to keyed noise (keyed.py); ``raced`` collects the token each race returned:
    for a keyed rule, the target's own sample at each position it compared a guess with, then its next_token."""

    def __init__(self, noise):
        self.noise, self.raced = noise, []

    def race(self, probs, i):
        y = self.noise.race(probs, i)
        self.raced.append(int(y))
        return y


class RecordingRng:
    """Passes ``random()`` through to a numpy Generator; ``compared`` collects (draw, threshold) of every decision."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.compared = rng, []

    def random(self):
        return RecordedDraw(self.rng.random(), self.compared)


@dataclass
class Round:
    k: int  # guesses verified
    guesses: list  # x_1..x_K
    p: list  # p_i(x_i)
    q: list  # q_i(x_i)
    accept: list  # the threshold each draw was compared with: min(1, p/q) (token-wise), h_i (block)
    draws: list  # the uniform that decided each guess
    accepted: int
    next_token: int
    next_kind: str  # "correction", "bonus" or "plain"
    residual_top: list  # [(token id, mass)] of the distribution the correction was drawn from
    rule: str = "token"  # "token", "block" (rejection.decides_jointly), "coupled" (is_keyed), "undeclared", "tree"
    samples: list = field(default_factory=list)  # coupled: the target's keyed sample each guess was compared with
    # (up to the first that differed: the rule stops there)
    emitted: list = field(default_factory=list)  # what the round emitted (cut at a stop token or the length)
    t_draft: float = 0.0
    t_verify: float = 0.0

    def kinds(self) -> list[str]:
        """Where each emitted token came from."""
        return (["kept"] * self.accepted + [self.next_kind])[: len(self.emitted)]


class Trace:
    """Records a run round by round (module docstring). ``rounds``: the Round of each."""

    def __init__(self, on_round=None):
        """``on_round(round)``, if given, is called as each round is recorded (``minispec generate --show``)."""
        self.rounds: list[Round] = []
        self.pending: Round | None = None
        self.on_round = on_round

    def observe(self, rule):
        """``rule`` (accept_reject's signature) with every decision recorded; it returns what ``rule`` returns."""
        joint = decides_jointly(rule)
        kind = "coupled" if is_keyed(rule) else "undeclared" if joint is None else "block" if joint else "token"

        def traced(target_probs, draft_probs, draft_tokens, rng):
            recorder = RecordingNoise(rng) if kind == "coupled" else RecordingRng(rng)
            n, next_token = rule(target_probs, draft_probs, draft_tokens, recorder)
            compared = [] if kind == "coupled" else recorder.compared
            self.pending = describe(kind, target_probs, draft_probs, list(draft_tokens), compared, n, next_token)
            if kind == "coupled":
                self.pending.samples = recorder.raced[: len(draft_tokens)]
            return n, next_token

        traced.__name__ = f"traced {getattr(rule, '__name__', 'rule')}"
        return traced

    def round_done(self, record) -> None:
        """A round is done (``stats.RoundRecord``: its emitted tokens and timings). A round the rule did not see, a
        tree (``record.tree``: its nodes and whether the walk ended at a leaf), is kept without decisions: k is its
        nodes, and its next_token the bonus after a leaf, the correction after a node whose children were all
        rejected."""
        r, emitted, accepted, tree = self.pending, record.emitted, record.accepted, record.tree
        if r is None or tree is not None:
            nodes, leaf = tree if tree is not None else (0, True)
            r = Round(k=nodes, guesses=list(emitted[:accepted]), p=[], q=[], accept=[], draws=[], accepted=accepted,
                      next_token=emitted[-1] if len(emitted) > accepted else -1,
                      next_kind="plain" if nodes == 0 else "bonus" if leaf else "correction", residual_top=[],
                      rule="tree")
        r.emitted, r.t_draft, r.t_verify = [int(t) for t in emitted], float(record.t_draft), float(record.t_verify)
        self.rounds.append(r)
        self.pending = None
        if self.on_round is not None:
            self.on_round(r)

    def predicted_speedup(self, verify_time: dict, draft_time: float) -> float:
        """The speed model's speedup for these rounds: tokens / sum of (K c + r(K + 1)), in target steps."""
        top = max(verify_time)
        steps = sum(r.k * draft_time + verify_time[min(r.k + 1, top)] for r in self.rounds) / verify_time[1]
        return len(self.tokens()) / steps if steps else float("nan")

    def tokens(self) -> list[int]:
        return [t for r in self.rounds for t in r.emitted]

    def acceptance_by_position(self) -> list[float]:
        """P(guess j kept | drafted), j = 1..max K, over the traced rounds."""
        K = max((r.k for r in self.rounds), default=0)
        drafted = [sum(r.k > j for r in self.rounds) for j in range(K)]
        kept = [sum(r.accepted > j for r in self.rounds) for j in range(K)]
        return [a / d if d else float("nan") for a, d in zip(kept, drafted)]

    def to_json(self, decode=None, **summary) -> dict:
        """The trace as plain data; ``decode(id) -> str`` adds each token's text. ``summary``: the run's figures."""
        text = (lambda t: decode(t)) if decode else (lambda t: None)
        rounds = []
        for r in self.rounds:
            d = dict(vars(r))
            d["kinds"] = r.kinds()
            d["emitted_text"] = [text(t) for t in r.emitted]
            d["guess_text"] = [text(t) for t in r.guesses]
            d["samples_text"] = [text(t) for t in r.samples]
            d["residual_top"] = [dict(id=t, text=text(t), mass=m) for t, m in r.residual_top]
            rounds.append(d)
        acc = self.acceptance_by_position()
        return dict(summary=dict(summary, tokens=len(self.tokens()), target_passes=len(self.rounds),
                                 acceptance_by_position=[None if np.isnan(a) else a for a in acc]), rounds=rounds)


def check_trace_path(path) -> Path:
    """A path to write a trace to: FILE.json or FILE.html in a directory that exists (refused early, by name)."""
    path = Path(path)
    if path.suffix not in (".json", ".html"):
        raise ValueError(f"trace file {str(path)!r} must end in .json (the data) or .html (a page)")
    if not path.parent.is_dir():
        raise ValueError(f"trace file {str(path)!r}: directory {str(path.parent)!r} does not exist")
    if path.is_dir():  # (bug: accepted, then the write failed after the whole run)
        raise ValueError(f"trace file {str(path)!r} is a directory: name a file in it")
    return path


def write_trace(trace: "Trace", path, decode=None, title: str = "minispec trace", **summary) -> Path:
    """``trace`` as FILE.json (``Trace.to_json``) or FILE.html (a self-contained page)."""
    path = check_trace_path(path)
    data = trace.to_json(decode, **summary)
    path.write_text(html_page(data, title) if path.suffix == ".html" else json.dumps(data, indent=1))
    return path


def describe(rule: str, target_probs, draft_probs, guesses: list[int], compared: list, n: int,
             next_token: int) -> Round:
    """What one round of the rule met, from its inputs, the (draw, threshold) of each decision and its answer.
    ``rule``: "token", "block", "coupled" or "undeclared" (``Trace.observe``); the residual is shown for the first two
    only (the coupled rule has none: its correction is the target's keyed sample)."""
    K = len(guesses)
    p = [float(target_probs[i, x]) for i, x in enumerate(guesses)]
    q = [float(draft_probs[i, x]) for i, x in enumerate(guesses)]
    decided, accept = [u for u, _ in compared], [h for _, h in compared]  # min(1, p/q), or block's h_i
    weight = 1.0  # block: the running weight of the kept prefix, which its residual is weighted by
    for pi, qi in zip(p[:n], q[:n]):
        weight = min(1.0, weight * pi / qi) if qi > 0 else 0.0
    top = []
    if n < K and rule in ("token", "block"):
        row = (weighted_residual(target_probs[n], draft_probs[n], weight) if rule == "block"
               else residual(target_probs[n], draft_probs[n]))
        order = np.argsort(-row, kind="stable")[:TOP]
        top = [(int(t), float(row[t])) for t in order if row[t] > 0]
    kind = "plain" if K == 0 else ("bonus" if n == K else "correction")
    return Round(k=K, guesses=[int(x) for x in guesses], p=p, q=q, accept=[float(a) for a in accept],
                 draws=[float(u) for u in decided], accepted=int(n), next_token=int(next_token), next_kind=kind,
                 residual_top=top, rule=rule)
