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


@pytest.mark.parametrize("bad, says", [(["--ns", "0"], "argument --ns: 0 is not at least 1"),
                                       (["--out", "FILE"], "exists and is not a directory"),
                                       (["--study", "FILE"], "not a study's JSON"),
                                       (["--target", "TWO"], "2 layers; the launch probe")])
def test_gpu_predict_refuses_its_arguments_before_it_measures(tmp_path, monkeypatch, capsys, bad, says):
    """(bug: each was found out after the measurement, minutes on a GPU, or as a ZeroDivisionError)"""
    from minispec.model.tiny import tiny_config, write_random_model

    (tmp_path / "FILE").write_text("not json")
    write_random_model(tmp_path / "TWO", tiny_config(num_hidden_layers=2))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(gpu, "measure", lambda *a, **k: pytest.fail("measured"))
    with pytest.raises(SystemExit) as e:
        gpu.main(["--device", "cpu", "--smoke", *bad])
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_gpu_predicts_own_target_needs_no_tokenizer(tmp_path, monkeypatch):
    """gpu-predict reads no tokenizer: its dry run works on a checkout that never fetched SmolLM2 (bug: it stopped,
    for want of one it does not read)."""
    monkeypatch.setattr(gpu, "default_model_dir", lambda: tmp_path / "absent")
    path = gpu.random_target(tmp_path / "t", smoke=True, tokenizer=False)
    assert load_model(path).cfg.vocab_size == 49152 and not (path / "tokenizer.json").exists()


def test_gpu_predict_asks_for_no_tokenizer(monkeypatch, tmp_path):
    asked = []

    class Measured(Exception):
        pass

    monkeypatch.setattr(gpu, "random_target", lambda *a, **k: asked.append(k) or tmp_path)
    monkeypatch.setattr(gpu, "measure", lambda *a, **k: (_ for _ in ()).throw(Measured()))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Measured):
        gpu.main(["--device", "cpu", "--smoke"])
    assert asked == [dict(tokenizer=False)]
