"""The package's layout, as an import graph: no cycles, nothing imports the CLI, the core never imports the lab, the
library never reaches into the harness, and the model knows nothing of speculation.

The core is what a learner reads: the rule, sampling, keyed noise, the tree, the textbook round, the engine's loop
and its record (the top-level modules), the drafters, the model and the policy. The lab is what measures it and
makes its weights: the harness (checks, benchmarks, the conformance kit, the calibration store), the recipes, the
trace, and the model's fetch, conversion, progress bars and provenance records (``LAB``).

Every ``import`` in every module counts, function-local ones and ``if TYPE_CHECKING:`` ones included; relative
imports are resolved. ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.
Importing a module also runs its packages' ``__init__``; those implicit edges are not drawn (``from . import x``
inside a package whose ``__init__`` imports the module would otherwise be a cycle in every package).
"""

from __future__ import annotations

import ast
from pathlib import Path

import minispec

# (d): what the model must not import: the speculation side of the package
SPECULATION = ("rejection", "keyed", "textbook", "speculative", "rounds", "drafters", "tree", "policy", "stats", "harness",
               "recipes", "processors")
# (e): the textbook round imports only the rule, sampling and the model
TEXTBOOK_USES = ("rejection", "sampling", "model")
# (g): the lab; everything else but the CLI is the core, which never imports it
LAB = ("harness", "recipes", "trace")
# the recipes the rest of the lab may use: the target's weights, fetched and converted, for minispec or llama.cpp, and
# the file of weights/eagle-data's windows (no PyTorch)
WEIGHT_RECIPES = ("recipes.fetch", "recipes.convert", "recipes.gguf_float32", "recipes.windows")
# what the rest of the lab may use of the harness: progress bars and the record of a run
HARNESS_SHARED = ("harness.progress", "harness.provenance")
# (f): what stands at the package's top level: the rule, sampling, its keyed noise and its logits processors, the tree
# rule, the loops (and the CLI)
TOP_LEVEL = {"__init__", "__main__", "cli", "rejection", "sampling", "keyed", "processors", "tree", "textbook",
             "generate", "speculative", "rounds", "stats"}


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the package directory ``root``."""
    out = {}
    for f in sorted(root.rglob("*.py")):
        parts = [package, *f.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that module ``name`` (file ``path``) imports, anywhere in its body."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]  # the package a relative import starts from
    found = set()

    def add(target: str) -> None:  # the longest known module that ``target`` names (a.b.func -> a.b)
        parts = target.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        if parts:
            found.add(".".join(parts))

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(here) - 1:
                    raise ValueError(f"{path}: relative import beyond the top-level package")
                base = here[: len(here) - (node.level - 1)]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module
            for a in node.names:
                sub = f"{src}.{a.name}"
                add(sub if sub in modules else src)
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    modules = module_names(root, package)
    return {m: imports_of(m, f, modules) for m, f in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layout_problems(root: Path, package: str = "minispec") -> list[str]:
    """Every breach of the layout rules in the package at ``root``, one line each (empty: all kept)."""
    graph = import_graph(root, package)
    cli, main, harness, model = (f"{package}.{n}" for n in ("cli", "__main__", "harness", "model"))
    problems = [f"import cycle among {', '.join(c)}" for c in cycles(graph)]
    for src, targets in sorted(graph.items()):
        for dst in sorted(targets):
            if src not in (cli, main) and dst in (cli, main):
                problems.append(f"{src} imports the CLI ({dst})")
            in_lab = any(under(src, f"{package}.{m}") for m in LAB)
            shared = in_lab and any(under(dst, f"{package}.{m}") for m in HARNESS_SHARED)
            if not (under(src, harness) or src in (cli, main) or shared) and under(dst, harness):
                problems.append(f"{src} imports the harness ({dst})")
            if under(src, model) and any(under(dst, f"{package}.{s}") for s in SPECULATION):
                problems.append(f"{src} (the model) imports speculation ({dst})")
            if src == f"{package}.textbook" and not any(under(dst, f"{package}.{u}") for u in TEXTBOOK_USES):
                problems.append(f"{src} (the textbook round) imports {dst}")
            lab = [f"{package}.{m}" for m in LAB]
            if not (any(under(src, m) for m in lab) or src in (cli, main)) and any(under(dst, m) for m in lab):
                problems.append(f"{src} (the core) imports the lab ({dst})")
            recipes = f"{package}.recipes"
            shared = any(under(dst, f"{package}.{m}") for m in WEIGHT_RECIPES) and any(under(src, m) for m in lab)
            if under(dst, recipes) and not (under(src, recipes) or src in (cli, main) or shared):
                problems.append(f"{src} imports a training recipe ({dst})")
    for f in sorted(root.glob("*.py")):
        if f.stem not in TOP_LEVEL:
            problems.append(f"{package}.{f.stem} stands at the top level: give it a part (model/, drafters/, policy/, ...)")
    return problems


def test_the_package_layout_holds():
    root = Path(minispec.__file__).parent
    graph = import_graph(root, "minispec")
    # the walk really sees the package: its subpackages, relative imports, and function-local imports
    assert {"minispec.cli", "minispec.harness.check", "minispec.model.transformer", "minispec.policy.costs"} <= set(graph)
    assert "minispec.speculative" in graph["minispec.harness.check"]  # `from ..speculative import ...`
    assert "minispec.model.blas" in graph["minispec.model.transformer"]  # `from .blas import ...`
    assert layout_problems(root) == []


def write_package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return root


def test_the_checker_reports_cycles_cli_harness_and_model_breaches(tmp_path):
    pkg = write_package(tmp_path / "minispec", {
        "__init__.py": "from .speculative import speculative_generate\n",
        "cli.py": "from . import speculative\nfrom .harness import check\n",  # allowed: the CLI imports anything
        "__main__.py": "from .cli import main\n",  # allowed
        "rejection.py": "import numpy as np\n",
        "speculative.py": ("from .rejection import accept\n"
                           "def run():\n"
                           "    from .rounds import Run  # function-local: still an edge\n"),
        "rounds.py": "from . import speculative\nfrom .trace import Trace\n",  # a cycle, and the core importing the lab
        "trace/__init__.py": "from ..rejection import accept\n",  # allowed: the lab imports the core
        "drafters/__init__.py": "def main():\n    import minispec.cli\n",  # a library module importing the CLI
        "textbook.py": "from .rejection import accept\nfrom .model import Model\nfrom .policy import costs\n",  # policy: no
        "recipes/__init__.py": "",
        "recipes/train.py": "from ..model import transformer\n",  # allowed
        "generate.py": "from .recipes import train\n",  # the library reaching into a recipe
        "helpers.py": "",  # a module without a part
        "harness/__init__.py": "",
        "harness/check.py": "from .. import speculative\nfrom ..model import transformer\n",  # allowed
        "policy/__init__.py": "",
        "policy/costs.py": "from ..harness.check import x\n",  # the library reaching into the harness
        "model/__init__.py": "from .transformer import Model\n",
        "model/transformer.py": "from . import blas\nfrom ..tree import tree_mask\n",  # the model importing speculation
        "model/blas.py": "",
        "tree.py": "",
    })
    problems = layout_problems(pkg)
    assert "import cycle among minispec.rounds, minispec.speculative" in problems, problems
    assert "minispec.drafters imports the CLI (minispec.cli)" in problems, problems
    assert "minispec.policy.costs imports the harness (minispec.harness.check)" in problems, problems
    assert "minispec.model.transformer (the model) imports speculation (minispec.tree)" in problems, problems
    assert "minispec.textbook (the textbook round) imports minispec.policy.costs" in problems, problems
    assert "minispec.generate imports a training recipe (minispec.recipes.train)" in problems, problems
    assert any(p.startswith("minispec.helpers stands at the top level") for p in problems), problems
    assert "minispec.rounds (the core) imports the lab (minispec.trace)" in problems, problems
    assert "minispec.policy.costs (the core) imports the lab (minispec.harness.check)" in problems, problems
    assert "minispec.generate (the core) imports the lab (minispec.recipes.train)" in problems, problems
    assert len(problems) == 10, problems  # and nothing else: the allowed imports above are not reported
    # a three-module cycle through a package __init__, and a self-import
    write_package(pkg, {"model/blas.py": "from minispec.model import kvcache\n",
                        "model/kvcache.py": "import minispec.model\n", "stats.py": "from . import stats\n"})
    problems = layout_problems(pkg)
    assert ("import cycle among minispec.model, minispec.model.blas, minispec.model.kvcache, minispec.model.transformer"
            in problems), problems
    assert "import cycle among minispec.stats" in problems, problems


def loaded_by(statement: str) -> list[str]:
    """The minispec modules a fresh interpreter has loaded after ``statement``."""
    import subprocess
    import sys
    code = f"{statement}; import sys; print(' '.join(sorted(m for m in sys.modules if m.startswith('minispec'))))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def test_importing_the_rule_loads_the_rule_and_not_the_library():
    """``import minispec.rejection`` loads the package's __init__, the rule, sampling and keyed noise: nothing of the
    drafters, the policy, the harness or the model."""
    loaded = loaded_by("import minispec.rejection")
    assert len(loaded) <= 6, loaded
    assert not any(m.startswith(("minispec.harness", "minispec.drafters", "minispec.policy", "minispec.model"))
                   for m in loaded), loaded


def test_the_public_api_loads_on_first_use():
    assert "minispec.speculative" not in loaded_by("import minispec")
    assert "minispec.speculative" in loaded_by("from minispec import speculative_generate")
    for name in minispec.__all__:
        assert getattr(minispec, name) is not None, name
    assert minispec.model.load_model is minispec.load_model  # a submodule, as before
    # the submodule minispec.generate, once imported, does not shadow its function of the same name
    assert loaded_by("import minispec.speculative; from minispec import generate; assert callable(generate)")
    with __import__("pytest").raises(AttributeError, match="no attribute 'nothing'"):
        getattr(minispec, "nothing")  # noqa: B009 (the attribute lookup is what is tested)
