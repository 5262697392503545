"""The Q4_1 kernel with d and m applied per block, timed beside the kernel kept (issue 46; docs/policy.md, "The Q4_1
kernel with d and m applied per block").

    python scripts/q4_1_per_block.py

A block's sums factor: sum_i (q_i d + m) x_i = d sum_i q_i x_i + m sum_i x_i. ``q4_1_per_block`` is
``numba_kernel.q4_1_rows`` with the unpacking leaving each weight as its integer q and d and m applied once per block
and output (ggml's order); both run on 12 random Q4_1 matrices of SmolLM2's MLP shapes at 1, 2, 4 and 8 rows, the
best of 3 x 5 calls each, with the largest difference between the two. Time it on a quiet machine.
"""

import time

import numpy as np
from numba import njit, prange

from minispec.model import numba_kernel as nk
from minispec.model.kernel import Q4Matrix
from minispec.model.q4_1 import quantize


@njit(cache=False)
def _unpack_q(q, lo, hi):  # [16, W] bytes -> lo, hi [16, W]: each byte's two integers q, as floats (exact)
    for i in range(16):
        for j in range(q.shape[1]):
            qf = np.float32(q[i, j])
            h = np.floor(qf * np.float32(0.0625))
            lo[i, j] = qf - np.float32(16) * h
            hi[i, j] = h


@njit(parallel=True, fastmath=True, cache=False)
def q4_1_per_block(x, xs, qt, dt, mt, width, out):  # [T, in], [T, in/32] block sums of x, the rest as q4_1_rows'
    T, nb, n_out = x.shape[0], qt.shape[0], qt.shape[2]
    for task in prange((n_out + width - 1) // width):
        j0, j1 = task * width, min(n_out, task * width + width)
        W = j1 - j0
        acc = np.zeros((T, W), np.float32)  # [T, W]: each row's running sums
        s = np.empty((T, W), np.float32)  # [T, W]: one block's sums of q x
        lo = np.empty((16, W), np.float32)
        hi = np.empty((16, W), np.float32)
        for b in range(nb):
            _unpack_q(qt[b, :, j0:j1], lo, hi)
            s[:] = 0
            for i in range(16):
                e = b * 32 + i
                wl, wh = lo[i], hi[i]
                for t in range(T):
                    st, u, v = s[t], x[t, e], x[t, e + 16]
                    for j in range(W):
                        st[j] += wl[j] * u + wh[j] * v
            d, m = dt[b, j0:j1], mt[b, j0:j1]
            for t in range(T):  # d and m once per block and output: d sum q x + m sum x
                a, st, c = acc[t], s[t], xs[t, b]
                for j in range(W):
                    a[j] += d[j] * st[j] + m[j] * c
        out[:, j0:j1] = acc


def kept(mats, x):
    """The kernel kept: ``numba_kernel.q4_1_matmul`` on every matrix."""
    for m in mats:
        nk.q4_1_matmul(np.ascontiguousarray(x[:, : m.qt.shape[0] * 32]), m.qt, m.dt, m.mt)


def per_block(mats, x):
    """The variant: the block sums of x, then ``q4_1_per_block``; returns the last matrix's product."""
    for m in mats:
        xi = np.ascontiguousarray(x[:, : m.qt.shape[0] * 32])  # [T, in]
        xs = xi.reshape(len(xi), -1, 32).sum(-1).astype(np.float32)  # [T, in/32]
        out = np.empty((len(xi), m.qt.shape[2]), np.float32)  # [T, out]
        q4_1_per_block(xi, xs, m.qt, m.dt, m.mt, nk.q4_1_width(m.qt.shape[2]), out)
    return out


def best_ms(fn, mats, x, rounds=3, calls=5) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(mats, x)
        times.append((time.perf_counter() - t0) / calls)
    return 1e3 * min(times)


def main():
    rng = np.random.default_rng(0)
    shapes = [(3072, 576)] * 6 + [(576, 1536)] * 6  # [out, in]: 6 fused gate/up and 6 down projections
    mats = [Q4Matrix(quantize(rng.standard_normal(s).astype(np.float32) * 0.05)) for s in shapes]
    for T in (1, 2, 4, 8):
        x = rng.standard_normal((T, 1536)).astype(np.float32)  # [T, widest in]
        kept(mats, x)  # compiled and warm, outside the timings
        got = per_block(mats, x)
        last = mats[-1]
        diff = np.abs(got - nk.q4_1_matmul(np.ascontiguousarray(x[:, :1536]), last.qt, last.dt, last.mt)).max()
        a, b = best_ms(kept, mats, x), best_ms(per_block, mats, x)
        print(f"{T} rows: kept {a:.2f} ms, per block {b:.2f} ms; largest difference {diff:.2g}", flush=True)


if __name__ == "__main__":
    main()
