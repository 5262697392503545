"""Read and write the safetensors format with NumPy alone, bfloat16 and int8 matrices included.

The format: 8 bytes little-endian header length N, N bytes of JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}}``, then the raw little-endian data.
NumPy has no bfloat16, so BF16 tensors are widened to float32 here (a bf16 is the top half of a
float32) and narrowed back when writing.

**Int8 matrices.** A tensor ``NAME`` of dtype I8 is a quantized matrix: it must be 2-D, [rows, cols], and come
with ``NAME_scale`` (``SCALE_SUFFIX``; Hugging Face's compressed formats name theirs ``...weight_scale`` the same
way), a float tensor of shape [rows], one scale per output row, finite and not negative. Row i of the weight is
``q[i, :] * scale[i]``, symmetric, no zero point. The reader widens both to float32 and multiplies, so each
weight is ``float32(q) * float32(scale)`` with one float32 rounding; ``read_header`` lists the pair as one
tensor, ``NAME``, whose entry carries its scale's entry under ``"scale"``. ``quantize_rows`` is the writer's
side: scale = max|w_i| / 127 and q = round(w / scale), so |q| <= 127 and each weight is off by at most half
a scale. Refused, with the file and the tensor named: an I8 tensor without its scale or not 2-D, a scale of
another shape or a non-float dtype, a tensor named ``..._scale`` that is not the scale of an I8 tensor, and
(as the rows are read) a negative, NaN or infinite scale.

**Q4_1 matrices** (``q4_1.py``: the fetched GGUF's own 4-bit blocks). A U8 tensor ``NAME`` of shape [rows, cols/2]
that comes with ``NAME_q4_1_d`` and ``NAME_q4_1_m`` (``Q4_SUFFIXES``), float tensors of shape [rows, cols/32], is the
Q4_1 matrix [rows, cols]: row i's bytes are its blocks' ``qs``, 16 per block, and the two float tensors their ``d``
and ``m``. ``read_header`` lists the three as one tensor ``NAME`` of dtype ``"Q4_1"`` and shape [rows, cols], its parts
under ``"q4_1"``; ``read_q4_1`` gives them back as they are stored, and every other reader dequantizes
(``q4_1.dequantize``). Refused like the int8 pairs: a part without the others, parts of the wrong shape or dtype, and
(as the rows are read) a NaN or infinite ``d`` or ``m``.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np

from .config import ModelFormatError
from .q4_1 import QK, Q4Blocks, dequantize

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64,
          "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    wide = bits.astype(np.uint32)
    wide <<= 16  # in place: no third array
    return wide.view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest even, as torch does."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


MAX_HEADER_BYTES = 100_000_000  # the reference library's limit: a larger header is refused unread
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")
SCALE_SUFFIX = "_scale"  # NAME_scale: the per-row scales of the I8 matrix NAME (module docstring)
Q4_SUFFIXES = ("_q4_1_d", "_q4_1_m")  # NAME_q4_1_d, NAME_q4_1_m: the blocks' d and m of the Q4_1 matrix NAME


def quantize_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A float matrix [rows, cols] -> (q int8 [rows, cols], scale float32 [rows]): symmetric, one scale per row,
    scale = max|w_i| / 127 and q = round(w / scale) (half to even; a row of zeros gets scale 0 and q 0)."""
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 2:
        raise ValueError(f"int8 storage is for matrices (one scale per row), got shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("cannot quantize NaN or infinite weights")
    scale = (np.abs(w).max(axis=1) / np.float32(127)).astype(np.float32)  # [rows]
    safe = np.where(scale > 0, scale, np.float32(1))
    q = np.clip(np.rint(w / safe[:, None]), -127, 127).astype(np.int8)
    return q, scale


def read_header(path) -> tuple[dict, int]:
    """-> (header without __metadata__, byte offset where the data starts), checked as the reference
    ``safetensors`` library checks it, so that a corrupt file is refused instead of loading as garbage:

    * the header length fits the file and the 100 MB limit, and the header is a UTF-8 JSON object
      (no name twice) whose ``__metadata__``, if any, maps strings to strings;
    * each tensor has a known ``dtype``, a ``shape`` of non-negative integers and ``data_offsets``
      [begin, end] of integers whose span is exactly dtype size x number of elements;
    * sorted by offset, the tensors tile the data section from byte 0 with no gap and no overlap,
      and the last one ends exactly at the end of the file.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelFormatError(f"{path}: not a file (expected a safetensors file)")
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ModelFormatError(f"{path}: truncated safetensors file ({size} bytes, no header)")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES:
            raise ModelFormatError(f"{path}: safetensors header of {n} bytes is over the {MAX_HEADER_BYTES}-byte limit")
        if n > size - 8:
            raise ModelFormatError(f"{path}: truncated safetensors file (header says {n} bytes, file has {size})")
        header = parse_header_json(path, f.read(n))
    data_start = 8 + n
    entries = sorted(((check_entry(path, name, info), name) for name, info in header.items()))
    offset = 0
    for (begin, end), name in entries:
        if begin != offset:
            what = "overlaps the tensor before it" if begin < offset else "leaves a gap after the tensor before it"
            raise ModelFormatError(f"{path}: tensor {name!r}: data_offsets [{begin}, {end}] {what} "
                                   f"(expected it to start at byte {offset} of the data section)")
        offset = end
    last = entries[-1][1] if entries else None
    if data_start + offset > size:
        raise ModelFormatError(f"{path}: truncated safetensors file: tensor {last!r} needs bytes up to {offset} "
                               f"of the data section but the file holds only {size - data_start}")
    if data_start + offset < size:
        raise ModelFormatError(f"{path}: {size - data_start - offset} bytes after the data of the last tensor, {last!r} "
                               f"(expected the file to end at byte {offset} of the data section)")
    return pair_scales(path, pair_q4_1(path, header)), data_start  # Q4_1 first: its parts are not int8 scales


def pair_scales(path: Path, header: dict) -> dict:
    """Each I8 matrix with its ``NAME_scale`` checked and moved into its entry (``info["scale"]``, with the
    scale's own name under ``"name"``); the header then lists tensors as the reader returns them."""
    for name, info in header.items():
        if name.endswith(SCALE_SUFFIX) and header.get(name[: -len(SCALE_SUFFIX)], {}).get("dtype") != "I8":
            raise ModelFormatError(f"{path}: tensor {name!r} is named as the scale of an int8 matrix, but there is no "
                                   f"I8 tensor {name[: -len(SCALE_SUFFIX)]!r}")
        if info["dtype"] != "I8":
            continue
        if len(info["shape"]) != 2:
            raise ModelFormatError(f"{path}: tensor {name!r} is I8 of shape {tuple(info['shape'])}: int8 is read only "
                                   "for 2-D matrices, with one scale per row")
        scale = header.get(name + SCALE_SUFFIX)
        if scale is None:
            raise ModelFormatError(f"{path}: tensor {name!r} is I8 but the file has no {name + SCALE_SUFFIX!r} (expected "
                                   f"a float tensor of shape [{info['shape'][0]}], one scale per row)")
        if scale["dtype"] not in FLOAT_DTYPES or scale["shape"] != info["shape"][:1]:
            raise ModelFormatError(f"{path}: tensor {name + SCALE_SUFFIX!r} is {scale['dtype']} of shape "
                                   f"{tuple(scale['shape'])}, expected a float ({', '.join(FLOAT_DTYPES)}) of shape "
                                   f"({info['shape'][0]},), one scale per row of {name!r}")
    for name in [n for n in header if header[n]["dtype"] == "I8"]:
        header[name]["scale"] = {**header.pop(name + SCALE_SUFFIX), "name": name + SCALE_SUFFIX}
    return header


def pair_q4_1(path: Path, header: dict) -> dict:
    """Each Q4_1 matrix's three tensors checked and listed as one (module docstring): ``NAME`` of dtype ``"Q4_1"``, its
    shape the float matrix's, and its parts, each with its own name, under ``info["q4_1"]`` as ``qs``, ``d`` and ``m``."""
    bases = {n[: -len(sfx)] for n in header for sfx in Q4_SUFFIXES if n.endswith(sfx)}
    for name in sorted(bases):
        parts = [header.get(name + sfx) for sfx in Q4_SUFFIXES]
        qs = header.get(name)
        missing = [n for n, p in zip([name, *(name + sfx for sfx in Q4_SUFFIXES)], [qs, *parts]) if p is None]
        if missing:
            raise ModelFormatError(f"{path}: the Q4_1 matrix {name!r} is three tensors, {name!r} (U8), "
                                   f"{name + Q4_SUFFIXES[0]!r} and {name + Q4_SUFFIXES[1]!r}; the file lacks "
                                   f"{', '.join(map(repr, missing))}")
        if qs["dtype"] != "U8":
            raise ModelFormatError(f"{path}: tensor {name!r} is {qs['dtype']}, expected U8: the bytes of the Q4_1 matrix "
                                   f"whose {name + Q4_SUFFIXES[0]!r} the file holds")
        if len(qs["shape"]) != 2 or qs["shape"][1] % (QK // 2):
            raise ModelFormatError(f"{path}: tensor {name!r} is the bytes of a Q4_1 matrix, of shape {tuple(qs['shape'])}: "
                                   f"expected [rows, cols/2] with cols a multiple of {QK}")
        rows, blocks = qs["shape"][0], qs["shape"][1] // (QK // 2)
        if rows == 0 or blocks == 0:
            raise ModelFormatError(f"{path}: tensor {name!r} is an empty Q4_1 matrix, of shape {tuple(qs['shape'])}")
        for sfx, part in zip(Q4_SUFFIXES, parts):
            if part["dtype"] not in FLOAT_DTYPES or part["shape"] != [rows, blocks]:
                raise ModelFormatError(f"{path}: tensor {name + sfx!r} is {part['dtype']} of shape {tuple(part['shape'])}, "
                                       f"expected a float ({', '.join(FLOAT_DTYPES)}) of shape ({rows}, {blocks}), one "
                                       f"number per block of {QK} in {name!r}")
        header[name] = {"dtype": "Q4_1", "shape": [rows, blocks * QK], "data_offsets": qs["data_offsets"],
                        "q4_1": {"qs": {**qs, "name": name},
                                 **{k: {**header.pop(name + sfx), "name": name + sfx} for k, sfx in zip("dm", Q4_SUFFIXES)}}}
    return header


def read_q4_1(fh, info: dict, data_start: int, first: int, stop: int) -> Q4Blocks:
    """Rows ``first .. stop`` of a Q4_1 matrix (its header entry ``info``) from the open file ``fh``, as stored: the
    bytes, and ``d`` and ``m`` read as float32 (from any float dtype), checked finite and, for ``d``, not negative
    (ggml's d = (max - min) / 15 never is)."""
    parts = info["q4_1"]
    qs = np.empty((stop - first, info["shape"][1] // QK, QK // 2), np.uint8)  # [rows, in/32, 16]
    read_rows_into(fh, parts["qs"], data_start, first, qs.reshape(len(qs), -1))
    dm = {}
    for k in "dm":
        dm[k] = np.empty(qs.shape[:2], np.float32)  # [rows, in/32]
        read_rows_into(fh, parts[k], data_start, first, dm[k])
        if not np.isfinite(dm[k]).all():
            raise ModelFormatError(f"{fh.name}: tensor {parts[k]['name']!r} holds NaN or infinite values (expected finite "
                                   f"{'steps' if k == 'd' else 'block minima'})")
    if (dm["d"] < 0).any():
        raise ModelFormatError(f"{fh.name}: tensor {parts['d']['name']!r} holds a negative step (expected d >= 0)")
    return Q4Blocks(qs, dm["d"], dm["m"])


def read_metadata(path) -> dict[str, str]:
    """A safetensors file's ``__metadata__`` (empty when it has none), after ``read_header``'s checks."""
    read_header(path)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n).decode("utf-8")).get("__metadata__") or {}


def parse_header_json(path: Path, raw: bytes) -> dict:
    """The header's JSON object, ``__metadata__`` checked and removed."""
    def no_duplicates(pairs):
        names = [k for k, _ in pairs]
        twice = sorted({k for k in names if names.count(k) > 1})
        if twice:
            raise ModelFormatError(f"{path}: safetensors header names {twice[0]!r} twice")
        return dict(pairs)

    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicates)
    except ModelFormatError:  # a name twice, from no_duplicates
        raise
    except (ValueError, RecursionError) as e:  # (bug: ValueError, not only JSONDecodeError: an integer over 4300 digits)
        raise ModelFormatError(f"{path}: corrupt safetensors header (expected UTF-8 JSON: {e})") from None
    if not isinstance(header, dict):
        raise ModelFormatError(f"{path}: corrupt safetensors header (expected a JSON object, got {type(header).__name__})")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise ModelFormatError(f"{path}: safetensors __metadata__ must map strings to strings, got {meta!r:.80}")
    return header


def is_count(x) -> bool:
    """A non-negative JSON integer (not a bool, not a float)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def check_entry(path: Path, name: str, info) -> tuple[int, int]:
    """One header entry's dtype, shape and data_offsets -> (begin, end)."""
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise ModelFormatError(f"{path}: tensor {name!r}: expected an object with dtype, shape and data_offsets, "
                               f"got {info!r:.80}")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ModelFormatError(f"{path}: tensor {name!r} has unsupported dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
    if not (isinstance(shape, list) and all(is_count(d) for d in shape)):
        raise ModelFormatError(f"{path}: tensor {name!r}: shape {shape!r} is not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(is_count(o) for o in offsets)):
        raise ModelFormatError(f"{path}: tensor {name!r}: data_offsets {offsets!r} is not [begin, end] with "
                               "non-negative integers")
    begin, end = offsets
    nbytes = math.prod(shape) * np.dtype(DTYPES[dtype]).itemsize
    if end - begin != nbytes:
        raise ModelFormatError(f"{path}: tensor {name!r}: data_offsets [{begin}, {end}] span {end - begin} bytes, "
                               f"expected {nbytes} for {dtype} of shape {tuple(shape)}")
    return begin, end


def read_safetensors(path, names=None) -> dict[str, np.ndarray]:
    """Tensors of one file as NumPy arrays, floats and int8 matrices widened to float32. Each tensor is read
    into its own array (not a view of one mapped file), so a caller can free them one by one."""
    header, start = read_header(path)
    out = {}
    with open(path, "rb") as fh:
        for name, info in header.items():
            if names is not None and name not in names:
                continue
            if "scale" in info or "q4_1" in info:  # an int8 matrix, q * scale; a Q4_1 matrix, dequantized
                out[name] = np.empty(info["shape"], np.float32)
                read_rows_into(fh, info, start, 0, out[name])
                continue
            begin, end = info["data_offsets"]
            dtype = np.dtype(DTYPES[info["dtype"]])
            fh.seek(start + begin)
            arr = np.fromfile(fh, dtype=dtype, count=(end - begin) // dtype.itemsize).reshape(info["shape"])
            if info["dtype"] == "BF16":
                arr = bf16_to_f32(arr)
            elif arr.dtype.kind == "f":
                arr = arr.astype(np.float32, copy=False)
            out[name] = arr
    return out


def read_rows_into(fh, info: dict, data_start: int, first: int, out: np.ndarray) -> None:
    """Fill ``out`` (float32, C-contiguous) with rows ``first .. first + len(out)`` of one tensor (its header
    entry ``info``) from the open file ``fh``, widened to float32. F32 bytes go straight into ``out``; other
    dtypes pass through a buffer of these rows only. Rows are along the first axis (elements of a 1-D tensor).
    An int8 matrix's rows are multiplied by the same rows of its scale, which are checked first; a Q4_1 matrix's rows
    are dequantized (``q4_1.dequantize``)."""
    if info["dtype"] == "Q4_1":
        out[...] = dequantize(read_q4_1(fh, info, data_start, first, first + len(out)))
        return
    dtype = np.dtype(DTYPES[info["dtype"]])
    row_bytes = int(np.prod(info["shape"][1:], dtype=np.int64)) * dtype.itemsize
    fh.seek(data_start + info["data_offsets"][0] + first * row_bytes)
    raw = out if out.dtype == dtype else np.empty(out.shape, dtype)  # F32 (or U8 bytes) straight into out
    if fh.readinto(raw) != raw.nbytes:
        raise ModelFormatError(f"{fh.name}: truncated safetensors file: tensor data ends early")
    if info["dtype"] == "BF16":
        bits = out.view(np.uint32)
        bits[...] = raw
        bits <<= 16  # a bf16 is the top half of a float32
    elif raw is not out:
        out[...] = raw
    if "scale" in info:
        scale = np.empty(len(out), np.float32)
        read_rows_into(fh, info["scale"], data_start, first, scale)
        bad = ~(np.isfinite(scale) & (scale >= 0))
        if bad.any():
            row = first + int(np.argmax(bad))
            raise ModelFormatError(f"{fh.name}: tensor {info['scale']['name']!r} holds the scale {scale[row - first]} at "
                                   f"row {row} (expected finite scales, none negative)")
        out *= scale[:, None]


def write_safetensors(path, tensors: dict[str, np.ndarray], dtype: str = "F32", metadata: dict | None = None,
                      int8=()):
    """Write float tensors as F32, F16 or BF16 (integers are written as they are), the float matrices named in
    ``int8`` as int8 ``NAME`` with its float32 ``NAME_scale`` (``quantize_rows``), and a ``Q4Blocks`` as its three
    tensors, its ``d`` and ``m`` in float16 (the module docstring)."""
    if set(int8) - set(tensors):
        raise KeyError(f"int8: no tensor {sorted(set(int8) - set(tensors))[0]!r} to quantize")
    entries = []  # (name, dtype code, the array as stored)
    for name, arr in tensors.items():
        if isinstance(arr, Q4Blocks):
            entries += [(name, "U8", arr.qs.reshape(len(arr.qs), -1)), (name + Q4_SUFFIXES[0], "F16", arr.d.astype(np.float16)),
                        (name + Q4_SUFFIXES[1], "F16", arr.m.astype(np.float16))]
            continue
        arr = np.asarray(arr)
        if name in int8:
            q, scale = quantize_rows(arr)
            entries += [(name, "I8", q), (name + SCALE_SUFFIX, "F32", scale)]
        elif arr.dtype.kind == "f":
            entries.append((name, dtype, f32_to_bf16(arr) if dtype == "BF16"
                            else arr.astype({"F32": np.float32, "F16": np.float16}[dtype])))
        else:
            entries.append((name, {v: k for k, v in DTYPES.items() if k != "BF16"}[arr.dtype.type], arr))
    scales = {name + SCALE_SUFFIX for name in int8}
    for name, _, _ in entries:
        if name.endswith(SCALE_SUFFIX) and name not in scales:
            raise ValueError(f"tensor {name!r}: a name ending in {SCALE_SUFFIX!r} is kept for the scale of an int8 "
                             f"matrix (the reader refuses it otherwise); rename it or quantize "
                             f"{name[: -len(SCALE_SUFFIX)]!r}")
    q4_parts = {name + sfx for name, arr in tensors.items() if isinstance(arr, Q4Blocks) for sfx in Q4_SUFFIXES}
    for name, _, _ in entries:
        if name.endswith(Q4_SUFFIXES) and name not in q4_parts:
            raise ValueError(f"tensor {name!r}: a name ending in {' or '.join(Q4_SUFFIXES)} is kept for the parts of a "
                             "Q4_1 matrix (the reader refuses it otherwise); rename it")
    if len({e[0] for e in entries}) < len(entries):
        raise ValueError("a scale's or a Q4_1 part's name is also the name of another tensor")
    header, blobs, offset = {}, [], 0
    for name, code, data in entries:
        b = np.ascontiguousarray(data).tobytes()
        header[name] = {"dtype": code, "shape": list(data.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    header["__metadata__"] = {"format": "pt", **{k: str(v) for k, v in (metadata or {}).items()}}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # align the data section to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
