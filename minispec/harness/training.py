"""What every training recipe here starts with: torch or a clear error, fixed seeds, a log file."""

from __future__ import annotations

import sys
import time
from pathlib import Path

TORCH_NEEDED = "error: training needs torch and transformers: pip install torch==2.13.0 -e '.[train,parity]'"


def import_torch():
    """torch, or None after printing how to install it (the recipe then exits with 2)."""
    try:
        import torch
        import transformers  # noqa: F401  (the recipes load the target with it)
    except ImportError:
        print(TORCH_NEEDED, file=sys.stderr)
        return None
    return torch


def start(torch, out, seed: int, threads: int):
    """Seed torch, use ``threads`` threads, create ``out`` -> (out as a Path, log): log(msg) prints a
    time-stamped line to stderr and appends it to ``out/train_log.txt``."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "train_log.txt", "w")

    def log(msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, file=sys.stderr, flush=True)
        logf.write(line + "\n")
        logf.flush()

    return out, log
