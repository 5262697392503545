"""Bad input gets a clear error naming what is wrong, never a crash deep inside NumPy."""

import json

import numpy as np
import pytest

from minispec import ModelFormatError, generate, load_model
from minispec.model import backend
from minispec.model.safetensors_io import read_safetensors, write_safetensors
from minispec.model.tiny import tiny_config, write_random_model


@pytest.fixture
def model_dir(tmp_path):
    return write_random_model(tmp_path / "m")


def test_missing_config(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFormatError, match="no config.json"):
        load_model(tmp_path / "empty")


def test_not_a_directory(tmp_path):
    with pytest.raises(ModelFormatError, match="not a directory"):
        load_model(tmp_path / "nope")


def test_unknown_architecture(tmp_path):
    d = write_random_model(tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelFormatError, match="GPT2LMHeadModel.*not supported"):
        load_model(d)


def test_sliding_window_refused(tmp_path):
    with pytest.raises(ModelFormatError, match="sliding-window"):
        write_random_model(tmp_path / "m", tiny_config("MistralForCausalLM", sliding_window=4096))


@pytest.mark.parametrize("hidden, heads", [(2, 4), (10, 4)])
def test_a_hidden_size_the_heads_do_not_divide_is_refused(hidden, heads):
    """(bug: the derived head_dim = hidden_size // heads was floored: 0 for 2 // 4, accepted; 2 for 10 // 4)"""
    from minispec.model.config import ModelConfig

    cfg = dict(tiny_config(), hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=heads)
    cfg.pop("head_dim", None)
    with pytest.raises(ModelFormatError, match=f"config.json: hidden_size {hidden} is not a multiple of num_attention_heads {heads}"):
        ModelConfig.from_dict(cfg)
    assert ModelConfig.from_dict(dict(cfg, head_dim=2)).head_dim == 2  # a head_dim given is taken as it is


def test_a_config_number_too_long_to_read_is_refused_by_name(model_dir):
    """(bug: an integer of more than 4300 digits raised Python's own ValueError, with no file named)"""
    text = (model_dir / "config.json").read_text()
    assert '"vocab_size": 64' in text
    (model_dir / "config.json").write_text(text.replace('"vocab_size": 64', '"vocab_size": ' + "9" * 5000))
    with pytest.raises(ModelFormatError, match="config.json: not valid JSON"):
        load_model(model_dir)


def test_missing_tensor_named(model_dir):
    t = read_safetensors(model_dir / "model.safetensors")
    del t["model.layers.1.mlp.up_proj.weight"]
    write_safetensors(model_dir / "model.safetensors", t)
    with pytest.raises(ModelFormatError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        load_model(model_dir)


def test_wrong_shape_names_tensor_file_and_shapes(model_dir):
    t = read_safetensors(model_dir / "model.safetensors")
    t["model.layers.0.self_attn.k_proj.weight"] = np.zeros((3, 32), np.float32)
    write_safetensors(model_dir / "model.safetensors", t)
    with pytest.raises(ModelFormatError) as e:
        load_model(model_dir)
    msg = str(e.value)
    assert "k_proj" in msg and "model.safetensors" in msg and "(3, 32)" in msg and "(16, 32)" in msg


def test_truncated_safetensors(model_dir):
    f = model_dir / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(ModelFormatError, match="truncated"):
        load_model(model_dir)
    f.write_bytes(b"\x01\x02")
    with pytest.raises(ModelFormatError, match="truncated"):
        load_model(model_dir)


def test_missing_weights_file(model_dir):
    (model_dir / "model.safetensors").unlink()
    with pytest.raises(ModelFormatError, match="no model.safetensors"):
        load_model(model_dir)


def test_token_ids_out_of_range(model_dir):
    m = load_model(model_dir)
    with pytest.raises(ValueError, match="token id 64 is out of range for vocabulary size 64"):
        m.forward([1, 64], m.new_cache(4))
    with pytest.raises(ValueError, match="out of range"):
        generate(m, [-1], 3)
    with pytest.raises(ValueError, match="non-empty"):
        m.forward([], m.new_cache(4))


def test_prompt_longer_than_cache(model_dir):
    m = load_model(model_dir)
    with pytest.raises(ValueError, match="do not fit"):
        m.forward(list(range(10)), m.new_cache(8))
    with pytest.raises(ValueError, match="exceeds the model's context"):
        generate(m, list(range(10)), 250)


@pytest.mark.parametrize("kw, match", [
    (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(temperature=-0.5), "temperature"),
    (dict(top_k=0), "top_k"),
])
def test_bad_generation_arguments(model_dir, kw, match):
    m = load_model(model_dir)
    args = dict(max_new_tokens=4)
    args.update(kw)
    n = args.pop("max_new_tokens")
    with pytest.raises(ValueError, match=match):
        generate(m, [1, 2], n, **args)


def test_cuda_without_cupy_says_what_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_cupy(name, *a, **k):
        if name == "cupy":
            raise ImportError("no cupy")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_cupy)
    with pytest.raises(RuntimeError, match=r"pip install 'minispec\[cuda\]'"):
        backend.use_device("cuda")
    assert backend.xp is np
