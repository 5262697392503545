"""How much code a reader meets in one run of a round: the textbook's, and the engine's.

    python -m minispec.harness.round_lines [--json]

Runs one generation on tiny random models (a 4-layer target and a 2-layer draft model, vocabulary 64) with K = 4,
the token rule, T = 1 and seed 0, under a line tracer (``sys.settrace``), once through ``speculative_sampling``
(textbook.py) and once through ``speculative_generate`` (speculative.py). Every function the run enters inside
``minispec/`` is counted whole: its non-blank lines that are neither comments nor its docstring. Below a model's
``forward`` nothing is counted (the transformer is the same for both, and read apart). Module-level code
(imports) is not counted.

It prints, for each round, the lines and files, then the functions by file, so a change that adds to the
round shows where.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve()
PACKAGE = HERE.parents[1]


def code_lines(code) -> set[int]:
    """The line numbers of ``code``'s function that count: not blank, not a comment, not the docstring."""
    lines, first = inspect.getsourcelines(code)
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:  # a lambda inside an expression: its lines count plainly
        tree = None
    doc: set[int] = set()
    if tree is not None and tree.body and isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        body = tree.body[0].body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            doc = set(range(body[0].lineno, body[0].end_lineno + 1))
    kept = set()
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if s and not s.startswith("#") and i not in doc:
            kept.add(first + i - 1)
    return kept


class Tracer:
    """Records the code objects entered inside the package, none below a model's ``forward``."""

    def __init__(self):
        self.codes: dict = {}
        self.depth_in_forward = 0

    def __call__(self, frame, event, arg):
        if event != "call":
            return None
        code = frame.f_code
        path = Path(code.co_filename)
        if self.depth_in_forward or PACKAGE not in path.parents or code.co_name == "<module>" or path == HERE:
            if self.depth_in_forward:
                self.depth_in_forward += 1
                return self.leave_forward
            return None
        self.codes[(code.co_filename, code.co_firstlineno, code.co_name)] = code
        if code.co_name == "forward" and path.parent.name == "model":  # the model's internals are not the round's
            self.depth_in_forward = 1
            return self.leave_forward
        return None

    def leave_forward(self, frame, event, arg):
        if event == "return":
            self.depth_in_forward -= 1
        return self.leave_forward


def count(fn) -> dict:
    """Run ``fn()`` under the tracer -> {lines, files, functions: {file: [(name, lines)]}}."""
    tracer = Tracer()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    functions: dict[str, list] = {}
    lines: dict[str, set] = {}  # per file: a comprehension's lines are its function's, counted once
    for (file, _, name), code in sorted(tracer.codes.items()):
        got = code_lines(code)
        rel = str(Path(file).relative_to(PACKAGE.parent))
        if not name.startswith("<") or not got <= lines.get(rel, set()):
            functions.setdefault(rel, []).append((name, len(got - lines.get(rel, set()))))
        lines.setdefault(rel, set()).update(got)
    total = sum(map(len, lines.values()))
    return dict(lines=total, files=len(functions), functions=functions)


def tiny_pair(folder: Path):
    from ..model import load_model
    from ..model.tiny import tiny_config, write_random_model
    target = load_model(write_random_model(folder / "target", tiny_config(num_hidden_layers=4, eos_token_id=None), seed=3))
    draft = load_model(write_random_model(folder / "draft", tiny_config(num_hidden_layers=2, eos_token_id=None), seed=4))
    return target, draft


def measure(max_new_tokens: int = 24) -> dict:
    """{textbook: count, engine: count} for one generation each, K = 4, token rule, T = 1, seed 0."""
    from ..drafters import DraftModel
    from ..speculative import speculative_generate
    from ..textbook import speculative_sampling

    with tempfile.TemporaryDirectory() as d:
        target, draft = tiny_pair(Path(d))
    prompt = [5, 9, 14, 5, 9]
    warm = DraftModel(draft)  # imports and first-call set-ups happen outside the count
    speculative_generate(target, warm, prompt, 4, k=4, temperature=1.0, seed=0)
    speculative_sampling(target, draft, prompt, 4, k=4, temperature=1.0, seed=0)
    out = {}
    out["textbook"] = count(lambda: speculative_sampling(target, draft, prompt, max_new_tokens, k=4, temperature=1.0, seed=0))
    out["engine"] = count(lambda: speculative_generate(target, DraftModel(draft), prompt, max_new_tokens, k=4,
                                                       temperature=1.0, seed=0))
    out["ratio"] = out["engine"]["lines"] / out["textbook"]["lines"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minispec.harness.round_lines", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = ap.parse_args(argv)
    got = measure()
    if args.json:
        print(json.dumps(got, indent=1))
        return 0
    for name in ("textbook", "engine"):
        c = got[name]
        print(f"{name}: {c['lines']} lines in {c['files']} files")
        for file, fns in c["functions"].items():
            print(f"    {file}: " + ", ".join(f"{f} {n}" for f, n in fns))
    print(f"the engine's round is {got['ratio']:.2f}x the textbook's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
