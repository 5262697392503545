"""Two tokenizers, one text: what slem.py and tli.py need to draft across vocabularies.

``OtherTokenizerDraft`` is a draft model with its own tokenizer that follows the target's text; slem.py
and tli.py add only how it proposes.

A token is a byte string. Byte-level BPE (GPT-2, SmolLM2, Qwen2, Llama 3) writes each byte as one printable
character in ``tokenizer.json``; a SentencePiece-style vocabulary writes a space as "▁" and a raw byte as
``<0x41>``; a plain BPE or word-level vocabulary is its own text. Added tokens (``<|im_end|>``) are their
content. From these bytes:

    CrossVocab.text(target_ids)        the text the target has written so far (None while its last
                                       character is cut in the middle of its bytes)
    CrossVocab.draft_ids(text)         that text in the draft's tokens: what the draft reads
    CrossVocab.target_ids(text)        a text in the target's tokens
    CrossVocab.shared_draft, .shared_target    the draft ids whose bytes are also one target token, and that
                                       token: the vocabulary intersection T ∩ D of TLI

Tokenisation is not injective: ``target_ids(text(ids))`` need not give ``ids`` back ("ab" + "c" and "a" +
"bc" are the same text). Nothing here assumes it does; slem.py says where that matters.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from ..model import Model
from ..model.config import ModelFormatError, read_json
from ..model.kvcache import kept_prefix
from ..sampling import Stream, Warp


@lru_cache(maxsize=1)
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: the printable character byte-level BPE uses for each byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + n)] = b
            n += 1
    return chars


def _kinds(part) -> set[str]:
    """The component types named in a tokenizer.json part (a pre-tokenizer or decoder, maybe a Sequence)."""
    if not isinstance(part, dict):
        return set()
    inner = part.get("pretokenizers") or part.get("decoders") or []
    return {str(part.get("type"))}.union(*(_kinds(p) for p in inner)) if isinstance(inner, list) else {str(part.get("type"))}


def read_vocabulary(model_dir, why: str) -> tuple[dict, dict, list, Path]:
    """``model_dir/tokenizer.json`` -> (the whole file, its model's "vocab" {token: id}, its "added_tokens" list,
    the file), checked; the one place that parses a tokenizer.json by hand. ``why`` ends the error for a
    directory without one: what needs it."""
    f = Path(model_dir) / "tokenizer.json"
    if not f.is_file():
        raise ModelFormatError(f"{model_dir}: no tokenizer.json; {why}")
    tj = read_json(f)
    model, added = tj.get("model"), tj.get("added_tokens", [])
    if not isinstance(model, dict) or not isinstance(model.get("vocab"), dict) or not isinstance(added, list):
        raise ModelFormatError(f"{f}: expected a \"model\" with a \"vocab\" object of token -> id and an "
                               "\"added_tokens\" list")
    return tj, model["vocab"], added, f


def token_bytes(model_dir) -> list[bytes]:
    """Each token id's bytes, from ``model_dir/tokenizer.json`` (ids without a token: b"")."""
    tj, vocab, added, f = read_vocabulary(model_dir, "drafting across vocabularies needs both tokenizers")
    model = tj["model"]
    kinds = _kinds(tj.get("pre_tokenizer")) | _kinds(tj.get("decoder"))
    if model.get("type") not in (None, "BPE", "WordLevel") or "WordPiece" in kinds:
        raise ModelFormatError(f"{f}: a {model.get('type')} tokenizer; drafting across vocabularies reads BPE and "
                               "word-level vocabularies (byte-level, SentencePiece-style, or plain text)")
    alphabet = _byte_level_alphabet()

    def decode(piece: str) -> bytes:
        if "ByteLevel" in kinds:
            if not all(c in alphabet for c in piece):
                raise ModelFormatError(f"{f}: token {piece!r} is not in the byte-level alphabet")
            return bytes(alphabet[c] for c in piece)
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):  # SentencePiece byte fallback
            try:
                return bytes([int(piece[3:5], 16)])
            except ValueError:
                pass
        return piece.replace("▁", " ").encode() if "Metaspace" in kinds or "Replace" in kinds else piece.encode()

    if not all(isinstance(t, dict) and isinstance(t.get("content"), str) for t in added):
        raise ModelFormatError(f"{f}: every added token needs a \"content\" string and an \"id\"")
    ids = list(vocab.values()) + [t.get("id") for t in added]
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 10_000_000 for i in ids):
        raise ModelFormatError(f"{f}: token ids must be integers in 0..9,999,999")
    out = [b""] * (max(ids) + 1)
    for piece, i in vocab.items():
        out[i] = decode(str(piece))
    for t in added:
        out[t["id"]] = t["content"].encode()
    return out


