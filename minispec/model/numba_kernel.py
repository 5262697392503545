"""The numba kernel: ``x @ w`` for a few rows, reading each weight once for all of them (its norms, RoPE and
attention, row by row: numba_layers.py).

Read it as ``out = x @ w``, with ``w`` stored by rows (``rows = w.T``, [out, in]: the Hugging Face
file's own layout). Why it is faster than NumPy's BLAS for verification: a decode step is bound by
streaming the weights from memory, 538 MB for SmolLM2-135M. OpenBLAS's sgemm is built for large
blocks and is far slower than its gemv over a few rows, and ``blas.skinny_matmul`` runs one gemv per
row, reading each column block from the cache once per row: r(2) = t(2)/t(1) is 1.4-1.6 there. Here each output's weight row is loaded from
memory once, and every input row is multiplied by it while it sits in registers and L1: the rows
after the first add arithmetic, not traffic (llamafile's tinyBLAS does the same in C++). How flat r(n)
stays then depends on how much of that arithmetic hides behind the stream: ``minispec bench forward``.

The work is cut into tiles of running sums, over the shared dimension, that the compiler keeps in vector registers.
How many fit depends on the CPU, so the tiles come from a table keyed by its features (``TILES``, ``sums_per_tile``):
- 16 sums where the CPU has 32 vector registers (AVX-512): 4 rows by 4 outputs, then 2 rows by 8 outputs and 1 row
  by 16 outputs for the rows left over (``matmul_tiles16``);
- 8 sums where it has 16 (AVX2 and older): 2 rows by 4 outputs, and 1 row by 8 outputs for an odd last row
  (``matmul_tiles8``). With 16 sums there, the compiler keeps some on the stack and moves them in and out on every
  step of the loop.
``MINISPEC_TILE_SUMS=8`` or ``16`` forces an entry (read at import); the tests call each entry directly, on any
CPU. Output blocks of ``BLOCK`` columns are shared between the cores (``prange``).

**Batch-invariant rows.** A row's logits are bitwise the same whatever the number of rows in the pass and the row's
place in it (``python -m minispec.harness.batch_invariance``; tests/test_batch_invariance.py). So greedy
speculative output equals plain greedy output token for token, near-ties included. Two things give it:
- every tile of a table entry keeps the same number of sums (16, or 8), so the compiler vectorizes each tile's loop
  the same way and a sum is split into the same vector lanes whichever tile computes it. A 1-row tile of 4 outputs
  (4 sums) beside 4-row tiles of 16, as this kernel had before, is vectorized another way and rounds differently
  (the test's twin);
- attention computes each (row, head) alone (``numba_layers.attention_rows``): its sums over the keys run strictly
  in key order, so the masked keys of a longer pass add exact zeros; NumPy's attention multiplies all the rows at
  once through BLAS, whose blocking depends on the number of rows. The norms and RoPE are loops over one row too.
This holds for the compiler and CPU the tests run on: LLVM chooses the vectorization. The rest of the forward
(SwiGLU's gate, the residual sums) is NumPy's, element by element, which the same measurement finds invariant.

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

A third setting decides how it fares on a busy machine. numba usually runs ``prange`` on OpenMP (GNU libgomp; TBB
where the ``tbb`` package is installed), whose threads spin at the end of every parallel loop until the others
arrive: 300,000 turns of a ``pause`` instruction by default. A pass runs about 120 such loops, so beside busy
processes, while one thread waits for a core, the other burns its share of the machine spinning. But a thread that
sleeps at once must be woken at every loop, which costs a quiet machine dearly where waking a thread is slow
(docs/speed.md, "A busy machine"). ``SPIN`` bounds the spin, after which a waiting thread sleeps, and is chosen when
this module is imported, from what other processes are doing then (``threads.chosen_spin``): ``threads.QUIET_SPIN``
turns where the machine is quiet, none where it is busy. It is set as ``GOMP_SPINCOUNT``, which libgomp reads once,
when numba starts its threads (at the first parallel loop or ``numba.set_num_threads``), unless ``GOMP_SPINCOUNT`` or
``OMP_WAIT_POLICY`` is set already (``GOMP_SPINCOUNT=0`` keeps a run from spinning whatever the machine): then
``SPIN`` is that ``GOMP_SPINCOUNT``, or None for a wait set otherwise. A ``GOMP_SPINCOUNT`` with ``threads.SPIN_MARK``
beside it, as a parent process that imported this module leaves them to its children, is chosen again. It does
nothing where another library loaded libgomp first, or under TBB. Busy processes that start after the choice meet the
threads as they were chosen.
"""

