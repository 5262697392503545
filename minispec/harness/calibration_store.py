"""The calibration store: the cost model's figures kept on disk between processes (the lab's side of
policy/calibration.py, which keeps them in memory only).

One file per key (``calibration_key``: model, device, kernel, the n's measured, machine, CPU model and generation,
NumPy, thread counts and the numba kernel's tiles) under ``$MINISPEC_CACHE/calibration/``, so that runs of other
models, kernels or thread counts never overwrite each other's. A file keeps the key's last RUNS calibrations, each
with when it was measured and the load then. ``load`` gives back, figure by figure, the minimum of those younger
than MAX_AGE_DAYS while fewer than 4 are kept, then their lower quartile (QUANTILE): load only ever slows a pass, so a
quiet run lowers the figures, and busy runs raise them only once they are most of the kept runs (three of four at
least). The figures ``load`` gives are checked by the cost model as measured ones are (policy/calibration.py), and a
file whose figures fail is measured afresh and replaced. Files are replaced atomically; two processes saving at
once may lose one of the two runs, never corrupt the file.

``use_disk_store()`` attaches it (the CLI does, unless ``MINISPEC_NO_CALIBRATION_CACHE=1``); a library caller that
wants its calibrations kept does the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np

from ..policy.calibration import Calibration, use_store
from ..recipes.fetch import cache_dir

RUNS = 8  # calibrations kept per key
QUANTILE = 0.25  # of a figure over the kept runs (the minimum while fewer than 4 are kept)
MAX_AGE_DAYS = 30  # older runs are dropped: a machine's software changes


class DiskStore:
    """Calibrations under ``folder`` (default ``$MINISPEC_CACHE/calibration``), one JSON file per key."""

    def __init__(self, folder=None):
        self.folder = Path(folder) if folder is not None else cache_dir() / "calibration"

    def path(self, key: str) -> Path:
        return self.folder / (hashlib.sha256(key.encode()).hexdigest()[:20] + ".json")

    def runs(self, key: str) -> list[dict]:
        """The key's kept runs ({times, measured_at, load}), newest last; ValueError when the file is not ours."""
        f = self.path(key)
        if not f.exists():
            return []
        data = json.loads(f.read_text())
        if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("runs"), list):
            raise ValueError(f"{f} is not a calibration file of this key")
        return data["runs"]

    def load(self, key: str, what: str) -> Calibration | None:
        now = time.time()
        runs = [Calibration.from_json(what, r) for r in self.runs(key)]
        runs = [c for c in runs if now - c.measured_at < MAX_AGE_DAYS * 86400]
        if not runs:
            return None
        names = set.intersection(*(set(c.times) for c in runs))
        q = QUANTILE if len(runs) >= 4 else 0.0
        times = {k: float(np.quantile([c.times[k] for c in runs], q)) for k in names}
        loads = [c.load for c in runs if c.load is not None]
        return Calibration(what, times, max(c.measured_at for c in runs), min(loads) if loads else None, [], "stored")

    @staticmethod
    def same_figure_names(entry, calibration: Calibration) -> bool:
        """Whether a kept run reads back (``Calibration.from_json``) with figures of the same names as ``calibration``'s."""
        try:
            return set(Calibration.from_json(calibration.what, entry).times) == set(calibration.times)
        except (ValueError, AttributeError, TypeError):
            return False

    def save(self, key: str, calibration: Calibration) -> None:
        try:
            runs = self.runs(key)
        except ValueError:
            runs = []  # a file that is not ours is replaced
        runs = [r for r in runs if self.same_figure_names(r, calibration)]  # (bug: a kept run without some figures, or
        # measured "in the future", stayed, so every later load was distrusted and measured afresh)
        runs = (runs + [calibration.to_json()])[-RUNS:]
        self.folder.mkdir(parents=True, exist_ok=True)
        f = self.path(key)
        tmp = f.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(key=key, what=calibration.what, runs=runs), indent=1))
        tmp.replace(f)


def use_disk_store(folder=None) -> DiskStore | None:
    """Attach a ``DiskStore`` (policy/calibration.py's ``use_store``) -> it, or None when
    ``MINISPEC_NO_CALIBRATION_CACHE`` is set (then calibrations stay in memory)."""
    if os.environ.get("MINISPEC_NO_CALIBRATION_CACHE"):
        use_store(None)
        return None
    store = DiskStore(folder)
    use_store(store)
    return store
