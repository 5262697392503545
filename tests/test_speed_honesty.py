"""Issue 45, "Speed figures that cannot lie": no printed speedup exceeds what its run's tokens per target pass allow (a
figure that does is reported as noise, not as a speedup), and a figure measured on a busy machine says so beside it.

Every report here is fed fake results, scripted so that a run's speedup exceeds its tokens per target pass; the clocks
and the side-by-side timings are replaced (a unit test asserts no timing), and no model runs.
"""

import importlib.util
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from minispec.harness import command, measure

ROOT = Path(__file__).resolve().parents[1]


def run(tokens: int, rounds: int, drafted: int = 0, accepted: int = 0):
    """A speculative run's result: ``tokens`` emitted in ``rounds`` target passes."""
    stats = SimpleNamespace(rounds=rounds, accepted=accepted, drafted=drafted, position_accepted=[accepted],
                            position_drafted=[drafted], rounds_log=[(drafted, accepted)] + [(0, 0)] * (rounds - 1),
                            time_draft=0.0, mean_tokens_per_pass=tokens / rounds)
    return SimpleNamespace(tokens=list(range(tokens)), stats=stats)


def busy(monkeypatch):
    """The 1-minute load average read as 10,000, far above what this process can add to it on any machine (others_load
    takes its own CPU use off): a busy machine."""
    monkeypatch.setattr(os, "getloadavg", lambda: (1e4, 1e4, 1e4))


def example(name: str):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), ROOT / "examples" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_words_of_a_bounded_speedup():
    assert measure.speedup_bound(30, 10) == 3.0 and measure.speedup_bound(8, 0) is None  # no passes: no bound
    assert command.noise_count([1.2, 2.0, 0.9], [1.0, 3.0, None]) == 1
    assert command.median_bound([1.0, 3.0, 2.0]) == 2.0 and command.median_bound([1.0, None]) is None
    assert command.noise_marks(1.5, 2.0) == "" and command.noise_marks(1.5, None, 0, 3) == ""
    assert command.noise_marks(1.5, 2.0, 1, 3) == " (1 of 3 noise)"
    assert command.noise_marks(2.5, 2.0, 2, 3) == " noise (2 of 3)"
    assert command.noise_words(1.5, 2.0) == "1.50x"
    assert "2.50x, which is noise, not a speedup: a run of 2.00 tokens per target pass" in command.noise_words(2.5, 2.0)
    assert command.noise_note(0, 9) == [] and "3 of 9 prompts" in command.noise_note(3, 9, "prompts")[1]


def test_example_02_prints_a_speedup_beyond_its_tokens_per_pass_as_noise():
    ex = example("02_speculative_generate.py")
    line = ex.speed_line(10.0, 20.0, 40, 40)  # 2x measured, one token a pass: at most 1x
    assert "2.00x, which is noise, not a speedup" in line and "speedup 2.00x" not in line, line
    assert "is noise" in ex.speed_shown(2.0, 40, 40, 4)
    fair = ex.speed_line(10.0, 20.0, 40, 10)  # 4 tokens a pass: up to 4x
    assert fair.endswith("speedup 2.00x") and "noise" not in ex.speed_shown(2.0, 40, 10, 4)


def test_example_03_prints_a_speedup_beyond_its_tokens_per_pass_as_noise():
    ex = example("03_drafters.py")
    assert ex.speed_cell(1.4, 40, 40) == "1.40 noise" and ex.speed_cell(1.4, 40, 20) == "1.40"
    assert ex.speed_verdict(1.4, 40, 40).startswith("measured 1.40x, which is noise, not a speedup")
    assert ex.speed_verdict(1.4, 40, 20) == "pays at 1.40x" and "noise" not in ex.speed_verdict(0.8, 40, 40)


