"""The EAGLE data builder (minispec/recipes/eagle_data.py): the generated windows exported as token ids and read back
for a rebuild, refused under other settings; the kinds' cycle; and, with torch and transformers on a tiny model, the
whole builder and the features a generation computes."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from minispec.recipes import eagle_data


def fake_shards(folder, kinds):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    want = {}
    for i, kind in enumerate(kinds):
        windows = [rng.integers(0, 49152, int(rng.integers(5, 20))) for _ in range(3)]
        starts = np.cumsum([0] + [len(w) for w in windows])
        np.savez(folder / f"shard-{i:05d}.npz", tokens=np.concatenate(windows).astype(np.int32), starts=starts)
        (folder / f"shard-{i:05d}.json").write_text(json.dumps(dict(shard=i, kind=kind, kept=3)))
        if kind != "text":
            want[i] = [w.tolist() for w in windows]
    return want


def test_generated_windows_round_trip_and_other_settings_are_refused(tmp_path):
    want = fake_shards(tmp_path / "data", ["code-greedy", "chat-greedy", "text", "chat-t1"])
    shaping = dict(seed=2, gen_batch=32)
    got = eagle_data.export_generations(tmp_path / "data", tmp_path / "gen.npz", shaping)
    assert got == dict(windows=9, tokens=sum(len(w) for ws in want.values() for w in ws), shards=3)
    assert eagle_data.load_generations(tmp_path / "gen.npz", shaping) == want  # text shards are not exported
    with pytest.raises(ValueError, match="other settings"):
        eagle_data.load_generations(tmp_path / "gen.npz", dict(seed=3, gen_batch=32))


def test_nothing_to_export_is_an_error(tmp_path):
    fake_shards(tmp_path / "data", ["text"])
    with pytest.raises(ValueError, match="no generated shards"):
        eagle_data.export_generations(tmp_path / "data", tmp_path / "gen.npz", {})


def test_every_kind_is_made_and_the_held_out_windows_meet_every_greedy_kind():
    """The default cycle makes every kind, and the trainer's held-out windows (train_eagle_ttt.held_out_split: every
    20th greedy window) of a folder made by it meet both greedy kinds, code and chat, and no other."""
    from minispec.recipes.train_eagle_ttt import held_out_split

    kinds = eagle_data.KINDS
    assert {k.split("-")[0] for k in kinds} == {"code", "chat", "text"} and {"code-greedy", "chat-t1"} <= set(kinds)
    per_shard = 32  # --gen-batch's default: the windows of a generated shard
    window_kinds = [kinds[i % len(kinds)] for i in range(3 * len(kinds)) for _ in range(per_shard)]
    data = dict(kind=window_kinds, tokens=[np.arange(4)] * len(window_kinds), answer_start=np.full(len(window_kinds), -1))
    held, same_prompt, rows = held_out_split(data)
    assert {window_kinds[r] for r in held} == {"code-greedy", "chat-greedy"} and not same_prompt
    assert len(held) + len(rows) == len(window_kinds)


def test_every_text_shard_reads_its_own_files():
    """Text shards take the standard library's files in turns: no two text shards read the same files (bug: the two
    text shards of a cycle read the same ones)."""
    idx = [eagle_data.text_index(i) for i in range(5 * len(eagle_data.KINDS)) if eagle_data.KINDS[i % len(eagle_data.KINDS)] == "text"]
    assert idx == list(range(len(idx)))


@pytest.mark.slow
def test_a_rebuild_reuses_the_exported_windows_and_computes_their_features(tmp_path, monkeypatch):
    """The whole builder on a tiny target with SmolLM2's tokenizer: shards 0-2 come from a --generations file (no
    generation runs), shard 3 is standard-library text; features are the target's own (bug: the loop's token counter
    shadowed the reused windows, and shard 4 crashed)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from .helpers import chat_model_dir

    target = chat_model_dir(tmp_path / "t")
    shaping_args = ["--gen-batch", "2", "--text-files", "1", "--seq", "64", "--external-prompts", "none"]
    rng = np.random.default_rng(1)
    windows = {i: [rng.integers(3, 49152, 20).tolist() for _ in range(2)] for i in (0, 1, 2, 4)}
    shaping = dict(seed=2, gen_batch=2, chat_tokens=256, code_tokens=192, text_files=1, seq=64, kinds=list(eagle_data.KINDS),
                   low=eagle_data.LOW, mid=eagle_data.MID, text_order="text_index")
    starts = np.cumsum([0] + [20] * 8)
    np.savez_compressed(tmp_path / "gen.npz", tokens=np.concatenate([w for i in windows for w in windows[i]]).astype(np.uint16),
                        starts=starts, shards=np.repeat(list(windows), 2).astype(np.int32), settings=np.array(json.dumps(shaping)))

    def no_generation(*a, **k):
        raise AssertionError("generated although the windows were given")
    monkeypatch.setattr(eagle_data, "generate", no_generation)
    out = tmp_path / "data"
    assert eagle_data.main(["--out", str(out), "--target", str(target), "--generations", str(tmp_path / "gen.npz"),
                            "--tokens", "10", "--threads", "1", *shaping_args]) == 0
    first = json.loads((out / "shard-00000.json").read_text())
    assert first["reused"] and first["kept"] == 2
    with np.load(out / "shard-00000.npz") as z:
        assert z["tokens"].tolist() == windows[0][0] + windows[0][1] and z["top"].shape == (40, 32)
    # resumed for one token more than shards 0-3 hold: shard 3 is standard-library text, shard 4 reused again
    def run_to(tokens):
        return eagle_data.main(["--out", str(out), "--target", str(target), "--generations", str(tmp_path / "gen.npz"),
                                "--tokens", str(tokens), "--threads", "1", *shaping_args])
    assert run_to(121) == 0 and json.loads((out / "shard-00003.json").read_text())["kind"] == "text"
    assert run_to(json.loads((out / "manifest.json").read_text())["tokens"] + 1) == 0
    assert json.loads((out / "shard-00004.json").read_text())["reused"]


