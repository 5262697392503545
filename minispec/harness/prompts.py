"""The evaluation prompt sets shipped in ``minispec/data/`` (see its README for provenance)."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
PROMPT_SETS = ("code", "chat", "grounded")


def load_prompts(name: str, tokenizer=None, limit: int | None = None):
    """Prompt texts of one set; with a tokenizer, token ids (chat prompts wrapped in the chat template)."""
    if name not in PROMPT_SETS:
        raise ValueError(f"unknown prompt set {name!r}; available: {', '.join(PROMPT_SETS)}")
    rows = [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines() if line.strip()]
    if limit is not None and limit < 0:
        raise ValueError(f"load_prompts: limit must be 0 or more, got {limit}")
    rows = rows[:limit] if limit is not None else rows  # (bug: a limit of 0 gave every prompt)
    if tokenizer is None:
        return [r["prompt"] for r in rows]
    return [tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}])
                             if r["kind"] == "chat" else r["prompt"]) for r in rows]