def study_result(speeds_and_passes, load=None) -> dict:
    """A study of one drafter at K = 2, greedy, over prompts of "code": each prompt's run made 8 tokens in the given
    passes and ran at the given speedup (plain decoding at 1 token a second, so a speedup is 8 over its seconds)."""
    from minispec.harness import study

    cfg = study.Config(drafter="d", k=2, setting="greedy")
    for speedup, passes in speeds_and_passes:
        cfg.record(run(8, passes, drafted=4, accepted=2), 8 / speedup, 1.0, "code")
    rows = [study.summary_row(cfg, "d", {"d": 0.1}, {1: 1.0, 2: 1.1, 3: 1.2})]
    return dict(machine=dict(cpu="cpu", cpus=1, python="3.11", numpy="2"), target="t", prompts_per_set=len(rows),
                prompt_sets=["code"], max_new_tokens=8, baseline_tok_s={"greedy": 1.0}, context_for_costs=16,
                target_step_ms=1.0, forward_ms={1: 1.0}, r={1: 1.0}, draft_step_ms={"d": 0.1}, c={"d": 0.1},
                rows=rows, best=study.best_rows(rows, ["greedy"], ["d"]), seconds=60.0, settings=["greedy"],
                memory=dict(models=[], used_context=16, peak_rss_bytes=1e6), load_before=load, load_after=load)


def test_the_studys_report_calls_a_speedup_beyond_its_tokens_per_pass_noise():
    from minispec.harness import study

    # three prompts at 8 tokens in 8 passes (at most 1x each): two measured 1.3x and 1.2x, noise; the median 1.2x too
    res = study_result([(1.3, 8), (1.2, 8), (0.9, 8)])
    row = res["rows"][0]
    assert row["noise"] == 2 and row["runs"] == 3 and row["speedup_bound"] == 1.0  # fields added beside the old ones
    assert row["by_prompt_set"]["code"]["noise"] == 2 and row["speedup"] == pytest.approx(1.2)
    text = study.format_report(res, [])
    assert "1.20x (1.05-1.25) noise (2 of 3)" in text, text  # the headline, every configuration, per prompt set
    assert "code 0.50 / 1.00 / 1.20x noise (2 of 3)" in text
    assert "Noise: 2 of 3 runs measured faster than their tokens per target pass allow" in text
    honest = study.format_report(study_result([(1.3, 4), (1.2, 4), (0.9, 4)]), [])  # 2 tokens a pass: up to 2x
    assert " noise" not in honest and "Noise" not in honest


def test_the_studys_report_names_a_busy_machine(monkeypatch):
    from minispec.harness import measure, study

    busy(monkeypatch)
    text = study.format_report(study_result([(0.9, 4)], load=measure.others_load()), [])
    assert "[the machine was busy (load average" in text and "the speed figures here are unreliable]" in text
    assert "busy" not in study.format_report(study_result([(0.9, 4)], load=0.1), [])


def test_bench_autos_report_counts_the_prompts_whose_speedup_was_noise():
    from minispec.harness.auto_eval import report

    rounds = dict(drafting=1.1, plain=1.0, drafted_share=0.4)
    d = dict(speedup=dict(code=1.2, chat=1.0, grounded=1.0), rounds=rounds, notes=[],
             by_prompt=dict(code=[1.1, 1.2, 1.3], chat=[0.98, 1.0, 1.05], grounded=[1.0, 1.0, 1.0]),
             by_prompt_tokens_per_pass=dict(code=[1.0, 1.0, 2.0], chat=[1.0, 1.0, 1.0], grounded=[2.0, 2.0, 2.0]))
    control = dict(d, by_prompt_tokens_per_pass={s: [None] * 3 for s in d["by_prompt"]})  # plain: no passes counted
    text = report(dict(tokens=64, repeats=2, calibration="honest", drafters={"eagle": d, "plain (control)": control},
                       load_before=0.1, load_after=0.1))
    assert "| eagle | 1.20x noise (2 of 3) (lowest 1.10x) | 1.00x (1 of 3 noise) (lowest 0.98x) | 1.00x (lowest 1.00x) |" \
        in text, text
    assert "| plain (control) | 1.20x (lowest 1.10x) |" in text  # the control is held to no bound
    assert "Noise: 3 of 9 prompts measured faster than their tokens per target pass allow" in text


