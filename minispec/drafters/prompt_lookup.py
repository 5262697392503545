"""Prompt lookup decoding (Saxena 2023): the guesses are what followed the most recent earlier occurrence
of the text's last n-gram. No model, no weights; deterministic, so q is one-hot.
"""

from __future__ import annotations

import numpy as np

from ..sampling import one_hot_rows
from ..tree import Tree


class PromptLookup:
    """Prompt lookup decoding: find the most recent earlier occurrence of the last n-gram
    (n = max_ngram down to min_ngram) and propose what followed it. Deterministic: one-hot q."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, *, vocab_size: int | None = None):
        ints = all(isinstance(n, int) and not isinstance(n, bool) for n in (max_ngram, min_ngram))
        if not (ints and 1 <= min_ngram <= max_ngram):
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.vocab = vocab_size  # q rows are [V]: the loop sets the target's V (as_drafter) when None
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.name, self.forwards = f"prompt-lookup:{max_ngram}", 0

    def matches(self, seq: np.ndarray):
        """(n, start of each earlier occurrence of the last n-gram, most recent first), longest n first."""
        L, found = len(seq), []
        same = seq[:-1] == seq[-1]  # [L-1] same[i]: the n-gram ending at i equals the last n-gram (n = 1 here)
        for n in range(1, min(self.max_ngram, L - 1) + 1):
            if n > 1:  # extend every match one token to the left
                same[n - 1:] &= seq[: L - n] == seq[L - n]  # the n-gram ending at i starts like the last one
                same[n - 2] = False  # an n-gram ending at n - 2 would start before position 0
            ends = np.flatnonzero(same)
            if not ends.size:
                break
            if n >= self.min_ngram:
                found.append((n, ends[::-1] - n + 1))
        yield from reversed(found)

    def context(self, tokens) -> int:
        """The length of the longest n-gram that ends ``tokens`` and occurred before (0: no match)."""
        return next((n for n, _ in self.matches(np.asarray(tokens))), 0)

    def continuations(self, tokens, k: int, limit: int) -> list[list[int]]:
        """Up to ``limit`` distinct continuations (length <= k), longest n-gram first, most recent first."""
        seq, out = np.asarray(tokens), []
        for n, hits in self.matches(seq):
            for hit in hits:
                cont = [int(t) for t in seq[hit + n: hit + n + k]]
                if cont and cont not in out:
                    out.append(cont)
                    if len(out) == limit:
                        return out
        return out

    def continuation(self, tokens, k: int) -> list[int]:
        """What followed the most recent earlier occurrence of the longest matching n-gram."""
        found = self.continuations(tokens, k, 1)
        return found[0] if found else []

    def propose(self, tokens, k, warp, draws, keep=None):
        """``keep`` is ignored: a copied continuation is certain of itself; context() says how good it is."""
        draft_tokens = self.continuation(tokens, k) if k > 0 else []
        return draft_tokens, one_hot_rows(draft_tokens, self.vocab)

    def propose_tree(self, tokens, width: int, depth: int, warp=None, draws=None) -> Tree:
        """Up to ``width`` continuations of distinct earlier matches of the last n-gram, merged into a trie
        (tree.py); deterministic candidates, so every node's q is one-hot."""
        tree = Tree()
        for cont in self.continuations(tokens, depth, width):
            node = 0
            for t in cont:
                child = next((c for c in tree.children(node) if tree.tokens[c] == t), None)
                node = child if child is not None else tree.add(node, t, one_hot_rows([t], self.vocab)[0])
        return tree
