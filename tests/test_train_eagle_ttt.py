"""The EAGLE recipe with the training-time test (minispec/recipes/train_eagle_ttt.py) on a tiny target and shards
written here: it runs to a head the NumPy drafter loads, and a run interrupted and resumed gives the same head,
byte for byte."""

import json
from pathlib import Path

import numpy as np
import pytest

from minispec.model import load_model
from minispec.model.tiny import tiny_config, write_random_model
from minispec.sampling import Stream, Warp

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def write_shards(folder, target, n_shards=3, windows=6, length=40, seed=0):
    """Shards in eagle_data.py's layout: tokens, starts, and top features that are the tiny target's own."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for i in range(n_shards):
        seqs = [rng.integers(3, target.cfg.vocab_size, length).tolist() for _ in range(windows)]
        feats = []
        for s in seqs:
            rows = []
            target.forward(s, target.new_cache(len(s)), on_features=rows.append)
            feats.append(np.concatenate(rows).astype(np.float16))
        starts = np.cumsum([0] + [len(s) for s in seqs])
        np.savez(folder / f"shard-{i:05d}.npz", tokens=np.concatenate(seqs).astype(np.int32), starts=starts,
                 top=np.concatenate(feats), low=np.concatenate(feats), mid=np.concatenate(feats))
        (folder / f"shard-{i:05d}.json").write_text(json.dumps(dict(
            shard=i, kind="chat-greedy", windows=windows, kept=windows, tokens=int(starts[-1]), dropped=[],
            generation_minutes=0.0, feature_minutes=0.0)))


def test_a_resumed_run_gives_the_same_head(tmp_path, monkeypatch):
    from minispec.drafters import load_eagle
    from minispec.recipes import train_eagle_ttt

    target_dir = write_random_model(tmp_path / "target", tiny_config(tie_word_embeddings=True), seed=1)
    target = load_model(target_dir)
    write_shards(tmp_path / "data", target, n_shards=4)  # 24 greedy windows: the 20th is held out
    common = ["--target", str(target_dir), "--data", str(tmp_path / "data"), "--epochs", "2", "--batch", "2",
              "--seq", "32", "--threads", "1", "--unroll", "3", "--checkpoint-every", "2", "--vocab", "40",
              "--ship-vocab", "32"]
    assert train_eagle_ttt.main(common + ["--out", str(tmp_path / "whole"), "--run-dir", str(tmp_path / "run1")]) == 0

    calls = {"n": 0}
    real = train_eagle_ttt.step_losses

    def interrupted(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:  # step 4, after the checkpoint of step 2
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(train_eagle_ttt, "step_losses", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_eagle_ttt.main(common + ["--out", str(tmp_path / "resumed"), "--run-dir", str(tmp_path / "run2")])
    monkeypatch.setattr(train_eagle_ttt, "step_losses", real)
    ckpt = tmp_path / "run2" / "checkpoint.pt"
    saved = torch.load(ckpt, weights_only=False)
    for key in ("lr", "seed", "noise", "unroll", "init"):  # as a checkpoint from before they were kept
        del saved["state"][key]
    torch.save(saved, ckpt)
    assert train_eagle_ttt.main(common + ["--out", str(tmp_path / "resumed"), "--run-dir", str(tmp_path / "run2")]) == 0
    assert torch.load(ckpt, weights_only=False)["state"]["lr"] == 0.002  # taken as this run's, and kept from now on
    log = (tmp_path / "resumed" / "train_log.txt").read_text()
    assert "resumed at step 2 of" in log and log.count("] args {") == 2  # the interrupted run's lines kept
    whole = (tmp_path / "whole" / "eagle.safetensors").read_bytes()
    assert (tmp_path / "resumed" / "eagle.safetensors").read_bytes() == whole

    summary = json.loads((tmp_path / "whole" / "training.json").read_text())
    depth = summary["held_out"]["by_depth"]
    assert summary["unroll"] == 3 and summary["steps"] > 4 and summary["held_out"]["held_out_windows"] == 1
    assert len(depth["code"]["greedy"]) == len(depth["chat"]["greedy"]) == 4 and depth["chat"]["positions"][0] == 31  # 40 tokens cut to --seq 32
    assert depth["code"]["positions"] == [0, 0, 0, 0]  # no code window held out here
    one = common + ["--out", str(tmp_path / "one"), "--run-dir", str(tmp_path / "run3")]
    one[one.index("--unroll") + 1] = "1"  # EAGLE-1's loss, evaluated at 4 depths all the same (bug: RoPE table short)
    assert train_eagle_ttt.main(one) == 0
    eagle = load_eagle(tmp_path / "whole", target)  # the NumPy drafter loads what the recipe wrote
    prompt = [5, 6, 7, 8]
    target.forward(prompt[:-1], target.new_cache(8), on_features=lambda f: eagle.see_features(prompt[:-1], f))
    tokens, probs = eagle.propose(prompt, 3, Warp(0.0), Stream(np.random.PCG64(0)))
    assert len(tokens) == 3 and probs.shape == (3, target.cfg.vocab_size)

    other = common + ["--out", str(tmp_path / "x"), "--run-dir", str(tmp_path / "run1")]
    other[other.index("--epochs") + 1] = "3"
    assert train_eagle_ttt.main(other) == 2  # another schedule is refused, not resumed into
    other = common + ["--out", str(tmp_path / "x"), "--run-dir", str(tmp_path / "run1"), "--ce-weight", "1.0"]
    assert train_eagle_ttt.main(other) == 2  # another loss too
    assert "at --ce-weight 0.1, --lr 0.002" in (tmp_path / "x" / "train_log.txt").read_text()
    for flag, value, said in (("--lr", "1e-3", "--lr 0.001"), ("--seed", "1", "--seed 1"), ("--noise", "0", "--noise 0,"),
                              ("--unroll", "2", "--unroll 2"), ("--init", str(tmp_path / "whole"), "from --init")):
        # the optimizer's and the draws' settings too (bug: a changed --lr was resumed at the saved optimizer's rate,
        # a changed --unroll crashed after training)
        other = common + ["--out", str(tmp_path / "x"), "--run-dir", str(tmp_path / "run1"), flag, value]
        assert train_eagle_ttt.main(other) == 2, flag
        last = (tmp_path / "x" / "train_log.txt").read_text().splitlines()[-1]
        assert "error:" in last and said in last.split("this one would be")[1], (flag, last)


def oracle(head, E, toks, feats, lens, steps, dims, noise_scale=0.0, lm=None):
    """``unrolled``'s stand-in for a head whose every step predicts the true feature (also tests/test_eagle_answers.py)."""
    out = []
    for i in range(steps):
        true = torch.nn.functional.pad(feats[:, 1 + i:], [0, 0, 0, i])
        valid = (torch.arange(feats.shape[1] - 1)[None, :] < lens[:, None] - 1 - i).float()
        out.append((true, true, valid))
    return out


