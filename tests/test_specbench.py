"""``minispec bench specbench`` (harness/specbench.py) on a tiny model with SmolLM2's tokenizer: the file is read and
refused line by line, the tasks and the subset are Spec-Bench's, an interrupted run resumes, and greedy output is
plain decoding's. Spec-Bench's own file is read in place where ../shared/external_prompts has it."""

import importlib.util
import json
from pathlib import Path

import pytest

from minispec.harness import specbench, specbench_figures
from minispec.model.kernel import default_kernel

from .helpers import chat_model_dir, run_cli

EXTERNAL = Path(__file__).resolve().parents[2] / "shared" / "external_prompts" / "spec_bench_question.jsonl"
CATEGORIES = ["writing", "roleplay", "translation", "summarization", "qa", "math_reasoning", "rag", "poetry"]


def write_questions(path: Path, per_category: int = 2) -> Path:
    lines, qid = [], 1
    for c in CATEGORIES:
        for i in range(per_category):
            turns = [f"say {c} {i} a b a b", "again, shorter"] if c in specbench.MT_BENCH else [f"{c} {i}: a b a b"]
            lines.append(json.dumps(dict(question_id=qid, category=c, turns=turns)))
            qid += 1
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    return chat_model_dir(tmp_path_factory.mktemp("specbench") / "model")


def test_tasks_and_the_subset_are_spec_benchs(tmp_path):
    qs = specbench.read_questions(write_questions(tmp_path / "q.jsonl", 3))
    assert {q.task for q in qs} == {*specbench.TASKS, "poetry"}  # MT-bench's sub-categories are one task
    chosen = specbench.select(qs, 2)
    assert [q.task for q in chosen][:4] == ["mt_bench"] * 2 + ["translation"] * 2 and chosen[-1].task == "poetry"
    assert [q.category for q in chosen[:2]] == ["writing", "roleplay"]  # spread over the sub-categories


def test_malformed_lines_are_refused_by_line_number(tmp_path, chat_model):
    good = json.dumps(dict(question_id=1, category="qa", turns=["x"]))
    for bad, words in [("{not json", "line 2: not JSON"), ("[1, 2]", "line 2: a JSON object"),
                       (json.dumps(dict(question_id="7", category="qa", turns=["x"])), "line 2: question_id"),
                       (json.dumps(dict(question_id=2, category="qa", turns=[])), "line 2: turns"),
                       (json.dumps(dict(question_id=1, category="qa", turns=["y"])), "line 2: question_id 1 again")]:
        f = tmp_path / "bad.jsonl"
        f.write_text(good + "\n" + bad + "\n")
        code, out, err = run_cli(["bench", "specbench", str(f), "--model", str(tmp_path / "no-model")])
        assert code == 2 and words in err and out == "", err  # refused before the model is looked for


def test_a_run_resumes_and_greedy_output_is_plain_decodings(tmp_path, chat_model):
    questions = write_questions(tmp_path / "q.jsonl")
    out, summary = tmp_path / "results.jsonl", tmp_path / "summary.json"
    argv = ["bench", "specbench", str(questions), "--per-task", "2", "--max-new-tokens", "6", "--drafters",
            "prompt-lookup,layer-skip", "--model", str(chat_model), "--out", str(out), "--json", str(summary)]
    code, _, err = run_cli(argv)
    assert code == 0, err
    lines = out.read_text().splitlines()
    n = 2 * (len(CATEGORIES) - 1)  # 2 per task: MT-bench's two sub-categories are one task
    assert len(lines) == 1 + n
    res = json.loads(summary.read_text())
    assert res["settings"]["kernel"] == default_kernel()  # the kernel is part of what a resumed run must share
    assert set(res["load"]) == {"start", "end"}  # the other processes' load as it began and ended, recorded
    assert res["settings"]["weights"] == {} and "peer_versions" in res["settings"]  # no method here reads weights/
    for m in ("prompt-lookup", "layer-skip"):
        got = res["summary"]["methods"][m]
        assert got["identical"] == n and got["failures"] == [], got["differences"]
        assert set(got["tasks"]) == {*specbench.TASKS, "poetry", "overall"}
    table = specbench_figures.leaderboard(res).splitlines()  # docs' table: a row per method, a column per task
    assert table[0] == "| method | MT-bench | translation | summarization | QA | math | RAG | poetry | overall |"
    assert [r.split(" | ")[0] for r in table[2:5]] == ["| plain decoding (tokens/s)", "| prompt-lookup", "| layer-skip"]
    assert all(r.count(" | ") == 8 for r in table[2:] if r.startswith("| "))
    if importlib.util.find_spec("matplotlib"):
        assert summary.with_suffix(".png").stat().st_size > 1000  # the plot beside the summary
    peers = res["summary"]["peers"]
    assert "llama.cpp: skipped" in res["peers_note"]  # not installed, or no GGUF of this --model given
    assert any(r.startswith("| llama.cpp: skipped, ") and r.endswith(" | - |") for r in table)  # its row kept
    if res["peers_note"].startswith("transformers: transformers"):  # the parity extra is installed: its three modes ran beside
        assert set(peers) == {"transformers plain", "transformers prompt-lookup", "transformers assisted"}
        assert all(v["questions"] == n and v["own"]["overall"]["speedup"] > 0 for v in peers.values())
    else:
        assert peers == {} and "not installed" in res["peers_note"]
    # an interruption: three questions done, the fourth cut short while it was written
    out.write_text("\n".join(lines[:4]) + "\n" + lines[4][:20])
    code, _, err = run_cli(argv)
    assert code == 0 and "resuming" in err and f"3 of {n} questions done" in err, err
    again = out.read_text().splitlines()
    assert again[:4] == lines[:4] and len(again) == len(lines)  # kept as they were, the rest made again
    code, _, err = run_cli(argv[:-6] + ["--max-new-tokens", "5", "--model", str(chat_model), "--out", str(out)])
    assert code == 2 and "other settings" in err, err


