"""The Python code blocks of README and docs/reading.md (the library from Python, moved there from README) run as
written (on the real SmolLM2, fetched from PyPI like in the README)."""

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
    from minispec.model.fetch import fetch_smollm2

    fetch_smollm2(log=lambda m: None)
    r = subprocess.run([sys.executable, "-c", BLOCKS[i]], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]

