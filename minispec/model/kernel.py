"""The kernel: which code multiplies a few rows by a weight matrix, chosen when a model is loaded.

- ``numpy`` (the default and the reference): ``x @ w`` through NumPy's BLAS, with ``blas.skinny_matmul``
  for 2 or more rows. Weights are [in, out] arrays.
- ``numba`` (optional: ``pip install -e ".[fast]"``): ``numba_kernel.matmul``, which reads each weight once for
  every row, in tiles chosen for the CPU. Weights are packed once, at load, as a ``PackedMatrix``: the same numbers
  stored by output rows ([out, in], the file's own layout), and no second copy. Its norms, RoPE and attention
  (``numba_layers.py``, the model's ``ops``) compute each row alone; with that and tiles that all keep the same
  number of sums, a row's logits do not depend on the pass (batch-invariant rows, numba_kernel.py).

The seams are ``transformer.linear(x, w)`` and ``Model.ops`` (a ``transformer.Ops``; None: NumPy's). A weight is
either an array (NumPy multiplies it) or a ``PackedMatrix``, the one declared type of a weight that multiplies itself
(``w.rmatmul(x)``). So the layer functions read the same under both kernels. ``Q4Matrix`` is the one other kind of ``PackedMatrix``: a matrix the
numba kernel keeps and multiplies in the GGUF's 4-bit Q4_1 blocks, when the model directory stores them
(``minispec convert --q4_1``); the NumPy kernel reads such a directory dequantized, as its reference.

A kernel is chosen, in this order, by the ``kernel=`` argument of ``load_model``, by ``use_kernel`` (what
``--kernel`` on the command line calls), or by ``$MINISPEC_KERNEL``; else it is ``numpy``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys

import numpy as np

from .q4_1 import QK, Q4Blocks, dequantize

KERNELS = ("numpy", "numba")
INSTALL = 'pip install -e ".[fast]"  (numba and threadpoolctl from PyPI)'
_chosen: str | None = None  # set by use_kernel


class KernelUnavailable(RuntimeError):
    """The numba kernel was asked for and numba is not installed."""


def check_kernel(name) -> str:
    """``name`` if it is a known kernel whose packages are installed; else a clear error."""
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}: use one of {', '.join(KERNELS)}")
    if name == "numba":  # found, not imported: numba_kernel sets numba's CPU features before its first import
        missing = [m for m in ("numba", "threadpoolctl") if importlib.util.find_spec(m) is None]
        if missing:
            raise KernelUnavailable(f"the numba kernel needs numba and threadpoolctl ({', '.join(missing)} missing): "
                                    f"install them with {INSTALL}")
    return name


def use_kernel(name: str) -> str:
    """Choose the kernel for every model loaded afterwards without a ``kernel=`` argument."""
    global _chosen
    _chosen = check_kernel(name)
    return _chosen


def default_kernel() -> str:
    """The kernel a model gets when ``load_model`` is not told: ``use_kernel``'s, else $MINISPEC_KERNEL's, else numpy."""
    if _chosen is not None:
        return _chosen
    env = os.environ.get("MINISPEC_KERNEL", "").strip()
    if env and env not in KERNELS:
        raise ValueError(f"MINISPEC_KERNEL={env!r} is not a kernel: use one of {', '.join(KERNELS)}")
    return check_kernel(env or "numpy")


def blas_threads(kernel: str):
    """A context in which NumPy's BLAS runs as ``kernel`` needs it: the process's own threads for numpy, one
    thread for numba (whose threads and OpenBLAS's contend for the cores: numba_kernel.py). Loading a model
    with the numba kernel sets that one thread for the whole process; the benchmarks compare kernels in one
    run by entering this around each kernel's measurements."""
    if kernel == "numpy" and "minispec.model.numba_kernel" not in sys.modules:
        return contextlib.nullcontext()
    from . import numba_kernel

    return numba_kernel.blas_limited(kernel == "numba")


class PackedMatrix:
    """A weight ``w`` [in, out] packed for the numba kernel: its rows ``w.T`` [out, in], C-contiguous. (Its one
    subclass, ``Q4Matrix``, stores Q4_1 blocks instead; there ``np.asarray(w)`` is a dequantized copy, not a view.)

    ``rmatmul(x)`` is ``x @ w``. It behaves as the [in, out] matrix where NumPy asks for an array
    (``np.asarray(w)`` is a view, ``w.shape`` is [in, out]), so code that reads a weight (the EAGLE head's
    reduced head, a test) sees the same matrix under both kernels."""

    def __init__(self, rows: np.ndarray):  # rows [out, in]
        if rows.ndim != 2 or rows.dtype != np.float32 or not rows.flags.c_contiguous:
            raise ValueError(f"a packed weight is a C-contiguous float32 [out, in] matrix, got {rows.dtype} "
                             f"{rows.shape} (contiguous: {rows.flags.c_contiguous})")
        from . import numba_kernel  # imported here, once per weight: NumPy-kernel runs never load numba

        self.rows = rows  # [out, in]
        self._matmul = numba_kernel.matmul

    def rmatmul(self, x):  # [T, in] -> [T, out]
        return self._matmul(x, self.rows)

    def __array__(self, dtype=None, copy=None):  # [in, out]: a view of the rows unless a copy is asked for or needed
        w = self.rows.T
        if copy is False and dtype is not None and np.dtype(dtype) != w.dtype:
            raise ValueError(f"a {np.dtype(dtype)} array of this float32 weight needs a copy")
        if copy:
            return np.array(w, dtype=dtype, copy=True)
        return w if dtype is None else w.astype(dtype, copy=False)

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows.shape[::-1]

    @property
    def dtype(self):
        return self.rows.dtype

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes

    def __repr__(self) -> str:
        return f"PackedMatrix([in, out] = {list(self.shape)}, stored by rows)"


class Q4Matrix(PackedMatrix):
    """A weight [in, out] kept in the GGUF's Q4_1 blocks (``q4_1.py``) for the numba kernel, and multiplied in them:
    ``rmatmul(x)`` is ``x @ w`` through ``numba_kernel.q4_1_rows``, which unpacks each weight once for all rows.

    Stored by columns, for that kernel: ``qt`` [in/32, 16, out] (byte i of block b of output j at [b, i, j]), ``dt`` and
    ``mt`` [in/32, out]. Departure from ggml: d and m are widened to float32 at load (8 bytes a block, 4 more than the
    file's float16), so that the kernel reads them without converting. So the matrix takes 6 bits a weight in
    memory, against 32 as float32. ``np.asarray(w)`` dequantizes it, a new float32 [in, out]
    array, bitwise what ``recipes/convert.py`` writes as float32 from the same GGUF."""

    def __init__(self, blocks: Q4Blocks):  # blocks of the [out, in] matrix, as the file stores them
        from . import numba_kernel  # imported here, once per weight: NumPy-kernel runs never load numba

        self.qt = np.ascontiguousarray(blocks.qs.transpose(1, 2, 0))  # [in/32, 16, out]
        self.dt = np.ascontiguousarray(blocks.d.T, dtype=np.float32)  # [in/32, out]
        self.mt = np.ascontiguousarray(blocks.m.T, dtype=np.float32)  # [in/32, out]
        self._matmul = numba_kernel.q4_1_matmul

    def rmatmul(self, x):  # [T, in] -> [T, out]
        return self._matmul(x, self.qt, self.dt, self.mt)

    def blocks(self) -> Q4Blocks:
        """The blocks by rows again, as ``q4_1.py`` and the file hold them ([out, in/32, 16] and [out, in/32])."""
        return Q4Blocks(self.qt.transpose(2, 0, 1), self.dt.T, self.mt.T)

    def __array__(self, dtype=None, copy=None):  # [in, out], dequantized: always a new array
        if copy is False:
            raise ValueError("a Q4_1 weight has no float32 array to view: np.asarray(w) dequantizes it into a copy")
        w = dequantize(self.blocks()).T  # [in, out]
        return w if dtype is None else w.astype(dtype)

    @property
    def shape(self) -> tuple[int, int]:
        return self.qt.shape[0] * QK, self.qt.shape[2]

    @property
    def dtype(self):
        return np.dtype(np.float32)  # what it multiplies to and dequantizes to

    @property
    def nbytes(self) -> int:
        return self.qt.nbytes + self.dt.nbytes + self.mt.nbytes

    def __repr__(self) -> str:
        return f"Q4Matrix([in, out] = {list(self.shape)}, Q4_1 blocks stored by columns)"


def pack(w, kernel: str):  # [in, out] -> the weight ``linear`` reads under ``kernel``
    """A weight read from a file in the [in, out] layout (the EAGLE head's) in the layout of ``kernel``; under numba
    this copies it once into rows, and the caller drops the original."""
    if kernel == "numpy" or not isinstance(w, np.ndarray):  # a CuPy array stays as it is
        return w
    if w.ndim != 2:
        raise ValueError(f"only a matrix is packed, got shape {w.shape}")
    return PackedMatrix(np.ascontiguousarray(np.asarray(w, dtype=np.float32).T))
