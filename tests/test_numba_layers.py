"""The numba kernel's norm and RoPE (minispec/model/numba_layers.py) against transformer.py's NumPy reference: the
same values within float32 rounding for 1-16 rows, RoPE on the strided view of the fused Q/K/V output that the block
hands it, each row the same bits whatever the rows beside it, and float64 or mismatched shapes refused."""

import numpy as np
import pytest

pytest.importorskip("numba")

from minispec.model import numba_layers as nl  # noqa: E402
from minispec.model import transformer as tr  # noqa: E402

D, H, KVH, HD = 96, 6, 2, 16


@pytest.mark.parametrize("T", [1, 2, 3, 8, 16])
def test_the_norm_and_rope_are_the_references_within_rounding(T):
    rng = np.random.default_rng(T)
    x = rng.standard_normal((T, D), dtype=np.float32) * 3
    w = rng.standard_normal(D, dtype=np.float32)
    got, want = nl.rms_norm(x, w, 1e-5), tr.rms_norm(x, w, 1e-5)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    qkv = rng.standard_normal((T, (H + 2 * KVH) * HD), dtype=np.float32)  # the block's fused output
    q = qkv[:, : H * HD].reshape(T, H, HD)  # a strided view, as transformer_block passes it
    angles = rng.uniform(0, 6.3, (T, HD // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    got, want = nl.rope(q, cos, sin), tr.rope(q, cos, sin)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_row_is_the_same_bits_alone_and_among_others():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, D), dtype=np.float32)
    w = rng.standard_normal(D, dtype=np.float32)
    q = rng.standard_normal((16, H, HD), dtype=np.float32)
    cos, sin = (rng.standard_normal((16, HD // 2), dtype=np.float32) for _ in range(2))
    all_rows, all_rot = nl.rms_norm(x, w, 1e-5), nl.rope(q, cos, sin)
    for t in (0, 7, 15):
        assert np.array_equal(nl.rms_norm(x[t: t + 1], w, 1e-5)[0], all_rows[t])
        assert np.array_equal(nl.rope(q[t: t + 1], cos[t: t + 1], sin[t: t + 1])[0], all_rot[t])


def test_attention_of_no_rows_is_no_rows_as_numpys():
    """numba's attention of 0 rows returns [0, H HD], as NumPy's does (bug: a reshape with -1 failed on no rows)."""
    q, kv = np.ones((0, H, HD), np.float32), np.ones((KVH, 4, HD), np.float32)
    got = nl.attention(q, kv, kv, np.zeros((0, 4), np.float32))
    assert got.shape == (0, H * HD) and got.dtype == np.float32


def test_float64_and_mismatched_shapes_are_refused():
    x, w = np.ones((2, D), np.float32), np.ones(D, np.float32)
    with pytest.raises(TypeError, match="float32"):
        nl.rms_norm(x.astype(np.float64), w, 1e-5)
    with pytest.raises(ValueError, match=r"w \[D\]"):
        nl.rms_norm(x, np.ones(D - 1, np.float32), 1e-5)
    q, cs = np.ones((2, H, HD), np.float32), np.ones((2, HD // 2), np.float32)
    with pytest.raises(TypeError, match="float32"):
        nl.rope(q, cs.astype(np.float64), cs)
    with pytest.raises(ValueError, match="HD/2"):
        nl.rope(q, cs[:1], cs[:1])  # cos for fewer rows than x has
    with pytest.raises(ValueError, match="HD even"):
        nl.rope(np.ones((2, H, HD + 1), np.float32), cs, cs)
