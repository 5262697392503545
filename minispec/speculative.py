"""The speculative loop: draft K tokens, verify them in ONE target pass, keep what the rule accepts.

    tokens --drafter.propose--> x_1..x_K with q_1..q_K
           --target.forward([last, x_1..x_K])--> K+1 logit rows -> p_1..p_{K+1}  (one batched pass)
           --accept_reject--> n accepted, one more token t; the target cache rolls back to the
                              accepted prefix; repeat.

With K = 0 a round is one plain autoregressive step. The prompt rides on the first round's pass
(the prefill is that pass's first rows), so a run makes exactly one target pass per round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .adaptive import FixedK, auto_k
from .drafters import as_drafter
from .generate import check_generate_args
from .model import Model
from .rejection import accept_reject, overlap
from .sampling import warp


@dataclass
class SpecStats:
    k: int
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0  # = target passes (the first also carried the prompt)
    draft_forwards: int = 0
    position_drafted: list = field(default_factory=list)  # [j]: rounds that drafted a token at position j+1
    position_accepted: list = field(default_factory=list)  # [j]: rounds that accepted it
    tokens_per_pass: dict = field(default_factory=dict)  # tokens emitted by a round -> how many rounds
    rounds_log: list = field(default_factory=list)  # (drafted, accepted) of every round
    time_draft: float = 0.0
    time_verify: float = 0.0
    time_sample: float = 0.0
    time_prefill: float = 0.0  # the first round's pass, which carried the prompt (not in time_verify)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def per_position_acceptance(self) -> list[float]:
        """P(position j accepted | drafted), j = 1..K."""
        return [a / d if d else float("nan") for a, d in zip(self.position_accepted, self.position_drafted)]

    @property
    def mean_tokens_per_pass(self) -> float:
        n = sum(self.tokens_per_pass.values())
        return sum(t * c for t, c in self.tokens_per_pass.items()) / n if n else float("nan")

    def add_times(self, t0: float, t1: float, t2: float, t3: float, prefill: bool = False) -> None:
        """One round: drafting t0..t1, the verification pass t1..t2 (with the prompt: ``prefill``), the rule t2..t3."""
        self.time_draft += t1 - t0
        if prefill:
            self.time_prefill += t2 - t1
        else:
            self.time_verify += t2 - t1
        self.time_sample += t3 - t2

    def record(self, n_drafted: int, n_accepted: int, emitted: int) -> None:
        self.rounds += 1
        self.drafted += n_drafted
        self.accepted += n_accepted
        while len(self.position_drafted) < n_drafted:
            self.position_drafted.append(0)
            self.position_accepted.append(0)
        for j in range(n_drafted):
            self.position_drafted[j] += 1
            self.position_accepted[j] += j < n_accepted
        self.tokens_per_pass[emitted] = self.tokens_per_pass.get(emitted, 0) + 1
        self.rounds_log.append((n_drafted, n_accepted))


@dataclass
class SpecResult:
    tokens: list[int]
    stats: SpecStats


def emit(new_tokens, tokens: list, out: list, stop: set, max_new_tokens: int, on_token) -> int:
    """Append a round's tokens, never past a stop token or max_new_tokens; -> how many were emitted."""
    emitted = 0
    for t in new_tokens:
        tokens.append(t)
        out.append(t)
        emitted += 1
        if on_token:
            on_token(t)
        if t in stop or len(out) == max_new_tokens:
            break
    return emitted


def k_policy(k, target, drafter):
    """k: an int (fixed K), "auto" (cost-aware adaptive K, see adaptive.py), or a policy object with
    next_k, probe, keep and observe (see adaptive.FixedK and adaptive.AutoK)."""
    if k == "auto":
        return auto_k(target, drafter)
    if isinstance(k, (int, np.integer)):
        if k < 0:
            raise ValueError(f"k must be a non-negative integer or 'auto', got {k}")
        return FixedK(int(k))
    if all(hasattr(k, m) for m in ("next_k", "observe", "probe", "keep")):
        return k
    raise ValueError(f"k must be a non-negative integer or 'auto', got {k!r}")


@dataclass
class Run:
    """What every speculative loop keeps: the sequence, the output, the target's cache and the prompt
    tokens still to feed it (they ride on the first round's pass)."""
    tokens: list  # prompt + everything emitted so far
    out: list
    cache: object
    fresh: list  # prompt tokens not yet in the cache
    stop: set
    max_new_tokens: int
    warp: Callable
    rng: np.random.Generator
    stats: SpecStats
    seen: int = 0  # len(tokens) when the drafter last proposed: it has the rest to catch up on
    probe: np.ndarray | None = None  # this round's unverified guess: the [V] row it was drawn from
    probe_came_true: bool = False  # the last round probed a certain guess and emitted that very token

    @property
    def done(self) -> bool:
        return len(self.out) == self.max_new_tokens or (bool(self.out) and self.out[-1] in self.stop)


