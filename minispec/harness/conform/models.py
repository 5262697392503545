"""The tiny random pair a loop is checked on, written as real Hugging Face-format directories (model/tiny.py).

Vocabulary 5, so that the target's exact law of m = 3 tokens has 125 cells. Two tokens of the target (1 and 4) have
the same output row, chosen so that at the check's prompt the pair is often the most likely: their logits tie exactly, which is where a
top-k that keeps ties wrong departs (twins.py). That row has one nonzero weight (TIED_ROW), so that the tie is exact
however a matrix product orders its sums: a random row's tie broke by one ulp in OpenBLAS's passes of 1-4 rows on a
Zen 1 EPYC, and not in longer ones, so a loop's verification pass and plain decoding saw different laws. No
end-of-sequence token: every run has its full length.

Each directory also has a tokenizer (tokenizer.json: byte-pair encoding over the letters a-e, one letter per target
token), so that a loop that works through text can run. ``own_vocabulary``: the draft has a vocabulary of its own,
the five letters and "ab" (one merge), 6 tokens, for a loop that drafts across tokenizers (universal assisted
decoding).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models

from ...model.config import ModelConfig
from ...model.safetensors_io import write_safetensors
from ...model.tiny import random_tensors, tiny_config

V = 5
SHAPE = dict(vocab_size=V, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=1,
             bos_token_id=None, eos_token_id=None, pad_token_id=None)
TIED = (1, 4)
TIED_ROW = (5, 3.0)  # (index, weight): the tied tokens' one nonzero head weight. The pair is the top two in 7 of the
# 25 contexts after the prompt (a random row: 8), and greedy runs under the check's processors never run out of tokens


LETTERS = ["a", "b", "c", "d", "e"]


def write_tokenizer(path: Path, words: list[str], merges=()) -> None:
    """tokenizer.json: byte-pair encoding of ``words`` (token i is words[i]) with ``merges``, decoded by joining."""
    tok = Tokenizer(models.BPE({w: i for i, w in enumerate(words)}, list(merges)))
    tok.decoder = decoders.Fuse()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))


def write_model(path, layers: int, seed: int, tie: bool, vocab: int = V, reverse: bool = False) -> Path:
    """``reverse``: the same model with its vocabulary in reverse order (token i is the unreversed token V - 1 - i, rows
    of the embedding and the head swapped to match): every tie an implementation breaks by id breaks the other way."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = tiny_config(num_hidden_layers=layers, **(SHAPE | dict(vocab_size=vocab)))
    (path / "config.json").write_text(json.dumps(config, indent=2))
    tensors = random_tensors(ModelConfig.from_dict(config), seed, scale=1.0)
    if tie:
        head = tensors["lm_head.weight"]  # [V, D]
        head[list(TIED)] = 0.0
        head[list(TIED), TIED_ROW[0]] = TIED_ROW[1]  # x[5] * 3.0 plus exact zeros: the same float in any order
    if reverse:
        for name in ("model.embed_tokens.weight", "lm_head.weight"):
            if name in tensors:
                tensors[name] = np.ascontiguousarray(tensors[name][::-1])  # [V, D], rows in reverse order
    write_safetensors(path / "model.safetensors", tensors, "F32")
    words = (LETTERS[::-1] if reverse else LETTERS) + ["ab"] * (vocab > V)
    write_tokenizer(path, words, [("a", "b")] if vocab > V else ())
    return path


def write_pair(directory, own_vocabulary: bool = False, reverse: bool = False) -> tuple[Path, Path]:
    """-> (target_dir, draft_dir) under ``directory``: a 2-layer target with tied tokens, a 1-layer draft (of its own
    vocabulary with ``own_vocabulary``); ``reverse``: both with the vocabulary in reverse order (``write_model``)."""
    if own_vocabulary and reverse:
        raise ValueError("a reversed vocabulary is written for drafts of the target's own vocabulary only")
    directory = Path(directory)
    return (write_model(directory / "target", 2, seed=10, tie=True, reverse=reverse),
            write_model(directory / "draft", 1, seed=20, tie=False, vocab=V + own_vocabulary, reverse=reverse))


def reversed_ids(ids) -> list[int]:
    """Token ids of the unreversed vocabulary as ids of the reversed one."""
    return [V - 1 - int(t) for t in ids]
