"""The threads a model's matrix products run on: one policy, declared here, for both kernels, and applied by
``Model.forward`` around each pass (``threads.running(kernel)``), so that nothing outside a pass changes.

Threads that wait for work spin, and a spinning thread holds a core. Threads of one pass then stall each other on a
machine whose cores are busy: beside two busy processes, a 2-vCPU AMD EPYC ran a SmolLM2 step many times slower
with OpenBLAS on both cores than on one, and a 2-vCPU Intel Xeon many times slower with numba's threads waiting as
libgomp does by default (the measurements and how they were taken: docs/speed.md, "A busy machine"). So:

    numpy   OpenBLAS on cores - 1 threads (at least 1): one core is left to the rest of the machine
    numba   numba's threads on every core, OpenBLAS on one (numba_kernel.py: the two would contend); a waiting
            OpenMP thread spins at most numba_kernel.SPIN turns (GOMP_SPINCOUNT), then sleeps: QUIET_SPIN turns
            where other processes kept QUIET CPUs or fewer busy when numba_kernel was imported (``others_busy``),
            none where they kept more (``chosen_spin``)

``MINISPEC_THREADS=N`` asks for N threads instead, for either kernel. ``threadpoolctl`` finds OpenBLAS, whose
threads are set inside a pass; without it, OpenBLAS keeps the threads it started with (``describe`` says so).
A pass sets OpenBLAS's only where they differ, and puts them back after it: a tiny model's pass takes well under a
millisecond, and threadpoolctl's ``limit`` context costs about a tenth of one. numba's are set by each pass of a
numba model (``running``) and left so: every numba pass sets its own.
"""

from __future__ import annotations

import contextlib
import os
import time

_BLAS = []  # the threadpoolctl controller of NumPy's BLAS, made on first use (it scans the loaded libraries)
_CORES = []  # the cores this process may run on, read once: it reads /sys on Linux, and a pass asks for it


def cores() -> int:
    """The cores this process may run on: its CPU affinity where the platform has one (a container or ``taskset``
    may give it fewer than the machine has; bug: ``os.cpu_count`` counted the machine's), else ``os.cpu_count``."""
    if not _CORES:
        _CORES.append(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    return _CORES[0]


def chosen(kernel: str) -> int:
    """The threads ``kernel``'s products run on: ``$MINISPEC_THREADS``, else the policy above."""
    env = os.environ.get("MINISPEC_THREADS", "").strip()
    if env:
        # (bug: isdigit() let '²' through, to an int() error that named nothing): a few ASCII digits only
        if not (env.isascii() and env.isdigit() and len(env) <= 9 and int(env) >= 1):
            raise ValueError(f"MINISPEC_THREADS={env!r:.80} must be a whole number of threads, 1 or more (ASCII digits, "
                             "at most 9)")
        return int(env)
    n = cores()
    return n if kernel == "numba" else max(1, n - 1)


QUIET = 0.5  # CPUs other processes may keep busy for the machine to count as quiet (issue 45's "busy": above 0.5
# besides a run's own threads; busy_bench.QUIET_LOAD is the same bound on the 1-minute load average)
QUIET_SPIN = 10000  # turns a waiting OpenMP thread spins on a quiet machine (docs/speed.md, "A busy machine")
SPIN_MARK = "MINISPEC_SPIN_CHOSEN_BY_PARENT"  # beside GOMP_SPINCOUNT, the value numba_kernel chose (not a setting):
# a child process that inherits both chooses its own spin


def busy_and_total(stat_line: str) -> tuple[int, int]:
    """(busy, total) clock ticks of /proc/stat's first line ("cpu user nice system idle iowait irq softirq steal
    ..."): busy is all but idle and iowait; steal counts as busy (a hypervisor's other guests hold the cores)."""
    ticks = [int(x) for x in stat_line.split()[1:9]]  # user .. steal (guest time is already in user)
    if len(ticks) < 5:
        raise ValueError(f"not a /proc/stat cpu line: {stat_line!r}")
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def load_average() -> float | None:
    """The 1-minute load average; None where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def others_busy(window: float = 0.1, stat: str = "/proc/stat") -> float | None:
    """How many CPUs other processes kept busy over the next ``window`` seconds: the machine's busy time (/proc/stat)
    less this process's own (its threads may run while it sleeps); where there is no /proc/stat, the 1-minute load
    average (which counts this process too); None where neither can be read."""
    try:
        with open(stat) as f:
            b0, t0 = busy_and_total(f.readline())
        own, start = time.process_time(), time.monotonic()
        time.sleep(window)
        own, elapsed = time.process_time() - own, time.monotonic() - start
        with open(stat) as f:
            b1, t1 = busy_and_total(f.readline())
    except (OSError, ValueError):
        return load_average()
    return max(0.0, cores() * (b1 - b0) / max(t1 - t0, 1) - own / max(elapsed, 1e-9))


def chosen_spin(busy: float | None) -> int:
    """numba_kernel.SPIN for a machine whose other processes keep ``busy`` CPUs busy: QUIET_SPIN turns where it is
    quiet (a thread that sleeps at once takes a wake-up at every parallel loop, 120 of them a pass), none where it is
    busy or cannot be told (a spinning thread holds a core another process wants)."""
    return QUIET_SPIN if busy is not None and busy <= QUIET else 0


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


def describe(kernel: str, spin: bool = True) -> str:
    """The policy in use, in words. ``spin=False``: the wait numba_kernel chose from the load (its ``SPIN``) is named
    without its number, as a calibration's key names it: a key that held it missed a quiet run's figures whenever a
    run began busy, and measured afresh at length."""
    n = chosen(kernel)
    if kernel == "numba":
        return f"numba on {n} thread(s) ({omp_wait(spin)}), OpenBLAS on 1"
    return f"OpenBLAS on {n} thread(s)" + ("" if blas() is not None else " asked, not applied: threadpoolctl is missing")


def omp_wait(spin: bool = True) -> str:
    """How numba's OpenMP threads wait at the end of a parallel loop, as libgomp reads it from the environment;
    ``spin=False``: "the kernel's own spin" where numba_kernel chose it (``SPIN_MARK`` beside it), a user's wait
    named in full either way."""
    policy, turns = os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT")
    if turns is not None:
        return "the kernel's own spin" if not spin and os.environ.get(SPIN_MARK) == turns else f"GOMP_SPINCOUNT={turns}"
    return f"OMP_WAIT_POLICY={policy}" if policy is not None else "libgomp's default wait"
