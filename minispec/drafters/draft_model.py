"""A draft model: a smaller model with the target's tokenizer, sampling K tokens one after another
(Leviathan et al. 2022, the M_q of Algorithm 1). Layer skip is the same drafter over the target's first
layers (self-speculation, no weights of its own).

The draft keeps its own KV cache, which follows the sequence: before each proposal it is cropped to the
longest prefix it shares with ``tokens`` (rejected guesses drop out) and fed the rest (the tokens the
target chose, and the last guess when all K were accepted): ``speculative_sampling`` (textbook.py)
spelled out as a drafter.
"""

from __future__ import annotations

import numpy as np

from ..model import Model
from ..model.kvcache import kept_prefix
from ..sampling import top_probability
from ..tree import Tree, add_children, tree_mask_rows


class DraftModel:
    """A smaller model with the target's tokenizer, sampling K tokens one after another.

    Its cache follows the sequence: before each proposal it rolls back to the longest prefix it
    shares with ``tokens`` (rejected guesses drop out) and feeds the rest (the tokens the target
    chose, and the last guess when all K were accepted).
    """

    def __init__(self, model: Model, target_vocab_size: int | None = None, name: str | None = None):
        """``target_vocab_size``: the target's V (default: the draft's own). The draft's vocabulary may be larger
        (padding rows, never proposed) but not smaller: the target may emit any of its V ids, and the draft
        must read each one when it catches up."""
        if not isinstance(model, Model):
            raise TypeError(f"DraftModel needs a Model, got {type(model).__name__}")
        self.model, self.name = model, name or f"draft:{model.name}"
        self.vocab = target_vocab_size or model.cfg.vocab_size
        if model.cfg.vocab_size - self.vocab > 1024:
            raise ValueError(f"draft vocabulary ({model.cfg.vocab_size}) and target vocabulary ({self.vocab}) differ by "
                             "more than padding: the draft needs the target's tokenizer")
        if model.cfg.vocab_size < self.vocab:
            raise ValueError(f"draft vocabulary ({model.cfg.vocab_size}) is smaller than the target's ({self.vocab}): "
                             "the target may emit a token the draft cannot read; the draft needs the target's tokenizer "
                             "and at least its vocabulary size")
        self.cache, self.fed, self.forwards = None, [], 0

    def context(self, tokens) -> int:
        return 0  # knowing more would cost a draft pass

    def forget(self) -> None:
        """Forget what the cache holds (protocol.py: Forgets): the next ``feed`` shares no prefix with it, so it crops
        the cache to nothing and reads every token; the cache keeps its room."""
        self.fed = []

    def room(self, tokens) -> int:
        """How many draft tokens fit after ``tokens`` in the draft's context (0: the draft is full; the run then
        goes on with plain rounds, rounds.Run.drafter_room)."""
        return self.model.cfg.max_position_embeddings - len(tokens)

    def pad(self, rows: np.ndarray) -> np.ndarray:  # [T, V_draft] -> [T, V_target]
        """The first V_target columns: the padding ids of a larger draft vocabulary are cut off, never proposed."""
        return rows[..., : self.vocab]

    def ensure_cache(self, length: int) -> None:
        """Room for ``length`` positions; a cache that grows keeps its entries (nothing is fed again)."""
        limit = self.model.cfg.max_position_embeddings
        if self.cache is None:
            self.cache, self.fed = self.model.new_cache(min(limit, max(2 * length, 256))), []
        self.cache = self.cache.with_room(min(length, limit), limit)

    def feed(self, tokens) -> np.ndarray:
        """Bring the cache to ``tokens`` (reusing the common prefix) -> logits [V] for the next position."""
        common = kept_prefix(self.fed, tokens, self.cache.length)
        self.cache.crop(common)
        self.fed = list(tokens)
        self.forwards += 1
        return self.pad(self.model.forward(tokens[common:], self.cache, last=1))[0]

    def first_guess_rows(self, tokens, start: int, warp, features=None) -> np.ndarray:  # -> [len(tokens) - start, V]
        """Row i: what the first guess after tokens[:start + i] is drawn from, warp(the draft's logits there), from one
        pass over ``tokens`` in a cache of its own (the drafter's cache is not touched)."""
        if not 1 <= start <= len(tokens):
            raise ValueError(f"first_guess_rows: start {start} must be in 1..{len(tokens)} (a guess follows a token)")
        logits = self.pad(self.model.forward(tokens, self.model.new_cache(len(tokens))))  # [T, V]
        return warp.chain(logits[start - 1: len(tokens) - 1], tokens[:start], tokens[start:], strict=False)  # row i after tokens[:start + i]

    def propose(self, tokens, k, warp, draws, keep=None):
        """Sample up to k guesses one after another. With ``keep``, stop before guess j when the draft's
        belief that guesses 1..j are all right (the product of its top probabilities) does not pay for
        verifying it; and before even computing guess j when the belief in 1..j-1 would not (a guess
        cannot raise it). The belief in guess j is read from its distribution *before* drawing from it: a
        rule that looked at the drawn token (drop unlikely draws) would leave kept guesses that are not
        distributed as q, and the rejection rule would no longer be lossless. One position, q = (0.9, 0.1),
        p = (0.5, 0.5), draws of the second token dropped (the target then samples p itself): the output
        is (0.5 + 0.05, 0.4 + 0.05) = (0.55, 0.45), not p (tests/test_adaptive.py catches this variant)."""
        if k == 0:
            return [], np.zeros((0, self.vocab))
        self.ensure_cache(len(tokens) + k)
        logits = self.feed(tokens)
        draft_tokens, draft_probs, reach = [], [], 1.0
        for i in range(k):
            if keep is not None:
                reach *= top_probability(logits)
                if not keep(i + 1, reach):
                    break
            probs = warp(logits, list(tokens) + draft_tokens)  # [V]: q_i, after the sequence and x_1..x_{i-1}
            x = draws.draw(probs, i)  # the guess, from q (keyed noise: its race at the guess's position, keyed.py)
            draft_tokens.append(x)
            draft_probs.append(probs)
            if i < k - 1:
                if keep is not None and not keep(i + 2, reach):
                    break  # even a certain next guess would not pay: save its draft pass
                self.forwards += 1
                logits = self.pad(self.model.forward([x], self.cache))[0]
                self.fed.append(x)
        return draft_tokens, np.array(draft_probs).reshape(len(draft_tokens), self.vocab)

    def propose_tree(self, tokens, width: int, depth: int, warp, draws) -> Tree:
        """``width`` first tokens, each followed by a chain of ``depth - 1`` draft samples (tree.py). The draft runs
        one masked pass per level over the whole level; its tree entries are scratch (cropped after)."""
        tree = Tree()
        self.ensure_cache(len(tokens) + width * depth)
        level = add_children(tree, 0, self.feed(tokens), width, warp, draws, prefix=tokens)
        base = self.cache.length  # the draft cache holds every committed token, the root last (slot base-1)
        for d in range(1, depth):
            ids = np.array([tree.tokens[n] for n in level], dtype=np.int64)
            mask = tree_mask_rows(tree, level, base - 1)
            positions = base - 1 + tree.depths()[level]
            self.forwards += 1
            logits = self.pad(self.model.forward_masked(ids, self.cache, positions, mask))  # [len(level), V]
            level = [add_children(tree, n, logits[i], 1, warp, draws, d, tree.prefix(tokens, n))[0]
                     for i, n in enumerate(level)]
        self.cache.crop(base)
        return tree


class LayerSkip(DraftModel):
    """Self-speculation: the target's first ``layers`` layers (default 4/5 of them: 24 of SmolLM2's 30), its
    final norm and head; no weight copy."""

    def __init__(self, target: Model, layers: int | None = None):
        layers = self.default_layers(target) if layers is None else layers
        if not (isinstance(layers, (int, np.integer)) and not isinstance(layers, bool)
                and 1 <= layers <= target.cfg.num_layers):
            raise ValueError(f"layer-skip layers must be an integer in 1..{target.cfg.num_layers} (the target's "
                             f"layers), got {layers!r}")
        super().__init__(target.truncated(layers), name=f"layer-skip:{layers}")

    @staticmethod
    def default_layers(target: Model) -> int:
        return max(1, target.cfg.num_layers * 4 // 5)
