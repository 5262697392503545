"""The thread policy (minispec/model/threads.py): OpenBLAS on cores - 1 threads for the NumPy kernel, numba on every
core, ``MINISPEC_THREADS`` over both; applied inside each pass only; numba's threads spin only where the machine was
quiet when it was loaded."""

import subprocess
import sys
import time

import numpy as np
import pytest

from minispec.model import load_model, threads
from minispec.model.tiny import write_random_model


def blas_threads() -> int:
    return max(lib.num_threads for lib in threads.blas().lib_controllers)


def test_the_policy_leaves_one_core_to_the_machine_for_openblas_and_takes_every_core_for_numba(monkeypatch):
    monkeypatch.delenv("MINISPEC_THREADS", raising=False)
    monkeypatch.setattr(threads, "cores", lambda: 8)
    assert threads.chosen("numpy") == 7 and threads.chosen("numba") == 8
    monkeypatch.setattr(threads, "cores", lambda: 1)
    assert threads.chosen("numpy") == 1 and threads.chosen("numba") == 1
    monkeypatch.setenv("MINISPEC_THREADS", "3")
    assert threads.chosen("numpy") == 3 == threads.chosen("numba")
    for bad in ("0", "two", "-1", "1.5", "²", "٣", "9" * 5000):  # (bug: '²' and '٣' passed isdigit())
        monkeypatch.setenv("MINISPEC_THREADS", bad)
        with pytest.raises(ValueError, match="MINISPEC_THREADS"):
            threads.chosen("numpy")


def test_a_pass_runs_openblas_on_the_chosen_threads_and_gives_them_back(tmp_path, monkeypatch):
    pytest.importorskip("threadpoolctl")
    if not threads.blas().lib_controllers:
        pytest.skip("NumPy's BLAS is not one threadpoolctl controls")
    monkeypatch.setenv("MINISPEC_THREADS", "1")
    model = load_model(write_random_model(tmp_path / "m"), kernel="numpy")
    before, seen = blas_threads(), []
    real = threads.running

    def watched(kernel):
        ctx = real(kernel)

        class Watch:
            def __enter__(self):
                ctx.__enter__()
                seen.append(blas_threads())

            def __exit__(self, *exc):
                return ctx.__exit__(*exc)
        return Watch()

    monkeypatch.setattr(threads, "running", watched)
    model.forward(np.array([1, 2, 3]), model.new_cache(8))
    assert seen == [1] and blas_threads() == before
    assert threads.describe("numpy") == "OpenBLAS on 1 thread(s)"


def test_the_ticks_of_proc_stat_split_into_busy_and_all():
    busy, total = threads.busy_and_total("cpu  100 5 50 1000 20 3 2 7 0 0")
    assert (busy, total) == (100 + 5 + 50 + 3 + 2 + 7, 1187)  # idle and iowait are not busy; steal is
    with pytest.raises(ValueError):
        threads.busy_and_total("cpu 1 2")


def test_numba_spins_only_where_the_rest_of_the_machine_is_quiet():
    assert threads.chosen_spin(0.0) == threads.chosen_spin(threads.QUIET) == threads.QUIET_SPIN > 0
    assert threads.chosen_spin(threads.QUIET + 0.01) == threads.chosen_spin(2.0) == 0
    assert threads.chosen_spin(None) == 0  # not known: no spin, the safe side


def test_a_process_that_spins_beside_the_measurement_counts_as_busy():
    """One process spinning a CPU for the whole window is at least 0.5 CPU busy (other tests running beside it only
    add to the figure), and the choice made from it is not to spin."""
    spinner = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 5\nwhile time.time() < end: pass"])
    try:
        time.sleep(0.3)  # started
        busy = threads.others_busy(window=0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert busy is not None and busy >= 0.5 and threads.chosen_spin(busy) == 0


def test_a_file_that_is_not_proc_stat_falls_back_to_the_load_average(tmp_path, monkeypatch):
    bad = tmp_path / "stat"
    bad.write_text("nothing here\n")
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (7.25, 0.0, 0.0))
    assert threads.others_busy(window=0.0, stat=str(bad)) == 7.25

    def no_load():
        raise OSError("no load average here")

    monkeypatch.setattr(threads.os, "getloadavg", no_load)
    assert threads.others_busy(window=0.0, stat=str(tmp_path / "absent")) is None
    assert threads.chosen_spin(None) == 0


def test_the_cores_are_those_the_process_may_run_on(monkeypatch):
    """A process pinned to one core (taskset, a container's cpuset) plans for one, not the machine's count (bug:
    os.cpu_count, so OpenBLAS and numba oversubscribed the one core)."""
    if not hasattr(threads.os, "sched_getaffinity"):
        pytest.skip("this platform has no CPU affinity (os.sched_getaffinity)")
    monkeypatch.setattr(threads, "_CORES", [])
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 64)
    monkeypatch.delenv("MINISPEC_THREADS", raising=False)
    assert threads.cores() == 1 and threads.chosen("numba") == 1 and threads.chosen("numpy") == 1
