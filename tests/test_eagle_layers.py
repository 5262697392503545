"""An EAGLE head with decoder layers after its first (eagle.py's ``layers.{i}.``, train_eagle_ttt's ``--extra-layers``):
the NumPy head computes what the training recipe's torch head computes; a head started from a one-layer head is that
head; the loop keeps and rolls back every layer's cache; a run trains one the drafter loads; malformed ones are
refused."""

import json

import numpy as np
import pytest

from minispec import generate, load_model
from minispec.drafters.dynamic_tree import DynamicTree
from minispec.drafters.eagle import Eagle, load_eagle
from minispec.model import ModelFormatError
from minispec.model.safetensors_io import read_safetensors, write_safetensors
from minispec.model.tiny import tiny_config, write_random_model
from minispec.speculative import speculative_generate, tree_speculative_generate

from .helpers import assert_chain_is_unrolled, write_random_eagle


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return load_model(write_random_model(tmp_path_factory.mktemp("t1"), tiny_config(num_hidden_layers=1), seed=5))


@pytest.fixture(scope="module")
def two_layer_dir(tmp_path_factory, target):
    return write_random_eagle(tmp_path_factory.mktemp("eagle2"), target.cfg, range(40), seed=4, scale=3.0,
                              extra_layers=2, extra_intermediate=20)


def test_the_numpy_head_with_extra_layers_computes_the_training_time_test(target):
    """train_eagle_ttt's ``unrolled`` through the head's layers is the NumPy head's chain (bugs: a layer skipped, two
    layers sharing one cache, an extra layer's width read from the target's)."""
    torch = pytest.importorskip("torch")
    from minispec.recipes.train_eagle import build_head, head_tensors
    from minispec.recipes.train_eagle_ttt import unrolled

    c = target.cfg
    torch.manual_seed(1)
    head = build_head(c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size, c.rope_theta,
                      c.rms_norm_eps, max_len=32, extra_layers=2, extra_intermediate=20)
    with torch.no_grad():
        for p in head.extra.parameters():  # their outputs start at zero: give them something to do
            p.normal_(0.0, 0.3)
    eagle = Eagle(target, {k: v.numpy() for k, v in head_tensors(head).items()}, list(range(c.vocab_size)),
                  extra_intermediate=20)
    assert len(eagle.layers) == 3 and eagle.cache.k.shape[0] == 3
    rng = np.random.default_rng(2)
    L, steps = 12, 3
    ids = rng.integers(0, c.vocab_size, L)
    feats = rng.standard_normal((L, c.hidden_size)).astype(np.float32)
    E = torch.from_numpy(np.ascontiguousarray(np.asarray(target.embed), dtype=np.float32))
    with torch.no_grad():
        outs = unrolled(head, E, torch.from_numpy(ids[None]), torch.from_numpy(feats[None]), torch.tensor([L]), steps,
                        (c.num_heads, c.num_kv_heads, c.head_dim))
        one = head(torch.from_numpy(np.asarray(target.embed)[ids[1:]][None]), torch.from_numpy(feats[None, :-1]))[0]
    np.testing.assert_allclose(one.numpy(), outs[0][0][0].numpy(), atol=1e-4)  # step 0 is the head's forward
    assert_chain_is_unrolled(eagle, ids, feats, outs, steps, atol=1e-4)


