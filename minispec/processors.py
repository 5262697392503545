"""Logits processors: what a run does to a row of logits, from the tokens before it, before the warp.

A processor is a function of a row of logits and that row's *prefix* (every token before the row's position: the
prompt, what was emitted, and in a speculative round the guesses drawn before it). ``sampling.Warp`` applies them,
in the order given, then temperature, top-k and top-p: the one place the order is written.

Speculation stays lossless with them as long as p_i and q_i of a round are both processed with the same, own
prefix: the rule then compares the two distributions plain masked decoding would sample from at that position
(tests/test_processors.py, exactly on tiny models, with twins that get the prefix wrong). Each processor is
stateless: it reads the prefix afresh, so it cannot advance on a guess the rule later rejects.

The penalties mean what transformers means by them (``RepetitionPenaltyLogitsProcessor``,
``NoRepeatNGramLogitsProcessor``, ``MinNewTokensLengthLogitsProcessor``), and the frequency and presence penalties
what vLLM and OpenAI's API mean (transformers has none):

    RepetitionPenalty(r)     every token in the prefix, prompt included, once: a logit l > 0 becomes l / r, a
                             logit l < 0 becomes l * r (r > 1 discourages repeats)
    FrequencyPenalty(f)      l - f * (how often the token was generated): generated tokens only, not the prompt
    PresencePenalty(a)       l - a if the token was generated at all
    NoRepeatNGram(n)         -inf for every token that would repeat an n-gram of the prefix (prompt included)
    MinNewTokens(m, stops)   -inf for the stop tokens until m tokens are generated
    Choices(seqs, stops)     only tokens that continue one of the token sequences ``seqs`` (a trie walked by the
                             generated tokens); once one is complete, its continuations and the stop tokens

The choice mask is local, as in plain masked decoding: its law is masked decoding's, not the law of the
unconstrained model conditioned on the output being a choice. FVO-Spec (arXiv 2605.07698) measures that gap
(total variation up to 0.996); it is a property of masking, not of speculation (docs/processors.md).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Protocol, Sequence

import numpy as np

from .sampling import is_integer, is_number


class Processor(Protocol):
    """``processor(logits, prefix, prompt_len) -> logits``: ``logits`` [V] float64 (the caller's copy: it may be
    changed in place), ``prefix`` the tokens before the row, of which the first ``prompt_len`` are the prompt."""

    def __call__(self, logits: np.ndarray, prefix: Sequence[int], prompt_len: int) -> np.ndarray: ...

    def describe(self) -> str: ...


def finite(name: str, value) -> float:
    if not (is_number(value) and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


@contextmanager
def refused_overflow(processor):
    """Refuse, by the processor's name, a penalty that takes a logit past float64's range, either way: +inf would make
    the row NaN, and -inf would ban a token that the penalty only lowers (every seen token of a row, perhaps)."""
    try:
        with np.errstate(over="raise", invalid="raise"):
            yield
    except FloatingPointError as e:
        raise ValueError(f"{processor.describe()} takes a logit past float64's range ({e}): too extreme a penalty") from None


class RepetitionPenalty:
    def __init__(self, penalty: float):
        self.penalty = finite("repetition penalty", penalty)
        if self.penalty <= 0:
            raise ValueError(f"repetition penalty must be > 0 (1 leaves the logits as they are), got {penalty!r}")

    def __call__(self, logits, prefix, prompt_len):
        seen = np.unique(np.asarray(prefix, dtype=np.int64))  # prompt included, as transformers
        z = logits[seen]
        neg = z < 0  # (each side apart: np.where would compute both, and overflow in the one not taken)
        with refused_overflow(self):
            z[neg] *= self.penalty
            z[~neg] /= self.penalty
        logits[seen] = z
        return logits

    def describe(self) -> str:
        return f"repetition penalty {self.penalty:g}"


def generated_counts(prefix, prompt_len: int, V: int) -> np.ndarray:  # -> [V]
    return np.bincount(np.asarray(prefix[prompt_len:], dtype=np.int64), minlength=V)[:V]


class FrequencyPenalty:
    def __init__(self, penalty: float):
        self.penalty = finite("frequency penalty", penalty)

    def __call__(self, logits, prefix, prompt_len):
        with refused_overflow(self):
            logits -= self.penalty * generated_counts(prefix, prompt_len, len(logits))
        return logits

    def describe(self) -> str:
        return f"frequency penalty {self.penalty:g}"


class PresencePenalty:
    def __init__(self, penalty: float):
        self.penalty = finite("presence penalty", penalty)

    def __call__(self, logits, prefix, prompt_len):
        logits -= self.penalty * (generated_counts(prefix, prompt_len, len(logits)) > 0)
        return logits

    def describe(self) -> str:
        return f"presence penalty {self.penalty:g}"


class NoRepeatNGram:
    def __init__(self, n: int):
        if not (is_integer(n) and n >= 1):
            raise ValueError(f"no-repeat n-gram size must be an integer >= 1, got {n!r}")
        self.n = int(n)

    def __call__(self, logits, prefix, prompt_len):
        n = self.n
        if len(prefix) + 1 < n:
            return logits
        head = tuple(prefix[len(prefix) - n + 1:]) if n > 1 else ()  # the n-1 tokens the next one would follow
        banned = [prefix[i + n - 1] for i in range(len(prefix) - n + 1) if tuple(prefix[i: i + n - 1]) == head]
        logits[banned] = -np.inf
        return logits

    def describe(self) -> str:
        return f"no repeated {self.n}-gram"


def check_stops(what: str, stop_ids) -> tuple[int, ...]:
    stops = tuple(int(t) for t in (stop_ids or ()))
    if not stops:
        raise ValueError(f"{what} needs the run's stop tokens (stop_ids): it forbids or allows them")
    check_ids(what, stops)
    return stops


def check_ids(what: str, ids) -> None:
    """Token ids are integers of at least 0 (bug: -1 silently meant the vocabulary's last token)."""
    bad = [t for t in ids if not (is_integer(t) and t >= 0)]
    if bad:
        raise ValueError(f"{what}: token ids must be integers of at least 0, got {bad[0]!r}")


def check_vocab(what: str, largest: int, logits) -> None:
    """A processor's largest token id within the row's vocabulary (bug: an IndexError in the middle of a run)."""
    if largest >= len(logits):
        raise ValueError(f"{what}: token id {largest} is outside the model's vocabulary of {len(logits)} tokens")


class MinNewTokens:
    def __init__(self, min_new: int, stop_ids):
        if not (is_integer(min_new) and min_new >= 0):
            raise ValueError(f"minimum new tokens must be an integer >= 0, got {min_new!r}")
        self.min_new, self.stops = int(min_new), check_stops("a minimum length", stop_ids)

    def __call__(self, logits, prefix, prompt_len):
        check_vocab("a minimum length's stop tokens", max(self.stops), logits)
        if len(prefix) - prompt_len < self.min_new:
            logits[list(self.stops)] = -np.inf
        return logits

    def describe(self) -> str:
        return f"at least {self.min_new} new tokens"


class Choices:
    """Only outputs that are one of ``sequences`` (token ids each), then a stop token. A trie: the node the
    generated tokens lead to allows its children, and the stop tokens where a sequence ends there. Generated tokens
    that leave the trie (a forbidden guess of a deterministic drafter) allow every token: the row after such a guess
    is never used, since the guess is always rejected."""

    def __init__(self, sequences, stop_ids, labels=None):
        self.stops = check_stops("a choice list", stop_ids)
        if any(isinstance(s, str) for s in sequences):
            raise TypeError("Choices takes token id sequences; texts go through processors.build(choices=..., encode=...)")
        for s in sequences:
            check_ids("a choice", s)
        seqs = [tuple(int(t) for t in s) for s in sequences]
        if not seqs:
            raise ValueError("the choice list is empty: give at least one choice")
        if any(len(s) == 0 for s in seqs):
            raise ValueError("a choice is empty (no tokens): every choice must have at least one token")
        self.children: list[dict[int, int]] = [{}]  # node -> {token: child node}; node 0 is the root
        self.ends: set[int] = set()
        for s in seqs:
            node = 0
            for t in s:
                if t not in self.children[node]:
                    self.children.append({})
                    self.children[node][t] = len(self.children) - 1
                node = self.children[node][t]
            self.ends.add(node)
        self.shortest = min(len(s) for s in seqs)
        self.largest = max(max(max(s) for s in seqs), max(self.stops))
        self.labels = list(labels) if labels is not None else [str(list(s)) for s in seqs]

    def node(self, generated) -> int | None:
        node = 0
        for t in generated:
            node = self.children[node].get(int(t))
            if node is None:
                return None
        return node

    def allowed(self, generated) -> list[int] | None:
        """The tokens allowed after ``generated``; None when they left the trie (everything is)."""
        node = self.node(generated)
        if node is None:
            return None
        return sorted(self.children[node]) + (list(self.stops) if node in self.ends else [])

    def __call__(self, logits, prefix, prompt_len):
        check_vocab("a choice list", self.largest, logits)
        allowed = self.allowed(prefix[prompt_len:])
        if allowed is None:
            return logits
        keep = np.full(len(logits), -np.inf)
        keep[allowed] = logits[allowed]
        return keep

    def describe(self) -> str:
        return f"one of {len(self.labels)} choices"


def build(*, repetition_penalty=None, frequency_penalty=None, presence_penalty=None, no_repeat_ngram=None,
          min_new_tokens=None, choices=None, stop_ids=None, max_new_tokens=None, encode=None) -> tuple:
    """The processors a run's settings ask for, checked (ValueError naming the setting), in this order: the
    penalties, the n-gram ban, the minimum length, the choice mask. ``choices``: texts (tokenized by ``encode``, as
    given: a leading space is part of a choice) or token sequences. ``max_new_tokens``: refuse choices that cannot
    finish within it."""
    out = []
    if repetition_penalty is not None:
        out.append(RepetitionPenalty(repetition_penalty))
    if frequency_penalty is not None:
        out.append(FrequencyPenalty(frequency_penalty))
    if presence_penalty is not None:
        out.append(PresencePenalty(presence_penalty))
    if no_repeat_ngram is not None:
        out.append(NoRepeatNGram(no_repeat_ngram))
    if min_new_tokens is not None:
        out.append(MinNewTokens(min_new_tokens, stop_ids))
    if choices is not None:
        if isinstance(choices, str):  # (bug: "yes" became the three choices "y", "e", "s")
            raise TypeError(f"choices: a list of texts or token id sequences, not one text ({choices!r:.40})")
        choices = list(choices)
        texts = all(isinstance(c, str) for c in choices) and choices
        if not texts and any(isinstance(c, str) for c in choices):
            raise ValueError("choices must be all texts or all token id sequences, not a mix")
        if texts and encode is None:
            raise TypeError("choices given as text need the tokenizer's encode")
        mask = Choices([encode(c) if c else [] for c in choices] if texts else choices, stop_ids,
                       labels=choices if texts else None)
        if max_new_tokens is not None and mask.shortest + 1 > max_new_tokens:
            raise ValueError(f"no choice fits in max_new_tokens = {max_new_tokens}: the shortest is "
                             f"{mask.shortest} tokens, and a stop token follows it")
        if min_new_tokens is not None and min_new_tokens > mask.shortest:
            raise ValueError(f"min_new_tokens = {min_new_tokens} with a choice of {mask.shortest} tokens: after it only a "
                             "stop token is allowed, and the minimum length forbids it")
        out.append(mask)
    return tuple(out)