from __future__ import annotations

import os
import sys

import numpy as np

if "numba" not in sys.modules and "NUMBA_CPU_FEATURES" not in os.environ:  # see the module docstring
    import llvmlite.binding as _llvm

    _llvm.initialize_native_target()
    os.environ["NUMBA_CPU_FEATURES"] = _llvm.get_host_cpu_features().flatten() + ",-prefer-256-bit"

from .threads import SPIN_MARK, chosen_spin, others_busy  # noqa: E402

if "OMP_WAIT_POLICY" not in os.environ and os.environ.get("GOMP_SPINCOUNT") in (None, os.environ.get(SPIN_MARK)):
    SPIN = chosen_spin(others_busy())  # turns of libgomp's spin before a waiting thread sleeps (module docstring)
    os.environ["GOMP_SPINCOUNT"] = os.environ[SPIN_MARK] = str(SPIN)  # read when numba's OpenMP layer starts
else:  # the user's wait (threads.omp_wait names it)
    SPIN = int(os.environ["GOMP_SPINCOUNT"]) if os.environ.get("GOMP_SPINCOUNT", "").isdigit() else None

import numba  # noqa: E402, F401
import threadpoolctl  # noqa: E402
from numba import njit, prange  # noqa: E402

BLOCK = 32  # outputs per parallel task: 32 weight rows, 74-197 KB for SmolLM2's matrices
FASTMATH = {"reassoc", "contract"}  # sums in any order and fused multiply-adds; NaN and infinity still propagate


@njit(fastmath=FASTMATH, inline="always")
def _tile4x4(x, rows, out, t, j):  # out[t:t+4, j:j+4] = x[t:t+4] @ rows[j:j+4].T
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
def _tile2x8(x, rows, out, t, j):  # out[t:t+2, j:j+8] = x[t:t+2] @ rows[j:j+8].T
    w0, w1, w2, w3, w4, w5, w6, w7 = rows[j], rows[j + 1], rows[j + 2], rows[j + 3], rows[j + 4], rows[j + 5], rows[j + 6], rows[j + 7]
    x0, x1 = x[t], x[t + 1]  # [in] each
    z = np.float32(0.0)
    s00 = s01 = s02 = s03 = s04 = s05 = s06 = s07 = s10 = s11 = s12 = s13 = s14 = s15 = s16 = s17 = z
    for i in range(x.shape[1]):
        a, b, c, d, e, f, g, h = w0[i], w1[i], w2[i], w3[i], w4[i], w5[i], w6[i], w7[i]  # 8 weights, each used by 2 rows
        s00 += x0[i] * a; s01 += x0[i] * b; s02 += x0[i] * c; s03 += x0[i] * d  # noqa: E702
        s04 += x0[i] * e; s05 += x0[i] * f; s06 += x0[i] * g; s07 += x0[i] * h  # noqa: E702
        s10 += x1[i] * a; s11 += x1[i] * b; s12 += x1[i] * c; s13 += x1[i] * d  # noqa: E702
        s14 += x1[i] * e; s15 += x1[i] * f; s16 += x1[i] * g; s17 += x1[i] * h  # noqa: E702
    r0, r1 = out[t], out[t + 1]  # [out] each
    r0[j], r0[j + 1], r0[j + 2], r0[j + 3], r0[j + 4], r0[j + 5], r0[j + 6], r0[j + 7] = s00, s01, s02, s03, s04, s05, s06, s07
    r1[j], r1[j + 1], r1[j + 2], r1[j + 3], r1[j + 4], r1[j + 5], r1[j + 6], r1[j + 7] = s10, s11, s12, s13, s14, s15, s16, s17


