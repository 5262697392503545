"""Sections of README and docs/ generated from the committed measurements, so that a figure has one source.

A generated section sits between two markers in a Markdown file:

    <!-- generated: level4 -->
    ... (the table, written by ``python -m minispec.harness.docs_tables``) ...
    <!-- end: level4 -->

``python -m minispec.harness.docs_tables`` rewrites every section from its JSON; ``--check`` only compares, and
exits 1 naming the stale sections (tests/test_docs_tables.py runs the comparison, so a new measurement cannot
leave old numbers behind).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEVEL4 = ["draft", "eagle", "tli", "slem", "block"]  # docs/level4_<kind>.json, in this order when present


def _p(x: float) -> str:
    return f"{x:.2g}"


def level4_table(root: Path = ROOT) -> str:
    rows = ["| drafter (rule) | paired runs | real rule: p (per statistic; combined) | broken twin: combined p | "
            "greedy identical | time | run |", "|---|---|---|---|---|---|---|"]
    for kind in LEVEL4:
        f = root / "docs" / f"level4_{kind}.json"
        if not f.is_file():
            continue
        r = json.loads(f.read_text())
        s = r["sampling"]
        stats = ", ".join(f"{k} {_p(s[k]['p_value'])}" for k in ("tokens", "acceptance", "prefix") if k in s)
        twins = []
        for key, label in (("sampling_broken_rule", r["sampling_broken_rule"]["rule"]),
                           ("sampling_trusted_boundary", "boundary token trusted by prefix")):
            if key in r:
                t = r[key]
                twins.append(f"{label}: {_p(t['p_value'])} ({'caught' if not t['passed'] else 'NOT caught'})")
        greedy = "; ".join(f"{g['drafter']} {g['identical']}/{g['prompts']}" for g in r["greedy"]) or "in the run above"
        prov = r.get("provenance")
        run = f"{prov['date'][:10]}, {str(prov['commit'] or '?')[:7]}" if prov else f"committed in {added_in(f)}"
        rows.append(f"| {s['drafter']} ({s['rule']}) | {s['tokens']['runs']} | {stats}; **{_p(s['p_value'])}** "
                    f"({'PASS' if s['passed'] else 'FAIL'}) | {'; '.join(twins)} | {greedy} | "
                    f"{r['seconds'] / 60:.0f} min | [{run}](docs/level4_{kind}.json) |")
    return "\n".join(rows)


def added_in(f: Path) -> str:
    """An older result without provenance: the commit (and day) that added it."""
    import subprocess

    try:
        out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%h %cs", "--", str(f)], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return f"{out[-2]}, {out[-1]}" if len(out) >= 2 else "?"


SECTIONS = {"level4": level4_table}
FILES = ["README.md"]


def render(text: str, root: Path = ROOT) -> str:
    def fill(m):
        return f"{m.group(1)}\n{SECTIONS[m.group(2)](root)}\n{m.group(3)}"
    return re.sub(r"(<!-- generated: (\w+) -->)\n(?:.*?\n)?(<!-- end: \2 -->)", fill, text, flags=re.S)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stale = []
    for name in FILES:
        f = ROOT / name
        text = f.read_text()
        new = render(text)
        if new != text:
            stale.append(name)
            if "--check" not in argv:
                f.write_text(new)
    if "--check" in argv and stale:
        print(f"stale generated sections in: {', '.join(stale)} (run python -m minispec.harness.docs_tables)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
