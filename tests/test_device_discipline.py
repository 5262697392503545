"""Device discipline, checked on the CPU: the model and the loops run with ``backend.xp`` a strict stand-in
for CuPy (tests/strict_xp.py), whose arrays refuse every implicit host conversion and count every transfer.
A host/device mix, a NumPy call on a device array, or a call CuPy does not provide fails here, not first
on a GPU; so does a silent host copy inside the loop (one ``.get()`` per model pass, for its logits)."""

import numpy as np
import pytest

import minispec.model.transformer as transformer
from minispec import generate, load_model, speculative_generate, tree_speculative_generate
from minispec.drafters import DraftModel, LayerSkip, PromptLookup
from minispec.model import backend
from minispec.model.tiny import tiny_config, write_random_model

from . import strict_xp
from .helpers import make_config

PROMPT = [5, 6, 7, 5, 6, 8, 9, 5, 6]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    d = tmp_path_factory.mktemp("discipline")
    return dict(target=write_random_model(d / "t", tiny_config(num_hidden_layers=3), seed=1),
                draft=write_random_model(d / "d", tiny_config(num_hidden_layers=1), seed=2),
                qwen=write_random_model(d / "q", make_config("qwen2-bias"), seed=3))


@pytest.fixture
def strict(monkeypatch):
    strict_xp.install(monkeypatch)
    return strict_xp


@pytest.mark.parametrize("which", ["target", "qwen"])
def test_model_runs_on_the_strict_device_and_matches_numpy(dirs, strict, monkeypatch, which):
    ids = [3, 17, 5, 60 % 64, 2, 9, 33, 1]
    model = load_model(dirs[which])
    assert type(model.embed).__name__ == "DeviceArray"
    cache = model.new_cache(32)
    got = np.concatenate([model.forward(ids[:5], cache), model.forward(ids[5:], cache)])
    cache.crop(3)
    again = model.forward(ids[3:], cache)
    cache.keep(2, [0, 2])  # the tree's compaction, on device
    monkeypatch.setattr(backend, "xp", np)
    ref = load_model(dirs[which])
    want = ref.forward(ids, ref.new_cache(32))
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(again, want[3:], atol=1e-5, rtol=0)


def test_one_forward_is_three_uploads_and_one_download(dirs, strict):
    """ids, positions and mask go up; the logits come down, once. No other transfer in a pass."""
    model = load_model(dirs["target"])
    cache = model.new_cache(32)
    for ids in ([1, 2, 3, 4], [5], [6, 7, 8]):
        strict.reset_transfers()
        model.forward(ids, cache)
        assert strict.transfers == {"to_device": 3, "to_host": 1}


def drafters(target, draft):
    return [DraftModel(draft), PromptLookup(), LayerSkip(target, layers=1)]


@pytest.mark.parametrize("setting", [dict(temperature=0.0), dict(temperature=1.0, top_p=0.9)], ids=["greedy", "T=1"])
def test_loops_on_the_strict_device_equal_numpy_with_one_download_per_pass(dirs, strict, monkeypatch, setting):
    """Chain and tree, every drafter: the same tokens as on NumPy, and exactly one .get() per model pass
    (target rounds + draft passes): no silent host copy anywhere in the loop."""
    target, draft = load_model(dirs["target"]), load_model(dirs["draft"])
    runs = [lambda t, d, k=k: speculative_generate(t, d, PROMPT, 24, k=k, seed=3, **setting) for k in (1, 4)]
    runs.append(lambda t, d: tree_speculative_generate(t, d, PROMPT, 24, shape=(2, 3), seed=3, **setting))
    got = []
    for run in runs:
        for d in drafters(target, draft):
            strict.reset_transfers()
            res = run(target, d)
            passes = res.stats.rounds + res.stats.draft_forwards
            assert strict.transfers["to_host"] == passes, (d.name, strict.transfers, passes)
            got.append(res.tokens)
    plain = generate(target, PROMPT, 24, seed=3, **setting)
    auto = speculative_generate(target, DraftModel(draft), PROMPT, 24, k="auto", seed=3, **setting).tokens
    monkeypatch.setattr(backend, "xp", np)
    monkeypatch.setattr(backend, "DEVICE", "cpu")
    target, draft = load_model(dirs["target"]), load_model(dirs["draft"])
    want = [run(target, d).tokens for run in runs for d in drafters(target, draft)]
    assert got == want
    assert plain == generate(target, PROMPT, 24, seed=3, **setting)
    if setting["temperature"] == 0:
        assert all(g == plain for g in got) and auto == plain


# ---- the check can fail: planted bugs ----

def test_catches_a_planted_numpy_call_on_a_device_array(dirs, strict, monkeypatch):
    model = load_model(dirs["target"])
    monkeypatch.setattr(transformer, "swiglu", lambda x, wg, wd: np.exp(x))  # np.exp, not backend.xp.exp
    with pytest.raises(TypeError, match="ufunc exp"):
        model.forward([1, 2, 3], model.new_cache(8))


def test_catches_a_planted_host_array_mixed_in(dirs, strict, monkeypatch):
    model = load_model(dirs["target"])
    monkeypatch.setattr(backend, "asarray", lambda a: a)  # forgot to upload ids, positions and mask
    with pytest.raises(TypeError, match="mixed with a device array"):
        model.forward([1, 2, 3], model.new_cache(8))


def test_catches_a_planted_call_cupy_does_not_provide(dirs, strict, monkeypatch):
    model = load_model(dirs["target"])
    monkeypatch.setattr(transformer, "rope", lambda x, cos, sin: backend.xp.apply_along_axis(None, 0, x))
    with pytest.raises(AttributeError, match="apply_along_axis"):
        model.forward([1, 2, 3], model.new_cache(8))


def test_catches_a_planted_silent_host_copy(dirs, strict, monkeypatch):
    """A round trip through the host inside a layer computes the right numbers; only the count sees it."""
    model = load_model(dirs["target"])
    real = transformer.attention
    monkeypatch.setattr(transformer, "attention", lambda *a: backend.asarray(backend.to_host(real(*a))))
    strict.reset_transfers()
    model.forward([1, 2, 3], model.new_cache(8))
    assert strict.transfers != {"to_device": 3, "to_host": 1}
    assert strict.transfers["to_host"] == 1 + model.cfg.num_layers
