"""TLI, token-level intersection: the standard rule with a draft that has its own tokenizer.

Timor et al. 2025 (arXiv 2502.05202, ICML 2025), Section 4, Algorithm 4. Names here -> the paper:

    T, D                         the target's and the draft's vocabularies (token -> its bytes, crossvocab.py)
    T ∩ D                        cross.shared_draft: draft ids whose bytes are exactly one target token
    q(x) of the draft, x in D    its logits
    q'(x) = q(x) / sum_{T ∩ D} q  the restricted distribution, renormalised: what the guess is drawn from.
                                 ``restrict`` keeps the logits of T ∩ D and warps them: with a temperature
                                 alone that is q / sum q exactly; top-k and top-p then pick among the
                                 shared tokens (either way the rule gets the q' it sampled from)
    map(x)                       the target id of the same bytes: the guess the target sees. Here the guess's
                                 target id is drawn from q' on the target's ids (``target_row``, ``pick``), the
                                 same law, and the draft goes on from the spelling q' likes most
    Algorithm 1 on (p, q')       rejection.accept_reject, unchanged

**Why it is lossless.** After the mapping, q' is a distribution over the target's ids (zero outside the
intersection) and each guess is drawn from it. That is all Algorithm 1 asks of q: its proof (accept x
with min(1, p(x)/q'(x)); after a rejection, sample norm(max(0, p - q'))) gives P(t) = p(t) for any q'
from which x was actually drawn. Tokens outside the intersection are still reachable: a rejection
samples them from the residual. What breaks it is a q that is not the one sampled: q not renormalised
(its rows sum to less than 1), or a guess drawn from outside the intersection and mapped to some target
token, which q' says cannot happen. The tests plant both (tests/test_crossvocab.py).

What TLI gives up: the draft's tokens outside the intersection (it can only propose what both
vocabularies spell the same way), and with them the mass q put there. It keeps the draft's
probabilities, which SLEM (slem.py) does not: at T > 0 a guess is accepted with min(1, p/q'), not p.
"""

from __future__ import annotations

import numpy as np

from .crossvocab import OtherTokenizerDraft


class TLI(OtherTokenizerDraft):
    """A draft with its own tokenizer, proposing only tokens both vocabularies share (module docstring)."""

    algorithm = "TLI"

    def summary(self) -> str:
        return (f"TLI, token-level intersection (it proposes only the {len(self.cross.shared_draft):,} of its "
                f"{len(self.cross.draft_bytes):,} tokens spelled like a target token; the standard rule; slem:DIR "
                "for string-level exact match)")

    def restrict(self, draft_logits: np.ndarray, warp) -> np.ndarray:
        """q' over the intersection: the draft's logits [V_draft] at the shared draft ids, warped (temperature,
        top-k, top-p over what it may propose) -> [S] probabilities summing to 1."""
        return warp(draft_logits[self.cross.shared_draft])

    def target_row(self, q: np.ndarray) -> np.ndarray:
        """q' [S] on the target's ids -> [V_target] (two draft ids spelled alike would add up on one target id)."""
        return np.bincount(self.cross.shared_target, weights=q, minlength=self.vocab)

    def first_guess_rows(self, tokens, start: int, warp, features=None) -> np.ndarray:  # -> [len(tokens) - start, V]
        """q' of a first guess at every position j >= start of ``tokens``: what ``propose`` would draw the guess for
        tokens[j] from, after tokens[:j] (a zero row where the text ends inside a character). The draft reads each
        prefix in its own tokens, so its cache follows the text as it does after a proposal."""
        rows = np.zeros((len(tokens) - start, self.vocab))
        for j in range(start, len(tokens)):
            draft_ids = self.read(tokens[:j])
            if draft_ids is not None:
                rows[j - start] = self.target_row(self.restrict(self.feed(draft_ids), warp))
        return rows

    def pick(self, q: np.ndarray, row: np.ndarray, draws, i: int) -> int:
        """The guess's index in the intersection: its target id drawn from q' as ``row`` [V] (on the target's ids,
        where a keyed rule's target token races on the same noise: keyed.py), then the draft id spelled as that
        target id that q' likes most (draft ids spelled alike share one target id)."""
        spelled = np.flatnonzero(self.cross.shared_target == draws.draw(row, i))  # [>= 1] draft ids of that target id
        return int(spelled[np.argmax(q[spelled])])  # departure: the paper's draft goes on from the id it drew; the
        # guess has the paper's law, and the rows stay the ones drawn from

    def propose(self, tokens, k, warp, draws, keep=None):
        """Up to k guesses drawn from q', as target ids, with their [k', V_target] rows. ``keep`` is ignored."""
        draft_ids = self.read(tokens) if k > 0 else None
        if draft_ids is None or not len(self.cross.shared_draft):
            return [], np.zeros((0, self.vocab))
        logits = self.feed(draft_ids, k)  # [V_draft]
        guesses, rows = [], np.zeros((k, self.vocab))
        for i in range(k):
            q = self.restrict(logits, warp)  # [S]
            rows[i] = self.target_row(q)
            j = self.pick(q, rows[i], draws, i)
            guesses.append(int(self.cross.shared_target[j]))
            if i < k - 1:
                logits = self.step(int(self.cross.shared_draft[j]))
        return guesses, rows
