"""The committed windows' file (weights/eagle-data/*.npz): the token ids of the windows the target generated for
eagle_data.py, a byte or less a token, so that a rebuild on another machine reuses them (``--generations``).

    tokens_xz   the token ids, uint16 little-endian, compressed with LZMA (a fifth smaller than zlib here; files
                written before it hold ``tokens`` [n] uint16, which ``read_windows`` reads too)
    starts      [m + 1] int64: window i is tokens[starts[i]:starts[i + 1]]
    shards      [m] int32: the shard each window came from
    settings    the JSON of the settings that shaped the data (eagle_data.py's settings.json)
"""

from __future__ import annotations

import json
import lzma
import os
from pathlib import Path

import numpy as np


def write_windows(file: Path, windows: list, shard_of: list[int], settings: dict) -> int:
    """Write ``windows`` (token id sequences) and the shard of each to ``file``, a name ending in .npz, under a
    temporary name first (it may replace a committed file) -> the number of tokens written."""
    file = Path(file)
    if file.suffix != ".npz":  # (bug: NumPy added .npz to a name without it: the file written was not the one named)
        raise ValueError(f"{file}: the windows' file must be named *.npz")
    starts = np.cumsum([0] + [len(w) for w in windows])
    tokens = np.concatenate(windows)  # [n]
    if tokens.dtype.kind not in "iu":
        raise ValueError(f"{file}: token ids must be integers, got {tokens.dtype}")
    outside = tokens[(tokens < 0) | (tokens > 65535)]
    if outside.size:  # (bug: they were wrapped: 70000 stored as 4464, -1 as 65535)
        raise ValueError(f"{file}: token id {outside[0]} is outside 0..65535, the ids the file stores (uint16)")
    packed = lzma.compress(tokens.astype("<u2").tobytes(), preset=9 | lzma.PRESET_EXTREME)
    tmp = file.with_name(f".{file.name}.partial")
    try:
        with open(tmp, "wb") as f:  # a file object: NumPy adds no suffix
            np.savez_compressed(f, tokens_xz=np.frombuffer(packed, np.uint8), starts=starts,
                                shards=np.array(shard_of, np.int32), settings=np.array(json.dumps(settings)))
        os.replace(tmp, file)  # (bug: written in place, a run that stopped half-way lost the committed file)
    finally:
        tmp.unlink(missing_ok=True)
    return int(starts[-1])


def read_windows(file: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """-> (tokens [n] int64, starts [m + 1], the shard of each window [m], the settings); a file whose parts do not
    agree is refused."""
    with np.load(file) as z:
        t = np.frombuffer(lzma.decompress(z["tokens_xz"].tobytes()), "<u2") if "tokens_xz" in z.files else z["tokens"]
        st, sh, settings = z["starts"], z["shards"], json.loads(str(z["settings"]))
    if len(st) != len(sh) + 1 or st[0] != 0 or st[-1] != len(t) or np.any(np.diff(st) < 0):
        raise ValueError(f"{file}: {len(t)} tokens and {len(sh)} windows whose starts do not cover them: a damaged file")
    return t.astype(np.int64), st, sh, settings
