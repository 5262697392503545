"""``minispec bench gpu-predict``'s random target (harness/gpu.py): SmolLM2's shape and tokenizer, or a refusal
before any weight is written. The GPU itself is scripts/gpu_check.sh's (docs/gpu/README.md)."""

import pytest

from minispec.harness import gpu
from minispec.model import load_model

from .helpers import TARGET_DIR, chat_model_dir


def test_the_random_target_carries_smollm2s_tokenizer(tmp_path):
    """(bug: it copied the shipped draft's tokenizer.json, which the draft no longer ships, skipped in silence, so
    the GPU check's study step failed for want of a tokenizer)"""
    chat_model_dir(tmp_path / "fetched")  # SmolLM2 converted where it is absent, as the other CLI tests do
    path = gpu.random_target(tmp_path / "t", smoke=True)
    assert (path / "tokenizer.json").read_bytes() == (TARGET_DIR / "tokenizer.json").read_bytes()
    assert load_model(path).cfg.vocab_size == 49152


def test_without_smollm2s_tokenizer_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "default_model_dir", lambda: tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="SmolLM2's tokenizer"):
        gpu.random_target(tmp_path / "t", smoke=True)
    assert not (tmp_path / "t").exists()
