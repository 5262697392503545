"""The older training recipes (minispec/recipes/train_draft.py, train_bpe_draft.py, train_eagle.py and training.py,
what they share) on tiny targets, in seconds: their arguments refused before anything is made, a run that stops leaving
its --out as it was, the EAGLE data refused under other settings, and the files they write as the shipped ones are."""

import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from minispec.model.safetensors_io import read_safetensors
from minispec.model.tiny import tiny_config, write_random_model

from .helpers import chat_model_dir

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
# the first EAGLE head's arguments, as its training.json recorded them (git show 049dc18:weights/eagle-smollm2-135m/training.json)
FIRST_HEAD = {"target": None, "out": "weights/eagle-smollm2-135m", "seed": 0, "gen_batches": 32, "gen_batch": 48,
              "gen_tokens": 128, "stdlib_tokens": 160000, "data_dir": None, "data_only": False, "vocab": 8192,
              "loss": "reg+ce", "epochs": 3.0, "batch": 16, "seq": 256, "lr": 0.002, "noise": 0.2, "threads": 1,
              "ship_vocab": 6144}


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory, monkeypatch):
    """Each test's own $MINISPEC_CACHE, where the recipes keep their run folders (training.run_folder)."""
    monkeypatch.setenv("MINISPEC_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def chat_target(tmp_path_factory):
    """A tiny random target with SmolLM2's vocabulary and tokenizer, 128 wide: two student heads of 64."""
    return chat_model_dir(tmp_path_factory.mktemp("chat") / "t", hidden_size=128, intermediate_size=64,
                          num_hidden_layers=1)


def shipped_out(path: Path) -> dict:
    """An --out that holds a shipped model's files (their bytes, by name)."""
    path.mkdir()
    files = {"train_log.txt": b"the shipped run's log\n", "model.safetensors": b"shipped weights", "README.md": b"mine"}
    for name, data in files.items():
        (path / name).write_bytes(data)
    return files


def contents(path: Path) -> dict:
    return {f.name: f.read_bytes() for f in path.iterdir()}


def write_data(d: Path, target_dir: Path, settings: dict, n_gen=40, n_code=4, length=24, seed=0) -> Path:
    """A finished data folder in train_eagle's layout: random token windows (``n_gen`` generated, then ``n_code``
    standard-library ones), random features, the target's embedding, and the settings it says it was made with."""
    cfg = json.loads((target_dir / "config.json").read_text())
    rng = np.random.default_rng(seed)
    toks = [rng.integers(3, cfg["vocab_size"], length) for _ in range(n_gen + n_code)]
    d.mkdir(parents=True)
    np.save(d / "tokens.npy", np.concatenate(toks).astype(np.int32))
    np.save(d / "feats.npy", rng.standard_normal((length * len(toks), cfg["hidden_size"])).astype(np.float16))
    np.save(d / "starts.npy", np.arange(len(toks) + 1) * length)
    np.save(d / "embed.npy", read_safetensors(target_dir / "model.safetensors")["model.embed_tokens.weight"])
    (d / "meta.json").write_text(json.dumps(dict(generated=n_gen, eos=[1, 2], generation_minutes=0.0,
                                                 feature_minutes=0.0)))
    (d / "settings.json").write_text(json.dumps(settings))
    (d / "done").write_text("ok\n")
    return d


def no_data_made(*a, **k):
    raise AssertionError("data made: the test gives it")


def stop(*a, **k):  # a run stopped there (an interruption, a crash)
    raise KeyboardInterrupt


# --- train_draft


@pytest.mark.parametrize("bad, said", [(["--seq", "1"], "--seq must be at least 2, got 1"),
                                       (["--steps", "0"], "--steps must be at least 1, got 0"),
                                       (["--steps", "-1"], "--steps must be at least 1, got -1"),
                                       (["--batch", "1"], "--batch must be at least 2, got 1"),
                                       (["--lr", "0"], "--lr must be a positive number, got 0.0"),
                                       (["--width", "192"], "--width 192 is wider than the target's hidden size 128")])
def test_train_draft_refuses_its_arguments_before_it_generates(tmp_path, chat_target, monkeypatch, capsys, bad, said):
    """(bug: each was found out after the generation, or never: --steps -1 saved an untrained model)"""
    from minispec.recipes import train_draft

    monkeypatch.setattr(train_draft, "generate_data", no_data_made)
    with pytest.raises(SystemExit) as e:
        train_draft.main(["--out", str(tmp_path / "out"), "--target", str(chat_target), *bad])
    assert e.value.code == 2 and said in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_a_train_draft_run_that_stops_leaves_its_out_as_it_was(tmp_path, chat_target, monkeypatch):
    """A run writes beside --out and moves its files in at the end: one stopped before (here as it writes the checksums)
    leaves --out's files as they were, its log included, and its own log where it wrote (bug: the log was emptied at
    the start, and the weights were replaced before the run had its results); a finished run's files replace theirs,
    the others are kept."""
    from minispec.recipes import train_draft, training

    monkeypatch.setattr(train_draft, "stdlib_files", lambda: [Path(json.__file__)])
    out = tmp_path / "draft"
    shipped = shipped_out(out)
    run = ["--out", str(out), "--target", str(chat_target), "--gen-batches", "1", "--gen-batch", "2", "--gen-tokens",
           "4", "--steps", "2", "--batch", "2", "--seq", "16", "--width", "128", "--layers", "1", "--mlp", "64",
           "--threads", "1"]
    monkeypatch.setattr(training, "write_sums", stop)
    with pytest.raises(KeyboardInterrupt):
        train_draft.main(run)
    assert contents(out) == shipped
    [left] = tmp_path.glob(".draft.*.partial")  # the stopped run's files, beside --out
    assert "] args {" in (left / "draft" / "train_log.txt").read_text()
    assert (left / "draft" / "model.safetensors").exists()

    monkeypatch.undo()
    monkeypatch.setattr(train_draft, "stdlib_files", lambda: [Path(json.__file__)])
    assert train_draft.main(run) == 0
    got = contents(out)
    assert got["README.md"] == b"mine" and got["model.safetensors"] != shipped["model.safetensors"]
    assert b"] args {" in got["train_log.txt"] and {"config.json", "training.json", "SHA256SUMS"} <= set(got)
    assert list(tmp_path.glob(".draft.*.partial")) == [left]  # the finished run's staging directory is gone


def test_a_stopped_train_draft_run_resumes_its_generation_and_its_training(tmp_path, chat_target, monkeypatch, capsys):
    """The same command, run again, generates only the batches the stopped run lacked and trains from its last
    checkpoint, to the weights of a run never stopped (bug: a stopped run began again, the target's generation too);
    a run folder of other settings is refused before anything is made."""
    from minispec.recipes import train_draft, training

    monkeypatch.setattr(train_draft, "stdlib_files", lambda: [Path(json.__file__)])
    def run(name, *more):
        return ["--out", str(tmp_path / name), "--target", str(chat_target), "--gen-batches", "2", "--gen-batch", "2",
                "--gen-tokens", "4", "--steps", "4", "--batch", "2", "--seq", "16", "--width", "128", "--layers", "1",
                "--mlp", "64", "--threads", "1", "--run-dir", str(tmp_path / f"run-{name}"), *more]
    assert train_draft.main(run("whole")) == 0
    whole = (tmp_path / "whole" / "model.safetensors").read_bytes()

    generate = train_draft.generate_data
    def one_batch_then_stop(*a, cache, **k):  # the run stopped after its first batch
        generate(a[0], a[1], a[2], 1, *a[4:], cache=cache, **k)
        raise KeyboardInterrupt
    monkeypatch.setattr(train_draft, "generate_data", one_batch_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train_draft.main(run("stopped"))
    monkeypatch.setattr(train_draft, "generate_data", generate)
    monkeypatch.setattr(training.RunState, "due", lambda self, step, steps: True)  # a checkpoint after every step
    real_step = __import__("torch").optim.AdamW.step
    steps = []
    def stop_at_third(self, *a, **k):
        steps.append(1)
        if len(steps) == 3:
            raise KeyboardInterrupt
        return real_step(self, *a, **k)
    monkeypatch.setattr(__import__("torch").optim.AdamW, "step", stop_at_third)
    capsys.readouterr()
    with pytest.raises(KeyboardInterrupt):
        train_draft.main(run("stopped"))
    log = capsys.readouterr().err
    assert "generate 1/2" not in log and "generate 2/2" in log  # the first batch read back, the second made
    monkeypatch.setattr(__import__("torch").optim.AdamW, "step", real_step)
    assert train_draft.main(run("stopped")) == 0
    log = capsys.readouterr().err
    assert "generate " not in log and "resumed at step 2 of 4" in log
    assert (tmp_path / "stopped" / "model.safetensors").read_bytes() == whole

    assert train_draft.main(run("stopped")) == 0  # again, finished: written out again, not trained again
    assert "a finished run, whose model is written out again" in capsys.readouterr().err
    assert (tmp_path / "stopped" / "model.safetensors").read_bytes() == whole

    monkeypatch.setattr(training, "train_next_token", stop)  # stopped after its generation, before a checkpoint
    with pytest.raises(KeyboardInterrupt):
        train_draft.main(run("late"))
    monkeypatch.undo()
    monkeypatch.setattr(train_draft, "stdlib_files", lambda: [Path(json.__file__)])
    assert train_draft.main(run("late")) == 0  # every batch read back: the student starts as an uninterrupted run's
    assert (tmp_path / "late" / "model.safetensors").read_bytes() == whole  # (bug: torch's state differed)

    with pytest.raises(SystemExit) as e:  # the folder of a run with other settings
        train_draft.main(run("other", "--lr", "0.001", "--run-dir", str(tmp_path / "run-whole")))
    assert e.value.code == 2 and "--lr 0.003 there, 0.001 here" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


# --- train_bpe_draft


@pytest.mark.parametrize("bad, said", [(["--width", "256"], "--width 256 is more than min(--vocab 8192, the target's "
                                                            "hidden size 128)"),
                                       (["--width", "64"], "--width must be a positive multiple of 128"),
                                       (["--batch", "1"], "--batch must be at least 2, got 1"),
                                       (["--steps", "0"], "--steps must be at least 1, got 0"),
                                       (["--lr", "-0.1"], "--lr must be a positive number, got -0.1")])
def test_train_bpe_draft_refuses_its_arguments_before_it_reads_data(tmp_path, chat_target, monkeypatch, capsys, bad,
                                                                    said):
    from minispec.recipes import train_bpe_draft, train_eagle

    monkeypatch.setattr(train_eagle, "load_or_make_data", no_data_made)
    with pytest.raises(SystemExit) as e:
        train_bpe_draft.main(["--out", str(tmp_path / "out"), "--target", str(chat_target), "--width", "128", *bad])
    assert e.value.code == 2 and said in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_train_bpe_draft_learns_from_its_targets_data_and_writes_its_tokenizer_at_the_end(tmp_path, chat_target,
                                                                                          monkeypatch):
    """--target's data is that target's (bug: the data was always the default target's); the tokenizer, written at
    the start before, reaches --out with the rest at the end."""
    from minispec.recipes import train_bpe_draft, train_draft, train_eagle

    monkeypatch.setenv("MINISPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(train_eagle, "make_data", no_data_made)
    monkeypatch.setattr(train_draft, "stdlib_files", lambda: [Path(json.__file__)])
    d, settings = train_eagle.data_dir(train_bpe_draft.eagle_data_args(0, str(chat_target)))
    assert settings["target"] == str(chat_target.resolve())
    write_data(d, chat_target, settings)
    out = tmp_path / "bpe"
    shipped = shipped_out(out)
    run = ["--out", str(out), "--target", str(chat_target), "--vocab", "300", "--tokenizer-chars", "5000", "--steps",
           "2", "--batch", "2", "--seq", "16", "--width", "128", "--layers", "1", "--mlp", "64", "--threads", "1"]
    monkeypatch.setattr(train_bpe_draft, "held_out_loss", stop)  # after the tokenizer and the training
    with pytest.raises(KeyboardInterrupt):
        train_bpe_draft.main(run)
    assert contents(out) == shipped
    monkeypatch.undo()
    monkeypatch.setenv("MINISPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(train_eagle, "make_data", no_data_made)
    monkeypatch.setattr(train_draft, "stdlib_files", lambda: [Path(json.__file__)])
    assert train_bpe_draft.main(run) == 0
    got = contents(out)
    assert got["README.md"] == b"mine" and b"] args {" in got["train_log.txt"] and "tokenizer.json" in got
    assert json.loads(got["config.json"])["vocab_size"] == 300


def test_the_bpe_drafts_tokenizer_files_are_written_as_shipped(tmp_path):
    """write_tokenizer_files of the shipped tokenizer gives the shipped files, byte for byte (bug: tokenizer.json was
    indented, and a rerun never gave the checksum in SHA256SUMS)."""
    from tokenizers import Tokenizer

    from minispec.recipes.train_bpe_draft import write_tokenizer_files

    shipped = ROOT / "weights" / "bpe8k-draft-4l-384"
    target = tmp_path / "target"
    target.mkdir()  # the target's chat template is all the files take of it
    chat = json.loads((shipped / "tokenizer_config.json").read_text())["chat_template"]
    (target / "tokenizer_config.json").write_text(json.dumps({"chat_template": chat}))
    write_tokenizer_files(tmp_path, Tokenizer.from_file(str(shipped / "tokenizer.json")), target)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (tmp_path / name).read_bytes() == (shipped / name).read_bytes(), name


# --- train_eagle


@pytest.fixture
def eagle_target(tmp_path):
    return write_random_model(tmp_path / "target", tiny_config(tie_word_embeddings=True), seed=1)


def eagle_run(tmp_path, target, *more) -> list[str]:
    return ["--out", str(tmp_path / "head"), "--target", str(target), "--data-dir", str(tmp_path / "data"), "--epochs",
            "2", "--batch", "2", "--seq", "24", "--vocab", "40", "--ship-vocab", "32", "--threads", "1", *more]


def eagle_settings(args: list[str]) -> dict:
    from minispec.recipes import train_eagle

    return train_eagle.data_dir(train_eagle.parser().parse_args(args))[1]


@pytest.mark.parametrize("bad, said", [(["--batch", "0"], "--batch must be at least 1, got 0"),
                                       (["--epochs", "0"], "--epochs must be a positive number, got 0.0"),
                                       (["--lr", "0"], "--lr must be a positive number, got 0.0")])
def test_train_eagle_refuses_its_arguments_before_it_reads_data(tmp_path, eagle_target, monkeypatch, capsys, bad, said):
    from minispec.recipes import train_eagle

    monkeypatch.setattr(train_eagle, "load_or_make_data", no_data_made)
    with pytest.raises(SystemExit) as e:
        train_eagle.main(eagle_run(tmp_path, eagle_target, *bad))
    assert e.value.code == 2 and said in capsys.readouterr().err and not (tmp_path / "head").exists()


def test_train_eagle_refuses_data_of_other_settings_by_name(tmp_path, eagle_target, monkeypatch, capsys):
    """(bug: --data-dir reused any folder with a ``done`` file, and the cache's name left the target out)"""
    from minispec.recipes import train_eagle

    monkeypatch.setattr(train_eagle, "make_data", no_data_made)
    run = eagle_run(tmp_path, eagle_target)
    other = write_random_model(tmp_path / "other", tiny_config(tie_word_embeddings=True), seed=2)
    write_data(tmp_path / "data", eagle_target, eagle_settings(eagle_run(tmp_path, other)))
    with pytest.raises(SystemExit):
        train_eagle.main(run)
    err = capsys.readouterr().err
    assert f"{tmp_path / 'data'}: its data was made with other settings: target '{other.resolve()}'" in err
    (tmp_path / "data" / "settings.json").unlink()  # a folder from before settings were recorded
    with pytest.raises(SystemExit):
        train_eagle.main(run)
    assert "its data records no settings" in capsys.readouterr().err and not (tmp_path / "head").exists()
    no_dir = [a for a in run if a not in ("--data-dir", str(tmp_path / "data"))]
    assert train_eagle.data_dir(train_eagle.parser().parse_args(no_dir))[0].name.startswith(
        "eagle-data-s0-g40x48x128-t400000-q24-target-")  # another target: another folder of the cache


def test_a_train_eagle_run_writes_its_out_at_the_end_with_the_command_that_made_it(tmp_path, eagle_target,
                                                                                   monkeypatch):
    """A run stopped as it writes the head's files leaves --out as it was (bug: eagle.safetensors was replaced before
    config.json and the token files); the README's command, parsed by the recipe, gives the run's arguments (bug: it
    said "every other setting at its default" of a run that had set others)."""
    from minispec.recipes import train_eagle

    run = eagle_run(tmp_path, eagle_target)
    write_data(tmp_path / "data", eagle_target, eagle_settings(run))
    shipped = shipped_out(tmp_path / "head")
    assert train_eagle.main([*run, "--data-only"]) == 0  # the data checked, --out not written, no staging left
    assert contents(tmp_path / "head") == shipped and not list(tmp_path.glob("*.partial"))
    monkeypatch.setattr(train_eagle, "write_head_dir", stop)
    with pytest.raises(KeyboardInterrupt):
        train_eagle.main(run)
    assert contents(tmp_path / "head") == shipped
    monkeypatch.undo()
    assert train_eagle.main(run) == 0
    got = contents(tmp_path / "head")
    assert got["model.safetensors"] == b"shipped weights" and b"] args {" in got["train_log.txt"]
    assert {"eagle.safetensors", "config.json", "frequent_tokens.json", "SHA256SUMS"} <= set(got)
    readme = got["README.md"].decode()
    [command] = [line.split("`")[1] for line in readme.splitlines() if "python -m minispec.recipes.train_eagle" in line]
    assert vars(train_eagle.parser().parse_args(shlex.split(command)[3:])) == vars(train_eagle.parser().parse_args(run))


def test_train_eagles_docs_give_the_first_heads_arguments():
    """The module docstring's command is the first head's (bug: "the first head's recipe" left out the arguments it
    set: --gen-batches 32, --stdlib-tokens 160000), and its README would say so too."""
    from minispec.recipes import train_eagle

    [line] = [x for x in train_eagle.__doc__.splitlines() if "python -m minispec.recipes.train_eagle" in x]
    args = vars(train_eagle.parser().parse_args(shlex.split(line)[3:]))
    assert args.pop("run_dir") is None  # (an argument the first head predates: where a run resumes, not its result)
    assert {k: v for k, v in args.items() if k != "out"} == {k: v for k, v in FIRST_HEAD.items() if k != "out"}
    again = train_eagle.parser().parse_args(shlex.split(train_eagle.command(FIRST_HEAD))[3:])
    assert vars(again) == {**FIRST_HEAD, "run_dir": None}


def test_a_stopped_train_eagle_run_resumes_at_its_checkpoint(tmp_path, eagle_target, monkeypatch, capsys):
    """Run again, a stopped run resumes at its last checkpoint and ends with the head of a run never stopped: the
    optimizer, the batches' draws and the feature noise's (torch's) random state carried over (bug: it began again)."""
    import torch

    from minispec.recipes import train_eagle, training

    def run(name):
        return [*eagle_run(tmp_path, eagle_target), "--out", str(tmp_path / name), "--run-dir", str(tmp_path / f"r-{name}")]
    write_data(tmp_path / "data", eagle_target, eagle_settings(run("whole")))
    assert train_eagle.main(run("whole")) == 0
    monkeypatch.setattr(training.RunState, "due", lambda self, step, steps: True)
    real_step, steps = torch.optim.AdamW.step, []
    def stop_at_third(self, *a, **k):
        steps.append(1)
        if len(steps) == 3:
            raise KeyboardInterrupt
        return real_step(self, *a, **k)
    monkeypatch.setattr(torch.optim.AdamW, "step", stop_at_third)
    with pytest.raises(KeyboardInterrupt):
        train_eagle.main(run("stopped"))
    monkeypatch.setattr(torch.optim.AdamW, "step", real_step)
    capsys.readouterr()
    assert train_eagle.main(run("stopped")) == 0
    assert "resumed at step 2 of " in capsys.readouterr().err
    same = [(tmp_path / n / "eagle.safetensors").read_bytes() for n in ("whole", "stopped")]
    assert same[0] == same[1]


def test_a_run_folder_whose_checkpoint_cannot_be_read_is_refused_before_the_data(tmp_path, chat_target, monkeypatch,
                                                                                 capsys):
    """A checkpoint that is not plain data (here a pickled object: loading it would run code) is refused by name before
    anything is made, not loaded."""
    import pickle

    from minispec.recipes import train_draft

    monkeypatch.setattr(train_draft, "generate_data", no_data_made)
    from minispec.recipes.training import run_folder

    run = ["--out", str(tmp_path / "o"), "--target", str(chat_target), "--run-dir", str(tmp_path / "r"), "--width", "128"]

    run_folder("train_draft", train_draft.parser().parse_args(run))  # the folder, with its settings
    (tmp_path / "r" / "checkpoint.pt").write_bytes(pickle.dumps(Path("not data"), protocol=2))  # torch.save's protocol
    with pytest.raises(SystemExit) as e:
        train_draft.main(run)
    assert e.value.code == 2 and "is not a checkpoint this recipe reads" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
