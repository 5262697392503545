"""The CUDA path (CuPy): logits match NumPy, greedy speculation equals plain decoding for every drafter, and
levels 2 and 3 of losslessness hold with a CuPy target. Marked ``cuda``; skipped, with the reason, where
CuPy or a GPU is absent. Run them with ``python -m pytest -m cuda`` (scripts/gpu_check.sh does)."""

from contextlib import contextmanager

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="CuPy is not installed: the CUDA tests need it and a GPU")

from minispec import generate, load_model, rejection  # noqa: E402
from minispec.drafters import DraftModel, LayerSkip, PromptLookup  # noqa: E402
from minispec.harness.equivalence import chisquare_gof  # noqa: E402
from minispec.model import backend  # noqa: E402
from minispec.model.tiny import tiny_config, write_random_model  # noqa: E402
from minispec.recipes.fetch import DEFAULT_DRAFT, default_weights_dir  # noqa: E402
from minispec.rejection import accept_reject  # noqa: E402
from minispec.sampling import sample, warp  # noqa: E402
from minispec.speculative import speculative_generate, tree_speculative_generate  # noqa: E402

from .helpers import CONFIGS, SMALL_V, broken_residual, exact_two_tokens, make_config, spec_two_token_counts  # noqa: E402


def gpu_count() -> int:
    try:
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no driver, no device
        return 0


pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(gpu_count() == 0, reason="CuPy is installed but no CUDA device is usable")]

RUNS = 4000  # level 3 on the GPU: 4000 runs (20 000 on the CPU); the broken twin still gives p ~ 1e-30


@contextmanager
def on(device):
    prev = backend.DEVICE
    backend.use_device(device)
    try:
        yield
    finally:
        backend.use_device(prev)


@pytest.fixture(autouse=True)
def cuda():
    with on("cuda"):
        yield


def load(path, device="cuda"):
    with on(device):
        return load_model(path)


def assert_close(got, want, rel=1e-4):
    assert got.shape == want.shape and got.dtype == np.float32
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err <= rel, f"max |cupy - numpy| / max |numpy| = {err:.2e}"


def passes(model, ids):
    """Prefill, single steps, an n-token pass after a crop, and a tree pass with its compaction."""
    cache = model.new_cache(len(ids) + 8)
    out = [model.forward(ids[:-4], cache)] + [model.forward([t], cache) for t in ids[-4:-2]]
    cache.crop(len(ids) - 5)
    out.append(model.forward(ids[-5:], cache))
    positions = np.array([cache.length, cache.length, cache.length + 1])  # two siblings, a child of the first
    S = cache.length + 3
    mask = np.zeros((3, S), np.float32)
    mask[0, -2:] = mask[1, -3] = mask[1, -1] = mask[2, -2] = -np.inf
    out.append(model.forward_masked(np.array([3, 4, 5]), cache, positions, mask))
    cache.keep(cache.length - 3, [0, 2])
    out.append(model.forward([6], cache))
    return out


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_match_numpy_tiny(tmp_path, name):
    d = write_random_model(tmp_path / name, make_config(name), seed=1)
    ids = list(np.random.default_rng(0).integers(0, 64, 20))
    with on("cpu"):
        want = passes(load_model(d), ids)
    for got, ref in zip(passes(load(d), ids), want):
        assert_close(got, ref)


def test_logits_match_numpy_shipped_draft():
    d = default_weights_dir() / DEFAULT_DRAFT
    if not (d / "model.safetensors").exists():
        pytest.skip(f"{d}: the shipped draft is not here")
    ids = list(np.random.default_rng(1).integers(0, 49152, 64))
    with on("cpu"):
        want = passes(load_model(d), ids)
    for got, ref in zip(passes(load(d), ids), want):
        assert_close(got, ref)


@pytest.fixture(scope="module")
def big_pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("cuda_big")
    return (load(write_random_model(d / "t", tiny_config(num_hidden_layers=3), seed=1)),
            load(write_random_model(d / "d", tiny_config(num_hidden_layers=1), seed=2)))


