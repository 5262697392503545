"""How minispec fares on a busy machine: a target step and README's main command, quiet and beside two busy
processes, on this machine only.

    python -m minispec.harness.busy_bench [--json docs/busy/contention.json] [--skip-readme]

Busy means two processes that spin a CPU each (``while True: pass``), which this script starts and stops itself,
bounded by a time limit. Quiet means nothing else runs: before the quiet measurements it waits (up to ``--settle``
seconds) for the 1-minute load average to fall below QUIET_LOAD, and it records the load before and after each part;
a part whose load says otherwise, or a README run that itself said the machine was busy, is recorded as
``"quiet": false``, never called quiet.

- ``steps``: the median seconds of one target step (SmolLM2-135M, one token after 64, ``--repeats`` steps) for each
  kernel and thread count (OpenBLAS's for numpy, numba's for numba), each in a child process of its own started with
  that count, quiet and busy. Their ratio, busy / quiet, is what a thread policy must keep near 2 (two spinners on two
  cores leave a run about half of them), not 30. ``--numba-spins 0,10000,...`` adds one numba row on every core per
  figure, its child run with libgomp's ``GOMP_SPINCOUNT`` set to it: how many turns a waiting OpenMP thread spins
  before it sleeps. The other numba rows run with the kernel's own, ``numba_kernel.SPIN``, which each child chooses
  from the machine's load when it starts (``threads.chosen_spin``: a row's quiet and busy parts may differ; each
  records its ``spin``); 300000 is libgomp's default. The row ``numba, policy`` gives its child no thread count: the
  thread policy's own (model/threads.py), each part recording its ``threads``. Every step child runs without the caller's
  ``GOMP_SPINCOUNT``, ``OMP_WAIT_POLICY`` and thread counts, so that a row measures what it names.
- ``readme``: README's main command (read from README.md, so that it is the command a user copies), with a store of
  calibrations of its own: a first run (which measures the cost model once), then a second, quiet; then a second
  again beside the two busy processes. Wall-clock seconds of each, and the line it printed about the cost model.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..model.threads import SPIN_MARK
from .measure import load_average
from .provenance import provenance

QUIET_LOAD = 0.5  # a 1-minute load average below this, before a part starts, is a quiet machine (the bound
# threads.QUIET puts on other processes' CPUs when numba's spin is chosen)
STEP = """
import os, sys, time, numpy as np
from minispec.model import load_model
m = load_model(sys.argv[1], kernel=sys.argv[2])
rng = np.random.default_rng(0)
cache = m.new_cache(128)
m.forward(rng.integers(0, m.cfg.vocab_size, 64), cache)
ts = []
for _ in range(int(sys.argv[3]) + 3):
    cache.crop(64)
    t0 = time.perf_counter()
    m.forward([7], cache)
    ts.append(time.perf_counter() - t0)
from minispec.model import threads
print(float(np.median(ts[3:])), os.environ.get("GOMP_SPINCOUNT", "-"), threads.chosen(sys.argv[2]))
"""


def load() -> float | None:
    got = load_average()
    return None if got is None else round(got, 2)


class Busy:
    """Two CPU-spinning child processes, each ended after ``limit`` seconds at the latest."""

    def __init__(self, n: int = 2, limit: float = 900):
        self.n, self.limit, self.procs = n, limit, []

    def __enter__(self):
        code = f"import time\nend = time.time() + {self.limit}\nwhile time.time() < end: pass"
        self.procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(self.n)]
        time.sleep(1.0)  # let them start spinning
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def settle(limit: float) -> float | None:
    """Wait until the load average falls below QUIET_LOAD, at most ``limit`` seconds -> the load then."""
    end = time.time() + limit
    while (now := load()) is not None and now >= QUIET_LOAD and time.time() < end:
        print(f"\r[busy_bench: waiting for a quiet machine, load {now:.2f}]", end="", file=sys.stderr, flush=True)
        time.sleep(5)
    print(file=sys.stderr)
    return load()


def part(fn, busy: bool):
    """Run ``fn()`` quiet or beside the busy processes -> its record, with the load before and after."""
    before = load()
    if busy:
        with Busy():
            got = fn()
    else:
        got = fn()
    after = load()  # (bug: a run that itself printed "busy" was called quiet on a load of 0.48 before it)
    quiet = before is not None and before < QUIET_LOAD and not got.get("said_busy", False)
    return dict(got, load_before=before, load_after=after, quiet=None if busy else quiet)


def step_run(model_dir: Path, kernel: str, threads: int | None, repeats: int, spin: int | None = None) -> dict:
    """{seconds: the median seconds of a target step in a child process on ``threads`` (None: the thread policy's own
    choice, made in the child, model/threads.py), spin: the GOMP_SPINCOUNT its numba ran with (None for NumPy), threads:
    the count it ran on}; ``spin``: the GOMP_SPINCOUNT to give it (None: the kernel's own choice, numba_kernel.SPIN, made
    in the child from the machine's load)."""
    env = dict(os.environ)
    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", SPIN_MARK, "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                 "NUMBA_NUM_THREADS", "MINISPEC_THREADS"):
        env.pop(name, None)
    if threads is not None:
        env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads), NUMBA_NUM_THREADS=str(threads),
                   MINISPEC_THREADS=str(threads))
    if spin is not None:
        env["GOMP_SPINCOUNT"] = str(spin)
    out = subprocess.run([sys.executable, "-c", STEP, str(model_dir), kernel, str(repeats)], env=env, capture_output=True,
                         text=True, timeout=600)
    if out.returncode:
        raise RuntimeError(f"a step child failed: {out.stderr.strip()[-500:]}")
    seconds, used, count = out.stdout.split()
    return dict(seconds=float(seconds), spin=None if used == "-" else int(used), threads=int(count))


