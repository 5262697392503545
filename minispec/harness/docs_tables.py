"""Sections of README and docs/ generated from the committed measurements, so that a figure has one source.

A generated section sits between two markers in a Markdown file, a generated figure inside a sentence between two
short ones:

    <!-- generated: level4 -->
    ... (the table, written by ``python -m minispec.harness.docs_tables``) ...
    <!-- end: level4 -->

    the shipped draft's c = <!-- v:study.c.draft -->0.087<!-- /v -->

The sections and figures are computed in ``doc_figures.py`` and, for the two kernels, ``kernel_figures.py``. ``python -m
minispec.harness.docs_tables`` rewrites every one from its JSON; ``--check`` only compares, and exits 1 naming the
stale files (tests/test_docs_tables.py runs the comparison, so a new measurement cannot leave old numbers behind). A
marker naming no known section or figure is an error. A section links its measurements from the repository root
(``docs/kernel/forward.json``); in a file elsewhere (``docs/speed.md``) those links are made relative to that file.
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path, PurePosixPath

from . import bench_commands, busy_figures, doc_figures, kernel_figures, specbench_figures
from .conform import peers_figures

ROOT = Path(__file__).resolve().parents[2]


def bench_list(root: Path) -> str:
    """The list of the bench subcommands (docs/speed.md, "Measuring"), from their one table (bench_commands.SUBCOMMANDS)."""
    width = max(len(name) for name in bench_commands.SUBCOMMANDS) + len("minispec bench ")
    lines = [f"{'minispec bench ' + name:<{width}}   # {what}" for name, (_, what) in bench_commands.SUBCOMMANDS.items()]
    return "\n".join(["```bash", *lines, "```"])


SECTIONS = {**doc_figures.SECTIONS, **kernel_figures.SECTIONS, **peers_figures.SECTIONS, **busy_figures.SECTIONS,
            **specbench_figures.SECTIONS,
            "bench_commands": bench_list}
FILES = ["README.md", "docs/speed.md", "docs/rules.md", "docs/losslessness.md", "docs/shipped-drafters.md", "docs/reading.md",
         "docs/models.md", "docs/eagle.md", "docs/crossvocab.md", "docs/block.md", "docs/power.md", "docs/mutation.md",
         "docs/peers.md", "docs/specbench.md", "weights/smoldraft-3l-192/README.md", "weights/eagle-smollm2-135m/README.md"]
SECTION = re.compile(r"(<!-- generated: ([\w.-]+) -->)\n(?:.*?\n)?(<!-- end: \2 -->)", re.S)
VALUE = re.compile(r"(<!-- v:([\w.-]+) -->)(?:(?!<!--).)*?(<!-- /v -->)", re.S)  # a figure holds no marker: one
# whose closer was lost is an error, not a match that swallows the text up to the next figure's closer
ROOT_LINK = re.compile(r"\]\((docs/[^)\s]*)\)")  # a section's link to a measurement, written from the repository root


def relink(text: str, where: str) -> str:
    """``text``'s links into docs/, written from the repository root, made relative to the file ``where`` (a path
    from the root): ``docs/kernel/forward.json`` is ``kernel/forward.json`` from docs/speed.md."""
    base = str(PurePosixPath(where).parent)
    if base == ".":
        return text
    return ROOT_LINK.sub(lambda m: f"]({posixpath.relpath(m.group(1), base)})", text)


def render(text: str, root: Path = ROOT, where: str = "README.md") -> str:
    """``text`` with every generated section and figure written afresh; ``where``: the file's path from the root,
    for the sections' links."""
    figures = {**doc_figures.values(root), **kernel_figures.values(root), **peers_figures.values(root),
               **busy_figures.values(root)}

    def section(m):
        if m.group(2) not in SECTIONS:
            raise KeyError(f"no generated section named {m.group(2)!r} (known: {', '.join(SECTIONS)})")
        return f"{m.group(1)}\n{relink(SECTIONS[m.group(2)](root), where)}\n{m.group(3)}"

    def value(m):
        if m.group(2) not in figures:
            raise KeyError(f"no generated figure named {m.group(2)!r}")
        return f"{m.group(1)}{figures[m.group(2)]}{m.group(3)}"

    check_closed(text, SECTION, "<!-- generated: ", where)
    check_closed(text, VALUE, "<!-- v:", where)
    return VALUE.sub(value, SECTION.sub(section, text))


def check_closed(text: str, marker: re.Pattern, opener: str, where: str) -> None:
    """ValueError naming the line of the first opener in ``text`` that ``marker`` does not match whole (its closer
    missing or misspelt): such a section or figure would never be written again, nor found stale by ``--check``."""
    matched = {m.start() for m in marker.finditer(text)}
    for m in re.finditer(re.escape(opener), text):
        if m.start() not in matched:
            line = text.count("\n", 0, m.start()) + 1
            raise ValueError(f"{where}:{line}: {text[m.start():].split(chr(10))[0][:60]!r} has no closing marker")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--check"]):  # (bug: any other argument, "--chek", meant "rewrite every file")
        print(f"usage: python -m minispec.harness.docs_tables [--check]; got {' '.join(argv)}", file=sys.stderr)
        return 2
    # every file rendered before any is written (bug: an error in a later file left the earlier ones rewritten)
    texts = {name: (ROOT / name).read_text() for name in FILES}
    stale = {name: new for name, text in texts.items() if (new := render(text, where=name)) != text}
    if argv == ["--check"]:
        if stale:
            print(f"stale generated sections in: {', '.join(stale)} (run python -m minispec.harness.docs_tables)")
            return 1
        return 0
    for name, new in stale.items():
        tmp = (ROOT / name).with_suffix(".tmp")
        tmp.write_text(new)
        tmp.replace(ROOT / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
