"""Logit warps (temperature, top-k, top-p), and sampling with passed-in randomness: ``sample`` with anything that
has ``random()`` (a ``numpy.random.Generator``, a drafter's ``Draws``).

A drafter draws its guesses with what the round hands it (``Draws``): the run's generator, a ``Stream``, by default,
or a keyed rule's noise (keyed.py), which draws by position. Either way the drafter calls ``draws.draw(q, i)``.

``warp`` turns one row of logits into the distribution that is actually sampled. Speculative
decoding applies the *same* warp to draft and target, and the draft must sample from exactly the
probabilities it hands to the rejection rule. Probabilities are float64: they are not activations,
and the rejection rule divides and subtracts them.

``Warp`` is what a run hands its drafter and applies to the target's rows: the warp's settings, and the logits
processors (processors.py: penalties, a choice mask) that read the tokens before a row, its *prefix*. A row's
prefix is its own: at the i-th guess of a round, the sequence and the guesses x_1..x_{i-1} drawn before it, for the
draft's q_i and the target's p_i alike (``Warp.chain``, ``Warp.tree``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


def is_number(x) -> bool:
    """A real number, not a bool (True would silently mean 1) and not a string ("0.8" must not pass)."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def is_integer(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def check_warp_args(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """temperature a finite number >= 0, top_k None or an integer >= 1, top_p None or a number in (0, 1]."""
    if not (is_number(temperature) and 0 <= temperature < np.inf):
        raise ValueError(f"temperature must be a finite number >= 0 (0 means greedy), got {temperature!r}")
    if top_k is not None and not (is_integer(top_k) and top_k >= 1):
        raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
    if top_p is not None and not (is_number(top_p) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be a number in (0, 1] or None, got {top_p!r}")


def check_generate_args(model, prompt_ids, max_new_tokens: int, temperature, top_k, top_p,
                        seed=None, stop_ids=None) -> np.ndarray:
    """Check every argument of a run before any work -> the prompt as an int64 array."""
    check_warp_args(temperature, top_k, top_p)
    if not (is_integer(max_new_tokens) and max_new_tokens >= 0):
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    if seed is not None and not (is_integer(seed) and seed >= 0):
        raise ValueError(f"seed must be None or a non-negative integer, got {seed!r}")
    if stop_ids is not None:
        check_stop_ids(model, stop_ids)
    ids = model.check_tokens(prompt_ids)
    limit = model.cfg.max_position_embeddings
    if len(ids) + max_new_tokens > limit:
        raise ValueError(f"prompt ({len(ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
                         f"context of {limit} positions")
    return ids


def stop_set(stop_ids) -> set[int]:
    """The checked ``stop_ids`` (``check_stop_ids``) as a set of ints; None: no stop token."""
    return set() if stop_ids is None else {int(t) for t in stop_ids}


def check_stop_ids(model, stop_ids) -> None:
    """None, or a list/tuple/set of token ids of the model's vocabulary (a bare int or a string is refused)."""
    if stop_ids is None:
        return
    if not isinstance(stop_ids, (list, tuple, set, frozenset, np.ndarray)):
        raise TypeError(f"stop_ids must be None or a list of token ids, got {type(stop_ids).__name__} {stop_ids!r}")
    bad = [t for t in stop_ids if not (is_integer(t) and 0 <= t < model.cfg.vocab_size)]
    if bad:
        raise ValueError(f"stop_ids must be token ids in 0..{model.cfg.vocab_size - 1}, got {bad[0]!r}")


def warp(logits, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None) -> np.ndarray:
    """logits [..., V] -> probs [..., V] (float64). temperature 0 gives the one-hot argmax."""
    check_warp_args(temperature, top_k, top_p)
    V = np.shape(logits)[-1]
    if temperature == 0:
        probs = np.zeros(np.shape(logits))  # greedy: all mass on the first maximum
        np.put_along_axis(probs, np.argmax(logits, axis=-1)[..., None], 1.0, axis=-1)
        return probs
    z = np.array(logits, dtype=np.float64)  # a float64 copy, worked on in place (a pass's rows are MBs)
    z /= temperature
    if top_k is not None and top_k < V:
        kth = np.sort(z, axis=-1)[..., V - top_k][..., None]  # the k-th largest value
        z[z < kth] = -np.inf
    z -= z.max(axis=-1, keepdims=True)
    probs = np.exp(z, out=z)
    probs /= probs.sum(axis=-1, keepdims=True)
    if top_p is not None and top_p < 1:
        # keep the smallest set of most likely tokens whose mass reaches top_p
        order = np.argsort(-probs, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(probs, order, axis=-1)
        before = np.cumsum(sorted_p, axis=-1) - sorted_p  # mass strictly before each token
        keep_sorted = before < top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum(axis=-1, keepdims=True)
    return probs


def top_probability(logits) -> float:
    """The largest probability in softmax(logits) at temperature 1: how sure a model is of its next token
    (for greedy decoding, the probability it gives the token it picks)."""
    z = np.asarray(logits, dtype=np.float64)
    return float(1.0 / np.exp(z - z.max()).sum())


def one_hot_rows(tokens, V: int) -> np.ndarray:  # [n] -> [n, V]
    """The q of a deterministic guess: all mass on the token. One row per token."""
    rows = np.zeros((len(tokens), V))
    rows[np.arange(len(tokens)), np.asarray(tokens, dtype=np.int64)] = 1.0
    return rows


def sample(probs: np.ndarray, rng) -> int:
    """One token from a probability row, by inverting its CDF with one uniform draw, ``rng.random()``."""
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(probs) - 1))