def test_acceptance_by_depth_of_an_oracle_and_of_a_guesser_that_is_one_step_late(tmp_path, monkeypatch):
    """``evaluate``: a head whose every step predicts the true feature keeps every guess at every depth (T = 1: sum
    min(p, q) = 1 over the whole vocabulary); one that predicts the feature before the true one keeps fewer, and
    depth d counts only the chains whose guesses 1..d-1 were kept."""
    from minispec.recipes import train_eagle_ttt as t

    target_dir = write_random_model(tmp_path / "target", tiny_config(tie_word_embeddings=True), seed=1)
    target = load_model(target_dir)
    write_shards(tmp_path / "data", target, n_shards=1)
    data = t.load_shards(tmp_path / "data", lambda m: None)
    E = torch.from_numpy(np.asarray(target.embed, np.float32))
    ids = torch.arange(target.cfg.vocab_size)
    rows = np.arange(len(data["tokens"]))

    monkeypatch.setattr(t, "unrolled", oracle)
    res = t.evaluate(None, E, ids, data, rows, 32, 3, None, torch)
    assert res["greedy"] == [1.0, 1.0, 1.0] and np.allclose(res["t1"], 1.0, atol=1e-5)
    assert res["answers"] == [None] * 3 and res["answer_positions"] == [0] * 3  # no answer start known
    data["answer_start"][:] = 10  # windows of 32 tokens: the chain at position j guesses x_{j+2}, ..., its d-th
    res = t.evaluate(None, E, ids, data, rows, 32, 3, None, torch)  # x_{j+1+d} while j < 32 - d; the answer's
    # chains start past x_10, j >= 9: 22, 21 and 20 of them at depths 1, 2, 3
    assert res["answers"] == [1.0] * 3 and res["answer_positions"] == [22 * len(rows), 21 * len(rows), 20 * len(rows)]
    data["answer_start"][:] = -1

    def late(*a, **k):  # predicts f_{j+i}, not f_{j+1+i}: the previous position's feature
        return [(torch.nn.functional.pad(true[:, :-1], [0, 0, 1, 0]), true, valid) for _, true, valid in oracle(*a, **k)]
    monkeypatch.setattr(t, "unrolled", late)
    res = t.evaluate(None, E, ids, data, rows, 32, 3, None, torch)
    assert res["greedy"][0] < 0.5 and res["t1"][0] < 0.9
    assert res["positions"][0] > res["positions"][1] > res["positions"][2]


