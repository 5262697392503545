"""eagle_data's ``--ask-subjects wordnet``: WordNet's tagged nouns of the kinds kept (recipes/wordnet_subjects.py), and
the requests the target is asked to write about them."""

import json
from pathlib import Path

import pytest

from minispec.recipes import eagle_data
from minispec.recipes.wordnet_subjects import WORDNET_DIR, wordnet_subjects

from .test_eagle_data import chat_run

CNTLIST = """\
thunder%1:11:00:: 1 13
lemon%1:13:00:: 1 6
ice_cream%1:13:00:: 1 4
lemon%1:20:00:: 2 2
carpenter%1:18:00:: 1 5
proximity%1:07:00:: 1 3
lot%1:23:00:: 1 9
lot%1:06:00:: 2 3
fog%2:30:00:: 1 2
dew%2:19:00:: 1 2
d.c.%1:15:00:: 1 1
b-52%1:06:00:: 1 1
tv%1:06:00:: 1 4
fogbank%1:19:00:: 1 0
"""


def wordnet_dir(tmp_path: Path, text: str = CNTLIST) -> Path:
    folder = tmp_path / "wordnet"
    folder.mkdir(parents=True)
    (folder / "cntlist.rev").write_text(text)
    return folder


def test_wordnet_subjects_are_the_tagged_nouns_of_the_kinds_kept(tmp_path):
    """Nouns (ss_type 1) whose commonest sense (1) is of a kept lexicographer file, each once, "_" read as a space;
    not a verb ("fog" as 2:30; "dew", a made-up verb line in a noun's file number), a person (18), an attribute
    (7), a noun whose commonest sense is a quantity though another is an artifact ("lot"), nor a lemma with dots or
    digits, or of two letters, nor a noun its corpus never tagged ("fogbank", a made-up count of 0)."""
    assert wordnet_subjects(wordnet_dir(tmp_path)) == ["ice cream", "lemon", "thunder"]


def test_wordnet_subjects_refuse_a_missing_file_and_a_line_not_of_its_form(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install wordnet-base"):
        wordnet_subjects(tmp_path / "none")
    for i, bad in enumerate(("lemon 1 6", "lemon%1:13 x 6", "lemon%1:13:00:: 1", "lemon%1:13:00:: 1 \u00b2")):
        with pytest.raises(ValueError, match=r"cntlist.rev:2: not a line of WordNet's cntlist.rev"):
            wordnet_subjects(wordnet_dir(tmp_path / f"bad{i}", f"lemon%1:13:00:: 1 6\n{bad}\n"))
    with pytest.raises(ValueError, match=r"cntlist.rev:2: not UTF-8 text"):
        folder = wordnet_dir(tmp_path / "latin1")
        (folder / "cntlist.rev").write_bytes(b"lemon%1:13:00:: 1 6\ncaf\xe9%1:13:00:: 1 2\n")
        wordnet_subjects(folder)
    with pytest.raises(ValueError, match="no tagged noun of the kinds kept"):
        wordnet_subjects(wordnet_dir(tmp_path / "people", "carpenter%1:18:00:: 1 5\n"))


@pytest.mark.skipif(not (WORDNET_DIR / "cntlist.rev").is_file(),
                    reason=f"Debian's wordnet-base is not installed ({WORDNET_DIR}); .ci/run installs it")
def test_debians_wordnet_gives_thousands_of_everyday_subjects():
    """Debian's WordNet 3.0: thousands of nouns, everyday things among them, no person and no attribute."""
    subjects = set(wordnet_subjects())
    assert 8000 <= len(subjects) <= 9000  # 8,383 (the module docstring)
    assert {"fog", "lemon", "ambulance", "breakfast", "vaccination", "fever", "gravity"} <= subjects
    assert not {"carpenter", "proximity", "lot", "tv"} & subjects  # a person, an attribute, a quantity, two letters


def test_requests_are_asked_about_wordnet_nouns_and_the_folder_records_which(tmp_path, monkeypatch, capsys):
    """--ask-subjects wordnet: each request is asked about a noun of the WordNet folder given; the settings record
    the list's size and digest; refused without --asked, --wordnet without it, and a folder without WordNet's counts
    (before any model loads)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from .helpers import chat_model_dir

    target = chat_model_dir(tmp_path / "t")
    asked = []

    def fake_generate(target, tok, prompts, new, greedy, seed, temperature=1.0, top_p=1.0, with_features=False):
        if temperature == 0.6:  # writing a request
            asked.extend(tok.decode(p) for p in prompts)
            return [p + tok.encode('"Why does thunder rumble after lightning?"') for p in prompts], None
        return [p + [5, 6, 7] for p in prompts], [None] * len(prompts)

    monkeypatch.setattr(eagle_data, "generate", fake_generate)
    folder, out = wordnet_dir(tmp_path), tmp_path / "data"
    run = chat_run(out, target)
    assert eagle_data.main([*run, "--ask-subjects", "wordnet", "--wordnet", str(folder)]) == 2  # no --asked
    assert eagle_data.main([*run, "--asked", "0.5", "--wordnet", str(folder)]) == 2  # no --ask-subjects wordnet
    assert eagle_data.main([*run, "--asked", "0.5", "--ask-subjects", "wordnet", "--wordnet", str(tmp_path)]) == 2
    assert not out.exists()  # refused before the folder was made
    assert eagle_data.main([*run, "--asked", "0.5", "--ask-subjects", "wordnet", "--wordnet", str(folder)]) == 0
    assert len(asked) == 2 and all(any(f" about {n} that a user" in a for n in ("thunder", "lemon", "ice cream"))
                                   for a in asked)
    settings = json.loads((out / "settings.json").read_text())
    assert settings["ask_subjects"] == "wordnet" and settings["subjects"]["count"] == 3
    other = wordnet_dir(tmp_path / "other", CNTLIST + "fog%1:19:00:: 1 4\n")  # another WordNet: other requests
    more = [*run[:-1], str(json.loads((out / "shard-00000.json").read_text())["tokens"] + 1), "--asked", "0.5",
            "--ask-subjects", "wordnet"]
    assert eagle_data.main([*more, "--wordnet", str(other)]) == 2
    assert "holds shards made with other settings" in capsys.readouterr().err
    assert eagle_data.main([*more, "--wordnet", str(folder)]) == 0 and len(asked) == 4  # the same: resumed
