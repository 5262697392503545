"""Store a draft model's matrices as int8 with one float32 scale per row: about half of bfloat16's bytes.

    python -m minispec.recipes.quantize_int8 SRC DST        (DST may be SRC: the file is rewritten in place)

Every 2-D tensor of ``SRC/model.safetensors`` (the embedding, the attention and MLP matrices) becomes an int8
matrix ``NAME`` with its float32 scales ``NAME_scale``, symmetric per output row (scale = max|w_i| / 127,
q = round(w / scale): ``model/safetensors_io.py`` defines the format); the 1-D tensors (the norms) are stored in
bfloat16. The other files of SRC are copied to DST. The loader multiplies each row back by its scale as it reads
it, so the model computes in float32 as before; only the weights are rounded, each by at most half its row's
scale. What was done is recorded in the file's metadata (``"int8"``) and in ``DST/training.json``
(``"stored_dtype"``, ``"int8"``): the source file's SHA-256 and the run's provenance (date, commit, command, machine); the
file's line in ``DST/SHA256SUMS`` is updated. A file already stored this way is left as it is. A new DST is made
beside it under a temporary name and renamed at the end: a run that fails leaves no DST.

transformers cannot read the format: it would load the integers as weights and ignore the scales. ``--to-float``
writes a float32 copy of such a directory for it, into a new directory DST (``model.weights.float_copy``, which the
harness's peer runs use).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..harness.provenance import provenance
from ..model.safetensors_io import read_header, read_metadata, read_safetensors, write_safetensors
from ..model.weights import float_copy
from .training import rewrite_weights, run_command

FILE = "model.safetensors"
STORED = "I8 matrices with an F32 scale per row, BF16 vectors"


def is_int8(directory) -> bool:
    """Whether ``directory/model.safetensors`` holds int8 matrices."""
    header, _ = read_header(Path(directory) / FILE)
    return any("scale" in info for info in header.values())


def quantize_int8(src, dst) -> bool:
    """SRC's model in int8 at DST (the module docstring) -> False when SRC's file was stored this way already
    (DST is then left as it is)."""
    src, dst = Path(src), Path(dst)
    path = src / FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (a single-file model directory is expected)")
    if is_int8(src):
        return False
    in_place = dst.resolve() == src.resolve()
    if not in_place and dst.exists():
        raise FileExistsError(f"{dst}: already exists (give a new directory, or SRC itself to rewrite it in place)")
    tensors = read_safetensors(path)  # read and checked before anything is written (bug: DST was made first, and a
    # NaN weight then left it without a model, refused as "already exists" by the next run)
    bad = [n for n, a in tensors.items() if a.ndim == 2 and not np.isfinite(a).all()]
    if bad:
        raise ValueError(f"{path}: tensor {bad[0]!r} holds NaN or infinite values, which int8 cannot store")
    record = dict(source_sha256=hashlib.sha256(path.read_bytes()).hexdigest(), stored=STORED,
                  **provenance([str(src), str(dst)], "python -m minispec.recipes.quantize_int8"))
    meta = {**read_metadata(path), "int8": json.dumps(record)}
    matrices = [n for n, a in tensors.items() if a.ndim == 2]

    def write(d: Path) -> None:
        rewrite_weights(d, FILE, lambda tmp: write_safetensors(tmp, tensors, "BF16", meta, int8=matrices),
                        dict(stored_dtype=STORED, int8=record))

    if in_place:
        write(dst)
        return True
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", suffix=".partial", dir=dst.parent))  # renamed to DST when done
    try:
        shutil.copytree(src, tmp, ignore=shutil.ignore_patterns(FILE), dirs_exist_ok=True)
        write(tmp)
        tmp.rename(dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # this run's own directory: DST is left as it was, absent
        raise
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", help="a draft model directory, for example weights/smoldraft-3l-192")
    ap.add_argument("dst", help="where to write it (SRC itself: in place; with --to-float, a new directory)")
    ap.add_argument("--to-float", action="store_true", help="the other way: a float32 copy for transformers")
    args = ap.parse_args(argv)
    if args.to_float:
        return run_command(lambda: f"{float_copy(args.src, args.dst) / FILE}: float32")
    return run_command(lambda: f"{Path(args.dst) / FILE}: " + ("written, int8 matrices" if quantize_int8(args.src, args.dst)
                                                              else "already int8, left as it is"))


if __name__ == "__main__":
    sys.exit(main())