class Draws(Protocol):
    """How a drafter draws: ``draw(probs, i)``, a token from ``probs`` for the round's i-th new position (i = 0: the
    token after the sequence), and ``random()``, a uniform, for a drafter that samples by itself (SLEM: ``sample(q,
    draws)``, then not coupled). ``Stream`` (the default) and keyed noise have both; nothing asks which one it holds
    (so this protocol is declared, not checked at run time): a drafter just calls ``draw``."""

    def draw(self, probs: np.ndarray, i: int) -> int: ...

    def random(self) -> float: ...


class Stream(np.random.Generator):
    """A NumPy generator that is also a drafter's ``Draws``: ``draw`` samples with the stream's next uniform, whatever
    the position. A subclass, not a wrapper: the run keeps one stream, which the rules use as the Generator it is.
    ``Stream(np.random.PCG64(seed))`` gives exactly the numbers of ``np.random.default_rng(seed)``."""

    def draw(self, probs: np.ndarray, i: int) -> int:
        return sample(probs, self)  # i is not read: a stream has no positions


@dataclass(frozen=True)
class Warp:
    """The distribution a position samples from, given the model's logits there and the tokens before it (its
    ``prefix``), for draft and target alike. The order, written here and nowhere else: the ``processors`` in the
    order given, each reading the row's own prefix, then temperature, top-k and top-p (``warp``), as transformers
    and vLLM order them. ``prompt_len``: the prefix's first tokens that are the prompt (a processor that counts
    generated tokens counts the rest). With no processors the prefix is not needed, and a matrix of rows is warped
    at once. The settings are checked where they are used, by ``warp``."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    processors: tuple = ()
    prompt_len: int = 0

    def __call__(self, logits, prefix=None, strict: bool = False) -> np.ndarray:  # [V] -> [V] float64
        """The row's distribution. ``strict``: a row the output is sampled from (the target's, or plain decoding's),
        where processors that leave no token allowed are an error, as in plain decoding; a draft's row is not strict
        (``process``)."""
        return warp(self.process(logits, prefix, strict) if self.processors else logits, self.temperature, self.top_k,
                    self.top_p)

    def process(self, logits, prefix, strict: bool = False) -> np.ndarray:  # [V] -> [V] float64
        """The processors applied to one row, in order, on a float64 copy. A row they leave with no allowed token
        (every logit -inf) is an error where ``strict`` (the ValueError plain decoding raises there); a draft's row is
        given back as it came instead (an EAGLE head whose frequent tokens are all forbidden): any q the guesses are
        really drawn from keeps the rule lossless. Departure from transformers, which would sample NaNs there."""
        z = np.array(logits, dtype=np.float64)  # [V]
        if not self.processors:
            return z
        if prefix is None:
            raise TypeError("these logits processors read the tokens before a row: call warp(logits, prefix) "
                            "(a drafter passes the sequence and its guesses so far; drafters/protocol.py)")
        prefix = [int(t) for t in prefix]
        for processor in self.processors:
            z = processor(z, prefix, self.prompt_len)
        if np.isnan(z).any() or np.isposinf(z).any():  # (bug: a penalty of 1e-310 made +inf, warp NaN, and sample
            # then gave the vocabulary's last token)
            raise ValueError(f"a logit is NaN or +inf after the logits processors, {len(prefix) - self.prompt_len} "
                             f"generated tokens in ({', '.join(map(describe, self.processors))}): a penalty too extreme, "
                             "or logits that were not finite already")
        if not np.isfinite(z).any():
            if strict:
                raise ValueError(f"the logits processors allow no token after {len(prefix) - self.prompt_len} "
                                 f"generated tokens ({', '.join(map(describe, self.processors))})")
            return np.array(logits, dtype=np.float64)
        return z

    def chain(self, logits, tokens, guesses, strict: bool = True) -> np.ndarray:  # [n, V] -> [n, V]
        """Row i's distribution after ``tokens`` + ``guesses[:i]``: a target pass's p_1..p_{K+1} over a chain
        x_1..x_K, or (``strict=False``) a drafter's first-guess rows over a text."""
        if self.processors and len(logits):
            return self.rows_along(logits, lambda i: [*tokens, *guesses[:i]], range(-1, len(logits) - 1),
                                   [-1, *guesses], strict)
        return warp(logits, self.temperature, self.top_k, self.top_p)

    def tree(self, logits, tokens, tree) -> np.ndarray:  # [N+1, V] -> [N+1, V]
        """Row n's distribution after ``tokens`` and the path to node n of ``tree`` (tree.py; row 0: the root's)."""
        if self.processors:
            return self.rows_along(logits, lambda n: tree.prefix(tokens, n), tree.parents, tree.tokens, True)
        return warp(logits, self.temperature, self.top_k, self.top_p)

    def rows_along(self, logits, prefix_of, parents, via, strict: bool) -> np.ndarray:  # [n, V] -> [n, V]
        """Rows processed and warped one by one, row n after the tokens ``prefix_of(n)``, reached from row
        ``parents[n]`` (-1: the first) by the token ``via[n]``; a row is strict only where it can be reached:
        ``strict`` for the first, then its parent's where the parent gives ``via[n]`` p > 0. After a guess with
        p = 0, which every rule rejects, no row is read, and one that the processors leave with no token is no error
        (bug: every row was strict, so such a row raised where plain decoding, which never reaches its prefix, went
        on)."""
        probs, reached = [], []
        for n, row in enumerate(logits):  # parents before children (tree.py adds a node after its parent)
            up = parents[n]
            reached.append(strict if up < 0 else reached[up] and probs[up][via[n]] > 0)
            probs.append(warp(self.process(row, prefix_of(n), reached[n]), self.temperature, self.top_k, self.top_p))
        return np.stack(probs)


def describe(processor) -> str:
    return getattr(processor, "describe", lambda: type(processor).__name__)()
