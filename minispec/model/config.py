"""`ModelConfig`: the few numbers of a Hugging Face `config.json` that a Llama-family model needs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# architecture -> whether q/k/v projections carry a bias
SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": False,
    "MistralForCausalLM": False,
    "Qwen2ForCausalLM": True,
}


class ModelFormatError(ValueError):
    """A model directory or file that minispec cannot load; the message says why."""


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int  # V
    hidden_size: int  # D
    intermediate_size: int  # F
    num_layers: int  # L
    num_heads: int  # H
    num_kv_heads: int  # KVH
    head_dim: int  # HD
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    @classmethod
    def from_dict(cls, d: dict, source: str = "config.json") -> "ModelConfig":
        archs = d.get("architectures") or []
        arch = archs[0] if archs else None
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ModelFormatError(
                f"{source}: architecture {arch!r} is not supported; "
                f"minispec loads {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        if arch == "MistralForCausalLM" and d.get("sliding_window") not in (None, 0):
            raise ModelFormatError(f"{source}: sliding-window attention is not supported (sliding_window={d['sliding_window']})")
        if arch == "Qwen2ForCausalLM" and d.get("use_sliding_window"):
            raise ModelFormatError(f"{source}: sliding-window attention is not supported")
        scaling = d.get("rope_scaling")
        if scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
            raise ModelFormatError(f"{source}: rope_scaling {scaling} is not supported (plain RoPE only)")
        if d.get("hidden_act", "silu") != "silu":
            raise ModelFormatError(f"{source}: hidden_act {d['hidden_act']!r} is not supported (SwiGLU with silu only)")
        try:
            heads = int(d["num_attention_heads"])
            hidden = int(d["hidden_size"])
            eos = d.get("eos_token_id")
            eos = () if eos is None else tuple(eos) if isinstance(eos, list) else (int(eos),)
            cfg = cls(
                architecture=arch,
                vocab_size=int(d["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(d["intermediate_size"]),
                num_layers=int(d["num_hidden_layers"]),
                num_heads=heads,
                num_kv_heads=int(d.get("num_key_value_heads") or heads),
                head_dim=int(d.get("head_dim") or hidden // heads),
                rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
                rope_theta=float(d.get("rope_theta", 10000.0)),
                max_position_embeddings=int(d.get("max_position_embeddings", 2048)),
                tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
                attention_bias=SUPPORTED_ARCHITECTURES[arch] or bool(d.get("attention_bias", False)),
                bos_token_id=d.get("bos_token_id"),
                eos_token_ids=eos,
            )
        except KeyError as e:
            raise ModelFormatError(f"{source}: missing required field {e.args[0]!r}") from None
        if cfg.num_heads % cfg.num_kv_heads:
            raise ModelFormatError(f"{source}: num_attention_heads {cfg.num_heads} is not a multiple of num_key_value_heads {cfg.num_kv_heads}")
        if cfg.head_dim % 2:
            raise ModelFormatError(f"{source}: head_dim {cfg.head_dim} must be even for RoPE")
        return cfg

    @classmethod
    def from_dir(cls, path) -> "ModelConfig":
        path = Path(path)
        if not path.is_dir():
            raise ModelFormatError(f"{path}: not a directory (expected a Hugging Face model directory)")
        f = path / "config.json"
        if not f.exists():
            raise ModelFormatError(f"{path}: no config.json (expected a Hugging Face model directory)")
        try:
            d = json.loads(f.read_text())
        except json.JSONDecodeError as e:
            raise ModelFormatError(f"{f}: not valid JSON ({e})") from None
        return cls.from_dict(d, str(f))
