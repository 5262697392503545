"""Run mutmut (PyPI) over the core and write what it found as JSON (docs/mutation/mutmut.json).

    pip install -e ".[dev,mutation]"
    python scripts/mutmut_report.py --json docs/mutation/mutmut.json       # every group
    python scripts/mutmut_report.py --json docs/mutation/mutmut.json --groups rule,cache   # run these again

pyproject.toml's [tool.mutmut] section holds mutmut's settings: the files to mutate (the rule, the tree, the
warps, the loops, the KV cache and the drafters), the default suite's fast files, the tests left out and the
lines not mutated. mutmut copies the tree to mutants/, plants every mutant behind a switch in each function,
records which tests call which function, and runs only those tests for each mutant (fastest first, stopping at
the first failure). A mutant that survives costs every test that calls its function: the warps are called by
150 tests (three minutes). One run over everything at once was stopped after 863 of its 2,907 mutants in about
20 minutes, the costly ones (run last) still to come. This script runs it file group by file group (GROUPS),
each in a scratch copy of the committed tree (HEAD: the report names a commit, and what is not committed is not
in it) and against the test files that exercise the group directly: minutes each.

The JSON holds each group's provenance (commit, date, time), the counts per file and status, and every mutant
that was not detected, with the words it changed. Detected mutants (killed, or stopped by the time limit) are
counted, not listed (the tracked tree has a size limit); ``mutmut show NAME`` in a group's scratch copy prints
any of them. docs/mutation/equivalent.json must give each survivor a reason, keyed ``file function: the words
changed`` (no line or mutant number: both move when the code moves; doc_figures.survivor_key). The docs test
refuses a survivor without one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import tomllib

GROUPS = {  # name: (files mutated, test files run against them)
    "rule": (["rejection.py", "sampling.py", "tree.py"],
             ["test_rejection.py", "test_block.py", "test_sampling.py", "test_tree.py", "test_exact_loop.py", "test_eagle.py"]),
    "cache": (["model/kvcache.py"], ["test_model.py", "test_tree.py", "test_exact_loop.py"]),
    "loops": (["speculative.py", "rounds.py", "textbook.py"],
              ["test_speculative.py", "test_textbook.py", "test_exact_loop.py", "test_tree.py", "test_eagle.py", "test_seeds.py"]),
    "drafters": (["drafters/draft_model.py", "drafters/prompt_lookup.py"],  # (test_untrusted's CLI tests fail under mutmut)
                 ["test_speculative.py", "test_exact_loop.py", "test_tree.py", "test_eagle.py", "test_adaptive.py"]),
    "eagle": (["drafters/eagle.py"], ["test_eagle.py"]),
    "crossvocab": (["drafters/crossvocab.py", "drafters/tli.py", "drafters/slem.py"], ["test_crossvocab.py"]),
}
NOT_KILLED = ("survived", "no tests", "suspicious", "segfault", "skipped")  # a timeout counts as detected


def changed_lines(diff: str) -> tuple[str, str]:
    """A unified diff of one function -> (old lines, new lines), each stripped and joined by ' / '."""
    old = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    new = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    return " / ".join(old), " / ".join(new)


def change(old: str, new: str, context: int = 24) -> str:
    """The words of a line that a mutant changed, with a little context: 'x if q > 0 else' -> 'x if q >= 0 else'
    reads 'x if q [>] 0 else -> [>=]'."""
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[len(old) - 1 - end] == new[len(new) - 1 - end]:
        end += 1
    while start > 0 and not old[start - 1].isspace():  # whole words: '[>] -> [>=]', not '>[] -> [=]'
        start -= 1
    while end > 0 and not old[len(old) - end].isspace():
        end -= 1
    lo, hi = max(0, start - context), end - context if end > context else 0
    before, after = old[lo:start], old[len(old) - end: len(old) - hi] if end else ""
    cut_old, cut_new = old[start: len(old) - end], new[start: len(new) - end]
    return (("…" if lo else "") + f"{before}[{cut_old}]{after}" + ("…" if hi else "") + f" -> [{cut_new}]")


def function_of(name: str) -> str:
    """mutmut's mangled name -> Class.method or function: 'minispec.tree.x_sample_tree__mutmut_3' -> 'sample_tree',
    'minispec.model.kvcache.xǁKVCacheǁcrop__mutmut_1' -> 'KVCache.crop'."""
    stem = name.rsplit("__mutmut_", 1)[0].rsplit(".", 1)[-1]
    if stem.startswith("xǁ"):
        return ".".join(stem[2:].split("ǁ"))
    return stem[2:] if stem.startswith("x_") else stem


def collect() -> dict:
    """Read mutants/**/*.meta (mutmut's results) in the current directory."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code

    files, survivors = {}, []
    for meta in sorted(Path("mutants").rglob("*.py.meta")):
        source = meta.relative_to("mutants").with_suffix("")  # mutants/minispec/tree.py.meta -> minispec/tree.py
        data = json.loads(meta.read_text())
        counts: dict[str, int] = {}
        for name, code in sorted(data["exit_code_by_key"].items()):
            status = status_by_exit_code[code]
            counts[status] = counts.get(status, 0) + 1
            if status in NOT_KILLED:
                old, new = changed_lines(get_diff_for_mutant(name, path=source))
                survivors.append({"file": str(source), "function": function_of(name), "change": change(old, new),
                                  "status": status, "mutant": name.rsplit("__mutmut_", 1)[1]})
        files[str(source)] = counts
    return {"files": files, "survivors": survivors}


def group_config(base: str, files, tests) -> str:
    """pyproject.toml with its [tool.mutmut] section (the file's last) narrowed to one group."""
    head, sep, _ = base.partition("[tool.mutmut]")
    if not sep:
        raise ValueError("pyproject.toml has no [tool.mutmut] section")
    settings = dict(tomllib.loads(base)["tool"]["mutmut"], only_mutate=["minispec/" + f for f in files],
                    pytest_add_cli_args_test_selection=["tests/" + f for f in tests])
    return head + sep + "\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())  # JSON strings are TOML's


def run_group(name: str, scratch: Path, max_children: int) -> tuple[dict, float]:
    """Export the committed tree (HEAD) to scratch/name, narrow the config to the group, run mutmut there, collect."""
    files, tests = GROUPS[name]
    where = scratch / name
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    (where / "pyproject.toml").write_text(group_config((where / "pyproject.toml").read_text(), files, tests))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")  # one BLAS thread per mutant
    start = time.perf_counter()
    with open(where / "mutmut.log", "w") as log:
        done = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children)], cwd=where,
                              env=env, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = (where / "mutmut.log").read_text(errors="replace")[-2000:]
        sys.exit(f"group {name}: mutmut run exited with {done.returncode}; the end of {where / 'mutmut.log'}:\n{tail}")
    here = os.getcwd()
    os.chdir(where)
    try:
        return collect(), seconds
    finally:
        os.chdir(here)


