"""`minispec generate` and the policies it builds: what the CLI hands the loops and the trace."""

import json
import math

import pytest

from .helpers import chat_model_dir, run_cli


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return chat_model_dir(tmp_path_factory.mktemp("cli") / "model")


@pytest.mark.parametrize("tree", ["2x2", "auto"])
def test_a_traced_tree_run_writes_its_trace_with_the_speed_models_prediction(model_dir, tmp_path, tree):
    """A tree policy's costs per tree level are not a chain's seconds per guess: the trace's prediction reads the
    drafter's cost per guess (bug: the tree policy's per-level costs, a dict, were multiplied by K and the run
    ended in a TypeError after its output)."""
    path = tmp_path / "run.json"
    code, _, err = run_cli(["generate", "--model", str(model_dir), "--prompt", "a b a b a b", "--draft", "prompt-lookup",
                            "--tree", tree, "--max-new-tokens", "8", "--no-stop", "--no-compare", "--trace", str(path)])
    assert code == 0, err
    summary = json.loads(path.read_text())["summary"]
    assert summary["k"] == f"tree {tree}"  # as --tree was written: auto or 2x2
    assert isinstance(summary["predicted_speedup"], float) and math.isfinite(summary["predicted_speedup"])


@pytest.mark.parametrize("extra, learns", [(["--temperature", "0.8", "--seed", "5"], False),
                                           (["--temperature", "0.8"], False),  # --seed defaults to 0: a seed
                                           (["--temperature", "0", "--seed", "5"], True)],
                         ids=["seeded", "default-seed", "greedy"])
def test_the_cli_builds_its_policy_with_the_loops_rule_for_following_the_clock(model_dir, monkeypatch, extra, learns):
    """The policy ``generate`` builds keeps its calibrated costs exactly when the loops' own rule says so
    (policy.follows_clock: a seeded run at T > 0, so that the seed repeats); a greedy run follows its clock."""
    from minispec import cli

    built = []
    real = cli.k_policy
    monkeypatch.setattr(cli, "k_policy", lambda *a, **kw: built.append(real(*a, **kw)) or built[-1])
    code, _, err = run_cli(["generate", "--model", str(model_dir), "--prompt", "a b a b", "--draft", "prompt-lookup",
                            "--max-new-tokens", "3", "--no-compare", *extra])
    assert code == 0, err
    assert [p.learn for p in built] == [learns]


def test_calibrate_measures_afresh_every_calibration_the_automatic_policies_read(model_dir, monkeypatch):
    """``minispec calibrate`` measures afresh what --k auto and --tree auto read: t(n) for n = 1..9 and for every tree
    (n = 1..17), the drafter's guesses and its tree levels (bug: the tree's t(n) and levels were never refreshed).
    The clock is scripted: every timing is 10 ms, whatever the machine."""
    from minispec.policy import calibration, costs, timing

    ticks = iter(range(10**9))
    monkeypatch.setattr(timing, "clock", lambda: 0.01 * next(ticks))
    monkeypatch.setattr(calibration, "_MEMORY", {})
    asked, real = [], costs.calibrated
    monkeypatch.setattr(costs, "calibrated", lambda key, what, *a: asked.append((key.split("|")[5], what, a[-1])) or real(key, what, *a))
    code, out, err = run_cli(["calibrate", "--model", str(model_dir), "--draft", "layer-skip"])
    assert code == 0, err
    ns = {n for n, _, _ in asked}
    assert {",".join(map(str, range(1, 10))), ",".join(map(str, range(1, 18))), "1,2,3,4", "guess,fed"} <= ns, asked
    assert all(fresh is True for _, _, fresh in asked), asked
    assert "  n     " + "".join(f"{n:>8}" for n in range(1, 18)) in out


