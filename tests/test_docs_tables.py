"""Generated sections and figures of README and docs/ (harness/docs_tables.py, harness/doc_figures.py) match the
committed JSON they come from, and a figure edited by hand is caught."""

import re

import pytest

from minispec.harness import doc_figures, docs_tables
from minispec.policy.acceptance import expected_tokens, predicted_speedup


def test_generated_docs_match_their_json():
    assert docs_tables.main(["--check"]) == 0, "run: python -m minispec.harness.docs_tables"


@pytest.mark.parametrize("name", docs_tables.FILES)
def test_every_generated_figure_edited_by_hand_is_caught(name):
    text = (docs_tables.ROOT / name).read_text()
    markers = list(docs_tables.SECTION.finditer(text)) + list(docs_tables.VALUE.finditer(text))
    assert markers, f"{name} has no generated section or figure"
    for m in markers:
        inner = text[m.end(1):m.start(3)]
        assert re.search(r"\d", inner), f"{name}: {m.group(2)} is empty"
        edited = text[:m.end(1)] + re.sub(r"\d", lambda d: str((int(d.group()) + 1) % 10), inner, count=1) + \
            text[m.start(3):]  # one digit changed by hand
        assert edited != text and docs_tables.render(edited) == text, f"{name}: {m.group(2)}"


def test_a_marker_naming_nothing_is_refused():
    with pytest.raises(KeyError, match="no generated figure named 'study.nothing'"):
        docs_tables.render("<!-- v:study.nothing -->1<!-- /v -->")
    with pytest.raises(KeyError, match="no generated section"):
        docs_tables.render("<!-- generated: nothing -->\n<!-- end: nothing -->")


def test_the_worked_example_is_the_cost_models_own_prediction():
    """README's speed model computes with one acceptance a; the cost model's predicted_speedup (policy/acceptance.py),
    given no later-guess rate, must agree."""
    s = doc_figures.study(docs_tables.ROOT)
    c, a = s["c"][doc_figures.DRAFT], doc_figures.row(s, doc_figures.DRAFT, 1)["a_first"]
    text = doc_figures.speed_model(docs_tables.ROOT)
    for k in (1, 4):
        assert f"**{predicted_speedup(a, c, s['r'][str(k + 1)], k):.2f}x** predicted" in text


def test_break_even_acceptance_pays_and_a_little_less_does_not():
    r = {"2": 1.5, "3": 1.8, "4": 2.1}
    a = doc_figures.needed(1.0, 0.05, r, ks=range(1, 4))
    assert a == pytest.approx(0.55, abs=1e-6)  # K = 1: 1 + a = 0.05 + 1.5
    assert expected_tokens(a - 1e-3, 1) < 0.05 + 1.5 and expected_tokens(a - 1e-3, 2) < 0.1 + 1.8


def test_the_study_report_is_written_from_its_json():
    """docs/study/report.md is study.format_report of docs/study/study.json: a figure cannot drift from its run."""
    import json

    from minispec.harness.study import format_report

    d = docs_tables.ROOT / "docs" / "study"
    plots = sorted(p.name for p in d.glob("*.png"))
    want = format_report(json.loads((d / "study.json").read_text()), ["speedup_greedy.png", "speedup_t1.png",
                                                                      "verify_cost_memory.png"])
    assert set(plots) == {"speedup_greedy.png", "speedup_t1.png", "verify_cost_memory.png"}
    assert (d / "report.md").read_text() == want, "rewrite it: study.format_report(study.json)"


def test_every_surviving_mutant_is_argued(tmp_path):
    """Each of mutmut's undetected mutants needs a reason in docs/mutation/equivalent.json, of a class it defines
    (docs/mutation.md's table counts them by class); a survivor without one is refused by name."""
    import json
    import shutil

    assert doc_figures.survivors(docs_tables.ROOT) and "| numpy |" in doc_figures.mutation_classes(docs_tables.ROOT)
    (tmp_path / "docs" / "mutation").mkdir(parents=True)
    res = json.loads((docs_tables.ROOT / doc_figures.MUTMUT).read_text())
    res["survivors"].append(dict(file="minispec/rejection.py", function="residual", change="[<=] -> [<]", status="survived"))
    (tmp_path / doc_figures.MUTMUT).write_text(json.dumps(res))
    shutil.copy(docs_tables.ROOT / doc_figures.REASONS, tmp_path / doc_figures.REASONS)
    with pytest.raises(KeyError, match=r"residual: \[<=\] -> \[<\] was not detected"):
        doc_figures.mutation_classes(tmp_path)
    eq = json.loads((docs_tables.ROOT / doc_figures.REASONS).read_text())
    eq["survivors"]["minispec/rejection.py residual: [<=] -> [<]"] = "no such class"
    (tmp_path / doc_figures.REASONS).write_text(json.dumps(eq))
    doc_figures.load.cache_clear()  # (the files are read once per process)
    with pytest.raises(KeyError, match="which classes does not define"):
        doc_figures.mutation_classes(tmp_path)


def test_no_reason_outlives_its_survivor():
    """Every reason in docs/mutation/equivalent.json belongs to a mutant that mutmut did not detect: one killed
    since loses it."""
    import json

    alive = {doc_figures.survivor_key(s) for s in doc_figures.survivors(docs_tables.ROOT)}
    reasons = json.loads((docs_tables.ROOT / doc_figures.REASONS).read_text())["survivors"]
    assert set(reasons) <= alive, sorted(set(reasons) - alive)
