"""The engine: cached forward == full forward == an independent naive reference, crop, dtypes."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minispec.model.transformer as model_mod
from minispec import ModelConfig, generate, load_model
from minispec.model import blas
from minispec.model.tiny import random_tensors, tiny_config, write_random_model
from minispec.model.weights import load_weights

from .reference import naive_forward


def full(model, ids):
    return model.forward(ids, model.new_cache(len(ids)))


def test_matches_independent_reference(tiny_model_dir, tiny_model):
    cfg = ModelConfig.from_dir(tiny_model_dir)
    ids = [3, 17, 5, 60, 2, 9, 33, 1]
    want = naive_forward(load_weights(tiny_model_dir, cfg), cfg, ids)
    np.testing.assert_allclose(full(tiny_model, ids), want, atol=1e-4, rtol=0)


def test_one_token_at_a_time_equals_full_forward(tiny_model, rng):
    ids = rng.integers(0, tiny_model.cfg.vocab_size, 24)
    cache = tiny_model.new_cache(32)
    steps = np.concatenate([tiny_model.forward([t], cache) for t in ids])
    assert cache.length == 24
    np.testing.assert_allclose(steps, full(tiny_model, ids), atol=1e-5, rtol=0)


def test_n_token_pass_equals_n_single_steps(tiny_model, rng):
    ids = rng.integers(0, tiny_model.cfg.vocab_size, 20)
    a, b = tiny_model.new_cache(32), tiny_model.new_cache(32)
    tiny_model.forward(ids[:12], a)
    tiny_model.forward(ids[:12], b)
    verify = tiny_model.forward(ids[12:], a)  # the verification path: 8 tokens at once
    singles = np.concatenate([tiny_model.forward([t], b) for t in ids[12:]])
    np.testing.assert_allclose(verify, singles, atol=1e-5, rtol=0)


def test_crop_then_reforward_equals_fresh(tiny_model, rng):
    ids = rng.integers(0, tiny_model.cfg.vocab_size, 16)
    new = rng.integers(0, tiny_model.cfg.vocab_size, 5)
    cache = tiny_model.new_cache(32)
    tiny_model.forward(ids, cache)
    cache.crop(9)
    assert cache.length == 9
    got = tiny_model.forward(new, cache)
    want = full(tiny_model, np.concatenate([ids[:9], new]))[9:]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_crop_rejects_growing():
    m = load_model(write_random_model(__import__("tempfile").mkdtemp()))
    c = m.new_cache(8)
    m.forward([1, 2, 3], c)
    with pytest.raises(ValueError, match="cannot crop"):
        c.crop(4)
    with pytest.raises(ValueError, match="cannot crop"):
        c.crop(-1)


class NotFloat32(AssertionError):
    """An activation that is not float32: raised where it first appears, before any later cast can hide it."""


DTYPE_CHECKED = ("linear", "rms_norm", "rope", "attention", "swiglu", "transformer_block")


def check_float32(monkeypatch) -> set[str]:
    """Wrap the layer functions (module globals that the model calls) and the skinny matmul so that each
    raises NotFloat32 on a floating input or output that is not float32. Returns the set of wrapped
    names that were called, filled in as they are."""
    called = set()

    def checked(fn, name):
        def wrapper(*args, **kwargs):
            out = fn(*args, **kwargs)
            arrays = [*args, *kwargs.values(), out]
            arrays += [w for a in args if isinstance(a, model_mod.LayerWeights) for w in vars(a).values()]
            for i, a in enumerate(arrays):
                if isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.dtype != np.float32:
                    raise NotFloat32(f"{name}: {'output' if a is out else f'input {i}'} is {a.dtype}, shape {a.shape}")
            called.add(name)
            return out
        return wrapper

    for name in DTYPE_CHECKED:
        monkeypatch.setattr(model_mod, name, checked(getattr(model_mod, name), name))
    # linear calls the name it imported from blas; blas's own attribute is wrapped too for any other caller
    monkeypatch.setattr(model_mod, "skinny_matmul", checked(model_mod.skinny_matmul, "skinny_matmul"))
    monkeypatch.setattr(blas, "skinny_matmul", checked(blas.skinny_matmul, "skinny_matmul"))
    return called


def run_every_path(model, rng):
    """Forward passes over 1, 2, 3, 4 and 6 new tokens after a cached prefix (the 1-row product, the
    per-row products of skinny_matmul and its padded gemm), then a token tree through forward_masked
    with a float64 mask."""
    from minispec.tree import tree_mask

    V = model.cfg.vocab_size
    outs = []
    for T in (1, 2, 3, 4, 6):
        cache = model.new_cache(16)
        model.forward(rng.integers(0, V, 5), cache)
        outs.append(model.forward(rng.integers(0, V, T), cache))
        assert outs[-1].shape == (T, V)
    parents = [-1, 0, 0, 1, 2]  # the root, two children, a grandchild under each
    cache = model.new_cache(16)
    model.forward(rng.integers(0, V, 5), cache)
    mask = tree_mask(parents, prefix=5).astype(np.float64)
    depth = np.array([0, 1, 1, 2, 2])
    outs.append(model.forward_masked(rng.integers(0, V, 5), cache, 5 + depth, mask))
    return outs


def test_every_activation_is_float32(tiny_model, monkeypatch, rng):
    called = check_float32(monkeypatch)
    for logits in run_every_path(tiny_model, rng):
        assert logits.dtype == np.float32
    assert called == {*DTYPE_CHECKED, "skinny_matmul"}, called  # every wrapped function really ran
    assert all(w.dtype == np.float32 for L in tiny_model.layers for w in vars(L).values() if w is not None)


def test_the_float32_check_catches_a_float64_table(tiny_model, monkeypatch, rng):
    check_float32(monkeypatch)
    monkeypatch.setattr(tiny_model, "cos", tiny_model.cos.astype(np.float64))  # a table left in float64
    with pytest.raises(NotFloat32, match="float64"):
        run_every_path(tiny_model, rng)


def test_cache_is_preallocated_and_written_in_place(tiny_model):
    cache = tiny_model.new_cache(16)
    k, v = cache.k, cache.v  # the arrays allocated up front
    ids = list(range(10))
    for t in ids:
        tiny_model.forward([t], cache)
    assert cache.k is k and cache.v is v and k.shape[2] == 16
    # the keys and values were written into those arrays, at positions 0..9 and nowhere else
    ref = tiny_model.new_cache(10)
    tiny_model.forward(ids, ref)
    np.testing.assert_allclose(k[:, :, :10], ref.k, atol=1e-5, rtol=0)
    np.testing.assert_allclose(v[:, :, :10], ref.v, atol=1e-5, rtol=0)
    assert np.abs(k[:, :, :10]).sum(axis=-1).min() > 0 and not k[:, :, 10:].any() and not v[:, :, 10:].any()
    with pytest.raises(ValueError, match="do not fit"):  # a full cache refuses instead of growing
        tiny_model.forward(list(range(7)), cache)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    layers=st.integers(1, 3), kv_heads=st.sampled_from([1, 2]), group=st.integers(1, 3),
    head_dim=st.sampled_from([4, 8]), ff=st.integers(4, 40), vocab=st.integers(5, 40),
    arch=st.sampled_from(["LlamaForCausalLM", "Qwen2ForCausalLM"]), tied=st.booleans(),
    n_prefix=st.integers(1, 8), n_new=st.integers(1, 6), back=st.integers(0, 8), seed=st.integers(0, 2**16),
)
def test_cache_identities_property(tmp_path_factory, layers, kv_heads, group, head_dim, ff, vocab, arch, tied,
                                   n_prefix, n_new, back, seed):
    heads = kv_heads * group
    cfg = tiny_config(arch, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      hidden_size=heads * head_dim, head_dim=head_dim, intermediate_size=ff, vocab_size=vocab,
                      tie_word_embeddings=tied)
    m = load_model(write_random_model(tmp_path_factory.mktemp("h"), cfg, seed=seed))
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, n_prefix + n_new)
    ref = full(m, ids)
    # one token at a time
    c = m.new_cache(len(ids))
    np.testing.assert_allclose(np.concatenate([m.forward([t], c) for t in ids]), ref, atol=1e-5, rtol=0)
    # prefix, then n_new at once (verification)
    c = m.new_cache(len(ids))
    m.forward(ids[:n_prefix], c)
    np.testing.assert_allclose(m.forward(ids[n_prefix:], c), ref[n_prefix:], atol=1e-5, rtol=0)
    # crop to m and re-forward the rest
    keep = max(1, len(ids) - back)
    c.crop(keep)
    if keep < len(ids):
        np.testing.assert_allclose(m.forward(ids[keep:], c), ref[keep:], atol=1e-5, rtol=0)


def test_sharded_and_half_precision_files_load(tmp_path):
    cfg = tiny_config()
    base = load_model(write_random_model(tmp_path / "one", cfg, seed=3))
    shards = load_model(write_random_model(tmp_path / "shards", cfg, seed=3, shards=3))
    ids = [1, 2, 3, 4]
    np.testing.assert_array_equal(full(base, ids), full(shards, ids))
    for dtype, tol in (("BF16", 0.1), ("F16", 0.02)):
        half = load_model(write_random_model(tmp_path / dtype, cfg, seed=3, dtype=dtype))
        assert half.layers[0].w_qkv.dtype == np.float32
        np.testing.assert_allclose(full(half, ids), full(base, ids), atol=tol)


def test_truncated_model_shares_weights(tiny_model):
    t = tiny_model.truncated(1)
    assert t.layers[0].w_qkv is tiny_model.layers[0].w_qkv and t.lm_head is tiny_model.lm_head
    assert t.cfg.num_layers == 1 and tiny_model.cfg.num_layers >= 2


def test_greedy_is_deterministic_and_sampling_reproducible(tiny_model):
    a = generate(tiny_model, [1, 2, 3], 12)
    assert a == generate(tiny_model, [1, 2, 3], 12) and len(a) == 12
    s1 = generate(tiny_model, [1, 2, 3], 12, temperature=1.0, seed=7)
    assert s1 == generate(tiny_model, [1, 2, 3], 12, temperature=1.0, seed=7)
    others = [generate(tiny_model, [1, 2, 3], 12, temperature=1.0, seed=s) for s in range(8, 12)]
    assert any(o != s1 for o in others)


def test_greedy_generate_equals_argmax_of_full_forward(tiny_model):
    prompt = [4, 5, 6]
    out = generate(tiny_model, prompt, 8)
    logits = full(tiny_model, prompt + out[:-1])
    assert out == list(np.argmax(logits[len(prompt) - 1:], axis=-1))


def test_generate_stops_at_stop_token(tiny_model):
    out = generate(tiny_model, [1, 2, 3], 20)
    stop = out[4]
    first = out.index(stop)
    assert generate(tiny_model, [1, 2, 3], 20, stop_ids=[stop]) == out[: first + 1]
    assert generate(tiny_model, [1, 2, 3], 0) == []


def test_random_tensors_cover_config():
    cfg = ModelConfig.from_dict(tiny_config("Qwen2ForCausalLM"))
    t = random_tensors(cfg)
    assert "model.layers.0.self_attn.q_proj.bias" in t and "lm_head.weight" in t


@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17])
def test_linear_equals_matmul_for_every_row_count(T, monkeypatch):
    rng = np.random.default_rng(T)
    x = rng.standard_normal((T, 48)).astype(np.float32)
    w = rng.standard_normal((48, 5000)).astype(np.float32)  # wide enough for several column blocks
    monkeypatch.setattr(blas, "CACHE_BYTES", 48 * 4 * 700)
    got = model_mod.linear(x, w)
    assert got.dtype == np.float32 and got.shape == (T, 5000)
    np.testing.assert_allclose(got, x @ w, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(model_mod.linear(x, w.T.copy().T), x @ w, rtol=1e-5, atol=1e-4)  # transposed view


def test_a_cache_that_grows_keeps_every_entry():
    """KVCache.with_room: the same cache when it has room; else a copy with twice the room (at most the limit)
    whose valid entries are the old ones, exactly, and whose length is the old length."""
    from minispec.model import KVCache

    c = KVCache(2, 1, 4, 3)
    rng = np.random.default_rng(0)
    c.k[...] = rng.standard_normal(c.k.shape)
    c.v[...] = rng.standard_normal(c.v.shape)
    c.length = 3
    assert c.with_room(4, 100) is c
    g = c.with_room(5, 100)
    assert g is not c and g.max_len == 8 and g.length == 3
    np.testing.assert_array_equal(g.k[:, :, :3], c.k[:, :, :3])
    np.testing.assert_array_equal(g.v[:, :, :3], c.v[:, :, :3])
    assert c.with_room(5, 6).max_len == 6 and c.with_room(20, 100).max_len == 20


def test_common_prefix_and_kept_prefix_against_a_loop():
    """common_prefix against a plain loop on 500 random pairs (equal, one a prefix of the other, empty); kept_prefix
    is the smallest of the common prefix, len(tokens) - 1 (one token is always fed, for its logits) and the
    cache's length (bugs: the second difference taken for the first, a bound dropped or moved by one)."""
    from minispec.model.kvcache import common_prefix, kept_prefix

    def loop(a, b):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    rng = np.random.default_rng(0)
    for i in range(500):
        a = [int(t) for t in rng.integers(0, 3, rng.integers(0, 9))]
        b = (a + [int(t) for t in rng.integers(0, 3, rng.integers(0, 4))])[: rng.integers(0, 12)] if i % 2 else \
            [int(t) for t in rng.integers(0, 3, rng.integers(0, 9))]
        assert common_prefix(a, b) == loop(a, b) == common_prefix(b, a), (a, b)
        if b:
            length = int(rng.integers(0, len(a) + 1))
            assert kept_prefix(a, b, length) == min(loop(a, b), len(b) - 1, length), (a, b, length)
    assert kept_prefix([1, 2, 3], [1, 2, 3], 3) == 2  # the same tokens: the last is fed again for its logits
    assert kept_prefix([1, 2, 3, 4], [1, 2, 3, 4, 5], 2) == 2  # the cache holds only 2 of them


