"""Drafters: whatever proposes the K guesses. One small protocol, three kinds.

A drafter implements ``propose(tokens, k, warp, rng, keep=None) -> (draft_tokens, draft_probs)``:
``tokens`` is the whole sequence so far (prompt + generated), ``warp`` turns logits into the
probabilities to sample from (the same warp the target gets), and ``draft_probs`` [k', V] must be
exactly the distributions the ``k' <= k`` guesses were drawn from (one-hot for a deterministic
drafter). ``keep(j, reach) -> bool``, if given, may stop drafting before guess j: ``reach`` is the
drafter's own probability that guesses 1..j would all be right (see policy/auto_k.py: the early stop); a drafter
without such a belief ignores it. ``forwards`` counts the drafter's model passes.
``context(tokens) -> int`` labels the next round cheaply, before any drafting (0: nothing to say; a
higher label: more reason to expect its guesses accepted); the cost model keeps one acceptance
estimate per label (see policy/acceptance.py). An optional ``room(tokens) -> int`` says how many draft
tokens still fit in the drafter's context (a draft model with fewer positions than the target's); at
0 the run goes on with plain rounds (rounds.Run.drafter_room).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from .crossvocab import CrossVocab
from .eagle import is_eagle_dir, load_eagle
from .model import Model, ModelFormatError, load_model
from .model.config import read_json
from .model.kvcache import kept_prefix
from .sampling import sample, top_probability
from .slem import SLEM
from .tli import TLI

Warp = Callable[[np.ndarray], np.ndarray]


class Drafter(Protocol):
    name: str
    forwards: int

    def propose(self, tokens: list[int], k: int, warp: Warp, rng: np.random.Generator,
                keep: Callable[[int, float], bool] | None = None) -> tuple[list[int], np.ndarray]: ...

    def context(self, tokens: list[int]) -> int: ...


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

    def room(self, tokens) -> int:
        """How many draft tokens fit after ``tokens`` in the draft's context (0: the draft is full; the run then
        goes on with plain rounds, rounds.Run.drafter_room)."""
        return self.model.cfg.max_position_embeddings - len(tokens)

    def pad(self, rows: np.ndarray) -> np.ndarray:  # [T, V_draft] -> [T, V_target]
        """Padding rows of a larger draft vocabulary are never proposed."""
        return rows[..., : self.vocab]

    def ensure_cache(self, length: int) -> None:
        if self.cache is None or self.cache.max_len < length:
            self.cache = self.model.new_cache(min(self.model.cfg.max_position_embeddings, max(2 * length, 256)))
            self.fed = []

    def feed(self, tokens) -> np.ndarray:
        """Bring the cache to ``tokens`` (reusing the common prefix) -> logits [V] for the next position."""
        common = kept_prefix(self.fed, tokens, self.cache.length)
        self.cache.rollback(common)
        self.fed = list(tokens)
        self.forwards += 1
        return self.pad(self.model.forward(tokens[common:], self.cache, last=1))[0]

    def propose(self, tokens, k, warp, rng, keep=None):
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
            probs = warp(logits)  # [V]
            x = sample(probs, rng)
            draft_tokens.append(x)
            draft_probs.append(probs)
            if i < k - 1:
                if keep is not None and not keep(i + 2, reach):
                    break  # even a certain next guess would not pay: save its draft pass
                self.forwards += 1
                logits = self.pad(self.model.forward([x], self.cache))[0]
                self.fed.append(x)
        return draft_tokens, np.array(draft_probs).reshape(len(draft_tokens), self.vocab)


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

    def propose(self, tokens, k, warp, rng, keep=None):
        """``keep`` is ignored: a copied continuation is certain of itself; context() says how good it is."""
        draft_tokens = self.continuation(tokens, k) if k > 0 else []
        draft_probs = np.zeros((len(draft_tokens), self.vocab))
        draft_probs[np.arange(len(draft_tokens)), draft_tokens] = 1.0
        return draft_tokens, draft_probs


def as_drafter(drafter, target: Model) -> Drafter:
    """A Model becomes a DraftModel; a drafter object passes through, and a drafter without a vocabulary
    (prompt lookup) takes the target's. A drafter's vocabulary must be the target's: its q rows are compared
    with the target's p rows, entry by entry."""
    if isinstance(drafter, Model):
        return DraftModel(drafter, target.cfg.vocab_size)
    if not (hasattr(drafter, "propose") and hasattr(drafter, "context")):
        raise TypeError("drafter must be a Model or have propose(tokens, k, warp, rng) and context(tokens), "
                        f"got {type(drafter).__name__}")
    if getattr(drafter, "vocab", 0) is None:
        drafter.vocab = target.cfg.vocab_size
    vocab = getattr(drafter, "vocab", target.cfg.vocab_size)
    if vocab != target.cfg.vocab_size:
        raise ValueError(f"drafter {getattr(drafter, 'name', type(drafter).__name__)} has vocabulary size {vocab}, "
                         f"expected the target's {target.cfg.vocab_size}")
    return drafter