def test_bench_specbench_marks_a_task_above_its_tau_and_counts_its_questions():
    from minispec.harness import specbench

    def question(qid, task, seconds, passes):  # plain: 8 tokens in 8 s; the method: 8 tokens in `seconds`
        method = dict(tokens=8, seconds=seconds, target_passes=passes, identical=True, differences=[])
        return dict(question_id=qid, task=task, plain=dict(tokens=8, seconds=8.0), methods={"m": method}, peers={})

    rows = [question(1, "qa", 4.0, 8), question(2, "qa", 8.0, 8), question(3, "rag", 4.0, 2)]  # qa: 2x and 1x at 1
    # token a pass; rag: 2x at 4 tokens a pass
    summary = specbench.summarise(rows, ["m"], [])
    qa, rag = summary["methods"]["m"]["tasks"]["qa"], summary["methods"]["m"]["tasks"]["rag"]
    assert qa["noise"] == 1 and qa["tau"] == 1.0 and qa["speedup"] == pytest.approx(4 / 3) and rag["noise"] == 0
    text = specbench.report(dict(summary=summary, settings=dict(max_new_tokens=8), questions=3, peers_note="none",
                                 skipped={}))
    assert "| m | 1.33x noise (1 of 2) (1.00) | 2.00x (4.00) | 1.50x noise (1 of 3) (1.33) |" in text, text
    assert "Noise: 1 of 3 runs (a method on a question) measured faster" in text


def test_bench_rules_counts_the_runs_whose_speedup_was_noise(monkeypatch):
    from minispec.harness import rules_eval

    results = iter([[(run(8, 8), 0.5), (run(8, 4), 0.5), (run(8, 2), 2.0)],  # plain at 8 tokens/s: 2x, 2x, 0.5x
                    [(run(8, 8), 2.0), (run(8, 4), 0.5), (run(8, 2), 2.0)]])
    monkeypatch.setattr(rules_eval, "side_by_side", lambda plain, runs, done: (None, 8.0, next(results)))
    a = SimpleNamespace(seeds=2, tokens=8, k=4)
    got = rules_eval.one_setting(None, None, [[1, 2, 3]], a, 1.0, SimpleNamespace(update=lambda: None))
    assert got["token"]["noise"] == 1 and got["token"]["runs"] == 2 and got["block"]["noise"] == 0
    text = rules_eval.report(dict(k=4, tokens=8, prompts=1, seeds=2, drafters={"d": {"T=1": got}}))
    assert "| d | T=1 | 0.000 / 1.000 / 1.25x noise (1 of 2) | 0.000 / 2.000 / 2.00x | 0.000 / 4.000 / 0.50x |" in text, text
    assert "Noise: 1 of 6 runs measured faster" in text


def test_bench_vocab_counts_the_prompts_whose_speedup_was_noise_and_names_a_busy_machine(monkeypatch):
    from minispec.harness import crossvocab_eval as cv

    busy(monkeypatch)
    monkeypatch.setattr(cv, "load_prompts", lambda s, tok, n: [[1, 2, 3]])
    monkeypatch.setattr(cv, "forward_times", lambda *a, **k: {1: 0.01})
    monkeypatch.setattr(cv, "guess_time", lambda d, ctx: 0.001)
    monkeypatch.setattr(cv, "accepted_chars", lambda tokens, log, token_bytes: 0)
    monkeypatch.setattr(cv, "side_by_side", lambda plain, runs, done: (None, 8.0, [(run(8, 8), 0.5)] * len(runs)))
    res = cv.run(None, {"slem:d": object()}, SimpleNamespace(eos_ids=()), None, (1,), ("greedy",), 1, 8,
                 log=lambda m: None)
    assert all(r["noise"] == 1 and r["speedup"] == 2.0 and r["speedup_bound"] == 1.0 for r in res["rows"])
    text = cv.format_report(res)
    assert "| slem:d | 1 | 0.00 / 0.0 / - / 2.00x noise (1 of 1) |" in text, text
    assert "Noise: 3 of 3 prompts measured faster" in text
    assert "[the machine was busy (load average" in text


