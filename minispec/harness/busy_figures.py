"""The figures of a busy machine and of the examples' run times (docs/busy/contention.json,
docs/examples/times.json), for ``docs_tables``: the thread policy's table, README's main command quiet and busy,
and each example's run time."""

from __future__ import annotations

from pathlib import Path

from .doc_figures import load, run_line

BUSY, EXAMPLES = "docs/busy/contention.json", "docs/examples/times.json"


def busy_steps(root: Path) -> str:
    """One target step per kernel and thread count, quiet and beside two busy processes."""
    d = load(root, BUSY)
    lines = ["| kernel, threads | quiet | beside two busy processes | busy / quiet |", "|---|---|---|---|"]
    for name, r in d["steps"].items():
        quiet = f"{1e3 * r['quiet']['seconds']:.1f} ms" + ("" if r["quiet"]["quiet"] else " (load said busy)")
        if name == "numba, policy":  # the thread policy's own count, chosen from the load (busy_bench)
            name += f" ({r['quiet'].get('threads')} thread(s) quiet, {r['busy'].get('threads')} busy)"
        if name.startswith("numba") and "GOMP_SPINCOUNT" not in name and not name.startswith("numba, 1 "):
            name += spin_note(d, r)
        lines.append(f"| {name} | {quiet} | {1e3 * r['busy']['seconds']:.1f} ms | {r['busy_over_quiet']:.2f}x |")
    origin = dict(provenance=d.get("steps_provenance", d["provenance"]))
    return "\n".join(lines) + f"\n\n*{run_line(origin)}; one SmolLM2-135M step, one token after 64, median of the run's steps.*"


def spin_note(d: dict, r: dict) -> str:
    """What a numba row that names no spin ran with, the kernel's own: one ``numba_spin`` for the whole run (files
    written before the spin was chosen from the machine's load, commit b1f0ba9), else each part's ``spin``."""
    if "numba_spin" in d:
        return f", GOMP_SPINCOUNT={d['numba_spin']} (numba_kernel.SPIN at the run's commit)"
    quiet, busy = r["quiet"].get("spin"), r["busy"].get("spin")
    if quiet is None or busy is None:
        return ""
    return f", the kernel's own spin (GOMP_SPINCOUNT={quiet} quiet, {busy} busy)"


def readme_runs(root: Path) -> str:
    d = load(root, BUSY)
    runs = (d.get("readme") or {}).get("runs") or {}
    lines = ["| README's main command | seconds | load before | quiet |", "|---|---|---|---|"]
    for name, r in runs.items():
        quiet = "-" if r["quiet"] is None else "yes" if r["quiet"] else "no"
        lines.append(f"| {name} | {r['seconds']:.1f} | {r['load_before']} | {quiet} |")
    return "\n".join(lines) + f"\n\n*{run_line(d)}.*"


def examples_table(root: Path) -> str:
    d = load(root, EXAMPLES)
    lines = ["| example | what it shows | seconds |", "|---|---|---|"]
    for name, r in d["examples"].items():
        if r.get("returncode", 0) != 0:  # (bug: a failed run's seconds were shown as the example's time)
            raise ValueError(f"{EXAMPLES}: {name} failed (returncode {r.get('returncode')}): its seconds are no time")
        note = "" if r["quiet"] else " (busy)"
        lines.append(f"| [`{name}`](../examples/{name}) | {r['what']} | {seconds(r['seconds'])}{note} |")
    return "\n".join(lines) + f"\n\n*{run_line(d)}: each run alone, after the load average fell below 0.5.*"


def seconds(s: float) -> str:
    return f"{s:.1f}" if s < 10 else f"{s:.0f}"


SECTIONS = {"busy_steps": busy_steps, "readme_runs": readme_runs, "examples": examples_table}


def values(root: Path) -> dict[str, str]:
    out = {}
    if (root / BUSY).exists():
        runs = (load(root, BUSY).get("readme") or {}).get("runs") or {}
        for key, name in (("first", "first, quiet"), ("second", "second, quiet"), ("busy", "second, busy")):
            if name in runs:
                out[f"busy.readme.{key}"] = f"{runs[name]['seconds']:.0f} s"
        out["busy.machine"] = load(root, BUSY)["provenance"]["machine"].get("cpu", "?")
        for name, r in load(root, BUSY)["steps"].items():  # "numpy, 1 thread(s)" -> busy.numpy.1
            parts = [x.strip() for x in name.split(",")]  # a third part: "GOMP_SPINCOUNT=N" -> busy.numba.2.spin.N
            key = f"busy.{parts[0]}.{parts[1].split()[0]}" + "".join(f".spin.{x.split('=')[1]}" for x in parts[2:])
            out[key] = f"{r['busy_over_quiet']:.1f}x"
            out[key + ".quiet"] = f"{1e3 * r['quiet']['seconds']:.1f} ms"
    if (root / EXAMPLES).exists():
        ex = load(root, EXAMPLES)["examples"]
        if "00_tiny_loop.py" in ex:
            out["examples.tiny"] = f"{seconds(ex['00_tiny_loop.py']['seconds'])} s"
    return out
