"""recipes/eagle_answers.py: acceptance by depth on answers, teacher-forced, counts only the answer's guesses past
its first token, with train_eagle_ttt.py's rule; a head directory is checked before anything loads."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from .test_train_eagle_ttt import oracle  # noqa: E402


def test_only_the_answers_guesses_past_its_first_token_are_counted(monkeypatch):
    from minispec.recipes import eagle_answers, train_eagle_ttt
    rng = np.random.default_rng(0)
    V, D = 12, 6
    E = torch.from_numpy(rng.standard_normal((V, D)).astype(np.float32))
    ids = torch.arange(V)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
    seqs = [p + rng.integers(0, V, 10).tolist() for p in prompts]  # answers of 10 tokens
    feats = [rng.standard_normal((len(s), D)).astype(np.float32) for s in seqs]
    monkeypatch.setattr(train_eagle_ttt, "unrolled", oracle)
    res = eagle_answers.answer_acceptance(None, E, ids, prompts, seqs, feats, 3, None, torch)
    # 10 answer tokens: the first is the target's; a chain starts at each of the 9 after it and after the last (the
    # target's next), and the d-th guess of the last d - 1 of them lies past the end
    assert res["greedy"] == [1.0, 1.0, 1.0] and res["positions"] == [2 * 10, 2 * 9, 2 * 8]
    assert res["in_reduced_vocab"] == 1.0  # every token is in this "reduced" head
    tenths = res["first_by_confidence"]
    want = np.zeros(10, int)  # the first guesses' tenths, from the oracle's row: the next true feature's
    for p, s, f in zip(prompts, seqs, feats):
        for j in range(len(p) - 1, len(s) - 1):
            row = torch.softmax(torch.from_numpy(f[j + 1]) @ E[ids].T, -1)
            want[min(9, int(10 * float(row.max())))] += 1
    assert [b["tenth"] for b in tenths] == list(range(10)) and [b["positions"] for b in tenths] == want.tolist()
    assert len(np.flatnonzero(want)) >= 2  # (more than one tenth: a table, not a count)
    assert all(b["greedy"] == 1.0 for b in tenths if b["positions"])  # the oracle's guesses are all right
    spans = res["first_by_position"]  # answer positions 2..11 (11: the target's next): 7 in 2-8, 3 in 9-16, twice
    assert [(b["span"], b["positions"], b["greedy"]) for b in spans] == [([2, 8], 14, 1.0), ([9, 16], 6, 1.0)]
    res = eagle_answers.answer_acceptance(None, E, ids[: V // 2], prompts, seqs, feats, 3, None, torch)
    want = np.array([(E.numpy() @ f.T).argmax(0) for f in feats], dtype=object)  # the target's greedy tokens
    inside = sum(int((w[len(p): len(s)] < V // 2).sum()) for w, p, s in zip(want, prompts, seqs))  # f_{j+1}, j >= P - 1
    assert res["in_reduced_vocab"] == inside / 20 and res["greedy"][0] <= inside / 20
    res = eagle_answers.answer_acceptance(None, E, ids, prompts, seqs, [feats[0], None], 3, None, torch)
    assert res["positions"] == [10, 9, 8]  # a sequence without features is left out

    def late(*a, **k):  # predicts the feature one position early: right only where two true rows agree
        return [(torch.nn.functional.pad(true[:, :-1], [0, 0, 1, 0]), true, valid) for _, true, valid in oracle(*a, **k)]
    monkeypatch.setattr(train_eagle_ttt, "unrolled", late)
    res = eagle_answers.answer_acceptance(None, E, ids, prompts, seqs, feats, 3, None, torch)
    assert res["greedy"][0] < 0.5 and res["positions"][0] == 20 and res["positions"][1] < 20
    tenths = res["first_by_confidence"]  # the confidence table counts the same first guesses, kept or not
    assert sum(b["positions"] for b in tenths) == 20
    assert sum(b["greedy"] * b["positions"] for b in tenths if b["positions"]) == pytest.approx(20 * res["greedy"][0])
    spans = res["first_by_position"]  # and so does the position table
    assert [b["positions"] for b in spans] == [14, 6]
    assert sum(b["greedy"] * b["positions"] for b in spans) == pytest.approx(20 * res["greedy"][0])


@pytest.mark.parametrize("argv, says", [(["{dir}"], "not an EAGLE head directory"),
                                         (["{head}", "--sets", "code,poems"], "--sets code,poems"),
                                         (["{head}", "--vocab", "100"], "token_frequency_order.json"),
                                         (["{head}", "--prompts", "0"], "--prompts"),
                                         (["{lower}"], "reads layers [1, 2]; the target's passes here give layers"),
                                         (["{head}", "--windows", "{dir}/none"], "is not a folder of shards"),
                                         (["{head}", "--windows", "{dir}:5-2"], ":5-2: shards A-B need B above A")])
def test_bad_arguments_are_refused_before_anything_loads(tmp_path, capsys, argv, says):
    import json

    from minispec.recipes import eagle_answers
    head, lower = tmp_path / "head", tmp_path / "lower"
    for d in (head, lower):
        d.mkdir()
        for name in ("eagle.safetensors", "frequent_tokens.json"):
            (d / name).write_text("")
    (lower / "config.json").write_text(json.dumps(dict(lower_layers=[1, 2])))  # not the layers eagle_data stores
    with pytest.raises(SystemExit) as e:
        eagle_answers.main([a.format(dir=tmp_path, head=head, lower=lower) for a in argv])
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_the_prompts_are_the_harness_prompts(tmp_path):
    """data_prompts reads minispec/data as the harness does (chat and grounded rows in the chat template)."""
    from minispec.harness.prompts import load_prompts
    from minispec.model.tokenizer import load_tokenizer
    from minispec.recipes.eagle_answers import data_prompts

    from .helpers import chat_model_dir

    tok = load_tokenizer(chat_model_dir(tmp_path / "t"))
    for name in ("code", "chat", "grounded"):
        assert data_prompts(name, tok, 5) == load_prompts(name, tok, 5)


def test_a_windows_request_is_told_by_where_it_came_from():
    """request_source tells the requests chat_instruction builds (templates, standard-library functions) from the
    target's own, and stored_windows sorts a folder's greedy chat windows by it, leaving out the others."""
    from minispec.recipes.eagle_answers import stored_windows
    from minispec.recipes.eagle_data import STAND_IN, STDLIB_REQUESTS, all_templates, all_topics, chat_instruction, request_source

    rng = np.random.default_rng(0)
    import argparse
    import json
    from pathlib import Path
    made = [chat_instruction([Path(json.__file__), Path(argparse.__file__)], rng) for _ in range(40)]
    assert {request_source(r) for r in made} == {"template", "stdlib"}
    assert all(request_source(t.format(t=all_topics()[-1])) == "template" for t in all_templates())
    for own in ["How do I repair a bicycle chain?", "Tell me about the sea", "Why?", ""]:
        assert request_source(own) == "asked"
    assert request_source(all_templates()[0].format(t=all_topics()[0]) + " And more.") == "asked"  # whole, or not one
    assert request_source(all_templates()[0].format(t="the tides of the moon")) == "asked"  # a topic of the lists only
    assert request_source(STDLIB_REQUESTS[1] + "\n```python\ndef f(): pass\n```") == "stdlib"
    assert request_source(STAND_IN) == "stdlib"  # where chat_instruction finds no function

    class Tok:  # decodes a window to its request in the chat template
        def decode(self, ids):
            return f"<|im_start|>user\n{texts[ids[0]]}<|im_end|>\n<|im_start|>assistant\n"
    texts = ["How do I repair a bicycle chain?", all_templates()[1].format(t="bees"), made[0], "code"]
    data = dict(kind=["chat-greedy", "chat-greedy", "chat-t1", "code-greedy", "chat-greedy"],
                answer_start=np.array([3, 3, 3, -1, 3]),
                tokens=[np.array([0, 9, 9, 5]), np.array([1, 9, 9, 5]), np.array([2, 9, 9, 5]), np.array([3, 5]),
                        np.array([1, 9, 9, 6])])
    assert list(stored_windows(data, Tok()).items()) == [("template", [1, 4]), ("asked", [0])]  # no T = 1, no code


def test_windows_end_to_end_count_every_stored_answer_on_its_own_features(tmp_path, monkeypatch):
    """eagle_answers --windows on a tiny chat target, a folder eagle_data made from it and a head train_eagle_ttt
    trained on that folder: each greedy chat window is teacher-forced as its stored tokens, split at its answer's
    start, on its stored features (not a generation's), grouped by where its request came from, and each answer token
    after the first starts a chain; the T = 1 windows are left out."""
    import json

    pytest.importorskip("transformers")
    from minispec.model.tokenizer import load_tokenizer
    from minispec.recipes import eagle_answers, eagle_data, train_eagle_ttt
    from minispec.recipes.eagle_data import request_source

    from .helpers import chat_model_dir
    from .test_eagle_data import chat_run

    target = chat_model_dir(tmp_path / "t")
    data = tmp_path / "data"
    run = chat_run(data, target)
    run[run.index("--kinds") + 1] = "chat-greedy,chat-t1"
    assert eagle_data.main([*run, "--chat-tokens", "12"]) == 0  # one greedy shard
    run[run.index("--tokens") + 1] = str(json.loads((data / "shard-00000.json").read_text())["tokens"] + 1)
    assert eagle_data.main([*run, "--chat-tokens", "12"]) == 0  # and one at T = 1
    assert (data / "shard-00001.json").is_file()
    assert train_eagle_ttt.main(["--target", str(target), "--data", str(data), "--epochs", "1", "--batch", "2",
                                 "--seq", "64", "--threads", "1", "--unroll", "2", "--vocab", "64", "--ship-vocab", "32",
                                 "--out", str(tmp_path / "head"), "--run-dir", str(tmp_path / "run")]) == 0
    seen = []  # each call of answer_acceptance: (prompts, seqs, feats)
    real = eagle_answers.answer_acceptance

    def recorded(head, E, ids, prompts, seqs, feats, *rest, **kw):
        seen.append((prompts, seqs, feats))
        return real(head, E, ids, prompts, seqs, feats, *rest, **kw)
    monkeypatch.setattr(eagle_answers, "answer_acceptance", recorded)
    generate = eagle_data.generate

    def unread(*a, **k):  # as if the answer had ended on the generation's last step: no pass read its end
        seqs, feats = generate(*a, **k)
        return seqs, [None for _ in feats]
    monkeypatch.setattr(eagle_data, "generate", unread)
    out = tmp_path / "answers.json"
    assert eagle_answers.main([str(tmp_path / "head"), "--target", str(target), "--sets", "chat", "--prompts", "1",
                               "--tokens", "4", "--threads", "1", "--windows", str(data), "--json", str(out)]) == 0

    tok = load_tokenizer(target)
    shard = np.load(data / "shard-00000.npz")
    marker = tok.encode("<|im_start|>assistant\n")
    want = {}  # source -> [(prompt, window, top features)], read here from the shard alone
    for a, b in zip(shard["starts"][:-1], shard["starts"][1:]):
        window = shard["tokens"][a:b].tolist()
        start = max(j + len(marker) for j in range(len(window)) if window[j: j + len(marker)] == marker)
        request = tok.decode(window[:start]).rsplit("<|im_start|>user\n", 1)[-1].rsplit("<|im_end|>", 1)[0].strip()
        want.setdefault(request_source(request), []).append((window[:start], window, shard["top"][a:b]))
    res = json.loads(out.read_text())
    assert set(res["prompts"]) == {"chat"} | {f"windows:{s}" for s in want}
    got = dict(zip(res["prompts"], seen))  # the calls, in the order of the results' sets
    prompts, seqs, feats = got["chat"]  # the answer's features from a pass of their own, where no generation read them
    assert [f.shape[0] for f in feats] == [len(s) for s in seqs]
    chains = res["heads"][str(tmp_path / "head")]["chat"]["positions"][0]
    assert chains == sum(len(s) - len(p) for p, s in zip(prompts, seqs)) > 0
    for source, rows in want.items():
        prompts, seqs, feats = got[f"windows:{source}"]
        assert prompts == [r[0] for r in rows] and seqs == [r[1] for r in rows]
        assert all(np.array_equal(f, r[2]) for f, r in zip(feats, rows))
        chains = res["heads"][str(tmp_path / "head")][f"windows:{source}"]["positions"][0]
        assert chains == sum(len(w) - len(p) for p, w, _ in rows)  # every answer token after the first, and the next


class Generated(Exception):
    """The target began to generate its answers (minutes, on the real target)."""


def never(*a, **k):
    raise Generated


@pytest.fixture(scope="module")
def target_and_head(tmp_path_factory):
    """A tiny chat target and an EAGLE head for it that eagle_answers accepts: two of them reach the generation."""
    pytest.importorskip("transformers")
    from minispec.model.config import ModelConfig
    from minispec.recipes import eagle_answers, eagle_data

    from .helpers import chat_model_dir, write_random_eagle

    tmp = tmp_path_factory.mktemp("answers")
    target = chat_model_dir(tmp / "t")
    head = write_random_eagle(tmp / "head", ModelConfig.from_dir(target), [5, 9, 700, 49151])
    (head / "token_frequency_order.json").write_text("[9, 5, 700]")
    with pytest.MonkeyPatch.context() as m, pytest.raises(Generated):
        m.setattr(eagle_data, "generate", never)
        eagle_answers.main([str(head), str(head), "--target", str(target), "--sets", "chat", "--prompts", "1",
                            "--tokens", "4", "--threads", "1", "--vocab", "3", "--json", str(tmp / "a.json")])
    return target, head


def rewrite_tensors(head, edit):
    from minispec.model.safetensors_io import read_safetensors, write_safetensors
    tensors = read_safetensors(head / "eagle.safetensors")
    edit(tensors)
    write_safetensors(head / "eagle.safetensors", tensors)


def nan_in_w_o(t):
    t["w_o"][3, 1] = np.nan


@pytest.mark.parametrize("edit, argv, says", [
    (lambda h: (h / "eagle.safetensors").write_text(""), [], "eagle.safetensors: truncated safetensors file"),
    (lambda h: (h / "frequent_tokens.json").write_text('[1, "a"]'), [], "frequent_tokens.json: expected a non-empty JSON list"),
    (lambda h: (h / "frequent_tokens.json").write_text('{"1": 2}'), [], "frequent_tokens.json: expected a non-empty JSON list"),
    (lambda h: (h / "frequent_tokens.json").write_text("[3, 3]"), [], "list of distinct token ids"),
    (lambda h: (h / "frequent_tokens.json").write_text("[1,"), [], "frequent_tokens.json: not valid JSON"),
    (lambda h: (h / "frequent_tokens.json").write_text("[5, 49152]"), [], "token id 49152 is not below the target's vocabulary size, 49152"),
    (lambda h: None, ["--vocab", "4"], "token_frequency_order.json: lists 3 tokens, fewer than the --vocab 4"),
    (lambda h: (h / "token_frequency_order.json").write_text("[9, 5.5]"), ["--vocab", "2"], "token_frequency_order.json: expected"),
    (lambda h: (h / "config.json").write_text("{"), [], "config.json: not valid JSON"),
    (lambda h: (h / "config.json").write_text('{"extra_layers": "1"}'), [], "extra_layers must be a whole number"),
    (lambda h: rewrite_tensors(h, nan_in_w_o), [], "tensor 'w_o' holds NaN or infinite values"),
    (lambda h: rewrite_tensors(h, lambda t: t.update(b_fc=np.zeros(33, np.float32))), [],
     r"tensor 'b_fc' has shape (33,); the target's widths need (32,)"),
    (lambda h: rewrite_tensors(h, lambda t: t.pop("w_down")), [], "missing tensor 'w_down'"),
    (lambda h: rewrite_tensors(h, lambda t: t.update(w_lower=np.zeros((64, 32), np.float32))), [],
     "unexpected tensors ['w_lower']; w_lower needs config.json's lower_layers"),
    (lambda h: rewrite_tensors(h, lambda t: t.update({"layers.1.w_o": t["w_o"]})), [], "at most config.json's extra_layers (0)"),
    (lambda h: None, ["--json", "{tmp}/no/such/dir/a.json"], "/no/such/dir does not exist"),
    (lambda h: None, ["--threads", "0"], "--threads at least 1")],
    ids=["empty-safetensors", "frequent-not-ints", "frequent-not-a-list", "frequent-twice", "frequent-not-json",
         "frequent-past-vocab", "vocab-over-order", "order-not-ints", "config-not-json", "extra-layers-text", "nan",
         "width", "missing", "w-lower-unasked", "layers-unasked", "json-dir", "threads"])
def test_a_bad_second_head_or_argument_is_refused_before_the_target_generates(target_and_head, tmp_path, monkeypatch,
                                                                              capsys, edit, argv, says):
    """Each head's files are read and checked against the target's config (its arrays' names and shapes, its token
    ids) before the target loads, and --json and --threads before that (bug: only the files' existence was checked,
    then the target generated every answer, minutes, before a bad second head or --json lost the first's figures)."""
    import shutil

    import transformers

    from minispec.recipes import eagle_answers, eagle_data
    target, good = target_and_head
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    edit(bad)
    monkeypatch.setattr(eagle_data, "generate", never)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    with pytest.raises(SystemExit) as e:
        eagle_answers.main([str(good), str(bad), "--target", str(target), "--sets", "chat", "--prompts", "1",
                            "--tokens", "4", "--threads", "1", *[a.format(tmp=tmp_path) for a in argv]])
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err, err
