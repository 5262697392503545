"""Mutation testing of the core: plant one small bug at a time and see whether the fast tests notice.

    python scripts/mutation.py minispec/rejection.py [more files] [--tests FILES] [--sample N] [--json OUT]
    python scripts/mutation.py minispec/tree.py --tests FILES --only "line 140: upper + 1"   (one survivor again)
    python scripts/mutation.py --report OUT      (the summary, as markdown)

Each mutant changes one node of the file's syntax tree:
  compare   < <-> <=, > <-> >=, == <-> !=, in <-> not in
  binop     + <-> -, * <-> /, // -> /
  number    an integer constant n -> n + 1 (0 -> 1, 1 -> 2, ...), a float c -> c * 1.5 (not 0.0)
  call      min <-> max, any <-> all
  bool      and <-> or; `not x` -> x
  slice     a[i:j] -> a[i:j + 1] (j present), a[i:] -> a[i + 1:]
The checkout's minispec/ and tests/ are copied to a scratch directory and each mutant is written there (the
checkout is never touched), and the test files run there with pytest -x; a mutant is killed when they fail, or
time out. Docstrings are not mutated. The report
lists each survivor with its line, so that it can be killed by a test or argued equivalent (docs/mutation.md).
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SWAP_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
            ast.In: ast.NotIn, ast.NotIn: ast.In}
SWAP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div}
SWAP_CALL = {"min": "max", "max": "min", "any": "all", "all": "any"}


def docstring_nodes(tree) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def mutation_points(tree) -> list[tuple[int, str, str]]:
    """(index of the node in ast.walk order, kind, description) for every mutation of the tree."""
    skip, out = docstring_nodes(tree), []
    for i, node in enumerate(ast.walk(tree)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare):
            for j, op in enumerate(node.ops):
                if type(op) in SWAP_CMP:
                    out.append((i, f"compare:{j}", f"line {line}: {type(op).__name__} -> {SWAP_CMP[type(op)].__name__}"))
        elif isinstance(node, ast.BinOp) and type(node.op) in SWAP_BIN:
            out.append((i, "binop", f"line {line}: {type(node.op).__name__} -> {SWAP_BIN[type(node.op)].__name__}"))
        elif isinstance(node, ast.Constant) and id(node) not in skip and not isinstance(node.value, bool):
            if isinstance(node.value, int):
                out.append((i, "number", f"line {line}: {node.value} -> {node.value + 1}"))
            elif isinstance(node.value, float) and node.value != 0.0:
                out.append((i, "number", f"line {line}: {node.value} -> {node.value * 1.5}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SWAP_CALL:
            out.append((i, "call", f"line {line}: {node.func.id} -> {SWAP_CALL[node.func.id]}"))
        elif isinstance(node, ast.BoolOp):
            out.append((i, "bool", f"line {line}: {type(node.op).__name__} -> {'Or' if isinstance(node.op, ast.And) else 'And'}"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append((i, "not", f"line {line}: not x -> x"))
        elif isinstance(node, ast.Slice):
            out.append((i, "slice", f"line {line}: {'upper + 1' if node.upper is not None else 'lower + 1'}"))
    return out


def plus_one(expr):
    return ast.BinOp(left=expr, op=ast.Add(), right=ast.Constant(1))


def mutate(tree, index: int, kind: str):
    tree = copy.deepcopy(tree)
    node = list(ast.walk(tree))[index]
    if kind.startswith("compare:"):
        j = int(kind.split(":")[1])
        node.ops[j] = SWAP_CMP[type(node.ops[j])]()
    elif kind == "binop":
        node.op = SWAP_BIN[type(node.op)]()
    elif kind == "number":
        node.value = node.value + 1 if isinstance(node.value, int) else node.value * 1.5
    elif kind == "call":
        node.func.id = SWAP_CALL[node.func.id]
    elif kind == "bool":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "not":
        parent = next(p for p in ast.walk(tree) for f in ast.iter_fields(p)
                      if f[1] is node or (isinstance(f[1], list) and any(x is node for x in f[1])))
        for name, value in ast.iter_fields(parent):
            if value is node:
                setattr(parent, name, node.operand)
            elif isinstance(value, list):
                setattr(parent, name, [node.operand if x is node else x for x in value])
    elif kind == "slice":
        if node.upper is not None:
            node.upper = plus_one(node.upper)
        else:
            node.lower = plus_one(node.lower if node.lower is not None else ast.Constant(0))
    return ast.fix_missing_locations(tree)


ROOT = Path(__file__).resolve().parents[1]


def scratch_copy() -> Path:
    """minispec/, tests/ and pyproject.toml in a scratch directory, where the mutants go."""
    work = Path(tempfile.mkdtemp(prefix="minispec-mutants-"))
    for part in ("minispec", "tests"):
        shutil.copytree(ROOT / part, work / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", work / "pyproject.toml")
    (work / "weights").symlink_to(ROOT / "weights")  # the shipped drafters and the fetched target, read only
    return work


def run_tests(tests: list[str], timeout: float, work: Path) -> str:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow and not heavy", *tests]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=work,  # the copy first on the path
                           env={**os.environ, "PYTHONPATH": str(work), "PYTHONDONTWRITEBYTECODE": "1"})
    except subprocess.TimeoutExpired:
        return "killed (timeout)"
    if r.returncode == 0:
        return "survived"
    if r.returncode in (1,):
        return "killed"
    return f"error (pytest exit {r.returncode})"


def report(results: list[dict]) -> str:
    """Markdown: per file, mutants run, killed, survived; then every survivor."""
    seen, rows = set(), []
    for r in results:  # a mutant run twice (two invocations) counts once, with its last status
        key = (r["file"], r["mutation"], r["kind"], r.get("index"))
        if key in seen:
            rows = [x for x in rows if (x["file"], x["mutation"], x["kind"], x.get("index")) != key]
        seen.add(key)
        rows.append(r)
    lines = ["| file | mutants | killed | survived |", "|---|---|---|---|"]
    for f in dict.fromkeys(r["file"] for r in rows):
        mine = [r for r in rows if r["file"] == f]
        alive = sum(r["status"] == "survived" for r in mine)
        lines.append(f"| `{f}` | {len(mine)} | {len(mine) - alive} | {alive} |")
    lines += ["", "Survivors:", ""]
    lines += [f"- `{r['file']}` {r['mutation']} (tests: {', '.join(Path(t).name for t in r['tests'])})"
              for r in rows if r["status"] == "survived"]
    return "\n".join(lines)


def main(argv=None) -> int:
    if argv is None and sys.argv[1:2] == ["--report"]:
        print(report(json.loads(Path(sys.argv[2]).read_text())))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="source files to mutate")
    ap.add_argument("--tests", required=True, help="comma-separated test files to run against each mutant")
    ap.add_argument("--sample", type=int, default=0, help="mutants per file, drawn with seed 0 (default: all)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant's test run (default 300)")
    ap.add_argument("--json", help="append the results to this JSON file")
    ap.add_argument("--only", action="append", help="run only the mutants whose description holds this text, for "
                                                    "example \"line 140: upper + 1\" (repeatable: a survivor re-run)")
    a = ap.parse_args(argv)
    tests = a.tests.split(",")
    work = scratch_copy()
    baseline = run_tests(tests, a.timeout * 2, work)
    if baseline != "survived":
        print(f"the tests fail without a mutant ({baseline}): fix them first", file=sys.stderr)
        return 2
    results = json.loads(Path(a.json).read_text()) if a.json and Path(a.json).is_file() else []
    for f in a.files:
        path = work / f
        original = path.read_text()
        tree = ast.parse(original)
        points = mutation_points(tree)
        if a.only:
            points = [pt for pt in points if any(o in pt[2] for o in a.only)]
        if a.sample and len(points) > a.sample:
            points = sorted(random.Random(0).sample(points, a.sample))
        t0 = time.perf_counter()
        try:
            for n, (index, kind, desc) in enumerate(points, 1):
                mutant = ast.unparse(mutate(tree, index, kind))
                if mutant == ast.unparse(tree):
                    continue
                path.write_text(mutant)
                status = run_tests(tests, a.timeout, work)
                results.append(dict(file=f, mutation=desc, kind=kind, index=index, status=status, tests=tests))
                print(f"[{n}/{len(points)}] {f} {desc}: {status}", flush=True)
                if a.json:
                    Path(a.json).write_text(json.dumps(results, indent=1))
        finally:
            path.write_text(original)
        print(f"{f}: {len(points)} mutants in {time.perf_counter() - t0:.0f} s", flush=True)
    survived = [r for r in results if r["status"] == "survived"]
    print(f"{len(results)} mutants, {len(results) - len(survived)} killed, {len(survived)} survived")
    return 0


if __name__ == "__main__":
    sys.exit(main())