def readme_command(readme: Path) -> list[str]:
    """The main command of README.md's "Two commands": the ``minispec generate`` after ``pip install ... &&``."""
    m = re.search(r"^pip install -e \"\.\[gguf\]\" && (minispec generate .+)$", readme.read_text(), re.M)
    if m is None:
        raise ValueError(f"{readme}: no `pip install -e \".[gguf]\" && minispec generate ...` line")
    return shlex.split(m.group(1))


def timed_run(cmd: list[str], env: dict) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - t0
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {out.stderr.strip()[-500:]}")
    lines = out.stderr.splitlines()
    summary = lines[-1] if lines else ""
    return dict(seconds=round(seconds, 2), cost_model=next((x for x in lines if x.startswith("[cost model:")), None),
                summary=summary, said_busy="the machine was busy" in summary)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minispec.harness.busy_bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None, help="write the record here (with its provenance)")
    ap.add_argument("--repeats", type=int, default=40, help="target steps per child (default 40)")
    ap.add_argument("--settle", type=float, default=240, help="seconds to wait for a quiet machine (default 240)")
    ap.add_argument("--skip-readme", action="store_true", help="only the target steps")
    ap.add_argument("--readme-only", action="store_true",
                    help="only README's command; the steps are kept from the --json file, with their provenance")
    ap.add_argument("--kernels", default="numpy,numba")
    ap.add_argument("--numba-spins", default="", help="numba rows on every core with GOMP_SPINCOUNT set to each of "
                    "these whole numbers too (comma-separated; default none: only the kernel's own, numba_kernel.SPIN)")
    a = ap.parse_args(argv)
    try:
        spins = [int(x) for x in a.numba_spins.split(",") if x.strip()]
    except ValueError:
        print(f"error: --numba-spins takes whole numbers separated by commas, got {a.numba_spins!r}", file=sys.stderr)
        return 2
    if any(x < 0 for x in spins):
        print(f"error: --numba-spins must not be negative, got {a.numba_spins!r}", file=sys.stderr)
        return 2
    if spins and (a.readme_only or "numba" not in a.kernels.split(",")):
        print("error: --numba-spins measures numba steps: it needs numba in --kernels, and no --readme-only",
              file=sys.stderr)
        return 2
    from ..model.kernel import check_kernel
    from ..recipes.fetch import resolve_model

    kernels = [k for k in a.kernels.split(",") if k]
    for k in kernels:
        check_kernel(k)
    kept = None
    if a.readme_only:  # checked before the wait for a quiet machine (bug: after it, minutes)
        if not (a.json and Path(a.json).exists()):
            print("error: --readme-only keeps the steps of an existing --json file", file=sys.stderr)
            return 2
        old = json.loads(Path(a.json).read_text())
        kept = dict(steps=old["steps"], steps_provenance=old.get("steps_provenance", old["provenance"]))
        kernels = []
    model_dir = resolve_model(None)
    record = dict(settled_load=settle(a.settle), steps={}, readme=None)
    record.update(kept or {})
    threads = sorted({1, os.cpu_count() or 1})
    rows = [(kernel, n, None) for kernel in kernels for n in [*threads, *[None] * (kernel == 'numba')]]  # None: the
    # policy's own count and spin, as a user runs it (numpy's is cores - 1 threads: a row above)
    rows += [("numba", threads[-1], spin) for spin in spins if "numba" in kernels]
    for kernel, n, spin in rows:
        name = f"{kernel}, {'policy' if n is None else f'{n} thread(s)'}" + ("" if spin is None else f", GOMP_SPINCOUNT={spin}")
        row = {}
        for busy in (False, True):
            print(f"[busy_bench: a step of {name}, {'busy' if busy else 'quiet'}]", file=sys.stderr)
            row["busy" if busy else "quiet"] = part(
                lambda kernel=kernel, n=n, spin=spin: step_run(model_dir, kernel, n, a.repeats, spin),
                busy)
            if busy:
                settle(a.settle)
        row["busy_over_quiet"] = round(row["busy"]["seconds"] / row["quiet"]["seconds"], 2)
        record["steps"][name] = row
    if not a.skip_readme:
        cmd = readme_command(Path(__file__).resolve().parents[2] / "README.md")
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, MINISPEC_CACHE=d)
            env.pop("MINISPEC_NO_CALIBRATION_CACHE", None)
            runs = {}
            print("[busy_bench: README's main command, first run (measures the cost model)]", file=sys.stderr)
            settle(a.settle)  # (bug: it began as the busy steps' spinners ended)
            runs["first, quiet"] = part(lambda: timed_run(cmd, env), False)
            print("[busy_bench: README's main command, second run]", file=sys.stderr)
            settle(a.settle)
            runs["second, quiet"] = part(lambda: timed_run(cmd, env), False)
            print("[busy_bench: README's main command, second run beside two busy processes]", file=sys.stderr)
            runs["second, busy"] = part(lambda: timed_run(cmd, env), True)
        record["readme"] = dict(command=cmd, runs=runs)
    record["provenance"] = provenance(argv, "python -m minispec.harness.busy_bench")
    text = json.dumps(record, indent=1)
    print(text)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