@pytest.mark.slow
def test_generate_only_makes_windows_without_features_and_a_later_build_adds_them(tmp_path, monkeypatch):
    """--generate-only writes the generated shards' windows (no features, no text shard) and exports them; a build in
    the same folder then computes those shards' features from the same windows without generating again, and keeps
    what the generating run dropped."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from .helpers import chat_model_dir

    target = chat_model_dir(tmp_path / "t")
    shaping_args = ["--gen-batch", "2", "--text-files", "1", "--seq", "64", "--external-prompts", "none"]
    rng = np.random.default_rng(3)
    calls = []

    def fake_generate(target, tok, prompts, new, greedy, seed, with_features=False):
        assert not with_features  # --generate-only keeps no features
        calls.append(seed)
        return [p[:5] + rng.integers(3, 49152, 10).tolist() for p in prompts], None
    monkeypatch.setattr(eagle_data, "generate", fake_generate)
    out = tmp_path / "data"
    run = ["--out", str(out), "--target", str(target), "--threads", "1", *shaping_args]
    assert eagle_data.main([*run, "--generate-only", "--tokens", "100"]) == 0
    records = {int(p.stem[-5:]): json.loads(p.read_text()) for p in out.glob("shard-*.json")}
    assert records and all(not r["features"] and r["kind"] != "text" for r in records.values())
    assert sum(r["tokens"] for r in records.values()) >= 100
    first = min(records)
    with np.load(out / f"shard-{first:05d}.npz") as z:
        assert set(z.files) == {"tokens", "starts"}
        windows = z["tokens"].tolist()
    got = eagle_data.export_generations(out, tmp_path / "gen.npz", json.loads((out / "settings.json").read_text()))
    assert got["shards"] == len(records)
    # the planted record of a dropped window survives the feature pass
    rec = json.loads((out / f"shard-{first:05d}.json").read_text())
    rec["dropped"] = [dict(window=9, run="planted", file="x")]
    (out / f"shard-{first:05d}.json").write_text(json.dumps(rec))
    n_calls = len(calls)
    assert eagle_data.main([*run, "--tokens", "1"]) == 0
    assert len(calls) == n_calls  # no generation: the windows were there
    again = json.loads((out / f"shard-{first:05d}.json").read_text())
    assert again["features"] and again["dropped"][0]["run"] == "planted"
    with np.load(out / f"shard-{first:05d}.npz") as z:
        assert z["tokens"].tolist() == windows and z["top"].shape == (len(windows), 32)


@pytest.mark.slow
def test_growing_from_the_windows_file_times_only_the_shards_it_generates(tmp_path, monkeypatch, capsys):
    """--generate-only --generations FILE copies the file's shards (no work) before it generates more: the pace and
    the time to go come from the generated shards alone, not from copies made in no time. The file's shards are
    numbered with a gap where a text shard's number was skipped, as the committed ones are."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from .helpers import chat_model_dir

    target = chat_model_dir(tmp_path / "t")
    rng = np.random.default_rng(4)
    monkeypatch.setattr(eagle_data, "generate", lambda target, tok, prompts, new, greedy, seed, with_features=False: (
        [p[:5] + rng.integers(3, 49152, 10).tolist() for p in prompts], None))
    run = ["--target", str(target), "--threads", "1", "--gen-batch", "2", "--text-files", "1", "--seq", "64",
           "--external-prompts", "none", "--generate-only"]
    assert eagle_data.main(["--out", str(tmp_path / "a"), *run, "--tokens", "100"]) == 0
    assert sorted(int(f.stem[-5:]) for f in (tmp_path / "a").glob("shard-*.json")) == [0, 1, 2, 4]  # 3: text
    made = eagle_data.export_generations(tmp_path / "a", tmp_path / "gen.npz",
                                         json.loads((tmp_path / "a" / "settings.json").read_text()))
    first = json.loads((tmp_path / "a" / "manifest.json").read_text())
    first.update(dropped=[dict(shard=0, kind="code-greedy", window=3, run="planted", file="x")], asked_requests=7)
    (tmp_path / "m.json").write_text(json.dumps(first))
    grow = ["--out", str(tmp_path / "b"), *run, "--generations", str(tmp_path / "gen.npz"), "--tokens",
            str(made["tokens"] + 1)]
    for bad, said in (([], "describes the shards of --generations"), (["--tokens", "5"], "lists 4 shards and 5 tokens")):
        wrong = dict(first, tokens=5) if bad else first
        (tmp_path / "w.json").write_text(json.dumps(wrong))
        argv = [a for a in grow if a != "--generate-only"] if not bad else grow
        assert eagle_data.main([*argv, "--generations-manifest", str(tmp_path / "w.json")]) == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "b").exists() or not list((tmp_path / "b").glob("shard-*"))  # refused before any shard
    (tmp_path / "w.json").write_text(json.dumps({k: v for k, v in first.items() if k != "shard_minutes"}))
    assert eagle_data.main([*grow, "--generations-manifest", str(tmp_path / "w.json")]) == 2
    assert "it has no shard_minutes" in capsys.readouterr().err
    # a folder whose first shards were generated there, not copied from the file, is refused, not crashed on
    other = ["--out", str(tmp_path / "a"), *grow[2:], "--generations-manifest", str(tmp_path / "m.json")]
    assert eagle_data.main(other) == 2
    assert "are not the 4 shards" in capsys.readouterr().err
    moved = dict(first, shard_minutes=[dict(s, shard=i) for i, s in enumerate(first["shard_minutes"])])  # 0-3
    (tmp_path / "w.json").write_text(json.dumps(moved))
    assert eagle_data.main([*grow, "--generations-manifest", str(tmp_path / "w.json")]) == 2
    assert "it lists shards [0, 1, 2, 3], and" in capsys.readouterr().err
    assert eagle_data.main([*grow, "--generations-manifest", str(tmp_path / "m.json")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "] shard " in line]
    assert len(lines) == made["shards"] + 1, lines  # the file's shards, copied, then at least one generated
    assert all("the pace is measured on the first shard generated" in line for line in lines[:-1]), lines
    assert "tok/s this run" in lines[-1] and "h to go" in lines[-1], lines[-1]
    # the grown folder's manifest keeps the committed records of the copied shards, and adds the new shard's
    grown = json.loads((tmp_path / "b" / "manifest.json").read_text())
    new = json.loads((tmp_path / "b" / "shard-00005.json").read_text())  # after 0, 1, 2 and 4, copied
    assert grown["dropped"][0]["run"] == "planted" and grown["asked_requests"] == 7 + new["asked"]
    assert (grown["shards"], grown["tokens"]) == (made["shards"] + 1, made["tokens"] + new["tokens"])
    assert grown["shard_minutes"][:made["shards"]] == first["shard_minutes"]
    assert grown["earlier_provenance"] == [first["provenance"]]


def asking_target(replies: list[str], made: list[str]):
    """``generate``'s stand-in for --asked and --asked-code: asked (at T != 1) to write a request or a function, it
    writes ``replies`` in turn; asked the prompts made from them (greedy), it records them in ``made`` and answers
    three tokens, with no features (None: a pass of their own makes them)."""
    def fake_generate(target, tok, prompts, new, greedy, seed, temperature=1.0, top_p=1.0, with_features=False):
        if temperature != 1.0:
            return [p + tok.encode(replies[j % len(replies)]) for j, p in enumerate(prompts)], None
        made.extend(tok.decode(p) for p in prompts)
        return [p + [5, 6, 7] for p in prompts], [None] * len(prompts)
    return fake_generate


def chat_run(out, target) -> list[str]:
    """eagle_data's arguments for one chat-greedy shard of 4 windows from ``target`` into ``out`` (the requests' tests)."""
    return ["--out", str(out), "--target", str(target), "--threads", "1", "--gen-batch", "4", "--seq", "256",
            "--external-prompts", "none", "--kinds", "chat-greedy", "--tokens", "1"]


def test_asked_requests_are_the_targets_own_and_a_short_evaluation_prompt_among_them_is_replaced(tmp_path, monkeypatch):
    """--asked: the target writes the chat requests; the quoted request is kept, one that holds a whole short
    evaluation prompt is replaced by a template's, and the settings record the share (the folder is then refused to
    a run without it)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from minispec.recipes.eval_overlap import MINISPEC_DATA, file_texts

    from .helpers import chat_model_dir

    target = chat_model_dir(tmp_path / "t")
    short = next(t for t in file_texts(MINISPEC_DATA / "chat.jsonl") if 3 <= len(t.split()) < 8)
    good = "How do I keep a sourdough starter alive over a long holiday?"
    made = []  # the requests: one good, one that holds an evaluation prompt
    monkeypatch.setattr(eagle_data, "generate", asking_target([f'A user might ask: "{good}"', f'A user might ask: "{short}"'], made))
    out = tmp_path / "data"
    run = chat_run(out, target)
    assert eagle_data.main([*run, "--asked", "0.5"]) == 0
    rec = json.loads((out / "shard-00000.json").read_text())
    assert rec["asked"] == 1 and rec["kind"] == "chat-greedy"
    assert sum(good in m for m in made) == 1 and not any(short in m for m in made) and len(made) == 4
    assert json.loads((out / "settings.json").read_text())["asked"] == 0.5
    assert eagle_data.main([*run, "--asked", "0"]) == 2  # other settings: refused
    assert eagle_data.main([*run, "--asked", "0.5", "--ask-wording", "person"]) == 2  # another wording: refused too
    assert "ask_wording" not in json.loads((out / "settings.json").read_text())  # the first wording, unrecorded


def test_the_target_and_an_unfiltered_build_are_recorded_so_a_resume_cannot_mix_them(tmp_path, monkeypatch):
    """A folder made from one --target, with --external-prompts none, is refused to a run with another target or with
    the external sets' rule (each would add windows of another kind to it), and resumed by its own settings."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import shutil

    from .helpers import chat_model_dir

    target = chat_model_dir(tmp_path / "t")
    monkeypatch.setattr(eagle_data, "generate", asking_target(["unused"], []))
    out = tmp_path / "data"
    run = chat_run(out, target)
    assert eagle_data.main(run) == 0
    settings = json.loads((out / "settings.json").read_text())
    assert settings["target"] == str(target.resolve()) and settings["external_prompts"] == "none"
    other = shutil.copytree(target, tmp_path / "t2")
    assert eagle_data.main([a if a != str(target) else str(other) for a in run]) == 2  # another target: refused
    (tmp_path / "ext").mkdir()
    assert eagle_data.main([*run, "--external-prompts", str(tmp_path / "ext")]) == 2  # filtered now: refused
    assert eagle_data.main([*run, "--tokens", "2"]) == 0  # its own settings: resumed


def test_the_ask_wording_reaches_the_target_and_the_settings(tmp_path, monkeypatch):
    """--ask-wording person: the target is asked in that wording (and not the chatbot one), and the folder records it;
    without --asked it is refused."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from .helpers import chat_model_dir

    target = chat_model_dir(tmp_path / "t")
    asked = []

    def fake_generate(target, tok, prompts, new, greedy, seed, temperature=1.0, top_p=1.0, with_features=False):
        if temperature != 1.0:
            asked.extend(tok.decode(p) for p in prompts)
            return [p + tok.encode('"How do I keep basil alive on a windowsill in winter?"') for p in prompts], None
        return [p + [5, 6, 7] for p in prompts], [None] * len(prompts)

    monkeypatch.setattr(eagle_data, "generate", fake_generate)
    out = tmp_path / "data"
    run = chat_run(out, target)
    assert eagle_data.main([*run, "--ask-wording", "person"]) == 2  # no --asked
    assert eagle_data.main([*run, "--asked", "0.5", "--ask-wording", "person"]) == 0
    assert len(asked) == 2 and all("as a person would ask it" in a and "chatbot" not in a for a in asked)
    assert json.loads((out / "settings.json").read_text())["ask_wording"] == "person"


def test_own_subjects_are_topics_the_target_lists_and_reach_its_requests(tmp_path, monkeypatch):
    """--ask-subjects own: the target first lists topics of a listed subject, and each request is asked about one of
    them; where it lists none, the listed subjects stay; the folder records it; without --asked it is refused."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from .helpers import chat_model_dir

    target = chat_model_dir(tmp_path / "t")
    listing, asked = [], []
    replies = iter(["Sure!\n1. **Sourdough starters**: how to feed them\n2) Rye bread\n3. Sourdough starters",
                    "I like bread."])  # the second shard's list: none

    def fake_generate(target, tok, prompts, new, greedy, seed, temperature=1.0, top_p=1.0, with_features=False):
        if temperature == 0.7:  # listing topics
            listing.extend(tok.decode(p) for p in prompts)
            reply = next(replies)
            return [p + tok.encode(reply) for p in prompts], None
        if temperature == 0.6:  # writing a request
            asked.extend(tok.decode(p) for p in prompts)
            return [p + tok.encode('"How do I keep basil alive on a windowsill in winter?"') for p in prompts], None
        return [p + [5, 6, 7] for p in prompts], [None] * len(prompts)

    monkeypatch.setattr(eagle_data, "generate", fake_generate)
    out = tmp_path / "data"
    run = chat_run(out, target)
    assert eagle_data.main([*run, "--ask-subjects", "own"]) == 2  # no --asked
    assert eagle_data.main([*run, "--asked", "0.5", "--ask-subjects", "own"]) == 0
    assert len(listing) == 1 and "List ten specific topics about" in listing[0]  # a quarter of 2 requests: one list
    assert len(asked) == 2 and all(" about Sourdough starters that a user" in a or " about Rye bread that a user" in a
                                   for a in asked)
    assert json.loads((out / "settings.json").read_text())["ask_subjects"] == "own"
    assert eagle_data.main([*run, "--asked", "0.5"]) == 2  # the folder's settings are refused to a run without it
    subjects = eagle_data.all_topics() + eagle_data.SUBJECTS
    more = str(json.loads((out / "shard-00000.json").read_text())["tokens"] + 1)  # a second shard
    assert eagle_data.main([*run[:-1], more, "--asked", "0.5", "--ask-subjects", "own"]) == 0
    assert len(listing) == 2 and len(asked) == 4
    assert all(any(f" about {t} that a user" in a for t in subjects) for a in asked[2:])  # no list: listed subjects


@pytest.mark.parametrize("reply, body, head", [
    ('Sure:\n```python\ndef area(w, h):\n    """\n    The area of a rectangle.\n\n    Args: w, h\n    """\n    return w * h\n'
     '    # done\n```\nExample: area(2, 3)', 1, 'def area(w, h):\n    """The area of a rectangle."""\n    return w * h\n'),
    ("class Stack:\n    '\'\'A stack.\n    More.\n    '\'\'\n    def push(self, x):\n", 1,
     'class Stack:\n    """A stack."""\n    def push(self, x):\n'),
    ('import math\n\ndef f(x):\n    """Add one."""\n    return x + 1\n```\n```python\nprint(f(1))', 3,
     'def f(x):\n    """Add one."""\n    return x + 1\n'),  # the body stops at the code's end
    ('def f(x):\n    """\n    Closed on its line."""\n    return x\n', 1, 'def f(x):\n    """Closed on its line."""\n    return x\n'),
    ("def f(x):\n    return x\n", 1, None),  # no docstring
    ('    def method(self):\n        """Indented: not top-level."""\n', 0, None),
    ('def f():\n    """Never closed\n    return 1\n', 0, None),
    ("Here is how you would do it in words.", 0, None),
])
def test_a_function_head_is_its_def_line_a_one_line_docstring_and_a_few_body_lines(reply, body, head):
    assert eagle_data.function_head(reply, body) == head


def test_asked_code_heads_are_the_targets_own_and_a_reply_without_one_gets_a_library_prompt(tmp_path, monkeypatch):
    """--asked-code: the target writes the function whose head becomes a plain-text code prompt; a reply without a
    docstring gives a standard-library prompt instead, and the settings record the share."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from .helpers import chat_model_dir

    target = chat_model_dir(tmp_path / "t")
    good = '```python\ndef count_vowels(text):\n    """Count the vowels in a piece of text."""\n    n = 0\n```'
    made = []  # the functions: one with a docstring, one without
    monkeypatch.setattr(eagle_data, "generate", asking_target([good, "def f(x):\n    return x"], made))
    out = tmp_path / "data"
    run = ["--out", str(out), "--target", str(target), "--threads", "1", "--gen-batch", "4", "--seq", "256",
           "--external-prompts", "none", "--kinds", "code-greedy", "--tokens", "1"]
    assert eagle_data.main([*run, "--asked-code", "0.5"]) == 0
    rec = json.loads((out / "shard-00000.json").read_text())
    assert rec["asked"] == 1 and rec["kind"] == "code-greedy" and len(made) == 4
    head = 'def count_vowels(text):\n    """Count the vowels in a piece of text."""\n'
    assert made[0] in (head, head + "    n = 0\n")  # 0 to 3 body lines were asked for; the code has one
    assert not any("def f(x)" in m or "```" in m for m in made)  # the rest: standard-library prompts
    assert json.loads((out / "settings.json").read_text())["asked_code"] == 0.5
    assert eagle_data.main(run) == 2  # other settings: refused


@pytest.mark.parametrize("bad", [["--kinds", "chat-greedy,poetry"], ["--asked", "1.5"], ["--kinds", ""],
                                 ["--kinds", "code-greedy", "--asked", "0.5"], ["--kinds", "text", "--generate-only"],
                                 ["--asked-code", "-0.1"], ["--kinds", "chat-greedy", "--asked-code", "0.5"],
                                 ["--chat-tokens", "0"], ["--code-tokens", "-1"], ["--text-files", "0"]])
def test_bad_kinds_or_share_are_refused_before_anything_loads(tmp_path, bad, capsys):
    assert eagle_data.main(["--out", str(tmp_path / "d"), *bad]) == 2
    assert "error: --" in capsys.readouterr().err and not (tmp_path / "d").exists()


def test_text_shards_that_run_out_of_files_stop_the_build_by_name(tmp_path, monkeypatch, capsys):
    """A text shard past the standard library's last file ends the build with an error that says so (bug: empty
    shards were made for ever, the tokens asked for never reached)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from .helpers import chat_model_dir

    target = chat_model_dir(tmp_path / "t")
    from minispec.recipes import train_draft
    monkeypatch.setattr(train_draft, "stdlib_files", lambda: [Path(json.__file__)])  # one file: one text shard
    run = ["--out", str(tmp_path / "d"), "--target", str(target), "--threads", "1", "--kinds", "text", "--text-files",
           "1", "--seq", "64", "--external-prompts", "none", "--tokens", "1000000"]
    assert eagle_data.main(run) == 2
    assert "text shard 1 found no standard-library files left (1 files, --text-files 1 a shard)" in capsys.readouterr().err
    assert [f.name for f in sorted((tmp_path / "d").glob("shard-*.json"))] == ["shard-00000.json"]


