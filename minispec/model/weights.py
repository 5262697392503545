"""Hugging Face tensor names -> minispec's arrays, in one declarative table.

``GLOBAL_TENSORS`` and ``LAYER_TENSORS`` list every tensor a Llama-family checkpoint holds, with the
shape it must have. ``load_weights`` finds them (one file or shards) and checks every shape with an
error that names the tensor, the file, and both shapes (the safetensors header itself is checked by
``safetensors_io.read_header``; a weight must have a float dtype, or be an int8 matrix with its per-row scales,
``safetensors_io``'s docstring; or a Q4_1 matrix, ``q4_1.py``), but reads no data yet: it returns a ``Checkpoint``, a
mapping by Hugging Face name that reads a tensor, as float32 (an int8 matrix as q * scale, a Q4_1 matrix
dequantized), when it is asked for; ``pop_q4_1`` reads a Q4_1 matrix as it is stored, for the numba kernel.

Why not read them all at once: the model fuses Q/K/V and gate/up and transposes each matrix into
the [in, out] layout that ``x @ w`` wants (see ``Model.from_hf`` in ``transformer.py``), a layout the
file does not have. Read first and rearranged after, the weights would sit in memory twice, once per
layout. ``Checkpoint.pop_transposed_into`` instead reads a tensor a block of rows at a time straight
into its place in the fused matrix, so loading holds one copy of the weights plus one small block.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from .config import ModelConfig, ModelFormatError, read_json
from .q4_1 import Q4Blocks
from .safetensors_io import FLOAT_DTYPES, read_header, read_metadata, read_q4_1, read_rows_into, read_safetensors, write_safetensors

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
    """The safetensors files of a model directory: the shards an index names, or model.safetensors."""
    index = path / "model.safetensors.index.json"
    if index.exists():
        weight_map = read_json(index).get("weight_map")
        if not (isinstance(weight_map, dict) and weight_map
                and all(isinstance(v, str) and v for v in weight_map.values())):
            raise ModelFormatError(f"{index}: expected a \"weight_map\" object mapping tensor names to shard files, "
                                   f"got {weight_map!r:.80}")
        shards = sorted(set(weight_map.values()))
        outside = [s for s in shards if Path(s).name != s or s in (".", "..")]
        if outside:  # (bug: an absolute path or one with .. was read from outside the model directory)
            raise ModelFormatError(f"{index}: shard {outside[0]!r} is not a plain file name (expected a file inside "
                                   f"{path}, such as \"model-00001-of-00002.safetensors\")")
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise ModelFormatError(f"{index}: shard file(s) missing (or not files): {', '.join(missing)}")
        return [path / s for s in shards]
    single = path / "model.safetensors"
    if single.exists() and not single.is_file():
        raise ModelFormatError(f"{single}: not a file (expected the model's safetensors file)")
    if single.exists():
        return [single]
    raise ModelFormatError(f"{path}: no model.safetensors and no model.safetensors.index.json")


BLOCK_BYTES = 8 << 20  # a transposed tensor is read this many bytes at a time


def locate_tensors(path: Path, need: dict[str, tuple[int, ...]]) -> dict[str, tuple[Path, dict, int]]:
    """name -> (file, its header entry, where that file's data starts), for every tensor in ``need``;
    shapes checked against ``need``."""
    where, files = {}, weight_files(path)
    for f in files:
        header, data_start = read_header(f)
        for name, info in header.items():
            if name not in need:
                continue
            if name in where:
                raise ModelFormatError(f"{f}: tensor {name!r} is also in {where[name][0]} (expected it in one file)")
            if info["dtype"] not in FLOAT_DTYPES and "scale" not in info and "q4_1" not in info:
                raise ModelFormatError(f"{f}: tensor {name!r} has dtype {info['dtype']}, expected a float weight "
                                       f"({', '.join(FLOAT_DTYPES)}), an I8 matrix with its scales or a Q4_1 matrix")
            if tuple(info["shape"]) != need[name]:
                raise ModelFormatError(
                    f"{f}: tensor {name!r} has shape {tuple(info['shape'])}, expected {need[name]} from config.json"
                )
            where[name] = (f, info, data_start)
    missing = [n for n in need if n not in where]
    if missing:
        more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
        where_from = files[0] if len(files) == 1 else f"{path} (shards {', '.join(f.name for f in files)})"
        raise ModelFormatError(f"{where_from}: tensor(s) missing, expected by config.json: {', '.join(missing[:3])}{more}")
    return where


def check_finite(values: np.ndarray, name: str, f: Path) -> None:
    """Refuse NaN or infinite weights: the model would still run and quietly emit token 0 forever."""
    if not np.isfinite(values).all():
        raise ModelFormatError(f"{f}: tensor {name!r} holds NaN or infinite values (expected finite weights)")


class Checkpoint(Mapping):
    """The tensors a config needs, by Hugging Face name, read from the files only when asked for.

    ``ckpt[name]`` reads a whole tensor as float32 (an int8 matrix times its per-row scales) and refuses NaN or
    infinite values; ``pop`` reads it and forgets it;
    ``pop_into(name, out)`` reads it into ``out`` as it is (the numba kernel's layout), and ``pop_transposed_into(name,
    out)`` writes its transpose into ``out``, each a block of rows at a time, so no full-size copy of the tensor ever
    exists besides ``out`` (see the module docstring).
    """

    def __init__(self, path, cfg: ModelConfig):
        self.path = Path(path)
        self.where = locate_tensors(self.path, expected_tensors(cfg))

    def __getitem__(self, name: str) -> np.ndarray:
        f, info, data_start = self.where[name]
        out = np.empty(info["shape"], np.float32)
        with open(f, "rb") as fh:
            read_rows_into(fh, info, data_start, 0, out)
        check_finite(out, name, f)
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self.where)

    def __len__(self) -> int:
        return len(self.where)

    def pop(self, name: str) -> np.ndarray:
        tensor = self[name]
        del self.where[name]
        return tensor

    def pop_into(self, name: str, out: np.ndarray) -> None:
        """``out[...] = self.pop(name)`` (``out`` C-contiguous), BLOCK_BYTES of it at a time: the numba kernel's
        packed layout is the file's own ([out, in]), so its weights are read straight into place."""
        f, info, data_start = self.where.pop(name)
        rows = info["shape"][0]
        step = max(1, BLOCK_BYTES // (4 * max(1, out[0].size)))
        with open(f, "rb") as fh:
            for first in range(0, rows, step):
                part = out[first: first + step]
                read_rows_into(fh, info, data_start, first, part)
                check_finite(part, name, f)

    def is_q4_1(self, name: str) -> bool:
        """Whether the tensor ``name`` is stored as a Q4_1 matrix (``q4_1.py``)."""
        return self.where[name][1]["dtype"] == "Q4_1"

    def pop_q4_1(self, name: str) -> Q4Blocks:
        """A Q4_1 matrix's blocks as stored (``d`` and ``m`` widened to float32), and forget it."""
        f, info, data_start = self.where.pop(name)
        with open(f, "rb") as fh:
            return read_q4_1(fh, info, data_start, 0, info["shape"][0])

    def pop_transposed_into(self, name: str, out: np.ndarray) -> None:
        """``out[...] = self.pop(name).T`` for a 2-D tensor, holding only BLOCK_BYTES of it at a time."""
        f, info, data_start = self.where.pop(name)
        rows, cols = info["shape"]
        step = max(1, BLOCK_BYTES // (4 * cols))
        block = np.empty((min(step, rows), cols), np.float32)
        with open(f, "rb") as fh:
            for first in range(0, rows, step):
                part = block[: min(step, rows - first)]
                read_rows_into(fh, info, data_start, first, part)
                check_finite(part, name, f)
                out[:, first: first + len(part)] = part.T


def load_weights(path, cfg: ModelConfig) -> Checkpoint:
    """All tensors the config needs, shapes checked, as a ``Checkpoint`` that reads each one (float32) on demand."""
    return Checkpoint(path, cfg)


def float_copy(src, dst) -> Path:
    """A copy of the single-file model directory ``src`` at ``dst`` with ``model.safetensors`` in float32, int8
    matrices multiplied out (``safetensors_io``), for readers that do not know the int8 format: transformers
    would load the integers as weights and ignore the scales. -> ``dst``, which must not exist yet; ``src``'s file is
    read before anything is written, and the new one is written under a .partial name, then renamed (on a failure,
    ``dst`` is removed)."""
    src, dst = Path(src), Path(dst)
    path = src / "model.safetensors"
    if not path.is_file():  # (bug: checked only after dst's config.json and the rest were overwritten)
        raise FileNotFoundError(f"{path}: no such file (a single-file model directory is expected)")
    if dst.exists():
        raise FileExistsError(f"{dst}: already exists (give a new directory for the float32 copy)")
    tensors, metadata = read_safetensors(path), read_metadata(path)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors"))
    tmp = dst / "model.safetensors.partial"
    try:
        write_safetensors(tmp, tensors, "F32", metadata)
    except BaseException:
        shutil.rmtree(dst)  # ours: it did not exist before
        raise
    tmp.replace(dst / "model.safetensors")
    return dst