def test_a_head_started_from_a_one_layer_head_is_that_head():
    """``load_into`` a head built with extra layers from a one-layer file keeps their outputs at zero: its steps are
    the file's head's (``--init`` starts where the head it reads is); a file with more layers than the head is
    refused."""
    torch = pytest.importorskip("torch")
    from minispec.recipes.train_eagle import build_head, head_tensors
    from minispec.recipes.train_eagle_ttt import load_into, unrolled

    dims = (16, 4, 2, 4, 24, 10000.0, 1e-6)
    torch.manual_seed(0)
    one = build_head(*dims, max_len=16)
    two = build_head(*dims, max_len=16, extra_layers=1, extra_intermediate=8)
    load_into(two, {k: v.numpy() for k, v in head_tensors(one).items()}, torch)
    g = torch.Generator().manual_seed(0)
    toks, feats, E = torch.randint(0, 16, (1, 8), generator=g), torch.randn(1, 8, 16, generator=g), torch.randn(16, 16, generator=g)
    with torch.no_grad():
        a = unrolled(one, E, toks, feats, torch.tensor([8]), 2, dims[1:4])
        b = unrolled(two, E, toks, feats, torch.tensor([8]), 2, dims[1:4])
    for (pa, _, _), (pb, _, _) in zip(a, b):
        assert torch.equal(pa, pb)
    with torch.no_grad():
        two.extra[0].down.weight.normal_()
        two.extra[0].o.weight.normal_()
    back = build_head(*dims, max_len=16, extra_layers=1, extra_intermediate=8)
    load_into(back, {k: v.numpy() for k, v in head_tensors(two).items()}, torch)
    assert all(torch.equal(x, y) for x, y in zip(back.state_dict().values(), two.state_dict().values()))
    with pytest.raises(ValueError, match="layers.1"):
        load_into(one, {k: v.numpy() for k, v in head_tensors(two).items()}, torch)
    wider = build_head(*dims, max_len=16, extra_layers=1, extra_intermediate=12)
    with pytest.raises(ValueError, match="layers.1.w_gate_up has MLP width 8; the head was built with 12"):
        load_into(wider, {k: v.numpy() for k, v in head_tensors(two).items()}, torch)
    gap = {k.replace("layers.1.", "layers.2."): v.numpy() for k, v in head_tensors(two).items()}
    with pytest.raises(ValueError, match="without a gap"):
        load_into(build_head(*dims, max_len=16, extra_layers=2, extra_intermediate=8), gap, torch)


@pytest.mark.parametrize("run", ["chain", "tree", "dynamic"])
def test_the_loop_keeps_and_rolls_back_every_layers_cache(target, two_layer_dir, run):
    """Greedy output is the target's, and in every round the feature the head drafts from equals a fresh head's given
    the whole text's features at once: each layer's entries made from predicted features are rolled back in every layer
    (the bug: one cache for all layers)."""
    eagle, checked, first = load_eagle(two_layer_dir, target), [], {"run": True}
    real = eagle.catch_up

    def checked_catch_up(tokens):
        f = real(tokens)
        if not first["run"]:
            seen = []
            target.forward(tokens[:-1], target.new_cache(len(tokens)), on_features=seen.append)
            fresh = load_eagle(two_layer_dir, target)
            fresh.see_features(tokens[:-1], seen[0])
            np.testing.assert_allclose(f, fresh.catch_up(tokens), rtol=1e-4, atol=1e-4)
            checked.append(len(tokens))
        first["run"] = False
        return f

    eagle.catch_up = checked_catch_up
    prompt = [3, 17, 5, 9]
    if run == "chain":
        res = speculative_generate(target, eagle, prompt, 24, k=3)
    else:
        res = tree_speculative_generate(target, eagle, prompt, 24, shape=(2, 3) if run == "tree" else DynamicTree(3, 3, 6))
    assert res.tokens == generate(target, prompt, 24)
    assert res.stats.drafted > 0 and len(checked) > 3


def test_malformed_extra_layer_heads_are_refused(target, two_layer_dir, tmp_path):
    """A config.json whose extra_layers disagrees with the file, a gap in the layers' numbers, a stray tensor and an
    extra layer of another width than the config's are refused by name."""
    import shutil

    def variant(name, conf=None, drop=(), add=None):
        d = tmp_path / name
        shutil.copytree(two_layer_dir, d)
        if conf is not None:
            c = json.loads((d / "config.json").read_text())
            (d / "config.json").write_text(json.dumps(c | conf))
        if drop or add:
            t = read_safetensors(d / "eagle.safetensors")
            t = {k: v for k, v in t.items() if not k.startswith(drop)} | (add or {})
            write_safetensors(d / "eagle.safetensors", t, "F32")
        return d

    assert len(load_eagle(two_layer_dir, target).layers) == 3
    with pytest.raises(ModelFormatError, match="extra_layers is 1"):
        load_eagle(variant("count", dict(extra_layers=1)), target)
    with pytest.raises(ModelFormatError, match="extra_intermediate_size 0"):
        load_eagle(variant("width0", dict(extra_intermediate_size=0)), target)
    one = write_random_eagle(tmp_path / "one", target.cfg, range(40), extra_layers=0)
    conf = json.loads((one / "config.json").read_text())
    (one / "config.json").write_text(json.dumps(conf | dict(extra_intermediate_size=20)))
    with pytest.raises(ModelFormatError, match="extra_layers is 0 and extra_intermediate_size 20"):
        load_eagle(one, target)
    with pytest.raises(ModelFormatError, match="without a gap"):
        load_eagle(variant("gap", dict(extra_layers=1), drop=("layers.1.",)), target)
    with pytest.raises(ModelFormatError, match="unexpected tensors"):
        load_eagle(variant("stray", add={"w_extra": np.zeros(3, np.float32)}), target)
    with pytest.raises(ModelFormatError, match="layers.1.w_gate_up.*the MLP width extra_intermediate_size"):
        load_eagle(variant("width", dict(extra_intermediate_size=24)), target)