def test_init_loads_a_heads_file_back_into_the_torch_head():
    """--init: eagle.safetensors' fused arrays (head_tensors) read back into a fresh torch head give the same head."""
    from minispec.recipes.train_eagle import build_head, head_tensors
    from minispec.recipes.train_eagle_ttt import load_into

    c = tiny_config()
    dims = (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"] // c["num_attention_heads"],
            c["intermediate_size"], c["rope_theta"], c["rms_norm_eps"])
    torch.manual_seed(0)
    a = build_head(*dims)
    torch.manual_seed(1)
    b = build_head(*dims)
    load_into(b, {k: v.numpy() for k, v in head_tensors(a).items()}, torch)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name


def random_outs(steps: int):
    """``unrolled``'s output for ``steps`` steps of random predictions over random true features (2 windows of 12,
    the second ending at 9), and a random reduced head [16, 8]."""
    from minispec.recipes.train_eagle_ttt import shifted

    g = torch.Generator().manual_seed(0)
    B, L, D, V = 2, 12, 8, 16
    feats, W_r = torch.randn(B, L, D, generator=g), torch.randn(V, D, generator=g)
    lens, pos = torch.tensor([L, 9]), torch.arange(L - 1)[None, :]
    return [(torch.randn(B, L - 1, D, generator=g), shifted(feats, i), (pos < lens[:, None] - 1 - i).float())
            for i in range(steps)], W_r


def test_the_target_distribution_computed_once_is_each_steps_own():
    """step_losses reads step i's target distribution from step 0's, i rows on: the same loss as computing
    softmax(f W_r) from each step's own true features (positions past a window's end are not valid either way). A
    twin of step_losses that reads it one row off is told apart."""
    import types
    from pathlib import Path

    from minispec.recipes import train_eagle_ttt
    from minispec.recipes.train_eagle_ttt import step_losses

    outs, W_r = random_outs(4)

    def own(outs):  # each step's distribution from its own true features
        total, wsum, parts = 0.0, 0.0, []
        for i, (pred, true, valid) in enumerate(outs):
            n = valid.sum()
            reg = (torch.nn.functional.smooth_l1_loss(pred, true, reduction="none").mean(-1) * valid).sum() / n
            ce = (-(torch.softmax(true @ W_r.T, -1) * torch.log_softmax(pred @ W_r.T, -1)).sum(-1) * valid).sum() / n
            total, wsum = total + 0.8 ** i * (reg + 0.1 * ce), wsum + 0.8 ** i
            parts.append((float(reg), float(ce)))
        return total / wsum, parts

    loss, parts = step_losses(outs, W_r)
    ref_loss, ref_parts = own(outs)
    assert abs(float(loss) - float(ref_loss)) < 1e-5
    np.testing.assert_allclose(parts, ref_parts, rtol=1e-5)

    src = Path(train_eagle_ttt.__file__).read_text()
    old, new = "p_r0[:, i:] * logq", "p_r0[:, i - 1:-1] * logq if i else p_r0 * logq"  # one row early from step 1
    assert src.count(old) == 1
    twin = types.ModuleType("train_eagle_ttt_twin")
    twin.__package__ = "minispec.recipes"  # its relative imports
    exec(compile(src.replace(old, new), "train_eagle_ttt_twin", "exec"), twin.__dict__)
    _, twin_parts = twin.step_losses(outs, W_r)
    assert np.abs(np.array(twin_parts)[1:, 1] - np.array(ref_parts)[1:, 1]).min() > 1e-2


