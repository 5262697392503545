"""The rule that keeps evaluation prompts out of training data (minispec/recipes/eval_overlap.py), and the committed
manifest of what the EAGLE data builder dropped by it (docs/eagle/data_manifest.json)."""

import json
from pathlib import Path

import pytest

from minispec.recipes.eval_overlap import MINISPEC_DATA, EvalRuns, external_prompts_dir, file_texts, prompt_files
from minispec.recipes.windows import read_windows

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "docs" / "eagle" / "data_manifest.json"
GENERATIONS = ROOT / "docs" / "eagle" / "generations_manifest.json"
ASKED = ROOT / "docs" / "eagle" / "asked_manifest.json"
ASKED_S3 = ROOT / "docs" / "eagle" / "data_manifest_asked.json"
CODE_ASKED_S3 = ROOT / "docs" / "eagle" / "data_manifest_code_asked.json"
ASKED_S4 = ROOT / "docs" / "eagle" / "data_manifest_asked_s4.json"
OWN_S6 = ROOT / "docs" / "eagle" / "data_manifest_own_s6.json"
OWN_S7 = ROOT / "docs" / "eagle" / "data_manifest_own_s7.json"
WORDNET_S8 = ROOT / "docs" / "eagle" / "data_manifest_wordnet_s8.json"


@pytest.fixture(scope="module")
def own():
    return EvalRuns(prompt_files(None))


def test_a_window_with_eight_words_of_a_prompt_is_dropped_and_seven_are_not(own):
    prompt = next(t for t in file_texts(MINISPEC_DATA / "chat.jsonl") if len(t.split()) >= 8)
    w = prompt.split()
    window = "Some training text. " + " ".join(x.upper() for x in w[:8]) + "\n and more after it."
    assert own.hit(window) == (" ".join(w[:8]).lower(), "chat.jsonl")
    seven = "Some training text. " + " ".join(w[:7]) + " zzzunseen " + " ".join(w[8:15])
    assert own.hit(seven) is None


def test_a_malformed_line_is_refused_with_its_number(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "fine"}\n{"prompt": \n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        file_texts(f)


@pytest.mark.parametrize("manifest_file", [MANIFEST, GENERATIONS, ASKED, ASKED_S3, CODE_ASKED_S3, ASKED_S4, OWN_S6, OWN_S7,
                                           WORDNET_S8],
                         ids=["data build", "generations", "asked", "asked s3", "code asked s3", "asked s4", "own s6",
                              "own s7", "wordnet s8"])
def test_every_dropped_window_of_the_manifest_shares_a_run_with_the_file_it_names(own, manifest_file):
    """Checks the rule without the data cache: each recorded run is a run of 8 words of the evaluation file named.
    minispec's own files are always here; a run from an external file is checked where that folder is present. The
    committed manifests: the data build's, the --generate-only run's that grew weights/eagle-data/, the first --asked
    run's, and those of the --asked and --asked-code folders whose windows weights/eagle-data/ holds (seeds 3, 4, 6, 7
    and 8)."""
    manifest = json.loads(manifest_file.read_text())
    external = external_prompts_dir()
    mine = {f["name"]: f["sha256"] for f in own.files}
    for f in manifest["evaluation_files"]:
        if f["name"] in mine:
            assert f["sha256"] == mine[f["name"]], f"{f['name']} changed since the data was built: rebuild it"
    checked = 0
    for d in manifest["dropped"]:
        assert len(d["run"].split()) == 8
        path = MINISPEC_DATA / d["file"] if d["file"] in mine else external / d["file"]
        if not path.is_file():
            continue
        assert tuple(d["run"].split()) in set(EvalRuns([path]).source), d  # in the very file it names
        checked += 1
    if manifest["dropped"] and not checked:
        pytest.skip(f"every dropped run is from the external prompts, absent at {external}")


@pytest.mark.parametrize("name", ["generations-s2.npz", "generations-asked-s3.npz", "generations-code-asked-s3.npz",
                                  "generations-asked-s4.npz", "generations-own-s6.npz", "generations-own-s7.npz",
                                  "generations-wordnet-s8.npz"])
def test_the_committed_generations_share_no_run_with_an_evaluation_prompt(name):
    """weights/eagle-data/'s windows, decoded: no window shares a run of 8 words with minispec's evaluation
    prompts, nor with the external sets where that folder is present (CI has it beside the clone)."""

    from minispec.model.tokenizer import load_tokenizer

    from .helpers import TARGET_DIR

    if not (TARGET_DIR / "tokenizer.json").exists():
        from minispec.recipes.fetch import fetch_smollm2

        fetch_smollm2(TARGET_DIR, progress=False, log=lambda m: None)
    tok = load_tokenizer(TARGET_DIR)
    external = external_prompts_dir()
    runs = EvalRuns(prompt_files(external if external.is_dir() else None))
    t, starts, _, _ = read_windows(ROOT / "weights" / "eagle-data" / name)
    assert len(starts) > 100
    hits = [runs.hit(tok.decode(t[a:b].tolist())) for a, b in zip(starts[:-1], starts[1:])]
    assert [h for h in hits if h] == []


def test_a_request_that_holds_a_whole_short_prompt_is_caught_and_a_changed_one_is_not(own):
    """A prompt of fewer than 8 words has no run of 8: ``holds_short`` sees it whole, punctuation and case aside
    (eagle_data.py's --asked drops a request the target wrote that holds one)."""
    short = next(t for t in file_texts(MINISPEC_DATA / "chat.jsonl") if 3 <= len(t.split()) < 8 and t.endswith("?"))
    assert own.hit("A user might ask: " + short) is None  # the window rule cannot see it
    assert own.holds_short("A user might ask: " + short.upper().replace("?", " ?") + " Thanks!")
    w = short.split()
    assert not own.holds_short(" ".join(w[:-1] + ["zzzunseen"]))
