"""``minispec bench``'s subcommands come from one table (harness/bench_commands.py): each entry runs, and both
helps list exactly the table's names."""

import importlib

import pytest

from minispec.harness.bench_commands import SUBCOMMANDS, summary
from minispec.model import kernel

from .helpers import run_cli


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_every_subcommand_is_dispatched_to_its_function(name, monkeypatch):
    monkeypatch.setattr(kernel, "_chosen", None)  # restored after: --kernel sets the process's default
    module, function = SUBCOMMANDS[name][0].split(":")
    seen = []
    monkeypatch.setattr(importlib.import_module(module), function, lambda argv: seen.append(argv) or 7)
    code, _, _ = run_cli(["bench", name, "--kernel", "numpy", "--x", "1"])
    assert code == 7
    want = ["--kernel", "numpy", "--x", "1"] if name in ("forward", "decode") else ["--x", "1"]  # the others: applied
    assert seen == [want]


def test_both_helps_list_the_table():
    _, top, _ = run_cli(["--help"])
    _, study, _ = run_cli(["bench", "--help"])
    assert ", ".join(SUBCOMMANDS) in " ".join(top.split())
    assert all(f"`{name}`" in " ".join(study.split()) for name in SUBCOMMANDS)
    assert summary().count("`") == 2 * len(SUBCOMMANDS)


def test_the_harness_index_names_every_file():
    from pathlib import Path

    import minispec.harness as harness

    files = {p.name for p in Path(harness.__file__).parent.glob("*.py")} - {"__init__.py"}
    missing = [f for f in sorted(files) if f not in harness.__doc__]
    assert not missing, f"harness/__init__.py's index leaves out {missing}"


@pytest.mark.parametrize("argv", [["bench", "auto"], ["bench", "rules"], ["bench", "stop"], ["bench", "draft"],
                                  ["bench", "eagle"], ["bench", "vocab", "--no-peer"], ["bench", "decode"], ["bench"]])
def test_a_bad_model_directory_is_refused_by_name(argv, tmp_path):
    """Every command loads its target through harness/command.py: a --model that is not a model directory is
    refused with its path, before anything is measured."""
    missing = tmp_path / "no-such-model"
    code, _, err = run_cli([*argv, "--model", str(missing), *(["--draft", "layer-skip"] if argv[1:2] == ["stop"] else [])])
    assert code != 0 and str(missing) in err, err


def test_a_json_file_in_a_missing_directory_is_refused_before_loading(tmp_path):
    for name in ("auto", "rules", "draft", "eagle"):
        code, _, err = run_cli(["bench", name, "--model", str(tmp_path / "never-read"), "--json", str(tmp_path / "no" / "x.json")])
        assert code != 0 and "does not exist" in err and "never-read" not in err, (name, err)


def test_the_shipped_drafters_are_listed_once(monkeypatch):
    from minispec.harness import command

    monkeypatch.setattr(command, "shipped_draft", lambda: "D")
    monkeypatch.setattr(command, "shipped_eagle", lambda: None)
    monkeypatch.setattr(command, "shipped_bpe_draft", lambda: "B")
    assert command.shipped_drafters() == ["D", "tli:B", "slem:B"]
    assert command.shipped_drafters(own_tokenizer=("tli",)) == ["D", "tli:B"]


@pytest.mark.parametrize("argv", [["bench", "--out", "FILE"], ["bench", "vocab", "--out", "FILE"],
                                  ["bench", "power", "--out", "FILE", "--repeats", "1", "--sizes", "2"]])
def test_an_out_that_is_a_file_is_refused_before_the_runs(argv, tmp_path, monkeypatch):
    """(bug: the study, the cross-vocabulary runs and the power study ran first, then failed to write)"""
    from minispec.harness import bench, crossvocab_eval, power

    (tmp_path / "FILE").write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    for module in (bench, crossvocab_eval):
        monkeypatch.setattr(module, "load_target", lambda *a, **k: pytest.fail("the target loaded"))
    monkeypatch.setattr(power, "power_study", lambda *a, **k: pytest.fail("the study ran"))
    code, _, err = run_cli(argv)
    assert code == 2 and "--out FILE: exists and is not a directory" in err
    assert (tmp_path / "FILE").read_text() == "mine\n"


