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
thunder%2:35:00:: 1 2
d.c.%1:15:00:: 1 1
twenty-two%1:23:00:: 1 1
"""


def wordnet_dir(tmp_path: Path, text: str = CNTLIST) -> Path:
    folder = tmp_path / "wordnet"
    folder.mkdir(parents=True)
    (folder / "cntlist.rev").write_text(text)
    return folder


def test_wordnet_subjects_are_the_tagged_nouns_of_the_kinds_kept(tmp_path):
    """Nouns (ss_type 1) of the kept lexicographer files, each once, "_" read as a space; not a verb sense (thunder's
    2:35 counts once, as the noun), a person (18), an attribute (7), nor a lemma with dots."""
    assert wordnet_subjects(wordnet_dir(tmp_path)) == ["ice cream", "lemon", "thunder"]


def test_wordnet_subjects_refuse_a_missing_file_and_a_line_not_of_its_form(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install wordnet-base"):
        wordnet_subjects(tmp_path / "none")
    with pytest.raises(ValueError, match=r"cntlist.rev:2: not a line of WordNet's cntlist.rev"):
        wordnet_subjects(wordnet_dir(tmp_path, "lemon%1:13:00:: 1 6\nlemon 1 6\n"))
    with pytest.raises(ValueError, match="no tagged noun of the kinds kept"):
        wordnet_subjects(wordnet_dir(tmp_path / "people", "carpenter%1:18:00:: 1 5\n"))


@pytest.mark.skipif(not (WORDNET_DIR / "cntlist.rev").is_file(),
                    reason=f"Debian's wordnet-base is not installed ({WORDNET_DIR}); .ci/run installs it")
def test_debians_wordnet_gives_thousands_of_everyday_subjects():
    """Debian's WordNet 3.0: thousands of nouns, everyday things among them, no person and no attribute."""
    subjects = wordnet_subjects()
    assert len(subjects) > 5000 and len(set(subjects)) == len(subjects)
    assert {"fog", "lemon", "ambulance", "breakfast"} <= set(subjects)
    assert not {"carpenter", "proximity"} & set(subjects)  # noun.person, noun.attribute


def test_requests_are_asked_about_wordnet_nouns_and_the_folder_records_which(tmp_path, monkeypatch):
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
    more = str(json.loads((out / "shard-00000.json").read_text())["tokens"] + 1)
    assert eagle_data.main([*run[:-1], more, "--asked", "0.5", "--ask-subjects", "wordnet", "--wordnet", str(other)]) == 2
