"""How long each example takes on this machine, measured quiet, for the list of examples (docs/reading.md).

    python -m minispec.harness.example_times [--json docs/examples/times.json] [--only 00,03]

Runs every ``examples/NN_*.py`` with its default arguments as a child process, one after another, each after the
machine has settled (busy_bench.settle: the 1-minute load average below QUIET_LOAD, waited for up to ``--settle``
seconds), and records its wall-clock seconds, the load before and after, and whether it ran quiet. The first run of
an example that needs SmolLM2 assumes it is converted already (``minispec fetch smollm2``); the calibrations the
examples store go to a temporary cache, so every run starts from the same state.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .busy_bench import QUIET_LOAD, load, settle
from .provenance import provenance

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 1800  # seconds an example may run


def first_line(path: Path) -> str:
    text = path.read_text()
    return text.split('"""', 2)[1].strip().splitlines()[0] if text.startswith('"""') else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minispec.harness.example_times", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None, help="write the record here (with its provenance)")
    ap.add_argument("--only", default=None, help="comma-separated example numbers (default: every example)")
    ap.add_argument("--settle", type=float, default=240)
    a = ap.parse_args(argv)
    files = sorted((ROOT / "examples").glob("[0-9][0-9]_*.py"))
    if a.only:
        wanted = {x.strip().zfill(2) for x in a.only.split(",")}
        files = [f for f in files if f.name[:2] in wanted]
    if not files:
        print("error: no example to run", file=sys.stderr)
        return 2
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, MINISPEC_CACHE=cache)
        for f in files:
            settle(a.settle)
            before = load()
            print(f"[example_times: {f.name}]", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            try:
                run = subprocess.run([sys.executable, str(f)], cwd=ROOT, env=env, capture_output=True, text=True,
                                     timeout=TIMEOUT)
                code, said = run.returncode, run.stderr.strip()[-300:]
            except subprocess.TimeoutExpired:  # (bug: raised, and every time measured before was lost)
                code, said = None, f"still running after {TIMEOUT} s: stopped"
            seconds = time.perf_counter() - t0
            out[f.name] = dict(seconds=round(seconds, 1), what=first_line(f), returncode=code,
                               load_before=before, load_after=load(),
                               quiet=before is not None and before < QUIET_LOAD)
            if code != 0:
                print(f"[example_times: {f.name} failed: {said}]", file=sys.stderr)
    record = dict(examples=out, provenance=provenance(argv, "python -m minispec.harness.example_times"))
    text = json.dumps(record, indent=1)
    print(text)
    failed = [name for name, r in out.items() if r["returncode"] != 0]
    if failed:  # (bug: a failed example's seconds were written to --json, and shown in docs/reading.md as its time)
        print(f"error: {', '.join(failed)} failed: --json {a.json} not written" if a.json else
              f"error: {', '.join(failed)} failed", file=sys.stderr)
        return 1
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(a.json).with_suffix(".tmp")
        tmp.write_text(text + "\n")
        tmp.replace(a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