def test_spec_benchs_own_file(tmp_path):
    if not EXTERNAL.exists():
        pytest.skip(f"{EXTERNAL} is absent: Spec-Bench's questions are other people's data, read in place only")
    qs = specbench.read_questions(EXTERNAL)
    assert len(qs) == 480
    assert {t: sum(q.task == t for q in qs) for t in specbench.TASKS} == {t: 80 for t in specbench.TASKS}
    chosen = specbench.select(qs, 8)
    assert len(chosen) == 48 and sorted(q.category for q in chosen[:8]) == sorted(specbench.MT_BENCH)


def test_the_outputs_never_overwrite_the_questions_or_another_file(tmp_path):
    questions = write_questions(tmp_path / "q.jsonl")
    before = questions.read_bytes()
    code, _, err = run_cli(["bench", "specbench", str(questions), "--json", str(questions), "--model", str(tmp_path)])
    assert code == 2 and "files of their own" in err, err
    other = tmp_path / "notes.jsonl"
    other.write_text('{"some": "thing"}\n')
    code, _, err = run_cli(["bench", "specbench", str(questions), "--out", str(other), "--model", str(tmp_path / "none")])
    assert code == 2 and "not this command's settings" in err, err
    assert questions.read_bytes() == before and other.read_text() == '{"some": "thing"}\n'


def test_peers_are_skipped_with_their_reason_and_a_gguf_needs_llama_cpp(tmp_path, monkeypatch):
    monkeypatch.setattr(specbench, "peers_installed", lambda asked: [p for p in asked if p == "transformers"])
    running, skipped = specbench.peers_to_run(["transformers", "llama.cpp"], None, None)
    assert running == ["transformers"] and "not installed (pip install llama-cpp-python" in skipped["llama.cpp"]
    monkeypatch.setattr(specbench, "peers_installed", lambda asked: list(asked))
    running, skipped = specbench.peers_to_run(["llama.cpp"], "some/model", None)
    assert running == [] and skipped == {"llama.cpp": "no GGUF of --model given (--gguf)"}
    assert specbench.peers_to_run(["llama.cpp"], "some/model", "m.gguf") == (["llama.cpp"], {})
    questions = write_questions(tmp_path / "q.jsonl")
    (tmp_path / "m.gguf").write_bytes(b"x")
    code, _, err = run_cli(["bench", "specbench", str(questions), "--peers", "transformers", "--gguf",
                            str(tmp_path / "m.gguf"), "--model", str(tmp_path / "none"), "--out", str(tmp_path / "o.jsonl")])
    assert code == 2 and "--gguf" in err and "llama.cpp is not among the peers that run" in err, err
    code, _, err = run_cli(["bench", "specbench", str(questions), "--peers", "transformers,lamma"])
    assert code == 2 and "--peers transformers,lamma: give distinct names" in err, err


def test_each_engines_fastest_method_per_task_and_whether_minispec_is_at_least_as_fast():
    """The committed run's last table (issue 48's first goal): per task, each engine's fastest mode in tokens/s."""
    def tasks(**rates):
        return {t: dict(speedup=1.0, tau=None, tokens_per_s=r, questions=1, iqr=[1.0, 1.0]) for t, r in rates.items()}

    res = {"summary": {"plain": {"tasks": tasks(qa=10.0, rag=10.0)},
                       "methods": {"prompt-lookup": {"tasks": tasks(qa=12.0, rag=25.0)}},
                       "peers": {"llama.cpp plain": {"tasks": tasks(qa=20.0, rag=18.0)},
                                 "llama.cpp prompt-lookup": {"tasks": tasks(qa=15.0, rag=24.0)}}}}
    rows = specbench_figures.fastest(res).splitlines()
    assert rows[0] == "| task | minispec: fastest | llama.cpp: fastest | minispec at least as fast |"
    assert rows[2] == "| QA | prompt-lookup 12.0 tokens/s | plain 20.0 tokens/s | no |"
    assert rows[3] == "| RAG | prompt-lookup 25.0 tokens/s | prompt-lookup 24.0 tokens/s | yes |"


