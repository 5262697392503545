"""The busy-machine benchmark's parts (minispec/harness/busy_bench.py): it runs README's own command, it never calls a
run quiet that the load average says was busy, and its busy processes end when it is done."""

import os
from pathlib import Path

from minispec.harness import busy_bench, example_times

ROOT = Path(__file__).resolve().parents[1]


def test_it_runs_the_command_readme_gives():
    cmd = busy_bench.readme_command(ROOT / "README.md")
    assert cmd[:2] == ["minispec", "generate"] and "--prompt" in cmd
    assert " ".join(cmd[:2]) + " " in (ROOT / "README.md").read_text()


def test_a_part_is_quiet_only_when_the_load_says_so(monkeypatch):
    loads = iter([0.2, 0.3, 0.9, 0.4])
    monkeypatch.setattr(busy_bench, "load", lambda: next(loads))
    assert busy_bench.part(lambda: {"seconds": 1.0}, busy=False)["quiet"] is True
    assert busy_bench.part(lambda: {"seconds": 1.0}, busy=False)["quiet"] is False  # 0.9 before it: not quiet
    monkeypatch.setattr(busy_bench, "load", lambda: 0.3)
    assert busy_bench.part(lambda: {"seconds": 1.0, "said_busy": True}, busy=False)["quiet"] is False  # its own word


def test_the_busy_processes_spin_and_end():
    with busy_bench.Busy(n=2, limit=30) as busy:
        assert all(p.poll() is None for p in busy.procs)  # running
        pids = [p.pid for p in busy.procs]
    assert all(p.poll() is not None for p in busy.procs)
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive = True
        except OSError:
            alive = False
        assert not alive


def test_the_examples_list_names_what_each_shows():
    assert example_times.first_line(ROOT / "examples" / "00_tiny_loop.py").startswith("The whole loop")


def test_a_step_child_gets_the_spin_asked_for_and_no_other(monkeypatch, tmp_path):
    seen = []

    class Done:  # a child that reports the GOMP_SPINCOUNT it was started with, as STEP does
        returncode, stderr = 0, ""

        def __init__(self, env):
            self.stdout = f"0.025 {env.get('GOMP_SPINCOUNT', '-')} {env.get('MINISPEC_THREADS', '1')}\n"

    monkeypatch.setattr(busy_bench.subprocess, "run", lambda cmd, env, **kw: seen.append(env) or Done(env))
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")  # the caller's setting must not leak into a row it does not name
    monkeypatch.setenv("MINISPEC_SPIN_CHOSEN_BY_PARENT", "0")  # nor the caller's own choice: the child makes its own
    monkeypatch.setenv("MINISPEC_THREADS", "5")  # nor the caller's thread count
    assert busy_bench.step_run(tmp_path, "numba", 2, 5, spin=0) == dict(seconds=0.025, spin=0, threads=2)
    assert busy_bench.step_run(tmp_path, "numba", 2, 5) == dict(seconds=0.025, spin=None, threads=2)  # what it saw
    assert seen[0]["GOMP_SPINCOUNT"] == "0" and "OMP_WAIT_POLICY" not in seen[0]
    assert "MINISPEC_SPIN_CHOSEN_BY_PARENT" not in seen[0]  # else the child would take the 0 asked for as its own
    assert "GOMP_SPINCOUNT" not in seen[1] and "OMP_WAIT_POLICY" not in seen[1]  # the kernel's own, numba_kernel.SPIN
    assert busy_bench.step_run(tmp_path, "numba", None, 5)["threads"] == 1  # the policy's own: no count given
    assert not {"MINISPEC_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS"} & set(seen[2])


def test_bad_spins_are_refused_before_anything_runs(capsys):
    assert busy_bench.main(["--numba-spins", "10,x"]) == 2
    assert "--numba-spins" in capsys.readouterr().err
    assert busy_bench.main(["--numba-spins", "-5"]) == 2
    assert busy_bench.main(["--numba-spins", "0", "--kernels", "numpy"]) == 2  # no numba rows to add it to
    assert busy_bench.main(["--numba-spins", "0", "--readme-only"]) == 2


def test_a_failed_or_hung_example_is_no_time(tmp_path, monkeypatch, capsys):
    """A failed example's record is not written to --json (bug: its seconds were, and docs/reading.md showed them as
    the example's time); one still running at the limit is stopped and named (bug: TimeoutExpired lost every time
    measured before it); a record holding a failure is refused by the examples table."""
    import json

    import pytest

    from minispec.harness import busy_figures

    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "00_ok.py").write_text('"""Runs."""\n')
    (tmp_path / "examples" / "01_fails.py").write_text('"""Fails."""\nraise SystemExit(3)\n')
    (tmp_path / "examples" / "02_hangs.py").write_text('"""Hangs."""\nimport time\ntime.sleep(30)\n')
    monkeypatch.setattr(example_times, "ROOT", tmp_path)
    monkeypatch.setattr(example_times, "settle", lambda s: None)
    monkeypatch.setattr(example_times, "TIMEOUT", 2)
    out = tmp_path / "times.json"
    assert example_times.main(["--json", str(out)]) == 1
    record = json.loads(capsys.readouterr().out)["examples"]
    assert [record[n]["returncode"] for n in ("00_ok.py", "01_fails.py", "02_hangs.py")] == [0, 3, None]
    assert not out.exists()
    assert example_times.main(["--json", str(out), "--only", "0"]) == 0 and out.exists()
    (tmp_path / "docs" / "examples").mkdir(parents=True)
    record["01_fails.py"]["quiet"] = True
    (tmp_path / busy_figures.EXAMPLES).write_text(json.dumps(dict(examples=record, provenance={})))
    with pytest.raises(ValueError, match="01_fails.py failed"):
        busy_figures.examples_table(tmp_path)


def test_readme_only_without_its_json_is_refused_before_the_wait(monkeypatch, capsys):
    """(bug: it waited up to --settle seconds for a quiet machine first)"""
    import pytest

    monkeypatch.setattr(busy_bench, "settle", lambda s: pytest.fail("waited"))
    assert busy_bench.main(["--readme-only"]) == 2
    assert "--readme-only keeps the steps of an existing --json file" in capsys.readouterr().err
