"""The thread policy (minispec/model/threads.py): OpenBLAS on cores - 1 threads for the NumPy kernel, numba on every
core, ``MINISPEC_THREADS`` over both; applied inside each pass only."""

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
    for bad in ("0", "two", "-1", "1.5"):
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