def test_in_bfloat16_the_products_round_and_the_softmaxes_and_losses_stay_float32():
    """``--precision bfloat16``: under torch's autocast the reduced head's products run in bfloat16 (the loss moves
    from float32's, by about bfloat16's rounding), while the softmaxes and the losses are float32 (bug: autocast
    keeps softmax in the product's bfloat16, so the cross-entropy was computed in bfloat16)."""
    from minispec.recipes.train_eagle_ttt import step_losses

    outs, W_r = random_outs(2)
    seen = []
    real = torch.log_softmax
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "log_softmax", lambda x, dim: seen.append(x.dtype) or real(x, dim))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss16, parts16 = step_losses(outs, W_r)
    loss32, parts32 = step_losses(outs, W_r)
    assert seen == [torch.float32] * 2 and loss16.dtype == torch.float32
    assert 0 < abs(float(loss16) - float(loss32)) < 0.02 * abs(float(loss32))  # rounded, not another loss


def test_answer_starts_find_the_last_assistant_marker_and_minus_one_without_it():
    from minispec.recipes.train_eagle_ttt import answer_starts
    marker = [1, 520, 9531, 198]
    windows = [np.array([5, 1, 520, 9531, 198, 7, 8]),  # one marker: the answer starts at index 5
               np.array([1, 520, 9531, 198, 4, 1, 520, 9531, 198, 6]),  # two turns: after the last
               np.array([1, 520, 9531, 7, 198]),  # an incomplete marker
               np.array([9, 9, 1, 520, 9531, 198])]  # the marker at the very end: an empty answer
    assert answer_starts(windows, marker).tolist() == [5, 9, -1, 6]
    assert answer_starts(windows, None).tolist() == [-1] * 4


def test_a_chat_window_that_shares_a_held_out_prompt_is_kept_out_of_training():
    """A greedy answer to the same prompt is the same answer, so training on it would put the held-out answer in
    training: every window with a held-out window's prompt leaves the training rows, and no other does."""
    from minispec.recipes.train_eagle_ttt import HELD_OUT, held_out_split
    rng = np.random.default_rng(0)
    n = 3 * HELD_OUT
    prompts = [[100 + int(rng.integers(0, 8)), 1, 520, 9531, 198] for _ in range(n)]  # 8 prompts: many repeat
    tokens = [np.array(p + rng.integers(3, 90, 6).tolist()) for p in prompts]
    kinds = ["chat-greedy" if i % 3 else "chat-t1" for i in range(n)]
    data = dict(tokens=tokens, kind=kinds, answer_start=np.full(n, 5))
    held, same_prompt, rows = held_out_split(data)
    held_prompts = {tuple(tokens[r][:5]) for r in held}
    assert len(held) == sum(k == "chat-greedy" for k in kinds) // HELD_OUT and len(same_prompt) > 0
    assert not any(tuple(tokens[r][:5]) in held_prompts for r in rows)
    assert sorted(rows.tolist() + held.tolist() + same_prompt) == list(range(n))  # nothing else is lost
    data["answer_start"] = np.full(n, -1)  # prompts unknown (code, text): only the held-out windows leave
    held2, same2, rows2 = held_out_split(data)
    assert held2.tolist() == held.tolist() and same2 == [] and len(rows2) == n - len(held)