def test_a_line_separator_inside_a_turn_is_text_not_a_new_line(tmp_path):
    """JSON strings may hold U+2028 and U+2029 raw; a line of the file ends at a newline only (bug: splitlines() cut the
    line there and refused it as not JSON)."""
    f = tmp_path / "q.jsonl"
    f.write_text(json.dumps(dict(question_id=1, category="qa", turns=["a\u2028b\u2029c"]), ensure_ascii=False) + "\n"
                 + json.dumps(dict(question_id=2, category="qa", turns=["d"])) + "\n", encoding="utf-8")
    qs = specbench.read_questions(f)
    assert [q.turns for q in qs] == [("a\u2028b\u2029c",), ("d",)]


def test_a_results_row_without_a_questions_fields_is_refused(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_text(json.dumps(dict(settings={"x": 1})) + "\n" + json.dumps(dict(question_id=3)) + "\n")
    with pytest.raises(ValueError, match="lacks a question's fields"):
        specbench.resume(out, {"x": 1})


def test_the_plot_beside_the_summary_never_overwrites_the_results(tmp_path):
    questions = write_questions(tmp_path / "q.jsonl")
    code, _, err = run_cli(["bench", "specbench", str(questions), "--out", str(tmp_path / "r.png"), "--json",
                            str(tmp_path / "r.json"), "--model", str(tmp_path / "none")])
    assert code == 2 and "would overwrite --out" in err, err


def test_a_peer_that_is_installed_but_does_not_import_is_refused_by_name(tmp_path, chat_model, monkeypatch):
    def broken(*a, **kw):
        raise ImportError("libtorch_cpu.so: cannot open shared object file")
    monkeypatch.setattr(specbench, "peers_installed", lambda asked: list(asked))
    monkeypatch.setattr(specbench, "transformers_modes", broken)
    code, _, err = run_cli(["bench", "specbench", str(write_questions(tmp_path / "q.jsonl")), "--per-task", "1",
                            "--peers", "transformers", "--model", str(chat_model), "--out", str(tmp_path / "o.jsonl")])
    assert code == 2 and "peer transformers: its packages are installed but do not import" in err, err


def test_a_greedy_difference_that_is_not_a_near_tie_fails_the_run(tmp_path, chat_model, monkeypatch):
    """design.md's greedy identity: a method's first difference from plain decoding at a top-2 margin of 1e-4 or more is
    a failure (the run exits 1 and names it); one under it is reported with its margin."""
    def question(self, q, done=lambda: None):
        method = dict(tokens=4, seconds=1.0, target_passes=2, identical=False,
                      differences=[dict(turn=0, position=2, margin=0.5 if q.question_id % 2 else 5e-5)])
        return dict(question_id=q.question_id, category=q.category, task=q.task, plain=dict(tokens=4, seconds=1.0),
                    methods={"prompt-lookup": method}, peers={})
    monkeypatch.setattr(specbench.Runner, "question", question)
    summary = tmp_path / "s.json"
    code, out, err = run_cli(["bench", "specbench", str(write_questions(tmp_path / "q.jsonl", 1)), "--drafters",
                              "prompt-lookup", "--peers", "none", "--model", str(chat_model), "--out",
                              str(tmp_path / "o.jsonl"), "--json", str(summary)])
    assert code == 1 and "greedy identity FAILED: prompt-lookup" in err and "FAILED: " in out, (out, err)
    got = json.loads(summary.read_text())["summary"]["methods"]["prompt-lookup"]
    assert {d["margin"] for d in got["failures"]} == {0.5} and {d["margin"] for d in got["differences"]} == {0.5, 5e-5}


def test_the_settings_name_the_shipped_weights_each_method_reads():
    """The settings a resumed run must share (refused otherwise, as above) name the shipped weights each method reads,
    so that after a new head a resume cannot mix two heads' rows in one table."""
    got = specbench.drafter_weights(["eagle", "prompt-lookup", "draft"])
    assert set(got) == {"eagle", "draft"} and all(len(h) == 16 for h in got.values())


def test_the_plot_refuses_a_summary_without_what_it_draws(tmp_path, capsys):
    """(bug: only the plain decoding's tasks were checked; a summary without its settings, its question count or a
    method's task failed inside the plot with a bare traceback)"""
    import copy

    whole = json.loads((Path(__file__).resolve().parents[1] / "docs" / "specbench" / "run.json").read_text())
    specbench_figures.check_summary(whole)  # the committed summary has all of it
    for cut in (lambda r: r.pop("settings"), lambda r: r.pop("questions"),
                lambda r: next(iter(r["summary"]["methods"].values()))["tasks"].popitem()):
        res = copy.deepcopy(whole)
        cut(res)
        (tmp_path / "s.json").write_text(json.dumps(res))
        assert specbench_figures.main([str(tmp_path / "s.json"), str(tmp_path / "s.png")]) == 2
        assert "not a `minispec bench specbench --json` summary" in capsys.readouterr().err
        assert not (tmp_path / "s.png").exists()