def start_run(target: Model, prompt_ids, max_new_tokens: int, temperature: float, top_k, top_p, seed, stop_ids,
              cache_room: int = 0) -> Run:
    """Check the arguments like ``generate`` and set up a run (``cache_room``: extra slots for a tree)."""
    ids = check_generate_args(target, prompt_ids, max_new_tokens, temperature, top_k, top_p)
    return Run(tokens=[int(t) for t in ids], out=[], cache=target.new_cache(len(ids) + max_new_tokens + cache_room),
               fresh=[int(t) for t in ids[:-1]], stop=set(stop_ids or ()), max_new_tokens=max_new_tokens,
               warp=lambda logits: warp(logits, temperature, top_k, top_p), rng=np.random.default_rng(seed),
               stats=SpecStats(-1))


def draft_probe(policy, drafter, run: Run, k: int) -> None:
    """In a plain round (``k`` = 0) the policy may still ask the drafter for one guess, never verified,
    only to learn how likely the rule would have accepted it (adaptive.py: probes). Sets ``run.probe``:
    the [V] row the guess was drawn from, or None."""
    run.probe = None
    if k == 0 and policy.probe():
        _, draft_probs = drafter.propose(run.tokens, 1, run.warp, run.rng)
        run.seen = len(run.tokens)
        run.probe = draft_probs[0] if len(draft_probs) else None


def measure_probe(run: Run, target_row: np.ndarray, emitted: int) -> tuple[float, bool] | None:
    """-> (P(the rule accepts the probe's guess) = sum min(p, q), whether it stands for a later guess of a
    chain), or None when the round did not probe. A certain guess (one-hot q) that the plain round emitted
    is as good as accepted: then the next probe is a later guess."""
    if run.probe is None:
        run.probe_came_true = False
        return None
    measured = (overlap(target_row, run.probe), run.probe_came_true)
    run.probe_came_true = bool(run.probe[emitted] == 1.0)
    return measured


def speculative_generate(target: Model, drafter, prompt_ids, max_new_tokens: int, *, k=4,
                         temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                         seed: int | None = None, stop_ids=None,
                         on_token: Callable[[int], None] | None = None) -> SpecResult:
    """Generate like ``generate(target, ...)`` (the same distribution; greedy: the same tokens), faster
    when the drafter guesses well and cheaply. Stops after a token in ``stop_ids`` (included)."""
    run = start_run(target, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, stop_ids)
    drafter = as_drafter(drafter, target)
    policy = k_policy(k, target, drafter)
    run.stats.k = k if isinstance(k, int) else -1
    tokens, cache, stats = run.tokens, run.cache, run.stats
    draft_forwards0 = getattr(drafter, "forwards", 0)
    while not run.done:
        # 1. draft: never more guesses than tokens still wanted (minus the one the target adds)
        t0 = time.perf_counter()
        k_round = min(policy.next_k(len(tokens) - run.seen, drafter.context(tokens)), max_new_tokens - len(run.out) - 1)
        draft_tokens, draft_probs = drafter.propose(tokens, k_round, run.warp, run.rng, policy.keep)
        run.seen = len(tokens) if k_round else run.seen
        draft_probe(policy, drafter, run, k_round)
        t1 = time.perf_counter()
        # 2. verify: one target pass over the last token and the K guesses -> K+1 rows
        target_logits = target.forward(run.fresh + [tokens[-1]] + list(draft_tokens), cache,
                                       last=len(draft_tokens) + 1)  # [K+1, V]
        t2 = time.perf_counter()
        # 3. accept or reject
        target_probs = run.warp(target_logits)  # [K+1, V]
        n, next_token = accept_reject(target_probs, draft_probs, draft_tokens, run.rng)
        probed = measure_probe(run, target_probs[0], next_token)
        t3 = time.perf_counter()
        cache.rollback(len(tokens) + n)  # keep the last token and the n accepted guesses
        emitted = emit(list(draft_tokens[:n]) + [next_token], tokens, run.out, run.stop, max_new_tokens, on_token)
        stats.record(len(draft_tokens), n, emitted)
        stats.add_times(t0, t1, t2, t3, prefill=bool(run.fresh))
        policy.observe(len(draft_tokens), n, t1 - t0, None if run.fresh else t3 - t1, probed)
        run.fresh = []
    stats.draft_forwards = getattr(drafter, "forwards", 0) - draft_forwards0
    return SpecResult(run.out, stats)