def test_lower_layers_train_a_head_the_drafter_loads_and_need_the_folders_layers(tmp_path):
    """--lower-layers: the head gets w_lower and config.json the layers the shards' low and mid are (their folder's
    settings.json, where eagle_data.stored_layers moves a layer past the target's second-to-last down to it), and the
    NumPy drafter reads [f, l, m] rows with it. Folders that do not name their layers, or name different ones, or
    layers that are one on this target, and an --init head that reads other layers, are refused before training."""
    from minispec.drafters import load_eagle
    from minispec.model.safetensors_io import read_safetensors
    from minispec.recipes import train_eagle_ttt

    target_dir = write_random_model(tmp_path / "target", tiny_config(tie_word_embeddings=True, num_hidden_layers=3), seed=1)
    target = load_model(target_dir)
    write_shards(tmp_path / "a", target, n_shards=2)
    write_shards(tmp_path / "b", target, n_shards=2, seed=1)
    common = ["--target", str(target_dir), "--data", str(tmp_path / "a"), str(tmp_path / "b"), "--epochs", "1",
              "--batch", "2", "--seq", "32", "--threads", "1", "--unroll", "2", "--vocab", "40", "--ship-vocab", "32",
              "--lower-layers", "--out", str(tmp_path / "head"), "--run-dir", str(tmp_path / "run")]
    settings = lambda folder, low, mid: (tmp_path / folder / "settings.json").write_text(json.dumps(dict(low=low, mid=mid)))  # noqa: E731
    assert train_eagle_ttt.main(common) == 2  # no settings.json: which layers are they?
    settings("a", 0, 1)
    settings("b", 0, 0)
    assert train_eagle_ttt.main(common) == 2  # two folders, two answers
    settings("a", 2, 14)
    settings("b", 2, 14)
    assert train_eagle_ttt.main(common) == 2  # SmolLM2's layers: on 3 layers both were stored as layer 1
    settings("a", 0, 14)
    settings("b", 0, 14)  # layer 14 stored as layer 1 here
    assert train_eagle_ttt.main(common) == 0
    assert json.loads((tmp_path / "head" / "config.json").read_text())["lower_layers"] == [0, 1]
    assert read_safetensors(tmp_path / "head" / "eagle.safetensors")["w_lower"].shape == (2 * 32, 32)
    assert load_eagle(tmp_path / "head", target).lower_layers == (0, 1)
    assert "corrected by the outputs l, m of its layers 0 and 1" in (tmp_path / "head" / "README.md").read_text()
    again = common[:-4] + ["--out", str(tmp_path / "again"), "--run-dir", str(tmp_path / "run2")]
    assert train_eagle_ttt.main([a for a in again if a != "--lower-layers"] + ["--init", str(tmp_path / "head")]) == 2


def test_answer_acceptance_reads_each_answers_own_lower_layers():
    """eagle_answers with a head that reads lower layers: answer i is unrolled with its own l and m (bug: the first
    answer's rows for all), so the counts over two answers are the sums of each alone."""
    from minispec.recipes.eagle_answers import answer_acceptance
    from minispec.recipes.train_eagle import build_head

    dims = (16, 4, 2, 4, 24, 10000.0, 1e-6)
    torch.manual_seed(0)
    head = build_head(*dims, max_len=32, with_lower=True)
    with torch.no_grad():
        head.w_lower.weight.normal_(0.0, 1.0)
    rng = np.random.default_rng(0)
    E, ids = torch.from_numpy(rng.standard_normal((4, 16)).astype(np.float32)), torch.arange(4)  # 4 tokens: hits
    prompts = [[1, 2], [3, 0]]  # the same lengths: the other answer's rows fit
    seqs = [p + rng.integers(0, 4, 24).tolist() for p in prompts]
    feats = [rng.standard_normal((len(s), 16)).astype(np.float32) for s in seqs]
    lms = [rng.standard_normal((len(s), 32)).astype(np.float32) for s in seqs]
    both = answer_acceptance(head, E, ids, prompts, seqs, feats, 2, dims[1:4], torch, lm=lms)
    alone = [answer_acceptance(head, E, ids, [p], [s], [f], 2, dims[1:4], torch, lm=[m])
             for p, s, f, m in zip(prompts, seqs, feats, lms)]
    hits = lambda r, d: round((r["greedy"][d] or 0.0) * r["positions"][d])  # noqa: E731
    for d in range(2):
        assert both["positions"][d] == sum(a["positions"][d] for a in alone)
        assert hits(both, d) == sum(hits(a, d) for a in alone) and hits(both, 0) > 0
    swapped = answer_acceptance(head, E, ids, prompts, seqs, feats, 2, dims[1:4], torch, lm=lms[::-1])
    assert swapped != both  # the rows matter: another answer's l and m give other guesses


