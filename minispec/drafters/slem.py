"""SLEM, string-level exact match: speculative decoding with a draft that has its own tokenizer.

Timor et al. 2025, "Accelerating LLM Inference with Lossless Speculative Decoding Algorithms for
Heterogeneous Vocabularies" (arXiv 2502.05202, ICML 2025), Section 3, Algorithm 2. The draft and the
target share no token ids, only text. One round, names here -> the paper:

    the draft samples d_1..d_m in its own vocabulary    d              (until s holds K target tokens and
                                                                       the boundary one, below; m <= 2K + 2)
    s = decode_draft(d_1..d_m)                          text           the draft's continuation as text
    x_1..x_K' = encode_target(s), K' <= K               candidates     target tokens (look-behind, below)
    the target samples y_i ~ p_i itself; x_i is kept    exact_match    (the target's own tokens only)
    while y_i = x_i; the first y_i != x_i ends the
    round, and it is the target's token there

**Why the output is the target's own, at any temperature.** Every emitted token is a y_i the target
sampled from its own p_i (warped) given the tokens before it; the draft only decides how many of those
samples one target pass can check. In the terms of rejection.py, exact match is Algorithm 1 with a
one-hot q at x_i: accept with min(1, p(x)/1) = p(x), and after a rejection sample from
norm(max(0, p - onehot(x))) = p without x, renormalised. Both give P(t) = p(t), whatever distribution
the draft drew x from, because the draft's randomness is independent of the target's. So the loops run
SLEM through the ordinary ``accept_reject`` with one-hot rows; ``exact_match`` is the paper's literal
form, and tests/test_crossvocab.py shows the two have the same law.

**Non-injective tokenisation, and the boundary token.** ``encode_target(decode(...))`` is not an
inverse: the same text has many splits ("ab" + "c" or "a" + "bc"), and the target's own tokens so
far are fixed. Two places matter:
- *The join.* Re-tokenising s alone would split its start as if the text began there. The paper
  re-tokenises with a look-behind window of the text already accepted and keeps the target tokens
  after the point where the new split agrees with the target's tokens (transformers' universal
  assisted generation does the same, with a window of 10 tokens). ``candidates`` tries windows of
  ``LOOK_BEHIND`` down to 1 target tokens, and re-tokenises s alone when none agrees.
- *The end.* The draft stops after m tokens wherever that is, often inside a word: s = "... wor"
  gives a last target token " wor" where the target would write " world". That boundary token is
  an artefact of where the draft stopped, so it is dropped, except when the draft ended on a special
  token such as its end-of-sequence. Dropping it is a matter of speed, not of correctness: verified
  by exact match like the others, it would just be rejected most of the time.
  What must never happen is to *trust* it: to accept it because the target's own token " world"
  starts with its text " wor" (a string-level match where only a token match is valid). The output
  would then contain the draft's split instead of the target's token, and its law would no longer
  be the target's: the tests plant that rule (``prefix_match``) and catch it.

What SLEM gives up: the draft's probabilities. A guess is accepted with p(x), not min(1, p(x)/q(x)),
so at T > 0 it accepts less than the standard rule would with the same draft (tli.py keeps them,
on the tokens both vocabularies share).
"""

from __future__ import annotations

import numpy as np

from ..sampling import one_hot_rows, sample
from .crossvocab import OtherTokenizerDraft
from .tli import TLI

LOOK_BEHIND = 4  # target tokens re-tokenised together with the draft's text


def exact_match(target_probs, draft_probs, draft_tokens, rng: np.random.Generator) -> tuple[int, int]:
    """The paper's verification: target_probs [K+1, V], draft_tokens x_1..x_K -> (n kept, next_token). The target
    samples y_i ~ p_i; x_i is kept while y_i == x_i; the first y_i that differs is the correction (or y_{K+1},
    the bonus, when all K were kept). ``draft_probs`` is ignored (one-hot by construction); the signature is
    ``accept_reject``'s so that a loop can take either."""
    for i, x in enumerate(draft_tokens):
        y = sample(target_probs[i], rng)
        if y != x:
            return i, y
    return len(draft_tokens), sample(target_probs[len(draft_tokens)], rng)


