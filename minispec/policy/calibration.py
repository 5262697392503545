"""Calibration: a measured figure of the cost model, checked, and reused while a probe agrees with it.

A laptop is rarely quiet, and one burst of load during a measurement can move a figure several-fold. Load only
ever slows a pass: interference is one-sided. So a calibration is:

    measured   REPEATS interleaved repeats (every n inside each repeat, so that a burst hits them alike);
               the median, which one burst cannot move
    checked    against physics: every figure > 0; t(n) does not fall below any t(m), m < n, and r(n) <= n, each
               within NOISE. One that fails is measured again, up to TRIES times, and its note says what failed
    kept       in this process's memory, and in a ``Store`` where one is attached (``use_store``): the core keeps
               none on disk; the lab's (harness/calibration_store.py, which the CLI attaches) keeps each key's
               recent calibrations and gives back a low quantile of them, so a busy run cannot raise a quiet one's
               figures
    reused     once per process, after the physics checks and one cheap probe (a few passes of 1 and of n_max
               tokens; one proposal of the drafter): ``reconcile``. A probe faster than the stored figures by more
               than TOLERANCE says they were measured on a busy machine: they are scaled down to it. A slower probe
               leaves the stored figures as they are (its note says whether other processes keep the machine
               busy now, or not: then something else slowed it), and a run that may follow its clock corrects
               them from its own rounds (auto_k.py). Nothing is measured at length again unless the stored figures
               break physics, or ``minispec calibrate`` asks (``fresh``)

``MINISPEC_TRUST_CALIBRATION=1`` uses a stored one without the probe (to repeat a seeded ``k="auto"`` run exactly,
see policy/__init__.py). What is calibrated (a target's t(n), a drafter's guess, a tree level) is costs.py's; how it
is timed, timing.py's. The key names what a figure depends on (``calibration_key``).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ..drafters.protocol import ReportsMemory, TimesItself, TimesItsTreeLevels, has
from ..model import Model, backend, threads
from ..model.cpu import cpu_name

REPEATS = 7  # interleaved repeats of a calibration: the median of 7 moves only when 4 of them are hit
TRIES = 2  # measurements of a calibration that fails a physical check before the last one is repaired
NOISE = 0.15  # the slack of a physical check: t(n+1) >= (1 - NOISE) t(n) and r(n) <= (1 + NOISE) n
TOLERANCE = 0.30  # a probe faster than a stored figure by more than this, relatively, scales it down (reconcile)
BUSY = 0.5  # CPUs other processes keep busy, above which a slower probe is put down to load (reconcile)
PROBE_SLOWER, REMEASURED = "a probe ran slower", "re-measured"  # how the notes that ``disagreed`` reads begin

__all__ = ["Calibration", "Store", "calibrated", "calibration_key", "check_drafter", "check_verify", "forget_in_memory",
           "is_key_of", "notes_of", "reconcile", "attached_store", "use_store"]


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
        """A stored entry, or ValueError naming what is wrong with it (the calibration is then measured afresh)."""
        if not isinstance(entry, dict) or not isinstance(entry.get("times"), dict):
            raise ValueError("stored without a record of when it was measured")
        times = {int(k) if k.isdigit() else k: float(v) for k, v in entry["times"].items()}
        if not all(np.isfinite(v) for v in times.values()):
            raise ValueError("stored with a figure that is not a finite number")
        if float(entry.get("measured_at", 0.0)) > time.time() + 60:  # (bug: kept forever, younger than any other)
            raise ValueError("stored as measured in the future")
        load = entry.get("load")
        return cls(what, times, float(entry.get("measured_at", 0.0)), None if load is None else float(load),
                   [str(n) for n in entry.get("notes", [])], source="stored")


@runtime_checkable
class Store(Protocol):
    """Where calibrations outlive a process (the lab's: harness/calibration_store.py). ``load(key, what)``: the
    figures to reuse for ``key`` (a Calibration of source "stored"), or None; ValueError names what is wrong with
    what it holds. ``save(key, calibration)``: keep this process's figures for ``key``."""

    def load(self, key: str, what: str) -> Calibration | None: ...

    def save(self, key: str, calibration: Calibration) -> None: ...


_MEMORY: dict[str, Calibration] = {}  # calibration_key -> the validated calibration of this process
_STORE: list = [None]  # the attached Store, or None: calibrations live in memory only


def attached_store() -> Store | None:
    return _STORE[0]


def use_store(store: Store | None) -> Store | None:
    """Attach ``store`` (None: memory only) -> the store attached before."""
    if store is not None and not isinstance(store, Store):
        raise TypeError(f"use_store: {type(store).__name__} has no load(key, what) and save(key, calibration)")
    before, _STORE[0] = _STORE[0], store
    return before


def forget_in_memory() -> None:
    """Forget this process's validated calibrations: the next one asked for is read from the file again (or
    measured), as in a new process."""
    _MEMORY.clear()


def calibration_key(what, ns) -> str:
    """What a measurement depends on: what was timed, the device, the kernel and the machine. ``what`` is a model
    (keyed by its name, size and shape) or a drafter that times itself (``TimesItself``, ``TimesItsTreeLevels``:
    keyed by its name, and by its weights' size where it reports them, ``ReportsMemory``: a head replaced in the same
    folder by one of another shape is timed afresh); either declares its ``kernel``. It keys the cache in memory too,
    so that a model loaded again (or a new drafter around the same model) finds the same figures: a seeded run then
    chooses the same K (see ``policy/__init__.py``)."""
    if isinstance(what, Model):
        who = f"{what.name}|{what.weight_bytes}|{what.cfg.num_layers}x{what.cfg.hidden_size}"
    elif has(what, TimesItself) or has(what, TimesItsTreeLevels):
        who = f"{what.name}|{what.weight_bytes if has(what, ReportsMemory) else '-'}|-"
    else:
        raise TypeError(f"calibration_key: {type(what).__name__} is neither a model nor a drafter that times itself")
    return (f"{who}|{backend.DEVICE}|{what.kernel}|{','.join(map(str, ns))}|"
            f"{platform.node()}|{os.cpu_count()}|numpy {np.__version__}|{cpu_name()}|{threads.describe(what.kernel, spin=False)}|"
            f"{tiles(what.kernel)}")


def tiles(kernel: str) -> str:
    """The numba kernel's tiles (``numba_kernel.SUMS``, chosen by the CPU or forced): its speed depends on them."""
    module = sys.modules.get("minispec.model.numba_kernel")  # loaded by any model with that kernel
    return f"tiles {module.SUMS}" if kernel == "numba" and module is not None else "-"


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
    """What a target's t(n) breaks of physics, one line each: a pass over more tokens cannot be cheaper than one over
    fewer, nor dearer than that many passes over one token (each within NOISE). Each t(n) is held against the
    dearest before it, not only its neighbour (bug: falls of 14% a step passed, t(8) under t(1))."""
    ns = sorted(times)
    problems = [f"t({n}) = {times[n]} s is not a positive time" for n in ns if not times[n] > 0]
    if problems:
        return problems
    for i, b in enumerate(ns[1:], 1):
        a = max(ns[:i], key=lambda n: times[n])  # the dearest pass over fewer tokens
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


def reconcile(stored: Calibration, probed: dict) -> Calibration:
    """The stored figures, checked by a probe's (module docstring). Where the probe is faster by more than TOLERANCE,
    every figure is scaled by probe / stored: at a probed figure its own ratio, between probed n's interpolated,
    elsewhere the smallest ratio. Where it is only slower, the stored figures stand. The note says which, in figures."""
    ratios = {k: now / stored.times[k] for k, now in probed.items() if k in stored.times and stored.times[k] > 0 and now > 0}
    if not ratios or min(ratios.values()) >= 1 - TOLERANCE:
        cal = Calibration(stored.what, dict(stored.times), stored.measured_at, stored.load, list(stored.notes), "stored")
        slow = [k for k, r in ratios.items() if r > 1 + TOLERANCE]
        if slow:
            busy = threads.others_busy()  # CPUs other processes keep busy now: is load the cause?
            why = ("" if busy is None else ": the machine is busy now" if busy > BUSY else
                   f", not from load (other processes kept {busy:.2f} CPUs busy)")
            cal.notes.append(f"{PROBE_SLOWER} ({said(slow[0], stored.times[slow[0]], probed[slow[0]])}){why}; the "
                             "stored figures stand")
        return cal
    ns = sorted(k for k in ratios if isinstance(k, int))
    low = min(ratios.values())

    def ratio(k):
        if k in ratios:
            return min(1.0, ratios[k])
        if isinstance(k, int) and ns:
            return min(1.0, float(np.interp(k, ns, [ratios[n] for n in ns])))
        return min(1.0, low)

    first = min(ratios, key=ratios.get)
    note = (f"the stored figures were slower than a probe now ({said(first, stored.times[first], probed[first])}): "
            "scaled to it")
    times = {k: v * ratio(k) for k, v in stored.times.items()}
    if all(isinstance(k, int) for k in times) and check_verify(times):
        # Ratios that differ by n, interpolated between, can break physics where the stored figures did not (before
        # this check, a probe that found t(1) as stored and t(8) 60% faster left t(8) under t(1), and K = 8 was
        # chosen). Then every figure is scaled by the probe's smallest change, which keeps the stored r(n).
        one = min(1.0, max(ratios.values()))
        note += f"; scaled apart they broke the checks ({', '.join(check_verify(times))}), so all by {one:.2f}"
        times = {k: v * one for k, v in stored.times.items()}
    return Calibration(stored.what, times, time.time(), load_per_core(), [note], "stored")


def said(k, was: float, now: float) -> str:
    label = f"t({k})" if isinstance(k, int) else k
    return f"{label} stored {1e3 * was:.2f} ms, a probe now {1e3 * now:.2f} ms"


def measure_checked(what: str, measure, check) -> Calibration:
    """``measure()`` until ``check`` finds nothing wrong, at most TRIES times; a target's t(n) that never passes is
    repaired so that it does (made non-decreasing, then r(n) = t(n) / t(1) cut to n) and says so: what one process
    settles on, and saves, must pass the check that another applies when it loads it (bug: a busy machine's r(n) > n
    was kept here and distrusted there, so two seeded runs at T > 0 measured different costs and drew differently)."""
    notes = []
    for _ in range(TRIES):
        load = load_per_core()
        times = measure()
        problems = check(times)
        if not problems:
            return Calibration(what, times, load=load, notes=notes)
        notes.append(f"{REMEASURED}: {', '.join(problems)}")
    if all(isinstance(n, int) for n in times):
        repair_verify(times)
        notes.append(f"kept after {TRIES} tries with t(n) made non-decreasing and r(n) at most n")
    return Calibration(what, times, load=load, notes=notes)


def repair_verify(times: dict) -> None:
    """Make a target's t(n) pass ``check_verify``, in place: non-decreasing in n, then r(n) = t(n) / t(1) cut to n
    (non-decreasing still: both bounds are)."""
    floor = 0.0
    for n in sorted(times):
        floor = times[n] = max(times[n], floor)
    if 1 in times:
        times.update({n: min(times[n], n * times[1]) for n in times})


def calibrated(key: str, what: str, measure, check, probe, names, fresh: bool = False) -> Calibration:
    """The calibration under ``key``: from memory; else from the attached store, checked against physics and
    reconciled with one cheap probe (``probe()`` -> some of its figures); else, or when the stored figures break
    physics or lack one of ``names`` (the figures ``measure()`` gives), measured (``measure_checked``). What this
    process settles on is saved to the store. ``fresh``: measure afresh whatever is stored (``minispec calibrate``)."""
    if key in _MEMORY and not fresh:
        return _MEMORY[key]
    store = _STORE[0]
    cal, distrust = None, None
    if store is not None and not fresh:
        try:
            stored = store.load(key, what)
            problems = [] if stored is None else [f"no figure for {n}" for n in names if n not in stored.times] + \
                check(stored.times)  # (bug: a store without some figures was trusted, and the policy failed on it)
            if problems:
                distrust = ", ".join(problems)
            elif stored is not None:
                cal = stored if os.environ.get("MINISPEC_TRUST_CALIBRATION") else reconcile(stored, probe())
        except (OSError, ValueError, AttributeError, TypeError) as e:
            distrust = f"unreadable ({e})"
    if cal is None:
        cal = measure_checked(what, measure, check)
        if distrust is not None:
            cal.notes.insert(0, f"the stored calibration was distrusted ({distrust}) and measured afresh")
    if store is not None and (cal.source == "measured" or cal.notes):
        try:
            store.save(key, cal)
        except OSError:
            pass  # a read-only cache: the figures stay in memory
    _MEMORY[key] = cal
    return cal


def notes_of(calibrations) -> list[str]:
    """The notes of the given calibrations: what was re-measured or distrusted in this process, and why."""
    return [f"{c.what}: {n}" for c in calibrations if c is not None for n in c.notes]


def disagreed(calibrations) -> bool:
    """Whether this process's timings disagreed with each other: a probe ran slower than the stored figures, or a
    measurement broke physics and was taken again. Either is a sign of load, whatever the load average says."""
    return any(n.startswith((PROBE_SLOWER, REMEASURED)) for c in calibrations if c is not None for n in c.notes)
