"""The latency study runs end to end on tiny models and writes its report; the cost model is right."""

import json

import numpy as np
import pytest

from minispec import load_model
from minispec.drafters import DraftModel, LayerSkip, PromptLookup
from minispec.drafters.eagle import load_eagle
from minispec.harness.study import run_study, write_report
from minispec.model.tiny import tiny_config, write_random_model
from minispec.policy.acceptance import expected_tokens, predicted_speedup

from .helpers import ToyTokenizer, write_random_eagle


def test_cost_model():
    assert predicted_speedup(1.0, 0.0, 1.0, 4) == 5.0  # perfect free draft, free verification
    assert predicted_speedup(0.0, 0.1, 2.0, 3) == pytest.approx(1 / 2.3)  # nothing accepted: pure overhead
    assert predicted_speedup(0.5, 0.0, 1.0, 0) == 1.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_first_and_next_rates_from_per_position_counts():
    from minispec.harness.study import first_and_next

    # 10 rounds at K = 3: position 1 accepted 4 times, position 2 in 3 of those, position 3 in 3 of those
    assert first_and_next([4, 3, 3], [10, 10, 10]) == (0.4, pytest.approx(6 / 7))
    assert first_and_next([5], [10]) == (0.5, None)  # K = 1 says nothing about later guesses


def test_study_end_to_end(tmp_path):
    target = load_model(write_random_model(tmp_path / "t", tiny_config(num_hidden_layers=2), seed=1))
    draft = load_model(write_random_model(tmp_path / "d", tiny_config(num_hidden_layers=1), seed=2))
    eagle = load_eagle(write_random_eagle(tmp_path / "e", target.cfg, range(40), seed=4), target)
    drafters = {"draft": DraftModel(draft), "prompt-lookup": PromptLookup(), "layer-skip:1": LayerSkip(target, 1),
                "self": DraftModel(target, name="self"), "eagle": eagle}
    res = run_study(target, drafters, ToyTokenizer(), ks=(1, 2), slow_ks=(2,), prompts_per_set=1, max_new_tokens=8,
                    forward_ns=(1, 2, 3), progress=False, log=lambda m: None)
    assert {(r["drafter"], r["k"]) for r in res["rows"]} == {
        ("draft", 1), ("draft", 2), ("prompt-lookup", 1), ("prompt-lookup", 2), ("layer-skip:1", 2), ("self", 2),
        ("draft", "auto"), ("prompt-lookup", "auto"), ("layer-skip:1", "auto"), ("self", "auto"),
        ("draft", "tree"), ("prompt-lookup", "tree"), ("layer-skip:1", "tree"), ("self", "tree"),
        ("eagle", 1), ("eagle", 2), ("eagle", "auto"), ("eagle", "tree")}
    self_greedy = next(r for r in res["rows"] if r["drafter"] == "self" and r["setting"] == "greedy")
    assert self_greedy["acceptance"] == 1.0 and self_greedy["tokens_per_pass"] > 2
    assert self_greedy["a_first"] == 1.0 and self_greedy["a_next"] == 1.0
    assert res["r"][1] == 1.0 and all(np.isfinite(list(res["c"].values())))
    assert len(res["best"]) == 10 and res["memory"]["peak_rss_bytes"] > 0
    assert next(m for m in res["memory"]["models"] if m["model"] == "eagle")["weight_bytes"] == eagle.weight_bytes
    assert 0 < res["c"]["eagle"]  # timed from its own guesses, not zero (their ratio to another's is a timing: not asserted)
    assert all(b["auto_speedup"] is not None and b["tree_speedup"] is not None for b in res["best"])
    report = write_report(res, tmp_path / "out")
    text = report.read_text()
    assert "Headline" in text and "| greedy | self |" in text and "K = auto and trees per prompt set" in text
    assert "| greedy | eagle |" in text and "no peer for the EAGLE head" in text
    assert json.loads((tmp_path / "out" / "study.json").read_text())["rows"]
    pytest.importorskip("matplotlib")
    assert (tmp_path / "out" / "speedup_greedy.png").exists() and (tmp_path / "out" / "verify_cost_memory.png").exists()