@njit(fastmath=FASTMATH, inline="always")
def _tile1x16(x, rows, out, t, j):  # out[t, j:j+16] = x[t] @ rows[j:j+16].T
    w = rows[j: j + 16]  # [16, in]
    x0 = x[t]  # [in]
    z = np.float32(0.0)
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = s8 = s9 = s10 = s11 = s12 = s13 = s14 = s15 = z
    for i in range(x.shape[1]):
        u = x0[i]  # 1 input, used by 16 weights
        s0 += u * w[0, i]; s1 += u * w[1, i]; s2 += u * w[2, i]; s3 += u * w[3, i]  # noqa: E702
        s4 += u * w[4, i]; s5 += u * w[5, i]; s6 += u * w[6, i]; s7 += u * w[7, i]  # noqa: E702
        s8 += u * w[8, i]; s9 += u * w[9, i]; s10 += u * w[10, i]; s11 += u * w[11, i]  # noqa: E702
        s12 += u * w[12, i]; s13 += u * w[13, i]; s14 += u * w[14, i]; s15 += u * w[15, i]  # noqa: E702
    r = out[t]  # [out]
    r[j], r[j + 1], r[j + 2], r[j + 3], r[j + 4], r[j + 5], r[j + 6], r[j + 7] = s0, s1, s2, s3, s4, s5, s6, s7
    r[j + 8], r[j + 9], r[j + 10], r[j + 11], r[j + 12], r[j + 13], r[j + 14], r[j + 15] = s8, s9, s10, s11, s12, s13, s14, s15


@njit(fastmath=FASTMATH, inline="always")
def _tile2x4(x, rows, out, t, j):  # out[t:t+2, j:j+4] = x[t:t+2] @ rows[j:j+4].T
    w0, w1, w2, w3 = rows[j], rows[j + 1], rows[j + 2], rows[j + 3]  # [in] each: loaded once per tile
    x0, x1 = x[t], x[t + 1]  # [in] each
    z = np.float32(0.0)
    s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = z
    for i in range(x.shape[1]):
        a, b, c, d = w0[i], w1[i], w2[i], w3[i]  # 4 weights, each used by 2 rows
        s00 += x0[i] * a; s01 += x0[i] * b; s02 += x0[i] * c; s03 += x0[i] * d  # noqa: E702
        s10 += x1[i] * a; s11 += x1[i] * b; s12 += x1[i] * c; s13 += x1[i] * d  # noqa: E702
    out[t, j], out[t, j + 1], out[t, j + 2], out[t, j + 3] = s00, s01, s02, s03
    out[t + 1, j], out[t + 1, j + 1], out[t + 1, j + 2], out[t + 1, j + 3] = s10, s11, s12, s13


@njit(fastmath=FASTMATH, inline="always")
def _tile1x8(x, rows, out, t, j):  # out[t, j:j+8] = x[t] @ rows[j:j+8].T
    w = rows[j: j + 8]  # [8, in]
    x0 = x[t]  # [in]
    z = np.float32(0.0)
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = z
    for i in range(x.shape[1]):
        u = x0[i]  # 1 input, used by 8 weights
        s0 += u * w[0, i]; s1 += u * w[1, i]; s2 += u * w[2, i]; s3 += u * w[3, i]  # noqa: E702
        s4 += u * w[4, i]; s5 += u * w[5, i]; s6 += u * w[6, i]; s7 += u * w[7, i]  # noqa: E702
    r = out[t]  # [out]
    r[j], r[j + 1], r[j + 2], r[j + 3], r[j + 4], r[j + 5], r[j + 6], r[j + 7] = s0, s1, s2, s3, s4, s5, s6, s7