def test_bench_eagle_marks_a_median_beyond_its_tokens_per_pass_and_names_a_busy_machine(monkeypatch):
    from minispec.harness import eagle_eval, measure

    monkeypatch.setattr(eagle_eval, "auto_dynamic_tree", lambda target, eagle: None)
    monkeypatch.setattr(eagle_eval, "side_by_side",
                        lambda plain, runs, done: (None, 8.0, [(run(8, 8), 0.5), (run(8, 2), 0.5), (run(8, 4), 2.0)]))
    bounds = {}
    speedups = eagle_eval.timed_trees(None, None, [[5, 6, 7]], [eagle_eval.DynamicTree(2, 3, 4)], 3, 0.0, 8, None,
                                      SimpleNamespace(update=lambda: None), bounds)
    assert speedups == {"chain K=3": [2.0], "2x3x4": [2.0], "auto": [0.5]}
    assert bounds == {"chain K=3": [1.0], "2x3x4": [4.0], "auto": [2.0]}
    busy(monkeypatch)
    memory = dict(plain_rss_mb=1, prompt_lookup_rss_mb=1, eagle_rss_mb=2, added_mb=1, added_over_plain_mb=1,
                  head_arrays_mb=1)
    res = dict(head="h", k=3, prompts_per_set=1, max_new_tokens=8, sizes={}, trees={}, timed={"greedy code": speedups},
               timed_tokens_per_pass={"greedy code": bounds}, timed_r={1: 1.0}, memory=memory,
               load_before=measure.others_load(), load_after=None)
    text = eagle_eval.report(res)
    assert "  greedy code: chain K=3 2.00x noise (1 of 1) [2.00, 2.00]; 2x3x4 2.00x [2.00, 2.00]; auto 0.50x" in text, text
    assert "Noise: 1 of 3 timed prompts" in text and "[the machine was busy (load average" in text


def test_bench_draft_reports_a_median_beyond_its_tokens_per_pass_as_noise(monkeypatch):
    from minispec.harness import draft_eval

    monkeypatch.setattr(draft_eval, "load_prompts", lambda s, tok, n: [[1, 2, 3]])
    outs = iter([[(run(8, 8), 0.5)], [(run(8, 2), 2.0)]])  # code: 2x at 1 token a pass; chat: 0.5x at 4
    monkeypatch.setattr(draft_eval, "side_by_side", lambda plain, runs: (None, 8.0, next(outs)))
    speed = draft_eval.speed_at(None, None, SimpleNamespace(eos_ids=()), 2, n_prompts=1)
    assert speed["noise"] == 1 and speed["runs"] == 2 and speed["speedup"][0] == pytest.approx(1.25)
    line = draft_eval.speed_line("greedy", dict(k=2, **speed))
    assert "measured speedup 1.25x (1 of 2 noise)" in line, line  # the median 1.25x is within the prompts' median 2.5 a pass
    over = draft_eval.speed_line("greedy", dict(k=2, speedup=[2.0, 1.5, 2.5], runs=2, noise=2, speedup_bound=1.0))
    assert "measured 2.00x noise (2 of 2)" in over and "speedup" not in over.split("over plain")[0], over


def test_bench_stop_marks_noise_and_names_a_busy_machine(monkeypatch):
    from minispec.harness import measure, stop_eval

    busy(monkeypatch)
    rows = {"K=4": [("code", 1.5, 1.0, 0.0, 1.0), ("chat", 0.9, 2.0, 1.0, 2.0), ("grounded", 1.1, 2.0, 1.0, 2.0)]}
    res = dict(rows={0.0: rows}, near_ties=[], load_before=measure.others_load(), load_after=None)
    text = stop_eval.report(res, "d", 8, 1)
    assert "1.50x noise (1 of 1)" in text and "1.10x (1 of 3 noise)" in text, text  # the median of all: 1.1x
    assert "Noise: 1 of 3 prompt runs" in text and "[the machine was busy (load average" in text
    quiet = stop_eval.report(dict(res, load_before=0.0), "d", 8, 1)
    assert "busy" not in quiet