def test_a_generation_reads_its_own_features_and_a_row_left_unread_gets_a_pass(tmp_path):
    """``generate(with_features=True)``: the same sequences as without, at T = 1 and greedy, and each token's {top, low,
    mid} as a teacher-forced pass gives them (float16 apart), row by row in left-padded batches. A row that ends while
    others go on is read by their next pass; a row that ends on the generation's last step is not: its entry is None,
    and ``features_of`` gives it a pass of its own. (Bug this would catch: features one position off, of the token
    before.)"""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from types import SimpleNamespace

    from .helpers import chat_model_dir

    target = transformers.AutoModelForCausalLM.from_pretrained(str(chat_model_dir(tmp_path / "t")),
                                                               dtype=torch.float32).eval()
    prompts = [[101, 102], [7, 300], [4444, 13, 14, 15]]

    def close(seqs, gen_features):
        want, got = eagle_data.features(target, seqs), eagle_data.features_of(target, seqs, gen_features)
        for k in ("top", "low", "mid"):
            assert got[k].shape == want[k].shape == (sum(map(len, seqs)), 32)
            np.testing.assert_allclose(got[k].astype(np.float32), want[k].astype(np.float32), rtol=1e-2, atol=1e-2)
        assert not np.allclose(got["top"][1:], want["top"][:-1], atol=1e-2)  # the shifted twin differs

    for greedy in (False, True):
        tok = SimpleNamespace(eos_ids=[49151])
        plain, none = eagle_data.generate(target, tok, prompts, 6, greedy, seed=4)
        seqs, gen_features = eagle_data.generate(target, tok, prompts, 6, greedy, seed=4, with_features=True)
        assert none is None and seqs == plain and all(len(s) == len(p) + 6 for s, p in zip(seqs, prompts))
        assert all(f is not None for f in gen_features)
        close(seqs, gen_features)
    # row 0 ends at its 2nd new token, rows 1 and 2 at their 3rd: the last step makes their end tokens, read by no pass
    greedy_seqs = plain
    ends = [greedy_seqs[0][len(prompts[0]) + 1], greedy_seqs[1][len(prompts[1]) + 2], greedy_seqs[2][len(prompts[2]) + 2]]
    assert not set(ends) & {t for s, p, n in zip(greedy_seqs, prompts, (1, 2, 2)) for t in s[len(p):][:n]}
    tok = SimpleNamespace(eos_ids=ends)
    seqs, gen_features = eagle_data.generate(target, tok, prompts, 6, True, seed=4, with_features=True)
    assert seqs == eagle_data.generate(target, tok, prompts, 6, True, seed=4)[0]
    assert [len(s) - len(p) for s, p in zip(seqs, prompts)] == [2, 3, 3]
    assert [f is None for f in gen_features] == [False, True, True]
    close(seqs, gen_features)