@njit(fastmath=FASTMATH, inline="always")
def _last_outputs(x, rows, out, j, end):  # out[:, j:end] = x @ rows[j:end].T, one sum at a time
    for jj in range(j, end):  # the last outputs of a matrix whose width is not a multiple of a tile's: each row
        for t in range(x.shape[0]):  # by the same loop, whatever T
            s = np.float32(0.0)
            for i in range(x.shape[1]):
                s += x[t, i] * rows[jj, i]
            out[t, jj] = s


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def matmul_tiles16(x, rows, out):  # [T, in], [out, in], [T, out] -> writes out = x @ rows.T
    """``out = x @ rows.T`` in tiles of 16 sums (module docstring): every task takes BLOCK weight rows, 16 at a time,
    and applies each group of 16 to every row of ``x`` before moving on, so that each weight leaves memory once."""
    T, n_out = x.shape[0], rows.shape[0]
    for block in prange((n_out + BLOCK - 1) // BLOCK):
        j, end = block * BLOCK, min(n_out, block * BLOCK + BLOCK)
        while j + 16 <= end:  # 16 outputs at a time, every row of x
            for jj in range(j, j + 16, 4):  # 4 outputs x 4 rows at a time: 4 weight rows stay in L1 for all of x
                t = 0
                while t + 4 <= T:  # rows t..t+3
                    _tile4x4(x, rows, out, t, jj)
                    t += 4
            t = T - T % 4  # the 0-3 rows left
            if t + 2 <= T:  # 2 rows x 16 outputs, as two 2 x 8 tiles
                _tile2x8(x, rows, out, t, j)
                _tile2x8(x, rows, out, t, j + 8)
                t += 2
            if t < T:  # 1 row x 16 outputs
                _tile1x16(x, rows, out, t, j)
            j += 16
        _last_outputs(x, rows, out, j, end)


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def matmul_tiles8(x, rows, out):  # [T, in], [out, in], [T, out] -> writes out = x @ rows.T
    """``out = x @ rows.T`` in tiles of 8 sums (module docstring), BLOCK weight rows per task, 8 at a time."""
    T, n_out = x.shape[0], rows.shape[0]
    for block in prange((n_out + BLOCK - 1) // BLOCK):
        j, end = block * BLOCK, min(n_out, block * BLOCK + BLOCK)
        while j + 8 <= end:  # 8 outputs at a time, every row of x
            for jj in range(j, j + 8, 4):  # 4 outputs x 2 rows at a time: 4 weight rows stay in L1 for all of x
                t = 0
                while t + 2 <= T:  # rows t, t+1
                    _tile2x4(x, rows, out, t, jj)
                    t += 2
            if T % 2:  # the last row, x 8 outputs
                _tile1x8(x, rows, out, T - 1, j)
            j += 8
        _last_outputs(x, rows, out, j, end)


TILES = {16: matmul_tiles16, 8: matmul_tiles8}  # running sums per tile -> the product


def sums_per_tile(cpu_features: str) -> int:
    """The tiles for a CPU, from the features numba compiles for (``NUMBA_CPU_FEATURES``' form: "+avx2,-avx512f,..."):
    16 sums on an x86 CPU with AVX-512, whose 32 vector registers hold a 4x4 tile's 16 sums, its 4 weights and an
    input; 8 on every other, where AVX2's 16 registers do not hold them and the sums go to the stack and back on
    every step (measured: docs/policy.md). Other CPUs (ARM's NEON has 32 registers) get 8 too: not measured."""
    return 16 if "+avx512f" in cpu_features.split(",") else 8


def chosen_sums() -> int:
    """``MINISPEC_TILE_SUMS`` (a key of ``TILES``) where it is set, to force an entry; else ``sums_per_tile`` of the
    features numba compiles for. Read once, when this module is imported (``SUMS``)."""
    forced = os.environ.get("MINISPEC_TILE_SUMS", "").strip()
    if forced:
        if forced not in [str(k) for k in TILES]:
            raise ValueError(f"MINISPEC_TILE_SUMS={forced!r}: the numba kernel has tiles of "
                             f"{' or '.join(str(k) for k in sorted(TILES))} sums")
        return int(forced)
    return sums_per_tile(os.environ.get("NUMBA_CPU_FEATURES") or _host_features())


def _host_features() -> str:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    return llvm.get_host_cpu_features().flatten()


SUMS = chosen_sums()  # this process's tiles (module docstring)


@njit(cache=True)  # no fastmath: each weight rounded as q4_1.dequantize rounds it, q d, then + m
def _unpack_q4_1(q, d, m, lo, hi):  # [16, W] bytes, [W] d, [W] m -> lo, hi [16, W]: the two weights each byte holds
    """Block b's bytes for W outputs: the low 4 bits of q[i, j] are output j's weight for input i of the block, the
    high 4 bits its weight for input i + 16 (``q4_1.py``); w = q d + m. The halves come from a float (q = 16 h + l)
    rather than from integer shifts, so that numba's loop vectorizer takes the loop (its integer halves, widened to
    int64, do not vectorize)."""
    for i in range(16):
        for j in range(q.shape[1]):
            qf = np.float32(q[i, j])
            h = np.floor(qf * np.float32(0.0625))  # exact: q / 16, rounded down
            lo[i, j] = (qf - np.float32(16) * h) * d[j] + m[j]
            hi[i, j] = h * d[j] + m[j]


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def q4_1_rows(x, qt, dt, mt, width, out):  # [T, in], [in/32, 16, out] uint8, [in/32, out] float32 twice, W, [T, out]
    """``out = x @ w`` for a Q4_1 matrix ``w`` stored by columns (``kernel.Q4Matrix``). Each task owns ``width``
    outputs; for each block of 32 inputs it unpacks their weights once into float32 (a buffer of 32 KB at most, in
    the core's cache), then adds them, times the inputs, into every row's running sums. Every long loop runs over the
    outputs, which numba vectorizes; each row goes through the same loop, so its sums take the inputs in the same
    order, by the same operations, whatever T is: rows are batch-invariant. (A body for 4 rows at a time, sharing
    each load of the weights, was tried and dropped: docs/policy.md.)
    Departures from ggml: the weights are laid out by columns, not rows (a block's 32 weights of one row, read along
    the row, make loops of 16 that numba leaves scalar); llama.cpp also quantizes the inputs (Q8_1) and multiplies
    integers, where here they stay float32."""
    T, nb, n_out = x.shape[0], qt.shape[0], qt.shape[2]
    for task in prange((n_out + width - 1) // width):
        j0, j1 = task * width, min(n_out, task * width + width)
        acc = np.zeros((T, j1 - j0), np.float32)  # [T, W]: each row's running sums
        lo = np.empty((16, j1 - j0), np.float32)  # [16, W]: weights of inputs 0..15 of the block
        hi = np.empty((16, j1 - j0), np.float32)  # [16, W]: weights of inputs 16..31
        for b in range(nb):
            _unpack_q4_1(qt[b, :, j0:j1], dt[b, j0:j1], mt[b, j0:j1], lo, hi)
            for i in range(16):
                e = b * 32 + i
                wl, wh = lo[i], hi[i]  # [W] each
                for t in range(T):  # every row by the same loop: its sums do not depend on T
                    a, u, v = acc[t], x[t, e], x[t, e + 16]  # [W], and the row's 2 inputs
                    for j in range(j1 - j0):
                        a[j] += wl[j] * u + wh[j] * v
        out[:, j0:j1] = acc


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def read_once(rows):  # [out, in] -> float: the sum of every weight, a pass that only streams them
    """Sum every element, the rows shared between numba's threads: the time of one read of the matrix from memory,
    the floor under a 1-row ``matmul`` (``minispec bench forward`` measures it with this kernel's own loads)."""
    n_out = rows.shape[0]
    sums = np.zeros(n_out, np.float32)  # [out]
    for j in prange(n_out):
        s = np.float32(0.0)
        for i in range(rows.shape[1]):
            s += rows[j, i]
        sums[j] = s
    return sums.sum()


def check_x(x, n_in: int) -> None:
    """Refuse what the compiled loops cannot take: an x that is not a 2-D float32 array (activations stay float32: a
    float64 x is a bug upstream, not something to cast away) and a width that is not the weight's ``n_in`` (the loops
    have no bounds checks)."""
    if not isinstance(x, np.ndarray) or x.ndim != 2 or x.dtype != np.float32:
        raise TypeError(f"the numba kernel multiplies a 2-D float32 x, got {getattr(x, 'dtype', type(x).__name__)} "
                        f"{getattr(x, 'shape', '')}")
    if x.shape[1] != n_in:
        raise ValueError(f"x has {x.shape[1]} columns, the weight takes {n_in} inputs")


def matmul(x: np.ndarray, rows: np.ndarray) -> np.ndarray:  # [T, in], [out, in] -> [T, out]
    """x @ rows.T through this CPU's tiles (``TILES[SUMS]``), for a float32 ``x`` of any memory layout (made contiguous). Refused: another
    dtype (activations stay float32: a float64 ``x`` is a bug upstream, not something to cast away) and a width that
    is not the matrix's (the compiled loop has no bounds checks)."""
    check_x(x, rows.shape[1])
    out = np.empty((x.shape[0], rows.shape[0]), np.float32)  # [T, out]
    if x.shape[0]:
        TILES[SUMS](np.ascontiguousarray(x), rows, out)
    return out


def q4_1_matmul(x: np.ndarray, qt: np.ndarray, dt: np.ndarray, mt: np.ndarray) -> np.ndarray:  # [T, in] -> [T, out]
    """x @ w for a Q4_1 matrix stored by columns (qt, dt, mt: ``kernel.Q4Matrix``) through ``q4_1_rows``, refusing
    what ``matmul`` refuses."""
    check_x(x, qt.shape[0] * 32)
    out = np.empty((x.shape[0], qt.shape[2]), np.float32)  # [T, out]
    if x.shape[0]:
        q4_1_rows(np.ascontiguousarray(x), qt, dt, mt, q4_1_width(qt.shape[2]), out)
    return out


def q4_1_width(n_out: int) -> int:
    """Outputs per task of ``q4_1_rows``: about 4 tasks per thread (so that even a 576-wide matrix gives every thread work),
    a multiple of 16 (whole vectors), at most 256 (each row's sums, 1 KB, stay in L1). It depends on the matrix and
    the threads, never on the rows: rows stay batch-invariant."""
    per_task = -(-n_out // (4 * numba.get_num_threads()))
    return int(min(256, max(16, -(-per_task // 16) * 16)))


_BLAS = threadpoolctl.ThreadpoolController()
_BLAS_THREADS = {lib.get("internal_api"): lib["num_threads"] for lib in _BLAS.select(user_api="blas").info()}  # before


def claim_cores() -> None:
    """Keep NumPy's BLAS on one thread from now on in this process: numba's threads run the large products,
    and OpenBLAS's spinning threads would contend with them for the cores (module docstring)."""
    _BLAS.limit(limits=1, user_api="blas")


def blas_limited(numba_runs: bool):
    """A context with BLAS on one thread (``numba_runs``) or on as many as it had before this module loaded."""
    return _BLAS.limit(limits=1 if numba_runs else max(_BLAS_THREADS.values(), default=None), user_api="blas")