def special_ids(model_dir) -> set[int]:
    """The ids of the added tokens marked special (``<|im_end|>``): where a draft's text ends."""
    added = read_json(Path(model_dir) / "tokenizer.json").get("added_tokens", [])
    return {t["id"] for t in added if isinstance(t, dict) and t.get("special") and isinstance(t.get("id"), int)}


def load_tokenizer_file(model_dir):
    from tokenizers import Tokenizer

    f = Path(model_dir) / "tokenizer.json"
    try:
        return Tokenizer.from_file(str(f))
    except Exception as e:  # the tokenizers library raises a plain Exception for a file it cannot read
        raise ModelFormatError(f"{f}: the tokenizers library cannot read it ({e})") from None


def fit(table: list[bytes], vocab_size: int, role: str, model_dir) -> list[bytes]:
    """A byte table the size of the model's vocabulary: padding rows (no token) are b"". A tokenizer with ids
    the model has no row for is refused: the model could not read them."""
    if len(table) > vocab_size and any(table[vocab_size:]):
        raise ModelFormatError(f"{model_dir}: its tokenizer has ids up to {len(table) - 1}, but the {role} model's "
                               f"vocabulary has {vocab_size} rows")
    return table[:vocab_size] + [b""] * (vocab_size - len(table))


def intersection(target_bytes: list[bytes], draft_bytes: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """T ∩ D: (the draft ids whose bytes are exactly one target token [S], those target ids [S])."""
    target_of = {b: i for i, b in enumerate(target_bytes) if b}
    shared = [(d, target_of[b]) for d, b in enumerate(draft_bytes) if b in target_of]
    return (np.array([d for d, _ in shared], dtype=np.int64).reshape(-1),
            np.array([t for _, t in shared], dtype=np.int64).reshape(-1))


class CrossVocab:
    """The target's and the draft's tokenizers side by side (module docstring)."""

    def __init__(self, target_dir, draft_dir, target_vocab_size: int, draft_vocab_size: int):
        self.target_bytes = fit(token_bytes(target_dir), target_vocab_size, "target", target_dir)
        self.draft_bytes = fit(token_bytes(draft_dir), draft_vocab_size, "draft", draft_dir)
        self.draft_blank = np.array([not b for b in self.draft_bytes])  # [V_draft] padding rows: never drafted
        self.draft_specials = special_ids(draft_dir)
        self.target_tok = load_tokenizer_file(target_dir)
        self.draft_tok = load_tokenizer_file(draft_dir)
        self.shared_draft, self.shared_target = intersection(self.target_bytes, self.draft_bytes)

    def text(self, target_ids) -> str | None:
        """The text of ``target_ids``; None when it ends inside a character's bytes (nothing can follow it yet).
        Invalid bytes elsewhere become U+FFFD: the draft only reads this text."""
        raw = b"".join(self.target_bytes[int(i)] for i in target_ids)
        try:
            return raw.decode()
        except UnicodeDecodeError as e:
            if e.reason == "unexpected end of data":
                return None
            return raw.decode(errors="replace")

    def draft_text(self, draft_ids) -> bytes:
        return b"".join(self.draft_bytes[int(i)] for i in draft_ids)

    def draft_ids(self, text: str) -> list[int]:
        return self.draft_tok.encode(text, add_special_tokens=False).ids

    def target_ids(self, text: str) -> list[int]:
        return self.target_tok.encode(text, add_special_tokens=False).ids


class OtherTokenizerDraft:
    """A draft model with another tokenizer than the target's. Before each proposal it reads the target's
    text in its own tokens, and its cache rolls back to the longest prefix it shares with them (the target
    may have written the text in a split the draft never proposed). It drafts chains, not trees. Its
    proposals are in the target's ids, q rows [k, V_target]: the loops see an ordinary drafter."""

    algorithm = "?"  # "SLEM" or "TLI": what its proposals mean (slem.py, tli.py); no propose_tree: chains only

    def __init__(self, draft_model: Model, cross: CrossVocab, target_vocab_size: int):
        if not isinstance(draft_model, Model):
            raise TypeError(f"a draft with its own tokenizer needs a Model, got {type(draft_model).__name__}")
        self.draft_model, self.cross, self.vocab = draft_model, cross, target_vocab_size
        self.name = f"{self.algorithm.lower()}:{draft_model.name}"
        self.cfg, self.kernel = draft_model.cfg, draft_model.kernel
        self.cache, self.fed, self.forwards = None, [], 0
        self._read = ((), None)

    def context(self, tokens) -> int:
        return 0

    def forget(self) -> None:
        """Forget what the cache holds (protocol.py: Forgets): the next ``feed`` shares no prefix with it, so it crops
        the cache to nothing and reads every token; the cache keeps its room."""
        self.fed = []

    def read(self, tokens) -> list[int] | None:
        """The target's tokens as the draft reads them: their text in draft ids (None: the text ends inside a
        character, so nothing can be drafted after it yet)."""
        key = tuple(tokens)
        if self._read[0] != key:
            text = self.cross.text(tokens)
            ids = None if text is None else self.cross.draft_ids(text)
            self._read = (key, ids or None)  # no text, or none the draft can read: nothing to draft after
        return self._read[1]

    def room(self, tokens) -> int:
        """Guesses that still fit in the draft's context (a TLI guess is one draft token)."""
        ids = self.read(tokens)
        return 0 if ids is None else max(0, self.cfg.max_position_embeddings - len(ids) - 1)

    def feed(self, draft_ids: list[int], steps: int = 64) -> np.ndarray:
        """Bring the cache to ``draft_ids`` (reusing the common prefix) -> the draft's logits [V_draft] for what follows;
        the cache then has room for ``steps`` more (``step``) within the draft's context."""
        limit = self.cfg.max_position_embeddings
        if self.cache is None:
            self.cache, self.fed = self.draft_model.new_cache(min(limit, 2 * len(draft_ids) + 256)), []
        self.cache = self.cache.with_room(min(limit, len(draft_ids) + max(steps, 64)), limit)  # grows keeping its
        # entries (bug: always 64 more, and SLEM steps 2k + 1 times: K >= 32 overflowed the cache)
        common = kept_prefix(self.fed, draft_ids, self.cache.length)
        self.cache.crop(common)
        self.fed = list(draft_ids)
        self.forwards += 1
        return self.draft_model.forward(draft_ids[common:], self.cache, last=1)[0]

    def step(self, draft_token: int) -> np.ndarray:
        """Feed one drafted token -> logits [V_draft] for the next."""
        self.forwards += 1
        self.fed.append(int(draft_token))
        return self.draft_model.forward([int(draft_token)], self.cache)[0]

    def measure_costs(self, clock, repeats: int = 5, n: int = 64) -> tuple[float, float]:
        """The cost hook (drafters/protocol.py: TimesItself): (seconds per guess, seconds per target token caught up),
        greedy, after a text of about n target tokens made of random draft tokens; the draft forgets it after."""
        rng = Stream(np.random.PCG64(0))  # default_rng(0), a drafter's draws too
        text = self.cross.draft_text(rng.integers(0, len(self.cross.draft_bytes), n)).decode(errors="ignore")
        tokens = self.cross.target_ids(text)[:n] or [0]
        per_guess, per_fed = [], []
        for _ in range(repeats + 1):  # the first is a warm-up
            self.cache, self.fed, self._read = None, [], ((), None)
            t0 = clock()
            self.feed(self.read(tokens) or [0])
            t1 = clock()
            self.propose(tokens, 4, Warp(0.0), rng)
            t2 = clock()
            per_fed.append((t1 - t0) / len(tokens))
            per_guess.append((t2 - t1) / 4)
        self.cache, self.fed, self._read = None, [], ((), None)
        return float(np.median(per_guess[1:])), float(np.median(per_fed[1:]))