def test_a_shard_keeps_the_generations_features_through_a_dropped_window_and_the_seq_cut(tmp_path, monkeypatch):
    """make_shard with a generation that computed features: a window that copies an evaluation prompt is dropped with
    its features, the rest are cut at --seq with theirs, and a window the generation left unread (None) gets a pass."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from minispec.recipes.eval_overlap import MINISPEC_DATA, file_texts

    from .helpers import chat_model_dir

    target = chat_model_dir(tmp_path / "t")
    copied = next(t for t in file_texts(MINISPEC_DATA / "chat.jsonl") if len(t.split()) >= 12)
    seq = 256

    def fake_generate(target, tok, prompts, new, greedy, seed, temperature=1.0, top_p=1.0, with_features=False):
        seqs = [p + tok.encode((copied if j == 1 else "") + " and so on" * 120) for j, p in enumerate(prompts)]
        marked = [{k: np.full((len(s), 32), j + 1, np.float16) for k in ("top", "low", "mid")} for j, s in enumerate(seqs)]
        marked[2] = None  # as for a row that ended on the generation's last step
        return seqs, marked
    monkeypatch.setattr(eagle_data, "generate", fake_generate)
    out = tmp_path / "data"
    assert eagle_data.main(["--out", str(out), "--target", str(target), "--threads", "1", "--gen-batch", "4",
                            "--seq", str(seq), "--external-prompts", "none", "--kinds", "chat-greedy",
                            "--tokens", "1"]) == 0
    rec = json.loads((out / "shard-00000.json").read_text())
    assert rec["kept"] == 3 and [d["window"] for d in rec["dropped"]] == [1]
    with np.load(out / "shard-00000.npz") as z:
        tokens, starts, top, mid = z["tokens"], z["starts"], z["top"], z["mid"]
    assert np.all(np.diff(starts) == seq) and len(top) == starts[-1]  # every window cut
    assert np.all(top[starts[0]:starts[1]] == 1) and np.all(mid[starts[2]:starts[3]] == 4)  # windows 0 and 3, as made
    model = transformers.AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    window2 = tokens[starts[1]:starts[2]].tolist()
    assert np.array_equal(top[starts[1]:starts[2]], eagle_data.features(model, [window2])["top"])  # its own pass


def test_the_recipe_script_refuses_bad_arguments_before_anything_runs(tmp_path):
    """scripts/eagle_recipe.sh, the whole recipe in one resumable command, checks its arguments first: one at most,
    a folder (it would otherwise start hours of work)."""
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "eagle_recipe.sh"
    env = dict(os.environ, MINISPEC_CACHE=str(tmp_path / "cache"))
    got = subprocess.run(["bash", str(script), str(tmp_path / "out"), "1300000"], capture_output=True, text=True, env=env)
    assert got.returncode == 2 and "one argument at most" in got.stderr and not (tmp_path / "out").exists()
    (tmp_path / "file").write_text("")
    got = subprocess.run(["bash", str(script), str(tmp_path / "file")], capture_output=True, text=True, env=env)
    assert got.returncode == 2 and "must be a folder" in got.stderr and not (tmp_path / "cache").exists()


def test_the_windows_file_reads_back_in_both_formats_and_refuses_a_damaged_one(tmp_path):
    """recipes/windows.py: windows written with LZMA read back as written, with their shards and settings; a file in
    the zlib format of the exports before it reads the same; starts that do not cover the tokens are refused."""
    import numpy as np

    from minispec.recipes.windows import read_windows, write_windows

    rng = np.random.default_rng(0)
    windows = [rng.integers(0, 49152, n) for n in (5, 9, 1, 30)]
    settings = {"seed": 3, "kinds": ["chat-greedy"]}
    assert write_windows(tmp_path / "w.npz", windows, [0, 0, 1, 2], settings) == 45
    t, st, sh, got = read_windows(tmp_path / "w.npz")
    assert [t[a:b].tolist() for a, b in zip(st[:-1], st[1:])] == [w.tolist() for w in windows]
    assert sh.tolist() == [0, 0, 1, 2] and got == settings and t.dtype == np.int64
    np.savez_compressed(tmp_path / "old.npz", tokens=np.concatenate(windows).astype(np.uint16), starts=st,
                        shards=sh, settings=np.array(json.dumps(settings)))
    old = read_windows(tmp_path / "old.npz")
    assert np.array_equal(old[0], t) and np.array_equal(old[1], st)
    np.savez_compressed(tmp_path / "bad.npz", tokens=np.concatenate(windows).astype(np.uint16), starts=st[:-1],
                        shards=sh[:-1], settings=np.array(json.dumps(settings)))
    with pytest.raises(ValueError, match="damaged"):
        read_windows(tmp_path / "bad.npz")


def test_the_windows_file_refuses_ids_it_cannot_hold_and_a_name_it_would_change_and_replaces_a_file_whole(tmp_path,
                                                                                                           monkeypatch):
    """write_windows refuses, by file and id, an id outside uint16's 0..65535 (bug: 70000 was stored as 4464, -1 as
    65535) and a name without .npz (bug: NumPy wrote gen.npz for gen); a write that stops half-way leaves the file it
    was to replace as it was (bug: written in place)."""
    from minispec.recipes import windows as w

    ok = [np.array([5, 65535]), np.array([0])]
    for bad in (70000, -1):
        with pytest.raises(ValueError, match=f"w.npz: token id {bad} is outside 0..65535"):
            w.write_windows(tmp_path / "w.npz", [*ok, np.array([7, bad])], [0, 0, 1], {})
    with pytest.raises(ValueError, match="gen: the windows' file must be named"):
        w.write_windows(tmp_path / "gen", ok, [0, 0], {})
    assert sorted(f.name for f in tmp_path.iterdir()) == []  # nothing written

    assert w.write_windows(tmp_path / "w.npz", ok, [0, 0], {"v": 1}) == 3
    before = (tmp_path / "w.npz").read_bytes()

    def stops_half_way(file, **arrays):
        file.write(b"PK half a file") if hasattr(file, "write") else Path(file).write_bytes(b"PK half a file")
        raise KeyboardInterrupt
    monkeypatch.setattr(w.np, "savez_compressed", stops_half_way)
    with pytest.raises(KeyboardInterrupt):
        w.write_windows(tmp_path / "w.npz", ok, [0, 0], {"v": 2})
    assert (tmp_path / "w.npz").read_bytes() == before and [f.name for f in tmp_path.iterdir()] == ["w.npz"]


def test_the_recipe_reads_the_windows_the_shipped_head_was_trained_on():
    """scripts/eagle_recipe.sh reads the self-prompted folders up to ASKED_SHARDS and CODE_SHARDS (``DIR:N``), so that a
    folder grown since still gives the shipped head's data: the committed windows of those shards, with eagle-data-v2's
    windows, are the windows its training.json counts."""
    import re
    from pathlib import Path

    from minispec.recipes.windows import read_windows

    root = Path(__file__).resolve().parents[1]
    script = (root / "scripts" / "eagle_recipe.sh").read_text()
    asked, code = (int(re.search(rf"{name}=(\d+)", script).group(1)) for name in ("ASKED_SHARDS", "CODE_SHARDS"))
    trained = json.loads((root / "weights" / "eagle-smollm2-135m" / "training.json").read_text())
    v2 = json.loads((root / "docs" / "eagle" / "data_manifest.json").read_text())["kept"]
    kept = [int((read_windows(root / "weights" / "eagle-data" / f)[2] < n).sum())
            for f, n in (("generations-asked-s3.npz", asked), ("generations-code-asked-s3.npz", code))]
    assert sum(kept) + v2 == trained["sequences"]


def test_listed_topics_reads_a_list_and_drops_a_cut_off_last_line():
    reply = "Sure!\n1. **Birdsong**: how birds sing\n2) Migration - why\n- Flight\n* Nests\n4. Birdsong\n5. The history of"
    assert eagle_data.listed_topics(reply) == ["Birdsong", "Migration", "Flight", "Nests", "The history of"]
    assert eagle_data.listed_topics(reply, complete=False) == ["Birdsong", "Migration", "Flight", "Nests"]
    assert eagle_data.listed_topics("No list here.\n10. " + "word " * 7) == []  # more than 6 words: not a topic


def test_asked_requests_draw_their_styles_and_subjects_as_before():
    """Without --ask-subjects own, the requests asked for are the ones the code before it asked for: for each request
    a style, then a subject, from the same generator (a resumed folder gets the same requests)."""
    seen = []

    def fake_generate(target, tok, prompts, *a, **k):
        seen.extend(prompts)
        return [p + [5] for p in prompts], None

    class Tok:
        eos_ids = ()

        def apply_chat_template(self, messages):
            return messages[0]["content"]

        def encode(self, text):
            return [text]

        def decode(self, ids):
            return ""

    class Never:
        def holds_short(self, text):
            return False

    from unittest import mock

    import numpy as np
    with mock.patch.object(eagle_data, "generate", fake_generate):
        eagle_data.asked_instructions(None, Tok(), 6, np.random.default_rng(3), 0, Never(), "person")
    rng, subjects = np.random.default_rng(3), eagle_data.all_topics() + eagle_data.SUBJECTS
    before = [eagle_data.ASK_WORDINGS["person"].format(style=eagle_data.ASK_STYLES[rng.integers(len(eagle_data.ASK_STYLES))],
                                                       subject=subjects[rng.integers(len(subjects))]) for _ in range(6)]
    assert [p[0] for p in seen] == before


@pytest.mark.parametrize("text, kept", [
    ("How do the human heart's beating mechanisms work?", True), ("Write a short poem about migratory birds.", True),
    ("Explain the rules of chess, please.", True), ("I'm ready to help! What can I assist you with today?", False),
    ("Please provide the task and the task description.", False), ("You're a helpful AI, provide a request.", False),
    ("A request for a recipe about Priority Queues, as a person would ask it.", False),
    ("Mirrors: Tools and supplies can be a great resource for your project.", False),
    ("To be a helpful AI, I'd love to know how to make exercise fun.", False),
    ("How does air pressure change with height?", True), ("How do I assist an elderly neighbour with shopping?", True),
    ("What can I help you with today?", False), ("How can AI help farmers?", False),
    ("What is a pull request in Git?", True), ("My request: how do plants grow?", False),
    ("Please provide an example of recursion?", False), ("Please explain photosynthesis.", True),
    ("Can you give me three tips for sleeping better.", True), ("Please ...", False),
    ("I'm planning a trip to Japan; what should I pack?", True), ("Great question! What is a heap?", False),
])
def test_a_request_is_kept_by_its_shape_only_where_it_reads_as_a_users(text, kept):
    assert eagle_data.reads_as_request(text) is kept


def test_ask_filter_shape_replaces_an_assistants_reply_by_a_template_request(tmp_path, monkeypatch):
    """--ask-filter shape: twice as many requests are asked for; one in the assistant's voice is not kept, and the
    first that pass are (the shard's asked count says how many); the folder records it; without --asked it is
    refused."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from .helpers import chat_model_dir

    target = chat_model_dir(tmp_path / "t")
    replies = ['"I\'m ready to help! What can I assist you with today?"', '"How do bees find their way home?"',
               '"Why is the sea blue?"', '"Describe a lighthouse."']  # 2 x 2 asked for: three a user's
    answered = []
    fake_generate = asking_target(replies, answered)

    monkeypatch.setattr(eagle_data, "generate", fake_generate)
    out = tmp_path / "data"
    run = chat_run(out, target)
    assert eagle_data.main([*run, "--ask-filter", "shape"]) == 2  # no --asked
    assert eagle_data.main([*run, "--asked", "0.5", "--ask-filter", "shape"]) == 0
    rec = json.loads((out / "shard-00000.json").read_text())
    assert rec["asked"] == 2  # four asked for (two would keep one); the first two of the three that pass kept
    assert sum("bees find their way" in a for a in answered) == sum("sea blue" in a for a in answered) == 1
    assert not any("lighthouse" in a or "assist you" in a for a in answered)
    assert json.loads((out / "settings.json").read_text())["ask_filter"] == "shape"
