"""Every example runs, with small settings, so none can rot."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args):
    r = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_01_rejection_rule():
    out = run("examples/01_rejection_rule.py", "--draws", "20000")
    assert "real rule  , exact   [0.5  0.3  0.15 0.05]" in out
    assert "BROKEN rule, exact   [0.35  0.35  0.225 0.075]" in out
    assert ": PASS against the threshold 0.001" in out and ": caught (below 0.001)" in out


def test_04_early_stop():
    out = run("examples/04_early_stop.py", "--draws", "20000")
    assert "before the draw, exact   [0.5  0.3  0.15 0.05]" in out
    assert "after the draw , exact   [0.55  0.19  0.195 0.065]" in out
    assert "(largest difference" in out and ": PASS (a failure needs p below 1e-3)" in out and ": caught." in out


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf")
    from minispec.recipes.fetch import fetch_smollm2

    return fetch_smollm2(log=lambda m: None)


def test_02_speculative_generate(smollm2):
    out = run("examples/02_speculative_generate.py", "--max-new-tokens", "12", "--draft", "prompt-lookup")
    assert "identical to plain greedy decoding: True" in out and "speedup" in out
    assert "What this showed: greedy speculative output is identical" in out and "nan" not in out


@pytest.mark.slow
def test_03_drafters(smollm2):
    out = run("examples/03_drafters.py", "--prompts", "1", "--max-new-tokens", "8")
    assert "outputs identical: True" in out and "prompt-lookup" in out and "layer-skip" in out
    assert "target steps" in out and "take away" in out and "nan" not in out


def test_05_rules():
    out = run("examples/05_rules.py")
    assert "  block        1.2222 guesses kept per round; lossless" in out  # 11/9 on the paper's example
    assert "  token-wise   1.1111 guesses kept per round; lossless" in out  # 10/9
    assert "  coupled      1.1111 guesses kept per round; lossless" in out  # two tokens: as much as token-wise
    assert "  coupled      0.2886 guesses kept per round; lossless" in out  # the table: a little less
    assert "  typical      2.0000 guesses kept per round; NOT lossless" in out
    assert "verdict: PASS" in out


def test_06_trace_leaves_nothing_in_the_clone(smollm2, tmp_path):
    """Its pages go to a new temporary folder (issue 45: it left an untracked traces/ folder in the clone)."""
    def untracked():  # the clone's files git does not know (and does not ignore)
        return subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True,
                              text=True).stdout.split()

    before = untracked()
    r = subprocess.run([sys.executable, "examples/06_trace.py", "--max-new-tokens", "4"], cwd=ROOT, capture_output=True,
                       text=True, timeout=900, env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("minispec-traces-*/*")) == ["draft.html", "draft.json",
                                                                          "prompt-lookup.html", "prompt-lookup.json"]
    assert set(untracked()) <= set(before), sorted(set(untracked()) - set(before))


@pytest.mark.slow
def test_07_same_text_any_drafter(smollm2):
    out = run("examples/07_same_text_any_drafter.py", "--max-new-tokens", "12")
    assert "identical texts (coupled): True" in out and "verdict: PASS" in out
    assert "draft:smoldraft-3l-192" in out and "eagle:" in out and "prompt-lookup" in out


def test_00_tiny_loop():
    """The whole loop on tiny random models: rounds printed, greedy output equal to plain decoding."""
    out = run("examples/00_tiny_loop.py")
    assert "round  1: guesses" in out and "kept" in out and "tokens per pass" in out
    assert "identical: the rule keeps a guess" in out, out
    plain = next(line for line in out.splitlines() if line.startswith("plain decoding"))
    spec = next(line for line in out.splitlines() if line.startswith("speculative"))
    assert plain.split(":", 1)[1] == spec.split(":", 1)[1]
    sampled = run("examples/00_tiny_loop.py", "--temperature", "1", "--k", "2")
    assert "follow the target's distribution" in sampled and "identical" not in sampled


@pytest.mark.parametrize("args, says", [(["02_speculative_generate.py", "--max-new-tokens", "0"], "--max-new-tokens at least 1"),
                                        (["03_drafters.py", "--prompts", "0"], "--prompts and --max-new-tokens must be"),
                                        (["06_trace.py", "--out", "README.md"], "exists and is not a directory")])
def test_an_example_refuses_its_arguments_before_it_loads_the_model(args, says):
    """(bug: --max-new-tokens 0 divided by zero after three timed runs, --prompts 0 ran every prompt, an --out that
    is a file raised after the model load)"""
    r = subprocess.run([sys.executable, f"examples/{args[0]}", *args[1:], "--model", "/nonexistent"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and says in r.stderr  # refused first: the missing --model is never reached
