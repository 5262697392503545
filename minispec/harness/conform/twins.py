"""Planted bugs: one twin for each class of bug that real rejection samplers have shipped (issue 37's list), each
minispec's own code with that one bug, each caught by the kit (tests/test_conform.py says so, with the smallest
failing case and its distance).

Rules (``rejection.accept_reject``'s contract):
    q_not_sampled      q is not what the draft sampled from: the rule is told norm(q^2) (a q from logits warped
                       otherwise than the ones sampled; transformers #47932 and #32867, DeepSpec #31). power.py's
                       planted "bias" at strength 1.
    warp_one_side      a warp applied to one side only: the target's rows truncated to their top 2 before the
                       rule, the draft's left as sampled (vLLM #9834 / PR #10198, mistral.rs PR #2424, ATOM PR #2318)
    wrong_residual     after a rejection, a draw from p instead of norm(max(0, p - q)) (EAGLE #20, vllm-ascend PR
                       #2881, transformers PR #28508): equivalence.broken_accept_reject
    reused_uniform     the acceptance uniform reused for the residual's draw (vllm-ascend PR #16370): the
                       acceptance rate is right, the correction is biased (it inverts the residual's CDF with a
                       uniform already known to lie above the threshold)
    bonus_wrong_row    the bonus token taken from p_K, the last guess's row, not p_{K+1} (lattice PR #509)
    bonus_dropped      every guess kept, and no bonus token: next_token None (lattice PR #509)
Loops (the loop contract):
    raw_q_loop         q not what the draft sampled from, in a loop: the draft samples from its warped logits and
                       reports softmax of its raw logits (transformers #47932); seen only where a warp changes q
    topk_ties_loop     top-k that over-keeps ties (flashinfer PR #3774): the k largest *distinct* values are kept,
                       so a tie at the top lets a (k+1)-th token in; both sides warp alike, so only the target's
                       own law with the requested top-k tells
    wrong_residual_loop  minispec's loop with the wrong residual: the loop check's power on a rule bug
    shared_noise_loop  the draft's sampling noise reused by the acceptance test (vLLM PR #47386): guess i is drawn by
                       inverting q_i's CDF at a uniform u_i, and accepted when that same u_i < p_i(x_i) / q_i(x_i)
Loops with logits processors (checked with the settings of ``LOOP_PROCESSORS``):
    grammar_advanced_loop  a grammar automaton with state, advanced on every guess and never rolled back after a
                       rejection (``AdvancesOnGuesses``)
    penalty_not_verified_loop  the penalty applied to the draft's rows, not to the target's in verification
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from ... import rejection, sampling
from ...drafters import DraftModel
from ...processors import Choices, build
from ...sampling import warp
from ..equivalence import broken_accept_reject
from ..power import planted_rule
from . import adapters


def named(fn, name: str, doc: str):
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


q_not_sampled = named(planted_rule("bias", 1.0), "q_not_sampled", "accept_reject told norm(q^2), not the q sampled from")


def top2_rows(rows: np.ndarray) -> np.ndarray:  # [n, V] -> [n, V]
    with np.errstate(divide="ignore"):
        return warp(np.log(rows), 1.0, top_k=2)


def warp_one_side(target_probs, draft_probs, draft_tokens, rng):
    """accept_reject with the target's rows truncated to their top 2, the draft's as sampled."""
    return rejection.accept_reject(top2_rows(target_probs), draft_probs, draft_tokens, rng)


def wrong_residual(target_probs, draft_probs, draft_tokens, rng):
    """The conformance kit's name for ``equivalence.broken_accept_reject``: after a rejection it samples from p, not
    norm(max(0, p - q)). (A function of its own: renaming the shared twin would rename it in every check.)"""
    return broken_accept_reject(target_probs, draft_probs, draft_tokens, rng)


class Recording:
    """A generator that remembers its last uniform."""

    def __init__(self, rng):
        self.rng, self.last = rng, None

    def random(self):
        self.last = self.rng.random()
        return self.last


@contextmanager
def replaced(module, name: str, value):
    real = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, real)


def reused_uniform(target_probs, draft_probs, draft_tokens, rng):
    """accept_reject whose final draw inverts the row's CDF with the last acceptance uniform, not a fresh one."""
    recording = Recording(rng)

    def sample_again(probs, _rng):
        cdf = np.cumsum(probs) / np.sum(probs)
        return next((i for i, c in enumerate(cdf[:-1]) if recording.last < c), len(cdf) - 1)

    with replaced(rejection, "sample", sample_again):
        return rejection.accept_reject(target_probs, draft_probs, draft_tokens, recording)


def bonus_wrong_row(target_probs, draft_probs, draft_tokens, rng):
    """accept_reject whose bonus token is drawn from p_K (the last guess's row) instead of p_{K+1}."""
    K = len(draft_tokens)
    rows = np.concatenate([target_probs[:K], target_probs[K - 1: K]]) if K else target_probs
    return rejection.accept_reject(rows, draft_probs, draft_tokens, rng)


def bonus_dropped(target_probs, draft_probs, draft_tokens, rng):
    """accept_reject that, when every guess is kept, returns no bonus token (next_token None)."""
    n, t = rejection.accept_reject(target_probs, draft_probs, draft_tokens, rng)
    return (n, None) if n == len(draft_tokens) else (n, t)


RULES = {"q_not_sampled": q_not_sampled, "warp_one_side": warp_one_side, "wrong_residual": wrong_residual,
         "reused_uniform": reused_uniform, "bonus_wrong_row": bonus_wrong_row, "bonus_dropped": bonus_dropped}


