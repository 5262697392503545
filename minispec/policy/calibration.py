"""The calibration store: a measured figure of the cost model, checked, stored and validated before use.

A laptop is rarely quiet, and one burst of load during a measurement can move a figure several-fold; a
figure that is stored is then trusted by every later process. So a calibration is:

    measured   REPEATS interleaved repeats (every n inside each repeat, so that a burst hits them alike);
               the median, which one burst cannot move
    checked    against physics: every figure > 0; t(n) does not fall as n grows and r(n) <= n, each within
               NOISE. One that fails is measured again, up to TRIES times, and its note says what failed
    stored     in memory and on disk (``$MINISPEC_CACHE/calibration.json``, keyed by model and machine),
               with when it was measured and the machine's load then
    validated  once per process before it is used again: the physics checks, and a cheap probe (a few passes
               of 1 and of n_max tokens; one proposal of the drafter). A stored figure more than TOLERANCE
               from the probe's is distrusted and measured afresh, and the note says so

``MINISPEC_NO_CALIBRATION_CACHE=1`` keeps calibrations in memory only; ``MINISPEC_TRUST_CALIBRATION=1``
uses a stored one without the probe (to repeat a seeded ``k="auto"`` run exactly, see policy/__init__.py).
What is calibrated (a target's t(n), a drafter's guess, a tree level) is costs.py's; how it is timed, timing.py's.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass, field

import numpy as np

from ..drafters.protocol import TimesItself, TimesItsTreeLevels, has
from ..model import Model, backend
from ..model.fetch import cache_dir

REPEATS = 7  # interleaved repeats of a calibration: the median of 7 moves only when 4 of them are hit
TRIES = 3  # measurements of a calibration that fails a physical check before the last one is repaired
NOISE = 0.15  # the slack of a physical check: t(n+1) >= (1 - NOISE) t(n) and r(n) <= (1 + NOISE) n
TOLERANCE = 0.30  # a stored figure further than this from a probe's, relatively, is measured afresh

__all__ = ["Calibration", "calibrated", "calibration_key", "check_drafter", "check_verify", "forget_in_memory", "is_key_of", "notes_of"]


@dataclass
class Calibration:
    """Measured figures and their record: ``times`` {n: seconds} of a target pass (or {"guess", "fed"}: a
    drafter's seconds per guess and per token caught up), when and under what load they were measured, and
    ``notes``: what was measured again or distrusted, and why (empty: measured once, every check passed)."""

    what: str
    times: dict
    measured_at: float = field(default_factory=time.time)
    load: float | None = None  # the 1-minute load average per core while it was measured
    notes: list = field(default_factory=list)
    source: str = "measured"  # "measured" in this process, or "stored" (read from disk and validated)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.measured_at))
        load = "" if self.load is None else f", load {self.load:.2f} per core"
        return f"{self.what}: {self.source} ({when}{load})" + "".join(f"; {n}" for n in self.notes)

    def to_json(self) -> dict:
        return dict(times={str(k): v for k, v in self.times.items()}, measured_at=self.measured_at, load=self.load,
                    notes=self.notes)

    @classmethod
    def from_json(cls, what: str, entry) -> "Calibration":
        """A stored entry, or ValueError naming what is wrong with it (it is then measured afresh)."""
        if not isinstance(entry, dict) or not isinstance(entry.get("times"), dict):
            raise ValueError("stored without a record of when it was measured")
        times = {int(k) if k.isdigit() else k: float(v) for k, v in entry["times"].items()}
        if not all(np.isfinite(v) for v in times.values()):
            raise ValueError("stored with a figure that is not a finite number")
        load = entry.get("load")
        return cls(what, times, float(entry.get("measured_at", 0.0)), None if load is None else float(load),
                   [str(n) for n in entry.get("notes", [])], source="stored")


_MEMORY: dict[str, Calibration] = {}  # calibration_key -> the validated calibration of this process


def forget_in_memory() -> None:
    """Forget this process's validated calibrations: the next one asked for is read from the file again (or
    measured), as in a new process."""
    _MEMORY.clear()


def calibration_key(what, ns) -> str:
    """What a measurement depends on: what was timed, the device, the kernel and the machine. ``what`` is a model
    (keyed by its name, size and shape) or a drafter that times itself (``TimesItself``, ``TimesItsTreeLevels``:
    keyed by its name); either declares its ``kernel``. It keys the cache in memory too, so that a model loaded again
    (or a new drafter around the same model) finds the same figures: a seeded run then chooses the same K (see
    ``policy/__init__.py``)."""
    if isinstance(what, Model):
        who = f"{what.name}|{what.weight_bytes}|{what.cfg.num_layers}x{what.cfg.hidden_size}"
    elif has(what, TimesItself) or has(what, TimesItsTreeLevels):
        who = f"{what.name}|-|-"
    else:
        raise TypeError(f"calibration_key: {type(what).__name__} is neither a model nor a drafter that times itself")
    return (f"{who}|{backend.DEVICE}|{what.kernel}|{','.join(map(str, ns))}|"
            f"{platform.node()}|{os.cpu_count()}|numpy {np.__version__}")


def is_key_of(key: str, what) -> bool:
    """Whether a stored ``key`` is one of ``what``'s calibrations, whatever it measured (its ns or cost names)."""
    mine, theirs = calibration_key(what, ()).split("|"), key.split("|")
    ns_field = 5  # name|size|shape|device|kernel|ns|machine...: calibration_key's layout
    return len(theirs) == len(mine) and all(a == b for i, (a, b) in enumerate(zip(mine, theirs)) if i != ns_field)


