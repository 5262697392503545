"""Store a trained drafter's weights in bfloat16: half the bytes on disk, the same float32 arithmetic.

``python -m minispec.recipes.store_bf16 DIR [--file model.safetensors]`` rewrites every float tensor of
``DIR/FILE`` as BF16 (round to nearest even), keeps the file's metadata, records ``"stored_dtype": "BF16"`` in
``DIR/training.json`` and updates that file's line in ``DIR/SHA256SUMS``. The loader widens BF16 to float32
(``model/safetensors_io.py``), so activations stay float32; only the weights' last 16 mantissa bits are lost.
A file already in BF16 is left as it is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..model.safetensors_io import read_header, read_metadata, read_safetensors, write_safetensors
from .training import rewrite_weights, run_command


def store_bf16(directory, file: str = "model.safetensors") -> bool:
    """-> True when the file was rewritten, False when every float tensor was BF16 already."""
    d = Path(directory)
    path = d / file
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    header, _ = read_header(path)
    if all(info["dtype"] != "F32" for info in header.values()):
        return False
    meta = read_metadata(path)  # kept as it was
    tensors = read_safetensors(path)
    rewrite_weights(d, file, lambda tmp: write_safetensors(tmp, tensors, dtype="BF16", metadata=meta),
                    dict(stored_dtype="BF16"))
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", help="a drafter's directory, for example weights/eagle-smollm2-135m")
    ap.add_argument("--file", default="model.safetensors", help="the safetensors file in it (default model.safetensors)")
    args = ap.parse_args(argv)
    return run_command(lambda: f"{Path(args.directory) / args.file}: " + (
        "rewritten in BF16" if store_bf16(args.directory, args.file) else "already BF16, left as it is"))


if __name__ == "__main__":
    sys.exit(main())