def test_a_folder_read_in_part_gives_the_windows_it_had_before_it_grew(tmp_path):
    """``--data DIR:N``: a folder grown by more shards since a head was trained still gives that head's windows (its
    shards 0 to N - 1), so the recipe of a shipped head still makes it; ``DIR:A-B`` gives the windows grown since
    (shards A to B - 1) and no others; shards not finished are refused, by number."""
    from minispec.recipes import train_eagle_ttt as t

    target_dir = write_random_model(tmp_path / "target", tiny_config(tie_word_embeddings=True), seed=1)
    target = load_model(target_dir)
    write_shards(tmp_path / "small", target, n_shards=2)
    write_shards(tmp_path / "grown", target, n_shards=3)  # the same seed: its first 2 shards are "small"'s
    before = t.load_shards(tmp_path / "small", lambda m: None)
    folder, n = t.data_folder(f"{tmp_path / 'grown'}:2")
    part = t.load_shards(folder, lambda m: None, shards=n)
    whole = t.load_shards(tmp_path / "grown", lambda m: None)
    assert len(part["tokens"]) == len(before["tokens"]) < len(whole["tokens"])
    assert all(np.array_equal(a, b) for a, b in zip(part["tokens"], before["tokens"]))
    folder, since = t.data_folder(f"{tmp_path / 'grown'}:2-3")
    grown = t.load_shards(folder, lambda m: None, shards=since)  # the shard "small" lacks, alone
    assert len(part["tokens"]) + len(grown["tokens"]) == len(whole["tokens"])
    assert all(np.array_equal(a, b) for a, b in zip(part["tokens"] + grown["tokens"], whole["tokens"]))
    assert set(grown["shard"]) == {2}
    assert t.data_folder(f"{tmp_path}:2") == (tmp_path, range(2)) and t.data_folder(str(tmp_path)) == (tmp_path, None)
    assert t.data_folder(f"{tmp_path}:83-178") == (tmp_path, range(83, 178))
    with pytest.raises(FileNotFoundError, match="shards 0 to 3 asked for, 1 of them not finished"):
        t.load_shards(tmp_path / "grown", lambda m: None, shards=range(4))
    with pytest.raises(FileNotFoundError, match=r"the first: 3\)"):
        t.load_shards(tmp_path / "grown", lambda m: None, shards=range(1, 5))
    with pytest.raises(ValueError, match="1 or more"):
        t.data_folder(f"{tmp_path}:0")
    with pytest.raises(ValueError, match="must follow"):
        t.data_folder(f"{tmp_path}:")
    with pytest.raises(ValueError, match="B above A"):
        t.data_folder(f"{tmp_path}:5-5")
    for bad in ("3-", "-5", "1-2-3"):
        with pytest.raises(ValueError, match="N or A-B"):
            t.data_folder(f"{tmp_path}:{bad}")
    assert t.data_folder(f"{tmp_path}:abc") == (Path(f"{tmp_path}:abc"), None)  # a folder named so


def test_the_cross_entropy_weight_is_w_ce_in_the_loss():
    """``--ce-weight``: the loss is sum_i 0.8^i (reg_i + w_ce CE_i) / sum_i 0.8^i, from the per-step parts that
    step_losses reports, for EAGLE-1's 0.1 (the default), 1 and 0 (regression alone)."""
    from minispec.recipes.train_eagle_ttt import step_losses

    outs, W_r = random_outs(3)
    w = np.array([0.8 ** i for i in range(3)])
    for ce_weight in (0.1, 1.0, 0.0):
        loss, parts = step_losses(outs, W_r, ce_weight=ce_weight) if ce_weight != 0.1 else step_losses(outs, W_r)
        reg, ce = np.array(parts).T
        assert abs(float(loss) - float((w * (reg + ce_weight * ce)).sum() / w.sum())) < 1e-5