@pytest.mark.parametrize("k", [1, 3, 5, "tree", "auto"])
def test_greedy_equals_plain_for_every_drafter(big_pair, k):
    target, draft = big_pair
    assert isinstance(target.embed, cupy.ndarray)
    rng = np.random.default_rng(3)
    for prompt in ([5, 6, 7], [int(x) for x in rng.integers(0, 64, 20)], [9] * 12):
        want = generate(target, prompt, 32)
        for d in (DraftModel(draft), PromptLookup(), LayerSkip(target, layers=1)):
            if k == "tree":
                res = tree_speculative_generate(target, d, prompt, 32, shape=(2, 3))
            else:
                res = speculative_generate(target, d, prompt, 32, k=k)
            assert res.tokens == want, (d.name, k)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The level-3 pair of tests/conftest.py (vocabulary 6), on CuPy."""
    d = tmp_path_factory.mktemp("cuda_small")
    small = dict(vocab_size=SMALL_V, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=1)
    return (load(write_random_model(d / "t", tiny_config(num_hidden_layers=2, **small), seed=10, scale=2.0)),
            load(write_random_model(d / "d", tiny_config(num_hidden_layers=1, **small), seed=20, scale=2.0)))


def test_level2_one_step_with_cupy_distributions(pair, monkeypatch):
    """The rule, one position, on p and q computed by the CuPy target and draft: the output follows p; the
    broken rule's does not."""
    target, draft = pair
    prompt = [1, 4, 2]
    p = warp(target.forward(prompt, target.new_cache(8)), 1.0)[-1:]  # [1, V]
    q = warp(draft.forward(prompt, draft.new_cache(8)), 1.0)[-1:]
    P = np.concatenate([p, p])  # p_1 and a p_2 for the bonus token (unused in the first position's law)

    def counts():
        rng, out = np.random.default_rng(5), np.zeros(SMALL_V)
        for _ in range(20_000):
            x = sample(q[0], rng)
            n, t = accept_reject(P, q, [x], rng)
            out[x if n == 1 else t] += 1
        return out

    assert chisquare_gof(counts(), p[0])[2] > 1e-3
    monkeypatch.setattr(rejection, "residual", broken_residual)
    assert chisquare_gof(counts(), p[0])[2] < 1e-6


@pytest.mark.parametrize("tree_shape", [None, (3, 2)], ids=["chain", "tree"])
def test_level3_with_a_cupy_target(pair, monkeypatch, tree_shape):
    target, draft = pair
    prompt, w = [1, 4, 2], dict(temperature=1.0)
    exact = exact_two_tokens(target, prompt, **w)
    counts = spec_two_token_counts(target, lambda: DraftModel(draft), prompt, RUNS, tree_shape=tree_shape, **w)
    chi2, dof, p = chisquare_gof(counts, exact)
    assert p > 1e-3, (chi2, dof, p)
    monkeypatch.setattr(rejection, "residual", broken_residual)
    counts = spec_two_token_counts(target, lambda: DraftModel(draft), prompt, RUNS, tree_shape=tree_shape, **w)
    chi2, dof, p = chisquare_gof(counts, exact)
    assert p < 1e-6, (chi2, dof, p)


def test_level3_top_k_with_a_cupy_target(pair):
    target, draft = pair
    prompt, w = [1, 4, 2], dict(temperature=0.7, top_k=4)
    counts = spec_two_token_counts(target, lambda: DraftModel(draft), prompt, RUNS, **w)
    assert chisquare_gof(counts, exact_two_tokens(target, prompt, **w))[2] > 1e-3


def test_cupy_is_really_in_use(big_pair):
    target, _ = big_pair
    assert backend.DEVICE == "cuda" and backend.xp is cupy
    assert isinstance(target.embed, cupy.ndarray) and isinstance(target.new_cache(4).k, cupy.ndarray)
    assert "cpu" not in backend.device_name()