def dumps(report: dict) -> str:
    """The report as JSON, one survivor a line."""
    head = json.dumps({k: v for k, v in report.items() if k != "survivors"}, indent=1, ensure_ascii=False)
    rows = ",\n".join(json.dumps(s, ensure_ascii=False) for s in report["survivors"])
    return head[:-2] + ',\n "survivors": [\n' + rows + "\n ]\n}\n"


def commit() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="where to write the report")
    ap.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated, of {', '.join(GROUPS)} (default all)")
    ap.add_argument("--scratch", default="/tmp/minispec-mutmut", help="where the groups' copies go (default %(default)s)")
    ap.add_argument("--max-children", type=int, default=2, help="mutants tested at once (default 2, this machine's cores)")
    args = ap.parse_args(argv)
    if not Path("pyproject.toml").is_file() or "[tool.mutmut]" not in Path("pyproject.toml").read_text():
        sys.exit("run this from the repository root: pyproject.toml's [tool.mutmut] holds mutmut's settings")
    if args.max_children < 1:
        sys.exit(f"--max-children must be at least 1, got {args.max_children}")
    groups = [g for g in args.groups.split(",") if g]
    unknown = [g for g in groups if g not in GROUPS]
    if unknown or not groups:
        sys.exit(f"--groups: unknown {unknown or 'none given'}; the groups are {', '.join(GROUPS)}")
    from importlib.metadata import version

    out = Path(args.json)
    try:
        report = json.loads(out.read_text()) if out.exists() else {"groups": {}, "files": {}, "survivors": []}
    except json.JSONDecodeError as e:
        sys.exit(f"{out}: not a report this script wrote ({e}); give another --json or remove it")
    if not (isinstance(report, dict) and {"groups", "files", "survivors"} <= set(report)):
        sys.exit(f"{out}: not a report this script wrote (no groups, files and survivors); give another --json")
    report["provenance"] = {"tool": f"mutmut {version('mutmut')}",
                            "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}",
                            "max_children": args.max_children}
    for g in groups:  # a group run again replaces its own results; the others stay as they were
        print(f"group {g}: {', '.join(GROUPS[g][0])} against {', '.join(GROUPS[g][1])}", flush=True)
        found, seconds = run_group(g, Path(args.scratch), args.max_children)
        mine = {"minispec/" + f for f in GROUPS[g][0]}
        report["groups"][g] = {"files": GROUPS[g][0], "tests": GROUPS[g][1], "seconds": round(seconds),
                               "commit": commit(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                               "command": "python scripts/mutmut_report.py " + " ".join(argv if argv is not None else sys.argv[1:])}
        report["files"] = {f: c for f, c in report["files"].items() if f not in mine} | found["files"]
        report["survivors"] = [s for s in report["survivors"] if s["file"] not in mine] + found["survivors"]
        n = {s: sum(c.get(s, 0) for c in found["files"].values()) for s in ("killed", "survived")}
        print(f"  {sum(sum(c.values()) for c in found['files'].values())} mutants, {n['killed']} killed, "
              f"{n['survived']} survived, {seconds:.0f} s", flush=True)
        out.write_text(dumps(report))  # after each group: a stop loses one
    total = {}
    for counts in report["files"].values():
        for status, n in counts.items():
            total[status] = total.get(status, 0) + n
    if total.get("not checked"):
        sys.exit(f"{total['not checked']} mutants were not checked: a run did not finish (run its group again)")
    print(f"{sum(total.values())} mutants: " + ", ".join(f"{n} {s}" for s, n in sorted(total.items())) + f" -> {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
