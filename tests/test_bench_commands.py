"""``minispec bench``'s subcommands come from one table (harness/bench_commands.py): each entry runs, and both
helps list exactly the table's names."""

import importlib

import pytest

from minispec.harness.bench_commands import SUBCOMMANDS, summary
from minispec.model import kernel

from .helpers import run_cli


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_every_subcommand_is_dispatched_to_its_function(name, monkeypatch):
    monkeypatch.setattr(kernel, "_chosen", None)  # restored after: --kernel sets the process's default
    module, function = SUBCOMMANDS[name][0].split(":")
    seen = []
    monkeypatch.setattr(importlib.import_module(module), function, lambda argv: seen.append(argv) or 7)
    code, _, _ = run_cli(["bench", name, "--kernel", "numpy", "--x", "1"])
    assert code == 7
    want = ["--kernel", "numpy", "--x", "1"] if name in ("forward", "decode") else ["--x", "1"]  # the others: applied
    assert seen == [want]


def test_both_helps_list_the_table():
    _, top, _ = run_cli(["--help"])
    _, study, _ = run_cli(["bench", "--help"])
    assert ", ".join(SUBCOMMANDS) in " ".join(top.split())
    assert all(f"`{name}`" in " ".join(study.split()) for name in SUBCOMMANDS)
    assert summary().count("`") == 2 * len(SUBCOMMANDS)


def test_the_harness_index_names_every_file():
    from pathlib import Path

    import minispec.harness as harness

    files = {p.name for p in Path(harness.__file__).parent.glob("*.py")} - {"__init__.py"}
    missing = [f for f in sorted(files) if f not in harness.__doc__]
    assert not missing, f"harness/__init__.py's index leaves out {missing}"
