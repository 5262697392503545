"""Which drafter: ``make_drafter`` turns the CLI's spec into one, ``register_drafter`` adds a kind of drafter to
the specs it knows, ``as_drafter`` checks what a caller passes in, and ``same_tokenizer`` decides whether a draft may
use the standard rule (its q and p rows compared entry by entry) or needs one of the cross-vocabulary algorithms
(slem.py, tli.py).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ..model import Model, ModelFormatError, load_model
from .crossvocab import CrossVocab, read_vocabulary
from .draft_model import DraftModel, LayerSkip
from .eagle import is_eagle_dir, load_eagle
from .prompt_lookup import PromptLookup
from .protocol import as_drafter
from .slem import SLEM
from .tli import TLI

CROSS_VOCAB = {"slem": SLEM, "tli": TLI}  # drafts with their own tokenizer (slem.py, tli.py)
BUILT_IN = ("none", "prompt-lookup", "layer-skip", *CROSS_VOCAB)
REGISTERED = {}  # kind -> make(target, argument or None): the kinds ``register_drafter`` added


def register_drafter(kind: str, make) -> None:
    """Let ``make_drafter`` (and so the CLI's ``--draft``, ``minispec check`` and ``minispec bench``) build a kind of
    drafter minispec does not ship: the spec ``kind`` or ``kind:ARGUMENT`` gives ``make(target, ARGUMENT or None)``,
    which returns the drafter (drafters/protocol.py says what it must provide). A kind must be a new lower-case name.

    tests/test_protocol.py registers a Medusa-style drafter this way: ``register_drafter("medusa", lambda target, arg:
    Medusa(target))``, then runs ``minispec check --draft medusa``.
    """
    if not (isinstance(kind, str) and re.fullmatch(r"[a-z][a-z0-9-]*", kind)):
        raise ValueError(f"drafter kind {kind!r}: expected a lower-case name (letters, digits, '-')")
    if kind in BUILT_IN or kind in REGISTERED:
        raise ValueError(f"drafter kind {kind!r} is already taken")
    if not callable(make):
        raise TypeError(f"drafter kind {kind!r}: make must be callable as make(target, argument)")
    REGISTERED[kind] = make


def unregister_drafter(kind: str) -> None:
    """Forget a kind ``register_drafter`` added (a test cleans up with it)."""
    REGISTERED.pop(kind, None)


def make_drafter(spec: str, target: Model, layers: int | None = None):
    """The CLI's drafter spec -> a drafter (None for plain decoding): ``prompt-lookup``, ``layer-skip`` (the
    target's first ``layers`` layers), ``none``, an EAGLE head directory (eagle.py), or a draft model
    directory, or a kind ``register_drafter`` added. A draft with the target's tokenizer runs the standard rule. One with its own tokenizer runs
    TLI (tli.py) when at least half of its tokens are spelled like a target token, else SLEM (slem.py);
    ``tli:<dir>`` and ``slem:<dir>`` choose.
    ``layers`` belongs to layer-skip only: given with another drafter it is refused, not ignored."""
    if not isinstance(spec, str):
        raise TypeError(f"drafter spec must be a string, got {type(spec).__name__}")
    if not spec.strip():  # (bug: "" is Path("."), so an empty spec, say an unset shell variable, loaded the current directory)
        raise ValueError(f"drafter spec is empty ({spec!r}): give prompt-lookup, layer-skip, none or a directory")
    if layers is not None and spec != "layer-skip":
        raise ValueError(f"layers ({layers}) applies only to the layer-skip drafter, not to {spec!r}")
    if spec == "none":
        return None
    if spec == "prompt-lookup":
        return PromptLookup()
    if spec == "layer-skip":
        return LayerSkip(target, layers)
    algorithm, _, rest = spec.partition(":")
    if algorithm in REGISTERED:
        return as_drafter(REGISTERED[algorithm](target, rest or None), target)
    if algorithm in CROSS_VOCAB and rest:
        return cross_vocab_drafter(CROSS_VOCAB[algorithm], rest, target)
    if not Path(spec).is_dir():
        raise ValueError(f"drafter {spec!r}: not a model directory, nor prompt-lookup, layer-skip, none, "
                         "slem:<dir>, tli:<dir>" + "".join(f", {k}" for k in REGISTERED) + " (register_drafter adds kinds)")
    if is_eagle_dir(spec):  # a feature head for this target (eagle.py), not a model
        return load_eagle(spec, target)
    if target.path is not None and not same_tokenizer(target.path, spec):
        tli = cross_vocab_drafter(TLI, spec, target, empty_ok=True)
        if len(tli.cross.shared_draft) >= len(tli.cross.draft_bytes) / 2:
            return tli  # measured better than SLEM for the shipped pair (docs/crossvocab.md)
        return SLEM(tli.draft_model, tli.cross, target.cfg.vocab_size)  # TLI would forbid most of what it says
    return DraftModel(load_model(spec, kernel=target.kernel), target.cfg.vocab_size)


def other_algorithm(drafter):
    """A draft with its own tokenizer (``HasOwnTokenizer``) under the other algorithm, over the same draft model and
    vocabularies: SLEM for TLI, TLI for SLEM; None where TLI would have nothing to propose (no draft token is spelled
    like a target token)."""
    other = {"SLEM": TLI, "TLI": SLEM}[drafter.algorithm]
    if other is TLI and not len(drafter.cross.shared_draft):
        return None
    return other(drafter.draft_model, drafter.cross, drafter.vocab)


def cross_vocab_drafter(cls, draft_dir, target: Model, empty_ok: bool = False):
    """SLEM or TLI around the draft model in ``draft_dir``; both tokenizers must be readable, and TLI needs
    tokens the two vocabularies share (``empty_ok``: let the caller decide)."""
    if not Path(draft_dir).is_dir():
        raise ValueError(f"{cls.algorithm} drafter: {draft_dir!r} is not a model directory")
    if target.path is None:
        raise ValueError(f"{cls.algorithm} needs the target's tokenizer: load the target from its directory")
    draft = load_model(draft_dir, kernel=target.kernel)
    cross = CrossVocab(target.path, draft_dir, target.cfg.vocab_size, draft.cfg.vocab_size)
    if cls is TLI and not len(cross.shared_draft) and not empty_ok:
        raise ValueError(f"{draft_dir}: no token of the draft's vocabulary is spelled like one of the target's; "
                         "TLI has nothing to propose (SLEM needs no shared tokens: slem:<dir>)")
    return cls(draft, cross, target.cfg.vocab_size)


def tokenizer_vocab(model_dir, role: str) -> dict[str, int]:
    """token -> id from a model directory's tokenizer.json (its BPE vocabulary and added tokens). ``role``
    ("target" or "draft") says in an error which of the two lacks one."""
    _, vocab, added, _ = read_vocabulary(model_dir, f"the {role} needs one to prove that the draft shares the target's "
                                         "tokenizer (copy the target's tokenizer files into the draft directory)")
    v = dict(vocab)
    v.update({t["content"]: t["id"] for t in added if isinstance(t, dict) and "content" in t and "id" in t})
    return v


SAME_TOKENIZER_FILE = "tokenizer.sha256"  # a draft directory that ships no tokenizer of its own: the one it was trained with


def tokenizer_digest(model_dir) -> str:
    """The SHA-256 of ``model_dir/tokenizer.json``."""
    f = Path(model_dir) / "tokenizer.json"
    if not f.is_file():
        raise ModelFormatError(f"{model_dir}: no tokenizer.json")
    return hashlib.sha256(f.read_bytes()).hexdigest()


def same_tokenizer(target_dir, draft_dir) -> bool:
    """Whether the draft's tokenizer.json maps tokens to the target's ids (the standard rule can then compare
    their q and p rows entry by entry); both directories must have one. A draft directory may instead name its
    tokenizer by the SHA-256 of its tokenizer.json (``tokenizer.sha256``): it must then be the target's, byte
    for byte."""
    pin = Path(draft_dir) / SAME_TOKENIZER_FILE
    if pin.is_file() and not (Path(draft_dir) / "tokenizer.json").is_file():
        want = pin.read_text(errors="replace").split()[:1]
        if not want or not re.fullmatch(r"[0-9a-f]{64}", want[0]):
            raise ModelFormatError(f"{pin}: expected the SHA-256 of a tokenizer.json (64 hex digits)")
        have = tokenizer_digest(target_dir)
        if have != want[0]:
            raise ValueError(f"{draft_dir}: the draft was trained with the tokenizer whose tokenizer.json has SHA-256 "
                             f"{want[0][:12]}..., the target's is {have[:12]}...: not the same tokenizer (copy the "
                             "draft's own tokenizer.json into its directory to draft across vocabularies)")
        return True
    target, draft = tokenizer_vocab(target_dir, "target"), tokenizer_vocab(draft_dir, "draft")
    shared = set(target) & set(draft)
    differ = [t for t in shared if target[t] != draft[t]]
    return len(shared) >= 0.99 * max(len(target), len(draft)) and not differ  # a same-id subset is not the same
