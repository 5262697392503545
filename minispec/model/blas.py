"""The matrix product of a few rows, shaped for a CPU's BLAS: the lever behind a cheap verification.

Read it as ``x @ w``: the result is the same product. Why it exists: verifying K guesses costs one
target pass over K + 1 rows, and speculation pays only if that pass costs little more than a
1-row pass (r(n) = t(n) / t(1) near 1). With a plain ``x @ w``, OpenBLAS (numpy's wheel) runs a gemm
over a few rows at several times the cost of its gemv over one (docs/findings.md gives r(2) and r(6) as
measured), where for a decode step bound by streaming the weights the extra rows should be almost free;
and its gemm is faster on a multiple of 8 rows than on 6 (``ROW_MULTIPLE``). So for 2..SMALL_BATCH rows we run one gemv per row, column block by
column block, while the block is still in cache for the next row; above that we pad the rows to a
multiple of 8. What r(n) this gives on SmolLM2-135M depends on the CPU: ``minispec bench forward``
measures it, and docs/speed.md gives the committed figures with the machine they were measured on.
"""

from __future__ import annotations

import numpy as np

SMALL_BATCH = 4  # up to this many rows, one gemv per row beats OpenBLAS's gemm
ROW_MULTIPLE = 8  # OpenBLAS's gemm is fastest for a multiple of 8 rows: 8 rows cost less than 6
CACHE_BYTES = 8 << 20  # weight column blocks of about this size stay in the last-level cache


def skinny_matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:  # [T, in], [in, out] -> [T, out]
    """x @ w for a NumPy x of T >= 2 rows, shaped for OpenBLAS (module docstring)."""
    T = x.shape[0]
    if T > SMALL_BATCH:
        pad = -T % ROW_MULTIPLE
        if pad == 0:
            return x @ w
        return (np.concatenate([x, np.zeros((pad, x.shape[1]), dtype=x.dtype)]) @ w)[:T]
    out = np.empty((T, w.shape[1]), dtype=np.float32)  # [T, out]
    block = max(256, CACHE_BYTES // (4 * w.shape[0]))
    for j in range(0, w.shape[1], block):
        wb = w[:, j: j + block]  # [in, block], a view
        for t in range(T):
            np.matmul(x[t], wb, out=out[t, j: j + block])
    return out