@pytest.mark.parametrize("module, argv, says", [
    ("batch_invariance", ["--kernels", "numpy,nmba"], "unknown kernel 'nmba'"),
    ("near_ties", ["--json", "cases.json", "--kernels", "numpy,nmba"], "unknown kernel 'nmba'"),
    ("batch_invariance", ["--kernels", ","], "--kernels names no kernel: give one or more of numpy, numba")])
def test_an_unknown_kernel_is_refused_before_the_first_kernels_runs(module, argv, says, monkeypatch, capsys):
    """(bug: refused only after every run of the first kernel, and its record lost)"""
    from minispec.recipes import fetch

    for name in ("fetch_smollm2", "resolve_model"):
        monkeypatch.setattr(fetch, name, lambda *a, **k: pytest.fail("the model was fetched or loaded"))
    with pytest.raises(SystemExit) as e:
        importlib.import_module(f"minispec.harness.{module}").main(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["auto", "--prompts", "0"], ["auto", "--repeats", "0"], ["rules", "--seeds", "0"],
                                  ["stop", "--prompts-per-set", "0"], ["draft", "--speed-prompts", "0"],
                                  ["eagle", "--max-new-tokens", "-1"], ["--prompts-per-set", "0"]])
def test_a_count_below_1_is_refused_by_name(argv):
    """(bug: --prompts 0 ran every prompt; --repeats 0 and --seeds 0 failed after the models loaded)"""
    code, _, err = run_cli(["bench", *argv])
    assert code == 2 and f"argument {argv[-2]}: {argv[-1]} is not at least 1" in err


def test_a_prompt_limit_of_0_is_no_prompt():
    from minispec.harness.prompts import load_prompts

    assert load_prompts("code", None, 0) == [] and len(load_prompts("code", None, 2)) == 2
    with pytest.raises(ValueError, match="limit must be 0 or more"):
        load_prompts("code", None, -2)


def test_bench_decode_stores_its_figures_with_their_provenance_and_kernel(tmp_path):
    """(bug: no --json: its committed figure, an early docs/decode_vs_transformers.txt, had no date, commit or machine; and its
    memory child ran under $MINISPEC_KERNEL, not the kernel the rest was measured with)"""
    import json

    from .helpers import chat_model_dir

    model = chat_model_dir(tmp_path / "m")
    code, out, err = run_cli(["bench", "decode", "--model", str(model), "--max-new-tokens", "3", "--repeats", "1",
                              "--kernel", "numpy", "--json", str(tmp_path / "d.json")])
    assert code == 0, err
    r = json.loads((tmp_path / "d.json").read_text())
    assert r["kernel"] == "numpy" and len(r["minispec_tok_s"]) == 1 and r["peak_rss_bytes"] > 0
    assert {"date", "commit", "command", "machine"} <= set(r["provenance"]) and "load_before" in r
    assert "kernel numpy" in out


def test_bench_forward_refuses_a_second_model_of_one_format_before_timing_it(tmp_path, monkeypatch):
    """(bug: both were timed, then the second refused)"""
    from minispec.harness import bench
    from minispec.model.tiny import tiny_config, write_random_model

    a, b = (write_random_model(tmp_path / n, tiny_config(), seed=s) for n, s in (("a", 1), ("b", 2)))
    timed = []
    real = bench.forward_times
    monkeypatch.setattr(bench, "forward_times", lambda model, *x, **k: timed.append(model.path) or real(model, *x, **k))
    with pytest.raises(ValueError, match="a second float32 model"):
        bench.bench_forward(["--model", str(a), "--model", str(b), "--ns", "1,2", "--repeats", "1", "--kernel", "numpy"])
    assert [str(p) for p in timed] == [str(a)]