def test_a_cross_entropy_weight_that_is_not_a_weight_is_refused_by_name(tmp_path, capsys):
    """A negative or infinite ``--ce-weight`` is refused by name, before any data is read."""
    from minispec.recipes.train_eagle_ttt import main

    for bad in ("-1", "inf", "nan"):
        with pytest.raises(SystemExit):
            main(["--out", str(tmp_path / "never"), "--ce-weight", bad, "--data", str(tmp_path / "no-such-folder")])
        assert f"--ce-weight must be a finite number >= 0, got {float(bad)}" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("bad, says", [(["--checkpoint-every", "0"], "--checkpoint-every must be at least 1"),
                                       (["--ship-vocab", "0"], "--ship-vocab and --max-tokens must be at least 1"),
                                       (["--vocab", "0"], "got 0, 6144 and None"),
                                       (["--max-tokens", "0"], "got 8192, 6144 and 0")])
def test_settings_that_cannot_train_are_refused_by_name(tmp_path, capsys, bad, says):
    """Before any data is read (bug: --checkpoint-every 0 divided by zero after training)."""
    from minispec.recipes.train_eagle_ttt import main

    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "never"), "--data", str(tmp_path / "no-such-folder"), *bad])
    assert says in capsys.readouterr().err and not (tmp_path / "never").exists()


def test_a_folder_without_features_and_data_too_small_for_a_step_are_refused(tmp_path):
    """Shards made with eagle_data --generate-only hold no features: refused by name (bug: a KeyError's traceback);
    data that makes no step of the batch is refused (bug: a division by zero in the schedule)."""
    from minispec.recipes import train_eagle_ttt

    target_dir = write_random_model(tmp_path / "target", tiny_config(tie_word_embeddings=True), seed=1)
    write_shards(tmp_path / "data", load_model(target_dir), n_shards=2, windows=2, length=12)
    run = ["--target", str(target_dir), "--data", str(tmp_path / "data"), "--threads", "1", "--vocab", "40",
           "--ship-vocab", "32", "--out", str(tmp_path / "head"), "--run-dir", str(tmp_path / "run")]
    log = lambda: (tmp_path / "head" / "train_log.txt").read_text().splitlines()[-1]  # noqa: E731
    assert train_eagle_ttt.main(run) == 2  # 48 tokens: no step of 16 x 256
    assert "48 training tokens make no step of --batch 16 x --seq 256" in log()
    assert train_eagle_ttt.main(run + ["--batch", "2", "--seq", "8"]) == 0  # smaller batches do
    shard = tmp_path / "data" / "shard-00001"
    record = json.loads(shard.with_suffix(".json").read_text())
    (shard.with_suffix(".json")).write_text(json.dumps(dict(record, features=False)))
    with np.load(shard.with_suffix(".npz")) as z:
        np.savez(shard.with_suffix(".npz"), tokens=z["tokens"], starts=z["starts"])  # as --generate-only writes it
    assert train_eagle_ttt.main(run + ["--batch", "2", "--seq", "8", "--run-dir", str(tmp_path / "run2")]) == 2
    assert "shard-00001.json: its windows have no features (made with eagle_data --generate-only)" in log()


def test_answer_tokens_cut_chat_windows_after_their_answers_first_tokens(tmp_path, capsys):
    """``--answer-tokens N``: a chat window (its answer's start known) is trained on its prompt and the first N tokens
    of its answer; a window whose answer's start is not known (code, text) stays whole; N < 1 is refused by name."""
    from minispec.recipes.train_eagle_ttt import answer_cut, main, rows_of

    data = dict(tokens=[np.arange(20), np.arange(20), np.arange(6)], feats=[np.ones((20, 4)), np.ones((20, 4)),
                                                                          np.ones((6, 4))],
                answer_start=np.array([5, -1, 2]))
    assert answer_cut(data, None) is None
    cut = answer_cut(data, 3)
    assert cut.tolist() == [8, 20, 5]
    toks, feats, lens, lm = rows_of(data, np.array([0, 1, 2]), 16, cut)
    assert lens.tolist() == [8, 16, 5] and toks[0, 8:].sum() == 0 and feats[0, 8:].sum() == 0 and lm is None
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "never"), "--answer-tokens", "0", "--data", str(tmp_path / "none")])
    assert "--answer-tokens must be at least 1, got 0" in capsys.readouterr().err


