"""Hugging Face tensor names -> minispec's arrays, in one declarative table.

``HF_TENSORS`` lists every tensor a Llama-family checkpoint holds, with the shape it must have.
``load_weights`` reads them (one file or shards), checks every shape with an error that names the
tensor, the file, and both shapes, and returns them by their Hugging Face names as float32.
The model then fuses Q/K/V and gate/up and transposes each matrix into the [in, out] layout
that ``x @ w`` wants (see ``model.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .config import ModelConfig, ModelFormatError
from .safetensors_io import read_header, read_safetensors

# Shapes use ModelConfig fields: D hidden, F intermediate, V vocab, H/KVH heads, HD head dim.
GLOBAL_TENSORS = {
    "model.embed_tokens.weight": lambda c: (c.vocab_size, c.hidden_size),  # [V, D]
    "model.norm.weight": lambda c: (c.hidden_size,),  # [D]
    "lm_head.weight": lambda c: (c.vocab_size, c.hidden_size),  # [V, D]  (absent when tied)
}
LAYER_TENSORS = {
    "input_layernorm.weight": lambda c: (c.hidden_size,),  # [D]
    "self_attn.q_proj.weight": lambda c: (c.num_heads * c.head_dim, c.hidden_size),  # [H*HD, D]
    "self_attn.k_proj.weight": lambda c: (c.num_kv_heads * c.head_dim, c.hidden_size),  # [KVH*HD, D]
    "self_attn.v_proj.weight": lambda c: (c.num_kv_heads * c.head_dim, c.hidden_size),  # [KVH*HD, D]
    "self_attn.q_proj.bias": lambda c: (c.num_heads * c.head_dim,),  # Qwen2 only
    "self_attn.k_proj.bias": lambda c: (c.num_kv_heads * c.head_dim,),  # Qwen2 only
    "self_attn.v_proj.bias": lambda c: (c.num_kv_heads * c.head_dim,),  # Qwen2 only
    "self_attn.o_proj.weight": lambda c: (c.hidden_size, c.num_heads * c.head_dim),  # [D, H*HD]
    "post_attention_layernorm.weight": lambda c: (c.hidden_size,),  # [D]
    "mlp.gate_proj.weight": lambda c: (c.intermediate_size, c.hidden_size),  # [F, D]
    "mlp.up_proj.weight": lambda c: (c.intermediate_size, c.hidden_size),  # [F, D]
    "mlp.down_proj.weight": lambda c: (c.hidden_size, c.intermediate_size),  # [D, F]
}


def expected_tensors(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name this config needs, with its shape."""
    names = {}
    for name, shape in GLOBAL_TENSORS.items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        names[name] = shape(cfg)
    for i in range(cfg.num_layers):
        for name, shape in LAYER_TENSORS.items():
            if name.endswith(".bias") and not cfg.attention_bias:
                continue
            names[f"model.layers.{i}.{name}"] = shape(cfg)
    return names


def weight_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (path / s).exists()]
        if missing:
            raise ModelFormatError(f"{index}: shard file(s) missing: {', '.join(missing)}")
        return [path / s for s in shards]
    single = path / "model.safetensors"
    if single.exists():
        return [single]
    raise ModelFormatError(f"{path}: no model.safetensors and no model.safetensors.index.json")


def load_weights(path, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """All tensors the config needs, by Hugging Face name, as float32, shapes checked."""
    path = Path(path)
    need = expected_tensors(cfg)
    where = {}  # name -> file
    for f in weight_files(path):
        header, _ = read_header(f)
        for name, info in header.items():
            where[name] = f
            if name in need and tuple(info["shape"]) != need[name]:
                raise ModelFormatError(
                    f"{f}: tensor {name!r} has shape {tuple(info['shape'])}, expected {need[name]} from config.json"
                )
    missing = [n for n in need if n not in where]
    if missing:
        more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
        raise ModelFormatError(f"{path}: tensor(s) missing from the safetensors files: {', '.join(missing[:3])}{more}")
    out = {}
    for f in sorted(set(where[n] for n in need)):
        out.update(read_safetensors(f, names={n for n in need if where[n] == f}))
    return out
