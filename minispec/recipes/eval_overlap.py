"""Keep evaluation prompts out of training data: a training window is dropped when it shares a run of
``RUN`` (8) lowercased, whitespace-separated words with any evaluation prompt.

The evaluation prompts are minispec's own (``minispec/data/*.jsonl``) and other projects' sets in the external
prompts folder (``$MINISPEC_EXTERNAL_PROMPTS``, else ``../shared/external_prompts`` beside the repository:
Spec-Bench, MT-bench, HumanEval, EAGLE's). Every string in every ``*.jsonl`` or ``*.jsonl.gz`` line counts,
references and test code included: the rule errs on the side of dropping.

No torch here: the data builder (``eagle_data.py``) and the test of the committed manifest
(``tests/test_eval_overlap.py``) share it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

RUN = 8
MINISPEC_DATA = Path(__file__).resolve().parents[1] / "data"


def external_prompts_dir() -> Path:
    """``$MINISPEC_EXTERNAL_PROMPTS``, else ``../shared/external_prompts`` beside the repository (may not exist)."""
    env = os.environ.get("MINISPEC_EXTERNAL_PROMPTS")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "external_prompts"


def words(text: str) -> list[str]:
    return text.lower().split()


def runs(text: str, n: int = RUN):
    """Every run of n consecutive words of ``text``, as tuples."""
    w = words(text)
    return (tuple(w[i: i + n]) for i in range(len(w) - n + 1))


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def prompt_files(external: Path | None) -> list[Path]:
    """minispec's evaluation files, then the external folder's ``*.jsonl`` and ``*.jsonl.gz`` (sorted)."""
    files = sorted(MINISPEC_DATA.glob("*.jsonl"))
    if external is not None:
        files += sorted(p for p in external.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")))
    return files


def file_texts(path: Path) -> list[str]:
    """Every string of every JSON line of ``path``; a malformed line is refused with its line number."""
    opener = gzip.open if path.name.endswith(".gz") else open
    out = []
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out += list(_strings(json.loads(line)))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON line ({e.msg})") from None
    return out


def bare_words(text: str) -> tuple[str, ...]:
    """Lowercased words with their punctuation stripped ("Why is the ocean salty?" -> why is the ocean salty)."""
    return tuple(w for w in ("".join(c for c in w if c.isalnum()) for w in words(text)) if w)


class EvalRuns:
    """The set of evaluation word runs, and where each came from: ``hit(text)`` -> the first shared run, or None.
    ``holds_short(text)``: whether ``text`` holds a whole evaluation string shorter than a run (no run of ``RUN``
    words can see it), punctuation aside; for a short request the target wrote itself (eagle_data.py's ``--asked``)."""

    def __init__(self, files: list[Path]):
        self.files = [dict(name=p.name, sha256=hashlib.sha256(p.read_bytes()).hexdigest()) for p in files]
        self.source: dict[tuple, str] = {}
        self.short: set[tuple[str, ...]] = set()
        for p in files:
            for text in file_texts(p):
                for r in runs(text):
                    self.source.setdefault(r, p.name)
                bare = bare_words(text)
                if 2 <= len(bare) < RUN:
                    self.short.add(bare)

    def holds_short(self, text: str) -> bool:
        w = bare_words(text)
        return any(w[i: i + n] in self.short for n in range(2, RUN) for i in range(len(w) - n + 1))

    def hit(self, text: str):
        """(the shared run as text, the file it is in), or None when ``text`` shares no run."""
        for r in runs(text):
            if r in self.source:
                return " ".join(r), self.source[r]
        return None

    def __len__(self):
        return len(self.source)
