"""GGUF -> Hugging Face-format directory.

llama.cpp's converter permutes the rows of the Q and K projections so that RoPE rotates
*interleaved* pairs (0,1), (2,3), ...; Hugging Face Llama rotates pairs (i, i + HD/2). We undo it
with ``unpermute_qk`` (the same reshape transformers' GGUF loader does). Weights are written as
float32: dequantized Q4_1 values are not exactly representable in bfloat16, and float32 keeps
the converted model bit-identical to what transformers dequantizes from the same GGUF.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..harness.progress import Progress
from ..model.config import ModelConfig, ModelFormatError
from ..model.q4_1 import Q4Blocks, from_gguf
from ..model.safetensors_io import write_safetensors

GGUF_TO_HF = {  # GGUF name -> Hugging Face name ({i} is the layer)
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:  # [n_head*HD, D] -> [n_head*HD, D]
    """Undo llama.cpp's ``permute``: within each head, rows (2j, 2j+1) go back to (j, j + HD/2)."""
    hd = w.shape[0] // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's permutation (the inverse of ``unpermute_qk``), for tests."""
    hd = w.shape[0] // n_head
    return w.reshape(n_head, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def _hf_name(gguf_name: str) -> str | None:
    parts = gguf_name.split(".")
    if parts[0] == "blk":
        key = ".".join(["blk", "{i}"] + parts[2:])
        return GGUF_TO_HF[key].format(i=parts[1]) if key in GGUF_TO_HF else None
    return GGUF_TO_HF.get(gguf_name)


def read_gguf(path: Path, doing: str):
    """-> (the gguf package, a reader of the GGUF at ``path``). Refused, by name: no gguf package (what ``doing``
    needs it for), no such file, a file gguf-py cannot read."""
    try:
        import gguf
    except ImportError as e:
        raise RuntimeError(f"{doing} GGUF needs the gguf package: pip install 'minispec[gguf]'") from e
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such file (expected a .gguf file)")
    try:
        return gguf, gguf.GGUFReader(str(path))
    except Exception as e:
        raise ModelFormatError(f"{path}: not a readable GGUF file ({e})") from None


def convert_gguf(gguf_path, out_dir, progress: bool = True, keep_q4_1: bool = False) -> Path:
    """Write config.json, model.safetensors (float32), tokenizer.json and friends from a Llama GGUF with a byte-level
    BPE ('gpt2') tokenizer. With ``keep_q4_1``, its Q4_1 matrices are kept in their blocks (``safetensors_io``'s Q4_1
    matrices), for the numba kernel to multiply in them; every other tensor is still written as float32 (refused: a
    GGUF with no Q4_1 matrix). Everything is checked before anything is written, and each file is written under a
    ``.partial`` name and renamed at the end: a refused or failed conversion leaves ``out_dir``'s files as they were."""
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"output directory {out_dir}: exists and is not a directory (expected a new or existing directory)")
    gguf, reader = read_gguf(gguf_path, "converting")
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ModelFormatError(f"{gguf_path}: GGUF architecture {arch!r} is not supported (only 'llama')")
    # (bug: a missing key or a head count of 0 crashed with a KeyError or ZeroDivisionError, after the files were written)
    n_head = _count(reader, gguf_path, "llama.attention.head_count")
    n_kv = _count(reader, gguf_path, "llama.attention.head_count_kv", n_head)
    tok, tok_config = make_tokenizer(reader, gguf_path)  # (bug: its kind was checked after the weights were written)
    config = llama_config(reader, gguf_path, n_head, n_kv)
    tensors = read_tensors(gguf, reader, gguf_path, n_head, n_kv, progress, keep_q4_1)
    if keep_q4_1 and not any(isinstance(t, Q4Blocks) for t in tensors.values()):
        raise ModelFormatError(f"{gguf_path}: no Q4_1 matrix to keep (its matrices are "
                               f"{', '.join(sorted({t.tensor_type.name for t in reader.tensors}))}); convert it without --q4_1")
    config["tie_word_embeddings"] = "lm_head.weight" not in tensors
    gen = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if config[k] is not None}
    meta = {"format": "pt", "source": gguf_path.name, **({"kept": "Q4_1"} if keep_q4_1 else {})}
    writers = {
        "model.safetensors": lambda f: write_safetensors(f, tensors, "F32", metadata=meta),
        "config.json": lambda f: f.write_text(json.dumps(config, indent=2)),
        "generation_config.json": lambda f: f.write_text(json.dumps(gen, indent=2)),
        "tokenizer.json": lambda f: tok.save(str(f)),
        "tokenizer_config.json": lambda f: f.write_text(json.dumps(tok_config, indent=2)),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = {name: out_dir / (name + ".partial") for name in writers}
    try:  # (bug: files were written in place one by one, so a failure left a directory half old, half new)
        for name, write in writers.items():
            write(partial[name])
    except BaseException:
        for f in partial.values():
            f.unlink(missing_ok=True)
        raise
    for name, f in partial.items():
        f.replace(out_dir / name)
    return out_dir


def _count(reader, gguf_path: Path, key: str, default=None) -> int:
    """A positive whole number of the GGUF's metadata (``default`` when absent; required when it is None)."""
    value = _field(reader, key, default)
    if value is None:
        raise ModelFormatError(f"{gguf_path}: no {key!r} in the GGUF's metadata (a Llama GGUF has one)")
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ModelFormatError(f"{gguf_path}: {key} must be a positive whole number, got {value!r}")
    return value


def _number(reader, gguf_path: Path, key: str, default=None) -> float:
    """A positive finite number of the GGUF's metadata (``default`` when absent; required when it is None)."""
    value = _field(reader, key, default)
    if value is None:
        raise ModelFormatError(f"{gguf_path}: no {key!r} in the GGUF's metadata (a Llama GGUF has one)")
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")):
        raise ModelFormatError(f"{gguf_path}: {key} must be a positive number, got {value!r}")
    return float(value)


def read_tensors(gguf, reader, gguf_path: Path, n_head: int, n_kv: int, progress: bool, keep_q4_1: bool = False) -> dict:
    """Every tensor of the GGUF as float32, under its Hugging Face name and in its layout (Q and K un-permuted); with
    ``keep_q4_1``, a Q4_1 matrix as its blocks (``q4_1.Q4Blocks``: un-permuting moves whole rows, so blocks stay)."""
    tensors = {}
    bar = Progress(len(reader.tensors), "dequantizing", quiet=not progress)
    for t in reader.tensors:
        name = _hf_name(t.name)
        if name is None:
            raise ModelFormatError(f"{gguf_path}: unexpected tensor {t.name!r}")
        if keep_q4_1 and t.tensor_type.name == "Q4_1":
            try:
                b = from_gguf(np.asarray(t.data), [int(x) for x in reversed(t.shape)])  # GGUF lists dims innermost-first
            except ValueError as e:
                raise ModelFormatError(f"{gguf_path}: tensor {t.name!r}: {e}") from None
            if t.name.endswith(("attn_q.weight", "attn_k.weight")):
                heads = n_head if t.name.endswith("attn_q.weight") else n_kv
                b = Q4Blocks(*(unpermute_qk(a, heads) for a in (b.qs, b.d, b.m)))
            tensors[name] = b
            bar.update()
            continue
        try:
            w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        except (NotImplementedError, KeyError, ValueError) as e:
            raise ModelFormatError(f"{gguf_path}: tensor {t.name!r} has quant type {t.tensor_type.name}, "
                                   f"which the gguf package cannot dequantize ({e})") from None
        w = w.reshape([int(x) for x in reversed(t.shape)])  # GGUF lists dims innermost-first
        if t.name.endswith("attn_q.weight"):
            w = unpermute_qk(w, n_head)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute_qk(w, n_kv)
        tensors[name] = w
        bar.update()
    bar.close()
    return tensors


def llama_config(reader, gguf_path: Path, n_head: int, n_kv: int) -> dict:
    """config.json of a Llama GGUF, from its metadata, every number checked with its key named (the caller sets
    ``tie_word_embeddings`` once it knows whether the GGUF has an output.weight of its own). Called after
    ``make_tokenizer``, which checked the tokens."""
    a = "llama."
    hidden = _count(reader, gguf_path, a + "embedding_length")
    if hidden % n_head:
        raise ModelFormatError(f"{gguf_path}: {a}embedding_length {hidden} is not a multiple of "
                               f"{a}attention.head_count {n_head}")
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": len(reader.fields["tokenizer.ggml.tokens"].data), "hidden_size": hidden,
        "intermediate_size": _count(reader, gguf_path, a + "feed_forward_length"),
        "num_hidden_layers": _count(reader, gguf_path, a + "block_count"),
        "num_attention_heads": n_head, "num_key_value_heads": n_kv, "head_dim": hidden // n_head,
        "rms_norm_eps": _number(reader, gguf_path, a + "attention.layer_norm_rms_epsilon"),
        "rope_theta": _number(reader, gguf_path, a + "rope.freq_base", 10000.0),
        "max_position_embeddings": _count(reader, gguf_path, a + "context_length"),
        "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "rope_scaling": None, "bos_token_id": _field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _field(reader, "tokenizer.ggml.eos_token_id"),
        "pad_token_id": _field(reader, "tokenizer.ggml.padding_token_id"), "torch_dtype": "float32",
    }
    ModelConfig.from_dict(config, f"{gguf_path} (its config)")  # the rest of the loader's checks (heads, head_dim)
    return config