class SLEM(OtherTokenizerDraft):
    """A draft with its own tokenizer, proposing target tokens re-tokenised from its text (module docstring)."""

    algorithm = "SLEM"

    def summary(self) -> str:
        return ("SLEM, string-level exact match (its text, re-tokenised, is checked against the target's own "
                "samples; tli:DIR for token-level intersection)")

    def room(self, tokens) -> int:
        """Guesses that fit in the draft's context: a round may step the draft 2k + 1 times for k guesses."""
        return super().room(tokens) // 2

    def keeping_boundary(self) -> BoundaryKeepingSLEM:
        """The same draft proposing its boundary token as well (``BoundaryKeepingSLEM``)."""
        return BoundaryKeepingSLEM(self.draft_model, self.cross, self.vocab)

    def first_guess_rows(self, tokens, start: int, warp, features=None) -> np.ndarray | None:
        """SLEM's guesses are one-hot, so it has no q of its own to read: these are the rows TLI would draw its first
        guess from with the same draft (tli.py), a fixed function of the text that level 4's acceptance statistic can
        read, or None when the two vocabularies share no token."""
        if not len(self.cross.shared_draft):
            return None
        return TLI(self.draft_model, self.cross, self.vocab).first_guess_rows(tokens, start, warp)

    def candidates(self, tokens: list[int], text: bytes, ended: bool) -> list[int]:
        """The target tokens of the draft's ``text`` after ``tokens``: re-tokenised with a look-behind window,
        checked byte for byte against ``text``, and without the boundary token unless the draft ``ended``."""
        cross = self.cross
        out = []
        for w in range(min(LOOK_BEHIND, len(tokens)), -1, -1):  # w = 0 always agrees: s alone
            behind = list(tokens[len(tokens) - w:])
            prefix = cross.text(behind)
            if prefix is None:
                continue
            try:
                ids = cross.target_ids(prefix + text.decode())
            except UnicodeDecodeError:  # the draft stopped inside a character: drop its last bytes
                ids = cross.target_ids(prefix + text.decode(errors="ignore"))
            if ids[:w] == behind:  # the new split agrees with the target's own tokens: take what follows
                out = ids[w:]
                break
        kept, at = [], 0
        for t in out:  # a tokenizer that adds or changes bytes (a prefix space, normalisation) is caught here
            b = cross.target_bytes[t] if t < len(cross.target_bytes) else b""
            if not b or text[at: at + len(b)] != b:
                break
            kept.append(int(t))
            at += len(b)
        return kept if ended else kept[:-1]

    def propose(self, tokens, k, warp, draws, keep=None):
        """Up to k target tokens, one-hot rows, from k + 1 or more draft tokens. ``keep`` is ignored: the target
        checks each guess against its own sample, so a guess's worth is not the draft's belief."""
        draft_ids = self.read(tokens) if k > 0 else None
        if draft_ids is None:
            return [], np.zeros((0, self.vocab))
        logits = self.feed(draft_ids, 2 * k + 2)  # [V_draft]; room for every step below
        text, ended, guesses = b"", False, []
        for i in range(2 * k + 2):  # until the text holds k target tokens besides the boundary one (at most 2k + 2)
            logits[self.cross.draft_blank] = -np.inf  # padding rows of its vocabulary spell nothing
            d = sample(warp(logits), draws)  # the draft's own token, drawn as it likes (a uniform of ``draws``)
            text += self.cross.draft_bytes[d]
            ended = d in self.cross.draft_specials
            if i >= k or ended:
                guesses = self.candidates(list(tokens), text, ended)
                if len(guesses) >= k or ended or i == 2 * k + 1:
                    break
            logits = self.step(d)
        return guesses[:k], one_hot_rows(guesses[:k], self.vocab)


class BoundaryKeepingSLEM(SLEM):
    """SLEM keeping its boundary token: harmless under exact match, which checks it like any other guess; with a
    verifier that trusts it by prefix (harness/equivalence.py: ``prefix_match``), the broken twin that level 4
    plants. Its proposal stops at the boundary token: the draft writes until its text holds more than k target
    tokens and proposes the text before that last step, so that the guess the draft broke off inside a word is in
    the proposal, last."""

    def candidates(self, tokens, text, ended):
        return super().candidates(tokens, text, True)

    def propose(self, tokens, k, warp, draws, keep=None):
        draft_ids = self.read(tokens) if k > 0 else None
        if draft_ids is None:
            return [], np.zeros((0, self.vocab))
        logits, text, guesses = self.feed(draft_ids, 2 * k + 2), b"", []
        for _ in range(2 * k + 2):
            logits[self.cross.draft_blank] = -np.inf
            d = sample(warp(logits), draws)
            more = self.candidates(list(tokens), text + self.cross.draft_bytes[d], True)
            if len(more) > k or d in self.cross.draft_specials:
                break
            text, guesses = text + self.cross.draft_bytes[d], more
            logits = self.step(d)
        return guesses, one_hot_rows(guesses, self.vocab)
