"""The threads a model's matrix products run on: one policy, declared here, for both kernels, and applied by
``Model.forward`` around each pass (``model.threads()``), so that nothing outside a pass changes.

Threads that wait for work spin, and a spinning thread holds a core. Threads of one pass then stall each other on a
machine whose cores are busy: beside two busy processes, a 2-vCPU AMD EPYC ran a SmolLM2 step many times slower
with OpenBLAS on both cores than on one, and a 2-vCPU Intel Xeon many times slower with numba's threads waiting as
libgomp does by default (the measurements and how they were taken: docs/speed.md, "A busy machine"). So:

    numpy   OpenBLAS on cores - 1 threads (at least 1): one core is left to the rest of the machine
    numba   numba's threads on every core, OpenBLAS on one (numba_kernel.py: the two would contend); a waiting
            OpenMP thread spins at most numba_kernel.SPIN turns (GOMP_SPINCOUNT), then sleeps

``MINISPEC_THREADS=N`` asks for N threads instead, for either kernel. ``threadpoolctl`` finds OpenBLAS, whose
threads are set inside a pass; without it, OpenBLAS keeps the threads it started with (``describe`` says so).
A pass sets them only where they differ, and puts back what it changed: a tiny model's pass takes well under a
millisecond, and threadpoolctl's ``limit`` context costs about a tenth of one.
"""

from __future__ import annotations

import contextlib
import os

_BLAS = []  # the threadpoolctl controller of NumPy's BLAS, made on first use (it scans the loaded libraries)
_CORES = []  # os.cpu_count(), read once: it reads /sys on Linux, and a pass asks for it


def cores() -> int:
    """The machine's cores, as ``os.cpu_count`` gives them (at least 1)."""
    if not _CORES:
        _CORES.append(os.cpu_count() or 1)
    return _CORES[0]


def chosen(kernel: str) -> int:
    """The threads ``kernel``'s products run on: ``$MINISPEC_THREADS``, else the policy above."""
    env = os.environ.get("MINISPEC_THREADS", "").strip()
    if env:
        if not (env.isdigit() and int(env) >= 1):
            raise ValueError(f"MINISPEC_THREADS={env!r} must be a whole number of threads, 1 or more")
        return int(env)
    n = cores()
    return n if kernel == "numba" else max(1, n - 1)


def blas():
    if not _BLAS:
        try:
            import threadpoolctl
            _BLAS.append(threadpoolctl.ThreadpoolController().select(user_api="blas"))
        except ImportError:
            _BLAS.append(None)
    return _BLAS[0]


def running(kernel: str):
    """A context for one pass of a ``kernel`` model: OpenBLAS on the policy's threads (numpy), or on one (numba,
    whose own threads are set once, numba_kernel.py)."""
    if kernel == "numba":
        import numba
        numba.set_num_threads(min(chosen(kernel), numba.config.NUMBA_NUM_THREADS))
    controller = blas()
    if controller is None:
        return contextlib.nullcontext()
    return _blas_on(controller.lib_controllers, chosen(kernel) if kernel == "numpy" else 1)


@contextlib.contextmanager
def _blas_on(libs, n: int):
    """OpenBLAS (each library threadpoolctl found) on ``n`` threads inside the context, as before it after."""
    before = [lib.get_num_threads() for lib in libs]
    for lib, b in zip(libs, before):
        if b != n:
            lib.set_num_threads(n)
    try:
        yield
    finally:
        for lib, b in zip(libs, before):
            if b != n:
                lib.set_num_threads(b)


def describe(kernel: str) -> str:
    """The policy in use, in words."""
    n = chosen(kernel)
    if kernel == "numba":
        return f"numba on {n} thread(s) ({omp_wait()}), OpenBLAS on 1"
    return f"OpenBLAS on {n} thread(s)" + ("" if blas() is not None else " asked, not applied: threadpoolctl is missing")


def omp_wait() -> str:
    """How numba's OpenMP threads wait at the end of a parallel loop, as libgomp reads it from the environment."""
    policy, spin = os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT")
    if spin is not None:
        return f"GOMP_SPINCOUNT={spin}"
    return f"OMP_WAIT_POLICY={policy}" if policy is not None else "libgomp's default wait"
