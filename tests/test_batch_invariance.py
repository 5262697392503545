"""Batch invariance: the measurement (minispec/harness/batch_invariance.py) tells a model whose rows do not depend
on the pass from one whose rows do, and under the numba kernel a row's logits are bitwise the same in a pass of 1,
2, 3, 4, 8 or 16 rows, and in a tree pass with its mask, on a tiny model and on SmolLM2; a twin of the kernel whose
1-row tile keeps 4 sums, not 16 (the kernel before it was made invariant), is caught, and so are NumPy's attention
and a norm whose partial sums depend on the pass."""

import dataclasses

import numpy as np
import pytest

from minispec.harness import batch_invariance
from minispec.model import load_model
from minispec.model.tiny import write_random_model
from minispec.model.transformer import attention


class RowByRow:
    """A model whose every pass runs its rows one at a time: batch-invariant by construction."""

    def __init__(self, model):
        self.model = model

    def new_cache(self, n):
        return self.model.new_cache(n)

    def forward(self, ids, cache, last=None):
        rows = np.concatenate([self.model.forward([t], cache) for t in ids])
        return rows if last is None else rows[-last:]


class Drifting(RowByRow):
    """The planted twin: a row's logits move by 1e-6 times the number of rows in its pass."""

    def forward(self, ids, cache, last=None):
        return super().forward(ids, cache, last) + np.float32(1e-6 * len(ids))


def test_it_finds_invariant_rows_invariant_and_a_pass_dependent_twin_not(tmp_path):
    model = load_model(write_random_model(tmp_path / "m", seed=5))
    ids = [int(t) for t in np.random.default_rng(0).integers(0, 64, 48)]
    same = batch_invariance.measure(RowByRow(model), ids, prefix=16, tree=False)
    assert all(same[str(n)]["identical_rows"] == 1.0 and same[str(n)]["max_abs_diff"] == 0.0 for n in batch_invariance.NS)
    drift = batch_invariance.measure(Drifting(model), ids, prefix=16, tree=False)
    assert all(drift[str(n)]["identical_rows"] < 1.0 for n in batch_invariance.NS)
    assert drift["16"]["max_abs_diff"] > 0


def twin_matmul():
    """The planted twin: numba_kernel.matmul with a 1-row tile of 4 outputs (4 running sums, where the 4-row tiles
    keep 16): the compiler vectorizes its loop another way, so a row rounds differently alone than in a pass of 4."""
    from numba import njit, prange

    from minispec.model import numba_kernel as nk

    @njit(parallel=True, fastmath=nk.FASTMATH)
    def rows4(x, rows, out):
        T, n_out = x.shape[0], rows.shape[0]
        for j4 in prange(n_out // 4):
            j = 4 * j4
            t = 0
            while t + 4 <= T:
                nk._tile4x4(x, rows, out, t, j)
                t += 4
            for tt in range(t, T):
                s0 = s1 = s2 = s3 = np.float32(0.0)
                for i in range(x.shape[1]):
                    s0 += x[tt, i] * rows[j, i]; s1 += x[tt, i] * rows[j + 1, i]  # noqa: E702
                    s2 += x[tt, i] * rows[j + 2, i]; s3 += x[tt, i] * rows[j + 3, i]  # noqa: E702
                out[tt, j], out[tt, j + 1], out[tt, j + 2], out[tt, j + 3] = s0, s1, s2, s3

    def matmul(x, rows):
        out = np.empty((x.shape[0], rows.shape[0]), np.float32)
        rows4(np.ascontiguousarray(x), rows, out)
        return out
    return matmul


def twin_rms_norm():
    """The planted twin of numba_layers.rms_norm: each row's sum of squares kept in T + 1 partial sums (as a compiler
    might split it between vector lanes by the shape of the pass), so a row rounds differently alone than with
    others."""
    from numba import njit

    @njit
    def rows(x, w, eps, out):
        T, D = x.shape
        for t in range(T):
            parts = np.zeros(T + 1, np.float32)  # [T + 1]: how the terms are shared out depends on T
            for i in range(D):
                parts[i % (T + 1)] += x[t, i] * x[t, i]
            r = np.float32(1.0) / np.sqrt(parts.sum() / np.float32(D) + np.float32(eps))
            for i in range(D):
                out[t, i] = x[t, i] * r * w[i]

    def rms_norm(x, w, eps):
        out = np.empty(x.shape, np.float32)
        rows(np.ascontiguousarray(x), w, eps, out)
        return out
    return rms_norm


WIDE = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, vocab_size=96)