def load_per_core() -> float | None:
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (OSError, AttributeError):  # not on every platform
        return None


def check_verify(times: dict) -> list[str]:
    """What a target's t(n) breaks of physics, one line each: a pass over more tokens cannot be cheaper, nor
    dearer than that many passes over one token (each within NOISE)."""
    ns = sorted(times)
    problems = [f"t({n}) = {times[n]} s is not a positive time" for n in ns if not times[n] > 0]
    if problems:
        return problems
    for a, b in zip(ns, ns[1:]):
        if times[b] < (1 - NOISE) * times[a]:
            problems.append(f"t({b}) = {1e3 * times[b]:.1f} ms < t({a}) = {1e3 * times[a]:.1f} ms")
    if 1 in times:
        for n in ns:
            if times[n] / times[1] > (1 + NOISE) * n:
                problems.append(f"r({n}) = {times[n] / times[1]:.2f} > {n}")
    return problems


def check_drafter(times: dict) -> list[str]:
    """A guess costs more than nothing; catching up on a token costs no less than nothing."""
    problems = [] if times.get("guess", 0) > 0 else [f"a guess measured {times.get('guess')} s"]
    return problems + ([] if times.get("fed", 0) >= 0 else [f"catching up measured {times.get('fed')} s per token"])


def disagreement(stored: dict, probed: dict) -> str | None:
    """The figure that a probe contradicts by more than TOLERANCE, in words, or None."""
    for k, now in probed.items():
        was = stored.get(k)
        if was is None or now <= 0 or abs(was / now - 1) > TOLERANCE:
            label = f"t({k})" if isinstance(k, int) else k
            return f"{label} stored {1e3 * (was or 0):.2f} ms, a probe now {1e3 * now:.2f} ms"
    return None


def measure_checked(what: str, measure, check) -> Calibration:
    """``measure()`` until ``check`` finds nothing wrong, at most TRIES times; a calibration that never passes
    is repaired (t(n) made non-decreasing) and says so."""
    notes = []
    for _ in range(TRIES):
        load = load_per_core()
        times = measure()
        problems = check(times)
        if not problems:
            return Calibration(what, times, load=load, notes=notes)
        notes.append(f"re-measured: {', '.join(problems)}")
    if all(isinstance(n, int) for n in times):
        ns, floor = sorted(times), 0.0
        for n in ns:
            floor = times[n] = max(times[n], floor)
        notes.append(f"kept after {TRIES} tries with t(n) made non-decreasing")
    return Calibration(what, times, load=load, notes=notes)


def calibrated(key: str, what: str, measure, check, probe, fresh: bool = False) -> Calibration:
    """The calibration under ``key``: from memory; else from disk, checked and probed (``probe()`` -> some of its
    figures, measured cheaply); else, or when it fails, measured afresh (``measure_checked``) and stored.
    ``fresh``: measure afresh whatever is stored (``minispec calibrate``)."""
    if key in _MEMORY and not fresh:
        return _MEMORY[key]
    disk = os.environ.get("MINISPEC_NO_CALIBRATION_CACHE") is None
    f = cache_dir() / "calibration.json"
    cal, distrust = None, None
    if disk and f.exists() and not fresh:
        try:
            entry = json.loads(f.read_text()).get(key)
            if entry is not None:
                cal = Calibration.from_json(what, entry)
                problems = check(cal.times)
                if problems:
                    distrust = ", ".join(problems)
                elif os.environ.get("MINISPEC_TRUST_CALIBRATION") is None:
                    distrust = disagreement(cal.times, probe())
        except (OSError, ValueError, AttributeError, TypeError) as e:
            distrust = f"unreadable ({e})"
        if distrust is not None:
            cal = None
    if cal is None:
        cal = measure_checked(what, measure, check)
        if distrust is not None:
            cal.notes.insert(0, f"the stored calibration was distrusted ({distrust}) and measured afresh")
        if disk:
            try:
                data = json.loads(f.read_text()) if f.exists() else {}
                data = data if isinstance(data, dict) else {}
                data[key] = cal.to_json()
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(json.dumps(data, indent=1))
            except (OSError, ValueError, TypeError):
                pass
    _MEMORY[key] = cal
    return cal


def notes_of(calibrations) -> list[str]:
    """The notes of the given calibrations: what was re-measured or distrusted in this process, and why."""
    return [f"{c.what}: {n}" for c in calibrations if c is not None for n in c.notes]