def test_the_study_calibrates_before_its_timed_runs(tmp_path, monkeypatch):
    """No calibration is measured inside the timed runs: K = auto's t(n) up to its k_max + 1 and every drafter's tree
    levels are measured before them (bug: t(n) up to the study's largest K only, and no tree levels: the first timed
    run of K = auto and of each tree measured them, on its own clock)."""
    from minispec.harness import study
    from minispec.policy import calibration

    target = load_model(write_random_model(tmp_path / "t", tiny_config(num_hidden_layers=2), seed=1))
    draft = load_model(write_random_model(tmp_path / "d", tiny_config(num_hidden_layers=1), seed=2))
    eagle = load_eagle(write_random_eagle(tmp_path / "e", target.cfg, range(40), seed=4), target)
    calibration._MEMORY.clear()
    before, inside = {}, {}
    run_prompts = study.run_prompts
    def timed(*a, **k):  # the timed runs: the calibrations in memory before them and after
        before["keys"] = set(calibration._MEMORY)
        out = run_prompts(*a, **k)
        inside["keys"] = set(calibration._MEMORY) - before["keys"]
        return out
    monkeypatch.setattr(study, "run_prompts", timed)
    run_study(target, {"draft": DraftModel(draft), "eagle": eagle}, ToyTokenizer(), ks=(1, 2), prompts_per_set=1,
              max_new_tokens=6, prompt_sets=("code",), settings=("greedy",), forward_ns=(1, 2), progress=False,
              log=lambda m: None)
    assert before["keys"] and inside["keys"] == set()


def test_acceptance_by_k_reads_rounds_at_k8():
    from minispec.harness.draft_eval import acceptance_by_k

    log = [(8, 0), (8, 3), (8, 8), (2, 1), (0, 0)]  # (drafted, accepted) per round
    acc = acceptance_by_k(log)
    assert acc[1] == pytest.approx((0 + 1 + 1 + 1) / 4)
    assert acc[4] == pytest.approx((0 + 3 + 4 + 1) / (4 + 4 + 4 + 2))
    assert acc[8] == pytest.approx((0 + 3 + 8 + 1) / (8 + 8 + 8 + 2))


def test_a_rounds_tokens_by_k_pick_the_k_a_geometric_acceptance_pays_best_at():
    """Rounds whose guesses are each kept with probability 0.6 after the one before: a round at K emits
    1 + 0.6 + ... + 0.6^K tokens, and with c = 0.05 and r(n) = 1 + 0.05 (n - 1) the best K is 3 (bug: the share of
    the first K guesses kept stood for the first guess's rate, so K = 1 was predicted best)."""
    from minispec.harness.draft_eval import best_k, tokens_by_k

    rng = np.random.default_rng(0)
    log = [(8, int(np.argmin(np.append(rng.random(8) < 0.6, False)))) for _ in range(20000)]  # kept: the first miss
    tokens = tokens_by_k(log)
    for k in (1, 4, 8):
        assert tokens[k] == pytest.approx(sum(0.6 ** j for j in range(k + 1)), abs=0.02)
    k, speed = best_k(tokens, 0.05, {n: 0.02 * (1 + 0.05 * (n - 1)) for n in range(1, 10)})  # seconds: r over t(1)
    assert k == 3 and speed == pytest.approx(2.176 / 1.3, abs=0.02)
    assert tokens_by_k([(2, 1), (8, 5)])[4] == 5.0  # a round that drafted 2 says nothing about K = 4


def test_acceptance_by_confidence(big_pair):
    from minispec import generate
    from minispec.harness.draft_eval import by_confidence, confidence_rows

    target, draft = big_pair
    prompt = [3, 1, 4, 1, 5]
    out = generate(target, prompt, 30)
    rows = confidence_rows(DraftModel(target), prompt, out)  # the target as its own draft agrees everywhere
    assert len(rows) == 30 and all(hit for _, hit in rows)
    other = confidence_rows(DraftModel(draft), prompt, out)
    assert not all(hit for _, hit in other)
    bins = by_confidence(other)
    assert sum(b["share"] for b in bins) == pytest.approx(1.0)
    hits = sum(b["share"] * (b["acceptance"] or 0) for b in bins) * len(other)
    assert hits == pytest.approx(sum(h for _, h in other))