@pytest.mark.slow
@pytest.mark.parametrize("sums", [8, 16], ids=["8sums", "16sums"])
def test_numba_rows_are_batch_invariant_on_a_tiny_model_and_the_twin_is_caught(tmp_path, monkeypatch, sums):
    """Under each entry of the kernel's table of tiles (numba_kernel.TILES), whatever this CPU's own."""
    pytest.importorskip("numba")
    from minispec.model import numba_kernel
    from minispec.model.tiny import tiny_config

    assert sums in numba_kernel.TILES
    monkeypatch.setattr(numba_kernel, "SUMS", sums)
    model = load_model(write_random_model(tmp_path / "m", tiny_config(**WIDE), seed=5), kernel="numba")
    ids = [int(t) for t in np.random.default_rng(0).integers(0, 96, 48)]
    got = batch_invariance.measure(model, ids, prefix=16)
    assert all(got[str(n)]["identical_rows"] == 1.0 for n in batch_invariance.NS), got
    assert got["tree"]["identical_rows"] == 1.0 and got["tree"]["rows"] == 10, got["tree"]
    kernel_ops = model.ops
    model.ops = dataclasses.replace(kernel_ops, attention=attention)  # twin 1: NumPy's attention (all rows at once, BLAS)
    caught = batch_invariance.measure(model, ids, prefix=16)
    assert caught["4"]["identical_rows"] < 1.0 and caught["tree"]["identical_rows"] < 1.0
    model.ops = dataclasses.replace(kernel_ops, rms_norm=twin_rms_norm())  # twin 2: a norm that depends on T
    caught = batch_invariance.measure(model, ids, prefix=16)
    assert caught["4"]["identical_rows"] < 1.0 and caught["tree"]["identical_rows"] < 1.0
    monkeypatch.setattr(numba_kernel, "matmul", twin_matmul())  # twin 3: the kernel's own layers, 4-sum 1-row tiles
    twin = load_model(tmp_path / "m", kernel="numba")
    caught = batch_invariance.measure(twin, ids, prefix=16)
    assert caught["4"]["identical_rows"] < 1.0 and caught["tree"]["identical_rows"] < 1.0


@pytest.mark.slow
@pytest.mark.parametrize("sums", [8, 16], ids=["8sums", "16sums"])
def test_numba_rows_are_batch_invariant_at_widths_no_tile_divides(tmp_path, monkeypatch, sums):
    """Widths that leave a remainder in every product (hidden 36, MLP 50, vocabulary 70; SmolLM2's are multiples of 32):
    the left-over outputs and the inputs' tails take loops of their own, which must not depend on the pass either."""
    pytest.importorskip("numba")
    from minispec.model import numba_kernel
    from minispec.model.tiny import tiny_config

    monkeypatch.setattr(numba_kernel, "SUMS", sums)
    odd = dict(hidden_size=36, intermediate_size=50, num_attention_heads=2, num_key_value_heads=1, vocab_size=70)
    model = load_model(write_random_model(tmp_path / "m", tiny_config(**odd), seed=6), kernel="numba")
    ids = [int(t) for t in np.random.default_rng(1).integers(0, 70, 48)]
    got = batch_invariance.measure(model, ids, prefix=16)
    assert all(got[str(n)]["identical_rows"] == 1.0 for n in batch_invariance.NS), got
    assert got["tree"]["identical_rows"] == 1.0, got["tree"]


@pytest.mark.slow
@pytest.mark.parametrize("q4_1", [False, True], ids=["float32", "q4_1"])
def test_numba_rows_are_batch_invariant_on_smollm2(q4_1):
    """The real model, float32 and with its Q4_1 blocks kept: 24 positions of a code prompt, in passes of 1 to 16 rows,
    and a tree pass."""
    pytest.importorskip("numba")
    from minispec.harness.prompts import load_prompts
    from minispec.model import load_tokenizer
    from minispec.recipes.fetch import fetch_smollm2

    d = fetch_smollm2(log=lambda m: None, q4_1=q4_1)
    tok = load_tokenizer(d)
    ids = [t for p in load_prompts("code", tok, 2) for t in p][: 32 + 24]
    got = batch_invariance.measure(load_model(d, kernel="numba"), ids, prefix=32)
    assert all(got[str(n)]["identical_rows"] == 1.0 and got[str(n)]["max_abs_diff"] == 0.0
               for n in batch_invariance.NS), got
    assert got["tree"]["identical_rows"] == 1.0, got["tree"]