def _strings(reader, gguf_path: Path, key: str) -> list[str]:
    """A required list of strings of the GGUF's metadata."""
    try:
        value = _field(reader, key)
    except UnicodeDecodeError as e:
        raise ModelFormatError(f"{gguf_path}: {key} holds text that is not UTF-8 ({e})") from None
    if value is None:
        raise ModelFormatError(f"{gguf_path}: no {key!r} in the GGUF's metadata (a GGUF with a tokenizer has one)")
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ModelFormatError(f"{gguf_path}: {key} must be a list of strings, got {value!r:.80}")
    return value


def make_tokenizer(reader, gguf_path: Path):
    """-> (tokenizer.json as a ``tokenizers.Tokenizer``, tokenizer_config.json as a dict), from the GGUF's vocabulary
    and merges. Only byte-level BPE ('gpt2') with the pre-tokenizers of ``split`` below is supported; the rest is
    refused, not tokenized another way; so is a GGUF that asks for a BOS or EOS token around the text
    (``add_bos_token``, ``add_eos_token``): minispec's tokenizer adds none."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    model_kind = _field(reader, "tokenizer.ggml.model")
    if model_kind != "gpt2":
        raise ModelFormatError(f"{gguf_path}: tokenizer model (tokenizer.ggml.model) {model_kind!r} is not supported "
                               "(byte-level BPE 'gpt2' only)")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)  # GPT-2's split
    digits = pre_tokenizers.Digits(individual_digits=True)  # every digit its own word
    split = {"gpt-2": byte_level, "smollm": pre_tokenizers.Sequence([digits, byte_level])}  # by llama.cpp's names
    pre = _field(reader, "tokenizer.ggml.pre")
    if pre not in split:  # (bug: any other pre-tokenizer was given GPT-2's split, and the text tokenized wrongly)
        raise ModelFormatError(f"{gguf_path}: pre-tokenizer (tokenizer.ggml.pre) {pre!r} is not supported "
                               f"(supported: {', '.join(map(repr, split))})")
    for key in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"):
        if _field(reader, key):  # (bug: ignored, so the model saw other prompts than llama.cpp gives it)
            raise ModelFormatError(f"{gguf_path}: {key} is true, which is not supported (minispec's tokenizer adds "
                                   "no BOS or EOS token around the text)")
    tokens = _strings(reader, gguf_path, "tokenizer.ggml.tokens")
    types = _field(reader, "tokenizer.ggml.token_type")
    if not (isinstance(types, list) and len(types) == len(tokens)):
        raise ModelFormatError(f"{gguf_path}: tokenizer.ggml.token_type must be a list of one type per token "
                               f"({len(tokens)}), got {types!r:.80}")
    merges = [tuple(m.split(" ", 1)) for m in _strings(reader, gguf_path, "tokenizer.ggml.merges")]
    try:
        tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False))
    except Exception as e:  # the tokenizers package's own error: a merge of tokens the vocabulary lacks
        raise ModelFormatError(f"{gguf_path}: its tokens and merges do not make a BPE tokenizer ({e})") from None
    tok.pre_tokenizer = split[pre]
    tok.decoder = decoders.ByteLevel()
    control = [i for i, t in enumerate(types) if t in (3, 4)]  # CONTROL, USER_DEFINED
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in control])

    def special(key):
        i = _field(reader, key)
        if i is not None and not (isinstance(i, int) and 0 <= i < len(tokens)):
            raise ModelFormatError(f"{gguf_path}: {key} {i!r} is not a token id (0..{len(tokens) - 1})")
        return None if i is None else tokens[i]

    cfg = {
        "tokenizer_class": "GPT2Tokenizer", "add_prefix_space": False, "clean_up_tokenization_spaces": False,
        "model_max_length": _count(reader, gguf_path, "llama.context_length", 2048),
        "bos_token": special("tokenizer.ggml.bos_token_id"), "eos_token": special("tokenizer.ggml.eos_token_id"),
        "pad_token": special("tokenizer.ggml.padding_token_id"), "unk_token": special("tokenizer.ggml.unknown_token_id"),
        "added_tokens_decoder": {str(i): {"content": tokens[i], "special": True, "normalized": False, "lstrip": False,
                                          "rstrip": False, "single_word": False} for i in control},
    }
    template = _field(reader, "tokenizer.chat_template")
    if template:
        cfg["chat_template"] = template
    return tok, cfg
