"""The numba kernel's layers other than the products: RMS norm, RoPE and attention, each row computed alone.

``transformer.py``'s NumPy functions are the reference; these give the same results within float32 rounding, with
two differences that make them worth having:
- **Cost.** A decode step calls the norm 2L + 1 times and RoPE 2L times on arrays of one row or a few, where NumPy
  spends most of each call on its own overhead (a handful of ufunc calls and temporaries each). One compiled call,
  looping over the rows, does the same arithmetic at a fraction of it (``minispec bench forward`` times the pass;
  docs/policy.md, "Norms and RoPE compiled; what bounds r(n) on a Zen 1").
- **Batch-invariant rows.** Each row goes through the same loop, of a length that does not depend on the number of
  rows in the pass (D for the norm, HD / 2 for RoPE, HD and then the keys in order for attention): a row's result is
  bitwise the same in a pass of 1 row and of 16 (numba_kernel.py's module docstring says what else that needs).

A model loaded with the numba kernel calls these three (its ``Model.ops``, a ``transformer.Ops``). Each of them takes
float32 and refuses anything else (activations stay float32, and another dtype is a bug upstream, not something to
cast away here), and refuses shapes that do not match: the compiled loops have no bounds checks.
"""

from __future__ import annotations

import numpy as np

from .numba_kernel import FASTMATH, njit, prange  # numba_kernel first: it sets how numba compiles (its docstring)


def _check_float32(**arrays) -> None:
    for name, a in arrays.items():
        if a.dtype != np.float32:
            raise TypeError(f"the numba kernel's layers take float32, got {name} {a.dtype}")


@njit("void(float32[:, ::1], float32[::1], float32, float32[:, ::1])", fastmath=FASTMATH, cache=True)
def _rms_norm_rows(x, w, eps, out):  # [T, D], [D], eps, [T, D] -> out = x / sqrt(mean(x^2) + eps) * w
    D = x.shape[1]
    for t in range(x.shape[0]):
        s = np.float32(0.0)
        for i in range(D):  # D terms, whatever T: the same sums for every row
            s += x[t, i] * x[t, i]
        r = np.float32(1.0) / np.sqrt(s / np.float32(D) + eps)
        for i in range(D):
            out[t, i] = x[t, i] * r * w[i]


def rms_norm(x, w, eps: float):  # [T, D], [D] -> [T, D]
    """``transformer.rms_norm``: one compiled call, looping over the rows."""
    _check_float32(x=x, w=w)
    if x.ndim != 2 or w.shape != (x.shape[1],):
        raise ValueError(f"rms_norm takes x [T, D] and w [D], got {x.shape} and {w.shape}")
    out = np.empty(x.shape, np.float32)  # [T, D]
    _rms_norm_rows(np.ascontiguousarray(x), np.ascontiguousarray(w), np.float32(eps), out)
    return out


@njit("void(float32[:, :, ::1], float32[:, ::1], float32[:, ::1], float32[:, :, ::1])", fastmath=FASTMATH, cache=True)
def _rope_rows(x, cos, sin, out):  # [T, n, HD], [T, HD/2] twice, [T, n, HD]
    half = x.shape[2] // 2
    for t in range(x.shape[0]):
        for h in range(x.shape[1]):
            for i in range(half):  # the pair (i, i + HD/2), rotated by row t's angle i
                a, b = x[t, h, i], x[t, h, i + half]
                out[t, h, i] = a * cos[t, i] - b * sin[t, i]
                out[t, h, i + half] = b * cos[t, i] + a * sin[t, i]


