"""The numba kernel: ``x @ w`` for a few rows, reading each weight once for all of them.

Read it as ``out = x @ w``, with ``w`` stored by rows (``rows = w.T``, [out, in]: the Hugging Face
file's own layout). Why it is faster than NumPy's BLAS for verification: a decode step is bound by
streaming the weights from memory, 538 MB for SmolLM2-135M. OpenBLAS's sgemm is built for large
blocks and is far slower than its gemv over a few rows, and ``blas.skinny_matmul`` runs one gemv per
row, reading each column block from the cache once per row: r(2) = t(2)/t(1) is 1.4-1.6 there. Here each output's weight row is loaded from
memory once, and every input row is multiplied by it while it sits in registers and L1: the rows
after the first add arithmetic, not traffic (llamafile's tinyBLAS does the same in C++). How flat r(n)
stays then depends on how much of that arithmetic hides behind the stream: ``minispec bench forward``.

The work is cut into tiles of 4 outputs by 4 rows (then 2, then 1 for the rows left over): 16 running
sums that the compiler keeps in vector registers, over the shared dimension. Output blocks of
``BLOCK`` columns are shared between the cores (``prange``).

Dimension key, as in ``transformer.linear``: T rows of ``x`` (tokens), in inputs (the shared dimension), out
outputs.

Two settings decide the speed, and both are made here (what was measured: docs/policy.md):
- LLVM prefers 256-bit vectors on many Intel cores (on the Xeons this was tuned on it names the host
  "rocketlake"), and 512-bit ones make this loop's tiles faster where the CPU has them. So
  ``NUMBA_CPU_FEATURES`` is set to the host's features without that preference before numba is
  imported, unless it is set already or numba was imported first. Being in ``os.environ``, it
  reaches child processes too (their numba then compiles the same way).
- OpenBLAS's threads spin between calls, and numba's threads then wait for the cores: ``claim_cores``
  (called when a model is loaded with this kernel) keeps OpenBLAS on one thread; ``blas_limited``
  gives it back its threads inside a context, for a NumPy-kernel model measured in the same process.
"""

from __future__ import annotations

import os
import sys

import numpy as np

if "numba" not in sys.modules and "NUMBA_CPU_FEATURES" not in os.environ:  # see the module docstring
    import llvmlite.binding as _llvm

    _llvm.initialize_native_target()
    os.environ["NUMBA_CPU_FEATURES"] = _llvm.get_host_cpu_features().flatten() + ",-prefer-256-bit"

import numba  # noqa: E402, F401
import threadpoolctl  # noqa: E402
from numba import njit, prange  # noqa: E402

BLOCK = 32  # outputs per parallel task: 32 weight rows, 74-197 KB for SmolLM2's matrices
FASTMATH = {"reassoc", "contract"}  # sums in any order and fused multiply-adds; NaN and infinity still propagate


@njit(fastmath=FASTMATH, inline="always")
def _tile4(x, rows, out, t, j):  # out[t:t+4, j:j+4] = x[t:t+4] @ rows[j:j+4].T
    w0, w1, w2, w3 = rows[j], rows[j + 1], rows[j + 2], rows[j + 3]  # [in] each: loaded once per tile
    x0, x1, x2, x3 = x[t], x[t + 1], x[t + 2], x[t + 3]  # [in] each
    z = np.float32(0.0)
    s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = z
    s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = z
    for i in range(x.shape[1]):
        a, b, c, d = w0[i], w1[i], w2[i], w3[i]  # 4 weights, each used by 4 rows
        s00 += x0[i] * a; s01 += x0[i] * b; s02 += x0[i] * c; s03 += x0[i] * d  # noqa: E702
        s10 += x1[i] * a; s11 += x1[i] * b; s12 += x1[i] * c; s13 += x1[i] * d  # noqa: E702
        s20 += x2[i] * a; s21 += x2[i] * b; s22 += x2[i] * c; s23 += x2[i] * d  # noqa: E702
        s30 += x3[i] * a; s31 += x3[i] * b; s32 += x3[i] * c; s33 += x3[i] * d  # noqa: E702
    out[t, j], out[t, j + 1], out[t, j + 2], out[t, j + 3] = s00, s01, s02, s03
    out[t + 1, j], out[t + 1, j + 1], out[t + 1, j + 2], out[t + 1, j + 3] = s10, s11, s12, s13
    out[t + 2, j], out[t + 2, j + 1], out[t + 2, j + 2], out[t + 2, j + 3] = s20, s21, s22, s23
    out[t + 3, j], out[t + 3, j + 1], out[t + 3, j + 2], out[t + 3, j + 3] = s30, s31, s32, s33