CROSS_VOCAB = {"slem": SLEM, "tli": TLI}  # drafts with their own tokenizer (slem.py, tli.py)


def make_drafter(spec: str, target: Model, layers: int | None = None):
    """The CLI's drafter spec -> a drafter (None for plain decoding): ``prompt-lookup``, ``layer-skip`` (the
    target's first ``layers`` layers), ``none``, an EAGLE head directory (eagle.py), or a draft model
    directory. A draft with the target's tokenizer runs the standard rule. One with its own tokenizer runs
    TLI (tli.py) when at least half of its tokens are spelled like a target token, else SLEM (slem.py);
    ``tli:<dir>`` and ``slem:<dir>`` choose.
    ``layers`` belongs to layer-skip only: given with another drafter it is refused, not ignored."""
    if not isinstance(spec, str):
        raise TypeError(f"drafter spec must be a string, got {type(spec).__name__}")
    if layers is not None and spec != "layer-skip":
        raise ValueError(f"layers ({layers}) applies only to the layer-skip drafter, not to {spec!r}")
    if spec == "none":
        return None
    if spec == "prompt-lookup":
        return PromptLookup()
    if spec == "layer-skip":
        return LayerSkip(target, layers)
    algorithm, _, rest = spec.partition(":")
    if algorithm in CROSS_VOCAB and rest:
        return cross_vocab_drafter(CROSS_VOCAB[algorithm], rest, target)
    if not Path(spec).is_dir():
        raise ValueError(f"drafter {spec!r}: not a model directory, nor prompt-lookup, layer-skip, none, "
                         "slem:<dir> or tli:<dir>")
    if is_eagle_dir(spec):  # a feature head for this target (eagle.py), not a model
        return load_eagle(spec, target)
    if target.path is not None and not same_tokenizer(target.path, spec):
        tli = cross_vocab_drafter(TLI, spec, target, empty_ok=True)
        if len(tli.cross.shared_draft) >= len(tli.cross.draft_bytes) / 2:
            return tli  # measured better than SLEM for the shipped pair (docs/crossvocab.md)
        return SLEM(tli.draft_model, tli.cross, target.cfg.vocab_size)  # TLI would forbid most of what it says
    return DraftModel(load_model(spec), target.cfg.vocab_size)


def cross_vocab_drafter(cls, draft_dir, target: Model, empty_ok: bool = False):
    """SLEM or TLI around the draft model in ``draft_dir``; both tokenizers must be readable, and TLI needs
    tokens the two vocabularies share (``empty_ok``: let the caller decide)."""
    if not Path(draft_dir).is_dir():
        raise ValueError(f"{cls.algorithm} drafter: {draft_dir!r} is not a model directory")
    if target.path is None:
        raise ValueError(f"{cls.algorithm} needs the target's tokenizer: load the target from its directory")
    draft = load_model(draft_dir)
    cross = CrossVocab(target.path, draft_dir, target.cfg.vocab_size, draft.cfg.vocab_size)
    if cls is TLI and not len(cross.shared_draft) and not empty_ok:
        raise ValueError(f"{draft_dir}: no token of the draft's vocabulary is spelled like one of the target's; "
                         "TLI has nothing to propose (SLEM needs no shared tokens: slem:<dir>)")
    return cls(draft, cross, target.cfg.vocab_size)


def tokenizer_vocab(model_dir, role: str) -> dict[str, int]:
    """token -> id from a model directory's tokenizer.json (its BPE vocabulary and added tokens). ``role``
    ("target" or "draft") says in an error which of the two lacks one."""
    f = Path(model_dir) / "tokenizer.json"
    if not f.is_file():
        raise ModelFormatError(f"{model_dir}: no tokenizer.json; the {role} needs one to prove that the draft shares "
                               "the target's tokenizer (copy the target's tokenizer files into the draft directory)")
    tj = read_json(f)
    vocab, added = (tj.get("model") or {}).get("vocab"), tj.get("added_tokens", [])
    if not isinstance(vocab, dict) or not isinstance(added, list):
        raise ModelFormatError(f"{f}: expected a \"model\" with a \"vocab\" object and an \"added_tokens\" list")
    v = dict(vocab)
    v.update({t["content"]: t["id"] for t in added if isinstance(t, dict) and "content" in t and "id" in t})
    return v


def same_tokenizer(target_dir, draft_dir) -> bool:
    """Whether the draft's tokenizer.json maps tokens to the target's ids (the standard rule can then compare
    their q and p rows entry by entry); both directories must have one."""
    target, draft = tokenizer_vocab(target_dir, "target"), tokenizer_vocab(draft_dir, "draft")
    shared = set(target) & set(draft)
    differ = [t for t in shared if target[t] != draft[t]]
    return len(shared) >= 0.99 * max(len(target), len(draft)) and not differ  # a same-id subset is not the same