def test_a_speedup_beyond_the_tokens_per_pass_is_called_noise(monkeypatch):
    """A run cannot beat plain decoding by more than its tokens per target pass; a measured ratio above that (load
    that fell on the plain run only) is printed as noise, never as a speedup. The runs' seconds are scripted (no
    clock: a unit test asserts no timing)."""
    from types import SimpleNamespace

    from minispec import cli
    from minispec.cli import compare_with_plain
    from minispec.harness.measure import speedup_bound

    assert speedup_bound(30, 10) == 3.0 and speedup_bound(5, 0) is None
    monkeypatch.setattr(cli, "timed", lambda fn: (out := fn(), 0.02 if isinstance(out, list) else 0.01))  # plain: 20
    # ms, a speculative run: 10 ms
    res = SimpleNamespace(tokens=list(range(8)), stats=SimpleNamespace(rounds=8))  # one token a pass: at most 1x
    gen = SimpleNamespace(plain=lambda: list(range(8)), policy=lambda: None, speculative=lambda pol: res)
    ratios, words = compare_with_plain(gen)  # 2x measured
    assert max(ratios) > 1 and "noise, not a speedup" in words and "speedup 1" not in words, words
    fair = SimpleNamespace(tokens=list(range(8)), stats=SimpleNamespace(rounds=1))  # 8 a pass: up to 8x
    gen.speculative = lambda pol: fair
    ratios, words = compare_with_plain(gen)
    assert ratios == [2.0] * 3 and "noise" not in words and "speedup 2.00x" in words, words
    runs = iter([res, fair, fair])  # bounds 1, 8 and 8: the median (2x) is within the median bound, one run is not
    gen.speculative = lambda pol: next(runs)
    ratios, words = compare_with_plain(gen)
    assert "speedup 2.00x" in words and "1 of them above their tokens per target pass: noise" in words, words
    gen.speculative = lambda pol: SimpleNamespace(tokens=list(range(8)), stats=SimpleNamespace(rounds=0))
    ratios, words = compare_with_plain(gen)  # no pass counted: no bound, so the figure stands (bug: None > float)
    assert "speedup 2.00x" in words and "noise" not in words, words


def test_a_long_run_is_compared_with_plain_decoding_in_two_alternating_pairs(monkeypatch):
    """A run of SHORT_RUN_S or more is timed against plain decoding twice, the second pair in the other order, so that
    load that comes or goes between two runs falls on both sides (bug: one speculative run, then one plain run)."""
    from types import SimpleNamespace

    from minispec import cli

    order = []

    def timed(fn):
        out = fn()
        order.append("plain" if isinstance(out, list) else "speculative")
        return out, 7.0 if isinstance(out, list) else 3.5  # long runs: plain 7 s, speculative 3.5 s

    monkeypatch.setattr(cli, "timed", timed)
    res = SimpleNamespace(tokens=list(range(8)), stats=SimpleNamespace(rounds=2))  # 4 tokens a pass
    gen = SimpleNamespace(plain=lambda: list(range(8)), policy=lambda: None, speculative=lambda pol: res)
    ratios, words = cli.compare_with_plain(gen)
    assert order == ["speculative", "plain", "plain", "speculative"] and ratios == [2.0, 2.0], (order, ratios)
    assert "median of 2 alternating runs)" in words and "speedup 2.00x" in words, words


def test_a_busy_machine_is_named_beside_the_speed_figures(monkeypatch):
    """The other processes' load before the run or after it, above 0.5, is printed beside its speed, and so is a cost
    model whose timings disagreed; a quiet run adds nothing."""
    from minispec import cli
    from minispec.policy import Calibration
    from minispec.policy.calibration import PROBE_SLOWER, REMEASURED

    assert cli.busy_words(None) == "" and cli.busy_words(0.3) == ""
    assert "the machine was busy (load average 2.41" in cli.busy_words(2.41)
    monkeypatch.setattr(cli, "others_load", lambda: 0.1)  # quiet at the end
    assert cli.busy_note(0.2) == "" and cli.busy_note(None) == ""
    assert "load average 1.30" in cli.busy_note(1.3)  # busy before
    monkeypatch.setattr(cli, "others_load", lambda: 1.7)  # load that began during the run (bug: not read)
    assert "load average 1.70" in cli.busy_note(0.2)
    monkeypatch.setattr(cli, "others_load", lambda: 0.1)
    steady = Calibration("t(n)", {1: 0.03}, notes=["the stored figures were slower than a probe now (...): scaled to it"])
    assert cli.busy_note(0.2, [steady, None]) == ""
    for note in (f"{PROBE_SLOWER} (t(1) stored 30 ms, a probe now 60 ms); the stored figures stand",
                 f"{REMEASURED}: t(5) = 20.1 ms < t(4) = 35.0 ms"):
        cal = Calibration("t(n)", {1: 0.03}, notes=[note])
        assert "the cost model's own timings disagreed" in cli.busy_note(0.2, [steady, cal]), note
        assert "busy" not in cli.busy_note(0.2, [steady, cal])  # the load did not say so