def test_gpu_predict_marks_the_cpu_studys_speedup_beyond_its_tokens_per_pass():
    from minispec.harness import gpu

    row = dict(drafter="d", setting="greedy", k=1, a_first=0.5, a_next=None, acceptance=0.5, speedup=1.3, predicted=1.1,
               speedup_bound=1.0)
    rows, best = gpu.predict(dict(rows=[row, dict(row, k=2, speedup=0.9)]), dict(r={"1": 1.0, "2": 1.0, "3": 1.1},
                                                                                 c={"d": 0.1}))
    assert gpu.measured(rows[0]) == "1.30x noise" and gpu.measured(rows[1]) == "0.90x" and gpu.measured(best[0]) == "1.30x noise"
    assert gpu.measured(dict(cpu_measured=1.3)) == "1.30x"  # a study stored before the bound was
    old = dict(row, speedup_bound=None, tokens_per_pass=1.0)  # stored before the runs were counted, one pass a token
    del old["speedup_bound"]
    rows, _ = gpu.predict(dict(rows=[old, dict(old, k=2, tokens_per_pass=1.4)]), dict(r={"2": 1.0, "3": 1.1}, c={"d": 0.1}))
    assert gpu.measured(rows[0]) == "1.30x noise" and gpu.measured(rows[1]) == "1.30x"  # its bound: 1; unknown above 1


def test_bench_forward_names_a_busy_machine_beside_its_table(monkeypatch):
    from minispec.harness import bench, measure

    busy(monkeypatch)
    row = dict(format="float32", weight_bytes=4e6, ms={1: 515.0, 2: 437.0}, r={1: 1.0, 2: 0.85}, gflops={1: 1.0, 2: 2.0},
               weight_stream_ms=1.0, weight_stream_by="numba read", decode_over_stream=515.0)
    res = dict(model="m", device="cpu", context=256, repeats=3, kernels={"numba": row}, load_before=measure.others_load(),
               load_after=measure.others_load())
    text = bench.forward_report(res, (1, 2))
    assert "515.00" in text and "0.85" in text and text.splitlines()[-1].startswith("[the machine was busy (load average")
    assert "busy" not in bench.forward_report(dict(res, load_before=0.1, load_after=0.2), (1, 2))


def test_a_stored_report_names_a_machine_that_was_busy_as_its_run_began_though_quiet_now(monkeypatch, capsys):
    """print_and_store reads the load the command recorded as it began (bench rules' load_before, say), not only the
    load now: a burst that ended before the report still marks its figures."""
    from minispec.harness import rules_eval

    monkeypatch.setattr(command, "others_load", lambda: 0.0)  # quiet as the report is printed
    command.print_and_store("a table", dict(load_before=1.7), None, "minispec bench rules")
    assert "the machine was busy (load average 1.70" in capsys.readouterr().err
    command.print_and_store("a table", dict(load_before=0.2), None, "minispec bench rules")
    assert "busy" not in capsys.readouterr().err
    loads = iter([1.3, 0.0])  # bench rules records the load as its run begins, and as it ends
    monkeypatch.setattr(rules_eval, "others_load", lambda: next(loads))
    monkeypatch.setattr(rules_eval, "load_target_and_drafters", lambda model, specs: (None, None, {}))
    monkeypatch.setattr(rules_eval, "last_prompts", lambda tok, n: {"code": []})
    res = rules_eval.run(SimpleNamespace(draft=["prompt-lookup"], model=None, prompts=1, k=2, tokens=8, seeds=1))
    assert (res["load_before"], res["load_after"]) == (1.3, 0.0)