def distinct_top_k(logits, temperature: float = 1.0, top_k=None, top_p=None):
    """sampling.warp, but top-k keeps every token whose logit is among the k largest *distinct* values."""
    if top_k is None or temperature == 0:
        return warp(logits, temperature, top_k, top_p)
    z = np.array(logits, dtype=np.float64)

    def cut(row):
        values = np.unique(row)[::-1]
        return np.where(row < values[min(top_k, len(values)) - 1], -np.inf, row)
    return warp(np.apply_along_axis(cut, -1, z), temperature, None, top_p)


def topk_ties_loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed):
    """minispec's loop with ``distinct_top_k`` as the warp of both sides."""
    with replaced(sampling, "warp", distinct_top_k):  # sampling.Warp looks warp up when it runs: both sides get it
        return adapters.loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed)


def wrong_residual_loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed):
    """minispec's loop with ``wrong_residual`` as its rule."""
    return adapters.loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                         rule=wrong_residual)


class RawLogitsDraft(DraftModel):
    """A draft model that samples its guesses from the warped logits and reports q at temperature 1, unwarped."""

    def propose(self, tokens, k, warp, draws, keep=None):
        raw = []

        def warped(logits, prefix=None):  # called once per guess, on its [V] logits
            raw.append(np.asarray(logits, dtype=np.float64))
            return warp(logits, prefix)
        draft_tokens, draft_probs = super().propose(tokens, k, warped, draws, keep)
        return draft_tokens, (sampling.warp(np.array(raw), 1.0) if draft_tokens else draft_probs)


def raw_q_loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed):
    """minispec's loop with ``RawLogitsDraft``."""
    return adapters.loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                         drafter_class=RawLogitsDraft)


LOOPS = {"raw_q": raw_q_loop, "topk_ties": topk_ties_loop, "wrong_residual": wrong_residual_loop}


class Recorder:
    """A drafter's draws (sampling.Draws) that keep every uniform they use in ``uniforms`` (the draft's noise)."""

    def __init__(self, rng, uniforms: list):
        self.rng, self.uniforms = rng, uniforms

    def random(self):
        self.uniforms.append(self.rng.random())
        return self.uniforms[-1]

    draw = sampling.Stream.draw  # the run's own draw: sample(probs, self), with this object's next uniform


class Replayer:
    """A generator that hands out ``uniforms`` first (the draft's noise, reused), then fresh draws."""

    def __init__(self, rng, uniforms: list):
        self.rng, self.uniforms = rng, list(uniforms)

    def random(self):
        return self.uniforms.pop(0) if self.uniforms else self.rng.random()


def shared_noise_loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed):
    """minispec's loop whose rule reuses, for guess i's acceptance, the uniform that drew guess i."""
    uniforms: list[float] = []

    class NoiseKeepingDraft(DraftModel):
        def propose(self, tokens, k, warp, draws, keep=None):
            uniforms.clear()
            return super().propose(tokens, k, warp, Recorder(draws, uniforms), keep)

    def rule(target_probs, draft_probs, draft_tokens, rng):
        return rejection.accept_reject(target_probs, draft_probs, draft_tokens, Replayer(rng, uniforms))
    return adapters.loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                         rule=rule, drafter_class=NoiseKeepingDraft)


class AdvancesOnGuesses(Choices):
    """A choice automaton with state: advanced by every token it is shown (the draft's guesses included) and never
    rolled back when the rule rejects a guess; it masks as if what it saw had been generated."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.state: list[int] = []

    def __call__(self, logits, prefix, prompt_len):
        generated = list(prefix[prompt_len:])
        self.state += generated[len(self.state):]  # advances on every new token it is shown
        believed = self.state[: len(generated)]  # what it thinks was generated: never rolled back
        return super().__call__(logits, list(prefix[:prompt_len]) + believed, prompt_len)


def with_stateful_choices(**settings) -> tuple:
    """processors.build, with the choice mask replaced by ``AdvancesOnGuesses`` (a fresh one per run)."""
    out = list(build(**settings))
    return tuple(AdvancesOnGuesses(settings["choices"], settings["stop_ids"]) if isinstance(p, Choices) else p
                 for p in out)


def grammar_advanced_loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                          processors=None):
    """minispec's loop with ``AdvancesOnGuesses`` as its choice mask."""
    return adapters.loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                         processors, make_processors=with_stateful_choices)


def unprocessed_chain(self, logits, tokens, guesses):
    """``sampling.Warp.chain`` that leaves out the processors: the target's rows verified without them."""
    return warp(logits, self.temperature, self.top_k, self.top_p)


def penalty_not_verified_loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                              processors=None):
    """minispec's loop whose target rows skip the processors (the draft's keep them)."""
    with replaced(sampling.Warp, "chain", unprocessed_chain):
        return adapters.loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                             processors)


LOOPS["shared_noise"] = shared_noise_loop
LOOPS["grammar_advanced"] = grammar_advanced_loop
LOOPS["penalty_not_verified"] = penalty_not_verified_loop
CHOICES = dict(choices=[[1, 2], [3], [2, 4, 1], [4, 3]], stop_ids=[0])  # token ids of the kit's 5-token models
LOOP_PROCESSORS = {"grammar_advanced": CHOICES, "penalty_not_verified": dict(repetition_penalty=3.0)}