@njit(fastmath=FASTMATH, inline="always")
def _tile2(x, rows, out, t, j):  # out[t:t+2, j:j+4] = x[t:t+2] @ rows[j:j+4].T
    w0, w1, w2, w3 = rows[j], rows[j + 1], rows[j + 2], rows[j + 3]  # [in] each
    x0, x1 = x[t], x[t + 1]  # [in] each
    z = np.float32(0.0)
    s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = z
    for i in range(x.shape[1]):
        a, b, c, d = w0[i], w1[i], w2[i], w3[i]
        s00 += x0[i] * a; s01 += x0[i] * b; s02 += x0[i] * c; s03 += x0[i] * d  # noqa: E702
        s10 += x1[i] * a; s11 += x1[i] * b; s12 += x1[i] * c; s13 += x1[i] * d  # noqa: E702
    out[t, j], out[t, j + 1], out[t, j + 2], out[t, j + 3] = s00, s01, s02, s03
    out[t + 1, j], out[t + 1, j + 1], out[t + 1, j + 2], out[t + 1, j + 3] = s10, s11, s12, s13


@njit(fastmath=FASTMATH, inline="always")
def _tile1(x, rows, out, t, j):  # out[t, j:j+4] = x[t] @ rows[j:j+4].T
    w0, w1, w2, w3 = rows[j], rows[j + 1], rows[j + 2], rows[j + 3]  # [in] each
    x0 = x[t]  # [in]
    z = np.float32(0.0)
    s0 = s1 = s2 = s3 = z
    for i in range(x.shape[1]):
        s0 += x0[i] * w0[i]; s1 += x0[i] * w1[i]; s2 += x0[i] * w2[i]; s3 += x0[i] * w3[i]  # noqa: E702
    out[t, j], out[t, j + 1], out[t, j + 2], out[t, j + 3] = s0, s1, s2, s3


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def matmul_rows(x, rows, out):  # [T, in], [out, in], [T, out] -> writes out = x @ rows.T
    """``out = x @ rows.T`` (module docstring): every task takes BLOCK weight rows, 4 at a time, and
    applies each group of 4 to every row of ``x`` before moving on, so that each weight leaves memory once."""
    T, n_out = x.shape[0], rows.shape[0]
    for block in prange((n_out + BLOCK - 1) // BLOCK):
        j, end = block * BLOCK, min(n_out, block * BLOCK + BLOCK)
        while j + 4 <= end:  # 4 outputs at a time, every row of x
            t = 0
            while t + 4 <= T:
                _tile4(x, rows, out, t, j)
                t += 4
            if t + 2 <= T:
                _tile2(x, rows, out, t, j)
                t += 2
            if t < T:
                _tile1(x, rows, out, t, j)
            j += 4
        for jj in range(j, end):  # the last 1-3 outputs of a matrix whose width is not a multiple of 4
            for t in range(T):
                s = np.float32(0.0)
                for i in range(x.shape[1]):
                    s += x[t, i] * rows[jj, i]
                out[t, jj] = s


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def read_once(rows):  # [out, in] -> float: the sum of every weight, a pass that only streams them
    """Sum every element, the rows shared between numba's threads: the time of one read of the matrix from memory,
    the floor under a 1-row ``matmul_rows`` (``minispec bench forward`` measures it with this kernel's own loads)."""
    n_out = rows.shape[0]
    sums = np.zeros(n_out, np.float32)  # [out]
    for j in prange(n_out):
        s = np.float32(0.0)
        for i in range(rows.shape[1]):
            s += rows[j, i]
        sums[j] = s
    return sums.sum()


def matmul(x: np.ndarray, rows: np.ndarray) -> np.ndarray:  # [T, in], [out, in] -> [T, out]
    """x @ rows.T through ``matmul_rows``, for a float32 ``x`` of any memory layout (made contiguous). Refused: another
    dtype (activations stay float32: a float64 ``x`` is a bug upstream, not something to cast away) and a width that
    is not the matrix's (the compiled loop has no bounds checks)."""
    if not isinstance(x, np.ndarray) or x.ndim != 2 or x.dtype != np.float32:
        raise TypeError(f"the numba kernel multiplies a 2-D float32 x, got {getattr(x, 'dtype', type(x).__name__)} "
                        f"{getattr(x, 'shape', '')}")
    if x.shape[1] != rows.shape[1]:
        raise ValueError(f"x has {x.shape[1]} columns, the weight takes {rows.shape[1]} inputs")
    out = np.empty((x.shape[0], rows.shape[0]), np.float32)  # [T, out]
    if x.shape[0]:
        matmul_rows(np.ascontiguousarray(x), rows, out)
    return out


_BLAS = threadpoolctl.ThreadpoolController()
_BLAS_THREADS = {lib.get("internal_api"): lib["num_threads"] for lib in _BLAS.select(user_api="blas").info()}  # before


def claim_cores() -> None:
    """Keep NumPy's BLAS on one thread from now on in this process: numba's threads run the large products,
    and OpenBLAS's spinning threads would contend with them for the cores (module docstring)."""
    _BLAS.limit(limits=1, user_api="blas")


def blas_limited(numba_runs: bool):
    """A context with BLAS on one thread (``numba_runs``) or on as many as it had before this module loaded."""
    return _BLAS.limit(limits=1 if numba_runs else max(_BLAS_THREADS.values(), default=None), user_api="blas")
