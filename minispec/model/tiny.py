"""Random-weight Llama-family models written to disk as real Hugging Face directories.

Tests and benchmarks use these so that the real loading path (config.json + safetensors) is
always exercised. ``SMOLLM2_SHAPE`` gives a model of SmolLM2-135M's exact shape.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .config import ModelConfig
from .safetensors_io import write_safetensors
from .weights import expected_tensors

SMOLLM2_SHAPE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True,
                     rope_theta=100000.0, rms_norm_eps=1e-5, max_position_embeddings=8192)


def tiny_config(arch: str = "LlamaForCausalLM", **kw) -> dict:
    d = dict(architectures=[arch], vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=10000.0,
             max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
             hidden_act="silu", model_type={"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                                            "MistralForCausalLM": "mistral"}[arch], torch_dtype="float32")
    d.update(kw)
    return d


def random_tensors(cfg: ModelConfig, seed: int = 0, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in expected_tensors(cfg).items():
        if name.endswith("norm.weight"):
            out[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        elif name.endswith(".bias"):
            out[name] = (0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            # embeddings get std 1/sqrt(D) too, so a tied head gives logits of std ~1 like an untied one
            out[name] = (scale * rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
    return out


def write_random_model(path, config: dict | None = None, seed: int = 0, dtype: str = "F32", shards: int = 1,
                       scale: float = 1.0) -> Path:
    """Write config.json and random weights (one file, or ``shards`` files with an index)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = config or tiny_config()
    (path / "config.json").write_text(json.dumps(config, indent=2))
    tensors = random_tensors(ModelConfig.from_dict(config), seed, scale)
    if shards == 1:
        write_safetensors(path / "model.safetensors", tensors, dtype)
        return path
    names = list(tensors)
    weight_map = {}
    for s, part in enumerate(np.array_split(np.arange(len(names)), shards)):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(path / fname, {names[i]: tensors[names[i]] for i in part}, dtype)
        weight_map.update({names[i]: fname for i in part})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2))
    return path