def test_answer_tokens_are_refused_where_no_answer_start_is_known(tmp_path, capsys):
    """A target whose tokenizer has no chat marker gives no window an answer start: --answer-tokens would cut nothing,
    so it is refused by name before training."""
    from minispec.recipes import train_eagle_ttt

    target_dir = write_random_model(tmp_path / "target", tiny_config(tie_word_embeddings=True), seed=1)
    write_shards(tmp_path / "a", load_model(target_dir), n_shards=2)
    assert train_eagle_ttt.main(["--target", str(target_dir), "--data", str(tmp_path / "a"), "--out", str(tmp_path / "h"),
                                 "--run-dir", str(tmp_path / "run"), "--answer-tokens", "8", "--threads", "1"]) == 2
    assert "no window here has a known answer start" in capsys.readouterr().err
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_vocab_from_keeps_another_heads_reduced_vocabulary(tmp_path, capsys):
    """--vocab-from DIR: the reduced head's tokens are DIR's most frequent (its token_frequency_order.json, the end ids
    first), not this run's data's: trained (--vocab) and shipped (--ship-vocab) alike, and its order is written on;
    an order that is not the target's distinct ids, or too short, is refused by name; a checkpoint of another
    vocabulary is not resumed into."""
    from minispec.recipes import train_eagle_ttt

    target_dir = write_random_model(tmp_path / "target", tiny_config(tie_word_embeddings=True), seed=1)
    target = load_model(target_dir)
    V = target.cfg.vocab_size
    write_shards(tmp_path / "data", target, n_shards=1)
    src = tmp_path / "src"
    src.mkdir()
    order = list(range(V - 1, 2, -1))[:40]  # not the data's order: the highest ids first (the end ids 0, 2 absent)
    (src / "token_frequency_order.json").write_text(json.dumps(order))
    common = ["--target", str(target_dir), "--data", str(tmp_path / "data"), "--epochs", "1", "--batch", "2",
              "--seq", "32", "--threads", "1", "--unroll", "2", "--vocab", "40", "--ship-vocab", "32",
              "--out", str(tmp_path / "head"), "--run-dir", str(tmp_path / "run")]
    assert train_eagle_ttt.main(common + ["--vocab-from", str(src)]) == 0
    want = [0, 2] + order
    assert json.loads((tmp_path / "head" / "frequent_tokens.json").read_text()) == sorted(want[:32])
    assert json.loads((tmp_path / "head" / "token_frequency_order.json").read_text())[:42] == want
    summary = json.loads((tmp_path / "head" / "training.json").read_text())
    assert summary["held_out"]["trained_vocab"] == 40 and summary["args"]["vocab_from"] == str(src)
    assert train_eagle_ttt.main(common) == 2  # the same run folder without it: another vocabulary, not resumed
    assert "another reduced head's tokens" in (tmp_path / "head" / "train_log.txt").read_text()
    for i, (bad, says) in enumerate([(order[:10], "lists 10 ids, fewer than --vocab 40"),
                                     (order[:39] + [order[0]], "lists an id twice"),
                                     (order[:39] + [V], f"holds ids outside the target's 0 to {V - 1}"),
                                     ({"0": 1}, "is not a list of token ids"), (None, "cannot read")]):
        f = src / "token_frequency_order.json"
        f.unlink(missing_ok=True)
        if bad is not None:
            f.write_text(json.dumps(bad))
        again = common[:-4] + ["--out", str(tmp_path / f"bad{i}"), "--run-dir", str(tmp_path / f"run-bad{i}")]
        assert train_eagle_ttt.main(again + ["--vocab-from", str(src)]) == 2
        assert says in (tmp_path / f"bad{i}" / "train_log.txt").read_text()