def test_extra_layers_train_a_head_the_drafter_loads(tmp_path, capsys):
    """--extra-layers: the head file gets the layers, config.json their number and width, the README says so, and the
    drafter loads it; a bad count or a width without layers is refused by name, a run of another shape is not resumed
    into, and an --init head with more layers than the run, or of another width, is refused."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from minispec.recipes import train_eagle_ttt

    from .test_train_eagle_ttt import write_shards

    target_dir = write_random_model(tmp_path / "target", tiny_config(tie_word_embeddings=True, num_hidden_layers=1), seed=1)
    t = load_model(target_dir)
    write_shards(tmp_path / "a", t, n_shards=2)
    common = ["--target", str(target_dir), "--data", str(tmp_path / "a"), "--epochs", "1", "--batch", "2", "--seq", "32",
              "--threads", "1", "--unroll", "2", "--vocab", "40", "--ship-vocab", "32", "--out", str(tmp_path / "head"),
              "--run-dir", str(tmp_path / "run")]
    for bad, says in ((["--extra-layers", "-1"], "--extra-layers must be 0 or more"),
                      (["--extra-intermediate", "8"], "--extra-intermediate sets the width of --extra-layers")):
        with pytest.raises(SystemExit):
            train_eagle_ttt.main(common + bad)
        assert says in capsys.readouterr().err
    assert train_eagle_ttt.main(common + ["--extra-layers", "1", "--extra-intermediate", "8"]) == 0
    conf = json.loads((tmp_path / "head" / "config.json").read_text())
    assert (conf["extra_layers"], conf["extra_intermediate_size"]) == (1, 8)
    assert read_safetensors(tmp_path / "head" / "eagle.safetensors")["layers.1.w_down"].shape == (8, 32)
    assert len(load_eagle(tmp_path / "head", t).layers) == 2
    assert "then 1 more of MLP width 8" in (tmp_path / "head" / "README.md").read_text()
    (tmp_path / "head").rename(tmp_path / "first")
    capsys.readouterr()
    assert train_eagle_ttt.main(common + ["--extra-layers", "1", "--extra-intermediate", "12"]) == 2  # same run dir
    assert "1 extra layers of width 8" in capsys.readouterr().err
    again = common[:-4] + ["--out", str(tmp_path / "again"), "--run-dir", str(tmp_path / "run2"), "--init",
                           str(tmp_path / "first")]
    assert train_eagle_ttt.main(again) == 2
    assert "has 1 extra layers of width 8; this run has none" in capsys.readouterr().err
    assert train_eagle_ttt.main(again + ["--extra-layers", "1", "--extra-intermediate", "12"]) == 2
    assert "this run has --extra-layers 1 of width 12" in capsys.readouterr().err


def test_bench_eagle_re_cuts_an_extra_layer_head_with_its_layers(tmp_path):
    """``minispec bench eagle --acceptance-only`` re-cuts the reduced head to each size and keeps the layers after the
    first, of their own width (bug: the re-cut head read their width from the target's and refused its own file)."""
    from minispec.harness import eagle_eval
    from minispec.model.config import ModelConfig

    from .helpers import chat_model_dir

    target_dir = chat_model_dir(tmp_path / "t", hidden_size=32, num_hidden_layers=2)
    head = write_random_eagle(tmp_path / "h", ModelConfig.from_dir(target_dir), range(3, 400), seed=3, scale=3.0,
                              extra_layers=1, extra_intermediate=20)
    out = tmp_path / "acc.json"
    assert eagle_eval.main(["--model", str(target_dir), "--eagle", str(head), "--sizes", "100,200", "--prompts-per-set",
                            "1", "--max-new-tokens", "8", "--acceptance-only", "--json", str(out)]) == 0
    assert set(json.loads(out.read_text())["sizes"]) == {"100", "200"}