def test_keep_compacts_and_refuses_bad_offsets():
    """keep(start, offsets) moves the kept entries to start, start + 1, ..; offsets must be ascending, distinct and
    inside the cache, from a start inside it (bugs: the last valid index taken for one past it, a repeated offset
    allowed, either check alone; a negative offset, and a start past the end that made unwritten slots count, let
    through); no offsets keep nothing past start."""
    from minispec.model import KVCache

    c = KVCache(1, 1, 8, 2)
    c.k[0, 0, :6] = np.arange(6)[:, None]
    c.length = 6
    c.keep(2, [0, 2, 3])
    assert c.length == 5 and list(c.k[0, 0, :5, 0]) == [0, 1, 2, 4, 5]
    for start, offsets in ((2, [0, 3]), (2, [1, 1]), (2, [2, 1]), (0, [0, 5]), (1, [4, 2]), (3, [-2, 0]), (6, [])):
        with pytest.raises(ValueError, match="ascending, >= 0 and inside"):
            c.keep(start, offsets)
    c.keep(3, [])
    assert c.length == 3


def test_a_pass_asks_for_the_logits_of_rows_it_has(tiny_model):
    """``last`` is 1 to T rows of a pass of T (bug: last > T counted rows from the end, and returned T - last)."""
    with pytest.raises(ValueError, match="last = 5"):
        tiny_model.forward([1, 2, 3], tiny_model.new_cache(8), last=5)
    assert tiny_model.forward([1, 2, 3], tiny_model.new_cache(8), last=3).shape[0] == 3