def rope(x, cos, sin):  # [T, n, HD], [T, HD/2], [T, HD/2] -> [T, n, HD]
    """``transformer.rope``: one compiled call, looping over the rows. ``x`` is usually a view into the fused Q/K/V
    output; the compiled loop takes C-contiguous arrays only (its signature), so such a view is copied first."""
    _check_float32(x=x, cos=cos, sin=sin)
    if x.ndim != 3 or x.shape[2] % 2 or cos.shape != (x.shape[0], x.shape[2] // 2) or sin.shape != cos.shape:
        raise ValueError(f"rope takes x [T, n, HD] with HD even and cos, sin [T, HD/2], got {x.shape}, {cos.shape} "
                         f"and {sin.shape}")
    out = np.empty(x.shape, np.float32)  # [T, n, HD]
    _rope_rows(np.ascontiguousarray(x), np.ascontiguousarray(cos), np.ascontiguousarray(sin), out)
    return out


# One compiled version each, for the C-contiguous cache: numba compiles a version per array layout, each vectorized
# its own way, so keys in another layout would round differently (a bug this fixed: the cache's slice [:S] is
# contiguous only when S fills the cache). ``attention`` is handed the whole cache and reads its first S positions.
@njit("void(float32[::1], float32[:, ::1], int64, float32[::1], float32, float32[::1])", fastmath=FASTMATH, cache=True)
def _scores(q, k, S, mask, scale, scores):  # [HD], [S_max, HD], S, [S], scale, [S] -> scores = q . k_s * scale + mask
    """A dot product of HD terms per key: the same length for every row, so the same sums (reassociated as
    FASTMATH allows, but identically each time). A masked key is -inf, not computed."""
    for s in range(S):
        if mask[s] == -np.inf:
            scores[s] = -np.inf
            continue
        d = np.float32(0.0)
        for i in range(k.shape[1]):
            d += q[i] * k[s, i]
        scores[s] = d * scale + mask[s]


@njit("void(float32[::1], float32[:, ::1], float32[::1])", cache=True)
def _softmax_times_v(scores, v, out):  # [S], [S_max, HD], [HD] -> out = softmax(scores) @ v[:S]
    """Sums over the S keys, strictly in key order (no fastmath here): a masked key adds an exact 0, so a row's
    result is the same whether the pass holds S or more keys. A reassociated sum over S would not be: which
    terms share a vector lane, and which fall to the scalar tail, depends on S."""
    m = scores.max()
    total = np.float32(0.0)
    for s in range(scores.shape[0]):
        scores[s] = np.exp(scores[s] - m)
        total += scores[s]
    out[:] = 0.0
    for s in range(scores.shape[0]):
        p = scores[s] / total
        for i in range(out.shape[0]):  # elementwise over HD: vectorized without reordering any sum
            out[i] += p * v[s, i]


@njit(parallel=True, cache=True)
def attention_rows(q, k, v, mask, scale, out):  # [T, H, HD], [KVH, S_max, HD] twice, [T, S], scale, [T, H, HD]
    """``transformer.attention``, one (row, head) pair at a time, the pairs shared between the cores: every row's
    result is computed by the same code, in the same order, whatever the number of rows in the pass."""
    T, H, HD = q.shape
    G, S = H // k.shape[0], mask.shape[1]
    for th in prange(T * H):
        t, h = th // H, th % H
        scores = np.empty(S, np.float32)  # [S]
        _scores(q[t, h], k[h // G], S, mask[t], scale, scores)
        _softmax_times_v(scores, v[h // G], out[t, h])


def attention(q, k_cache, v_cache, mask):  # [T, H, HD], [KVH, S_max, HD] twice, [T, S] -> [T, H*HD]
    """``transformer.attention`` through ``attention_rows`` (batch-invariant rows; module docstring): the first
    S = mask.shape[1] positions of the caches."""
    _check_float32(q=q, k_cache=k_cache, v_cache=v_cache, mask=mask)
    if mask.shape[0] != q.shape[0] or mask.shape[1] > k_cache.shape[1]:
        raise ValueError(f"mask {mask.shape} for {q.shape[0]} rows and a cache of {k_cache.shape[1]} positions")
    out = np.empty(q.shape, np.float32)  # [T, H, HD]
    scale = np.float32(1.0 / q.shape[2] ** 0.5)  # as transformer.attention rounds it
    attention_rows(np.ascontiguousarray(q), np.ascontiguousarray(k_cache), np.ascontiguousarray(v_cache),
                   np.ascontiguousarray(mask), scale, out)
    return out.reshape(q.shape[0], q.shape[1] * q.shape[2])  # [T, H HD] (bug: -1 cannot be inferred for T = 0)

