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
        """Check every field minispec reads (type and range, the file named in each error), then build."""
        if not isinstance(d, dict):
            raise ModelFormatError(f"{source}: expected a JSON object, got {type(d).__name__}")
        arch = check_architecture(d, source)
        check_unsupported_features(d, arch, source)
        heads = int_field(d, "num_attention_heads", source)
        hidden = int_field(d, "hidden_size", source)
        if d.get("head_dim") is None and hidden % heads:  # (bug: head_dim = hidden // heads was floored, even to 0)
            raise ModelFormatError(f"{source}: hidden_size {hidden} is not a multiple of num_attention_heads {heads} "
                                   "(give head_dim, or heads that divide hidden_size)")
        cfg = cls(
            architecture=arch,
            vocab_size=int_field(d, "vocab_size", source),
            hidden_size=hidden,
            intermediate_size=int_field(d, "intermediate_size", source),
            num_layers=int_field(d, "num_hidden_layers", source),
            num_heads=heads,
            num_kv_heads=int_field(d, "num_key_value_heads", source, default=heads),
            head_dim=int_field(d, "head_dim", source, default=hidden // heads),
            rms_norm_eps=float_field(d, "rms_norm_eps", source, 1e-6),
            rope_theta=float_field(d, "rope_theta", source, 10000.0),
            max_position_embeddings=int_field(d, "max_position_embeddings", source, default=2048),
            tie_word_embeddings=bool_field(d, "tie_word_embeddings", source),
            attention_bias=SUPPORTED_ARCHITECTURES[arch] or bool_field(d, "attention_bias", source),
            bos_token_id=token_ids_field(d, "bos_token_id", source, single=True),
            eos_token_ids=token_ids_field(d, "eos_token_id", source),
        )
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
        return cls.from_dict(read_json(f, expect=None), str(f))


def read_json(f: Path, expect=dict):
    """A JSON file's content; errors name the file. ``expect=dict``: it must be a JSON object."""
    if not f.is_file():
        raise ModelFormatError(f"{f}: not a file (expected a JSON file)")
    try:
        content = json.loads(f.read_bytes().decode("utf-8"))
    except (ValueError, RecursionError) as e:  # (bug: ValueError, not only JSONDecodeError: an integer over 4300 digits)
        raise ModelFormatError(f"{f}: not valid JSON ({e})") from None
    if expect is not None and not isinstance(content, expect):
        raise ModelFormatError(f"{f}: expected a JSON object, got {type(content).__name__}")
    return content


def check_architecture(d: dict, source: str) -> str:
    """``architectures`` must be a list whose first entry minispec supports."""
    archs = d.get("architectures")
    if not (isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs)):
        raise ModelFormatError(f"{source}: architectures must be a list of names such as [\"LlamaForCausalLM\"], "
                               f"got {archs!r}")
    if archs[0] not in SUPPORTED_ARCHITECTURES:
        raise ModelFormatError(
            f"{source}: architecture {archs[0]!r} is not supported; minispec loads {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    return archs[0]


def check_unsupported_features(d: dict, arch: str, source: str) -> None:
    """Refuse what the transformer does not implement, rather than running a different model."""
    if arch == "MistralForCausalLM" and d.get("sliding_window") not in (None, 0):
        raise ModelFormatError(f"{source}: sliding-window attention is not supported (sliding_window={d['sliding_window']})")
    if arch == "Qwen2ForCausalLM" and d.get("use_sliding_window"):
        raise ModelFormatError(f"{source}: sliding-window attention is not supported")
    scaling = d.get("rope_scaling")
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else None
        if kind != "default":  # a scaling without a type is not plain RoPE either: it has a factor to apply
            raise ModelFormatError(f"{source}: rope_scaling {scaling!r} is not supported (expected null or "
                                   "{\"rope_type\": \"default\"}: plain RoPE only)")
    if d.get("mlp_bias", False) is not False:
        raise ModelFormatError(f"{source}: mlp_bias {d['mlp_bias']!r} is not supported (expected false: no MLP biases)")
    if d.get("hidden_act", "silu") != "silu":
        raise ModelFormatError(f"{source}: hidden_act {d['hidden_act']!r} is not supported (SwiGLU with silu only)")


def int_field(d: dict, name: str, source: str, default=None) -> int:
    """A positive integer field; ``default`` when absent or null (required when default is None)."""
    value = d.get(name)
    if value is None:
        if default is None:
            raise ModelFormatError(f"{source}: missing required field {name!r}")
        return default
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ModelFormatError(f"{source}: {name} must be a positive integer, got {value!r}")
    return value


def float_field(d: dict, name: str, source: str, default: float) -> float:
    """A positive finite number field; ``default`` when absent."""
    value = d.get(name, default)
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")):
        raise ModelFormatError(f"{source}: {name} must be a positive number, got {value!r}")
    return float(value)


def bool_field(d: dict, name: str, source: str) -> bool:
    value = d.get(name, False)
    if not isinstance(value, bool):
        raise ModelFormatError(f"{source}: {name} must be true or false, got {value!r}")
    return value


def token_ids_field(d: dict, name: str, source: str, single: bool = False):
    """A token id (``single``) or an id or list of ids (-> a tuple); absent or null: None or ()."""
    value = d.get(name)
    values = value if isinstance(value, list) and not single else [] if value is None else [value]
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in values):
        raise ModelFormatError(f"{source}: {name} must be a non-negative integer{'' if single else ' or a list of them'}, "
                               f"got {value!r}")
    return value if single else tuple(values)
