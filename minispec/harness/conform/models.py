"""The tiny random pair a loop is checked on, written as real Hugging Face-format directories (model/tiny.py).

Vocabulary 5, so that the target's exact law of m = 3 tokens has 125 cells. Two tokens of the target (1 and 4) have
the same output row, chosen so that at the check's prompt the pair is often the most likely: their logits tie exactly, which is where a
top-k that keeps ties wrong departs (twins.py). No end-of-sequence token: every run has its full length.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...model.config import ModelConfig
from ...model.safetensors_io import write_safetensors
from ...model.tiny import random_tensors, tiny_config

V = 5
SHAPE = dict(vocab_size=V, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=1,
             bos_token_id=None, eos_token_id=None, pad_token_id=None)
TIED = (1, 4)


def write_model(path, layers: int, seed: int, tie: bool) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = tiny_config(num_hidden_layers=layers, **SHAPE)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    tensors = random_tensors(ModelConfig.from_dict(config), seed, scale=1.0)
    if tie:
        head = tensors["lm_head.weight"]  # [V, D]
        head[TIED[1]] = head[TIED[0]]
    write_safetensors(path / "model.safetensors", tensors, "F32")
    return path


def write_pair(directory) -> tuple[Path, Path]:
    """-> (target_dir, draft_dir) under ``directory``: a 2-layer target with tied tokens, a 1-layer draft."""
    directory = Path(directory)
    return write_model(directory / "target", 2, seed=10, tie=True), write_model(directory / "draft", 1, seed=20,
                                                                                tie=False)
