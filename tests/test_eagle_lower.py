"""An EAGLE head that reads two lower layers of the target too (eagle.py's ``w_lower``, EAGLE-3's fused features):
the target hands those layers' outputs beside the top feature, in the order asked; the NumPy head computes what the
training recipe's torch head computes; the loop and level 4 feed it the rows of those layers; malformed heads and
features are refused."""

import json

import numpy as np
import pytest

from minispec import generate, load_model
from minispec.drafters.eagle import Eagle, load_eagle
from minispec.drafters.protocol import FeatureTap
from minispec.harness import check
from minispec.model import ModelFormatError
from minispec.model.safetensors_io import read_safetensors
from minispec.model.tiny import tiny_config, write_random_model
from minispec.model.transformer import Model, rms_norm
from minispec.speculative import speculative_generate, tree_speculative_generate

from .helpers import assert_chain_is_unrolled, write_random_eagle


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """Three layers: 0 and 1 may be read as lower layers (the last one's output is the top feature's)."""
    return load_model(write_random_model(tmp_path_factory.mktemp("t3"), tiny_config(num_hidden_layers=3), seed=7))


def tapped(model, ids, lower_layers):  # -> [len(ids), D (1 + n)]: one pass over ids
    got = []
    model.forward(ids, model.new_cache(len(ids)), on_features=FeatureTap(got.append, lower_layers))
    return got[0]


def test_the_target_hands_each_tapped_layers_output_beside_the_top_feature(target):
    """``on_features`` with ``lower_layers``: [T, D (1 + n)], the top feature first, then the output of each layer in
    the order asked (a model cut after layer i has that output as its last layer's: the index is the layer's, not one
    off); a layer the model lacks is refused."""
    ids, D = [3, 9, 4, 20, 11], target.cfg.hidden_size
    top = []
    target.forward(ids, target.new_cache(8), on_features=top.append)
    both = tapped(target, ids, (0, 1))
    assert both.shape == (len(ids), 3 * D) and both.dtype == np.float32
    np.testing.assert_array_equal(both[:, :D], top[0])
    np.testing.assert_array_equal(tapped(target, ids, (1, 0)), np.concatenate([top[0], both[:, 2 * D:], both[:, D: 2 * D]], 1))
    for i in (0, 1):
        cut = Model(target.cfg, target.embed, target.layers[: i + 1], target.final_norm, target.lm_head)
        got = []
        cut.forward(ids, target.new_cache(8), on_features=got.append)  # norm(output of layer i)
        np.testing.assert_allclose(rms_norm(both[:, D * (1 + i): D * (2 + i)], target.final_norm,
                                            target.cfg.rms_norm_eps), got[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"layers \[0, 3\]; this model has layers 0..2"):
        tapped(target, ids, (0, 3))


def test_the_taps_are_the_hidden_states_the_shards_store(tmp_path):
    """eagle_data.py stores transformers' hidden_states[LOW + 1] and [MID + 1] (``stored_layers``): the outputs of
    layers LOW and MID, which a tap of (LOW, MID) gives (here on a 3-layer model, layers 0 and 1)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    d = write_random_model(tmp_path / "t", tiny_config(num_hidden_layers=3), seed=8)
    ids = [3, 9, 4, 20, 11]
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()
    with torch.no_grad():
        hidden = hf(torch.tensor([ids]), output_hidden_states=True).hidden_states
    got, D = tapped(load_model(d), ids, (0, 1)), hf.config.hidden_size
    for i in (0, 1):
        np.testing.assert_allclose(got[:, D * (1 + i): D * (2 + i)], hidden[i + 1][0].numpy(), rtol=1e-4, atol=1e-4)


def test_the_numpy_head_with_lower_layers_computes_the_training_time_test(target):
    """train_eagle_ttt's ``unrolled`` with ``lm`` (step 0 reads g = f + [rms(l); rms(m)] W_lower, later steps their
    own f^) is the NumPy head's chain after ``see_features`` of [f, l, m] rows; the middle layer's outliers (in the
    thousands in SmolLM2) are normed away in both (bugs: the norm left out of one, l and m swapped)."""
    torch = pytest.importorskip("torch")
    from minispec.recipes.train_eagle import build_head, head_tensors
    from minispec.recipes.train_eagle_ttt import unrolled

    c = target.cfg
    D = c.hidden_size
    torch.manual_seed(1)
    head = build_head(D, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size, c.rope_theta, c.rms_norm_eps,
                      max_len=32, with_lower=True)
    with torch.no_grad():
        head.w_lower.weight.normal_(0.0, 0.3)  # it starts at zero: give it something to do
    eagle = Eagle(target, {k: v.numpy() for k, v in head_tensors(head).items()}, list(range(c.vocab_size)),
                  lower_layers=(0, 1))
    rng = np.random.default_rng(2)
    L, steps = 12, 3
    ids = rng.integers(0, c.vocab_size, L)
    rows = rng.standard_normal((L, 3 * D)).astype(np.float32)  # f, l, m
    rows[:, 2 * D + 3] *= 1000.0  # an outlier dimension in m
    E = torch.from_numpy(np.ascontiguousarray(np.asarray(target.embed), dtype=np.float32))
    dims = (c.num_heads, c.num_kv_heads, c.head_dim)
    with torch.no_grad():
        outs = unrolled(head, E, torch.from_numpy(ids[None]), torch.from_numpy(rows[None, :, :D]), torch.tensor([L]),
                        steps, dims, lm=torch.from_numpy(rows[None, :, D:]))
        plain = unrolled(head, E, torch.from_numpy(ids[None]), torch.from_numpy(rows[None, :, :D]), torch.tensor([L]),
                         steps, dims)
    assert not np.allclose(outs[0][0].numpy(), plain[0][0].numpy(), atol=1e-2)  # the lower layers matter here
    eagle.see_features(ids[: L - 1].tolist(), rows[: L - 1])
    assert_chain_is_unrolled(eagle, ids, eagle.feats, outs, steps, atol=1e-3)  # true context: g rows


def test_a_head_started_from_one_without_lower_layers_is_that_head():
    """``load_into`` a head built ``with_lower`` from a file without ``w_lower`` leaves W_lower at zero: its steps are
    the file's head's, whatever l and m are (``--init`` starts where the head it reads is)."""
    torch = pytest.importorskip("torch")
    from minispec.recipes.train_eagle import build_head, head_tensors
    from minispec.recipes.train_eagle_ttt import load_into, unrolled

    dims = (16, 4, 2, 4, 24, 10000.0, 1e-6)
    torch.manual_seed(0)
    plain = build_head(*dims, max_len=16)
    lower = build_head(*dims, max_len=16, with_lower=True)
    load_into(lower, {k: v.numpy() for k, v in head_tensors(plain).items()}, torch)
    g = torch.Generator().manual_seed(0)
    toks, feats = torch.randint(0, 16, (1, 8), generator=g), torch.randn(1, 8, 16, generator=g)
    lm, E = torch.randn(1, 8, 32, generator=g), torch.randn(16, 16, generator=g)
    with torch.no_grad():
        a = unrolled(plain, E, toks, feats, torch.tensor([8]), 2, dims[1:4])
        b = unrolled(lower, E, toks, feats, torch.tensor([8]), 2, dims[1:4], lm=lm)
    for (pa, _, _), (pb, _, _) in zip(a, b):
        assert torch.equal(pa, pb)
    with pytest.raises(ValueError, match="w_lower"):  # and the other way round is refused
        load_into(plain, {k: v.numpy() for k, v in head_tensors(lower).items()}, torch)


@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_the_loop_feeds_a_lower_layer_head_the_rows_of_its_layers(target, tmp_path, tree):
    """speculative_generate with a head that reads layers 0 and 1: what the head keeps for the tokens the target
    cached is g of one whole tapped pass over them (to rounding: the loop's rows come from several passes), the head
    drafts, and greedy output is the target's."""
    head = load_eagle(write_random_eagle(tmp_path / "h", target.cfg, range(target.cfg.vocab_size), seed=2, scale=3.0,
                                         lower_layers=[0, 1]), target)
    assert head.lower_layers == (0, 1)
    prompt = [5, 9, 2, 7]
    want = generate(target, prompt, 24)
    res = (tree_speculative_generate(target, head, prompt, 24, shape=(2, 2)) if tree
           else speculative_generate(target, head, prompt, 24, k=3))
    assert res.tokens == want
    assert res.stats.drafted > 0 and head.forwards > 0
    seen = head.ftokens
    np.testing.assert_allclose(head.feats[: len(seen)], head.g(tapped(target, seen, (0, 1))), rtol=1e-4, atol=1e-4)


def test_level_4_reads_a_lower_layer_heads_first_guesses_from_its_layers(target, tmp_path):
    """``PromptPasses`` with ``lower_layers`` gives one whole tapped pass's rows, and ``per_token_values`` scores a
    head that reads them with the first-guess rows of those rows."""
    from minispec.sampling import Warp

    head = load_eagle(write_random_eagle(tmp_path / "h", target.cfg, range(target.cfg.vocab_size), seed=2,
                                         lower_layers=[0, 1]), target)
    prompt, run = [1, 2, 3], [4, 5, 6, 7]
    passes = check.PromptPasses(target)
    logits, features = passes(prompt, run, True, (0, 1))
    np.testing.assert_allclose(features, tapped(target, prompt + run, (0, 1)), rtol=1e-5, atol=1e-5)
    values = check.per_token_values(target, head, prompt, run, passes=passes)
    p = Warp(1.0).chain(logits, prompt, run)
    q = head.first_guess_rows(prompt + run, len(prompt), Warp(1.0), features)
    idx = np.arange(len(run))
    np.testing.assert_allclose(values["acceptance"], np.minimum(1.0, q[idx, run] / p[idx, run]), rtol=1e-5)


def test_malformed_lower_layer_heads_and_features_are_refused(target, tmp_path):
    d = write_random_eagle(tmp_path / "h", target.cfg, [1, 2, 3], lower_layers=[0, 1])
    tensors = read_safetensors(d / "eagle.safetensors")
    with pytest.raises(ModelFormatError, match="lower_layers"):  # w_lower without the layers it reads
        Eagle(target, tensors, [1, 2, 3])
    with pytest.raises(ModelFormatError, match="lower_layers"):  # layers without w_lower
        Eagle(target, {k: v for k, v in tensors.items() if k != "w_lower"}, [1, 2, 3], lower_layers=(0, 1))
    for bad in ((0, 2), (1, 0), (0, 0), (0,), (-1, 1), (0, 1, 1)):  # layer 2 is the last: its output is the top's
        with pytest.raises(ModelFormatError, match=r"two layer indices a < b in 0..1"):
            Eagle(target, tensors, [1, 2, 3], lower_layers=bad)
    with pytest.raises(ModelFormatError, match="shape"):
        Eagle(target, tensors | {"w_lower": tensors["w_lower"][:-1]}, [1, 2, 3], lower_layers=(0, 1))
    conf = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(conf | {"lower_layers": 1}))
    with pytest.raises(ModelFormatError, match="lower_layers must be a list"):
        load_eagle(d, target)
    head = Eagle(target, tensors, [1, 2, 3], lower_layers=(0, 1))
    D = target.cfg.hidden_size
    with pytest.raises(ValueError, match=rf"\[n, {3 * D}\].*layers \[0, 1\]"):
        head.see_features([1, 2], np.zeros((2, D), np.float32))  # the top feature alone


def test_bench_eagle_measures_a_lower_layer_head_at_each_size(tmp_path, capsys):
    """``minispec bench eagle --acceptance-only`` re-cuts the reduced head to each size and keeps the layers the head
    reads (bug: a re-cut head without them refuses its rows)."""
    from minispec.harness import eagle_eval
    from minispec.model.config import ModelConfig

    from .helpers import chat_model_dir

    target_dir = chat_model_dir(tmp_path / "t", hidden_size=32, num_hidden_layers=3)
    head = write_random_eagle(tmp_path / "h", ModelConfig.from_dir(target_dir), range(3, 400), seed=3, scale=3.0,
                              lower_layers=[0, 1])
    out = tmp_path / "acc.json"
    assert eagle_eval.main(["--model", str(target_dir), "--eagle", str(head), "--sizes", "100,200", "--prompts-per-set",
                            "1", "--max-new-tokens", "8", "--acceptance-only", "--trees", "2x3x4", "--json",
                            str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["sizes"]) == {"100", "200"}
    assert all(v["tokens_per_pass"] >= 1.0 for row in res["sizes"].values() for v in row.values() if isinstance(v, dict))
    tree = res["trees"]["2x3x4"]  # a fixed dynamic tree: at most 4 nodes verified, at most depth + 1 tokens a pass
    assert set(tree) == {"greedy code", "greedy chat", "T=1 code", "T=1 chat"}
    assert all(1.0 <= v["tokens_per_pass"] <= 4.0 and 0 < v["nodes_per_round"] <= 4 for v in tree.values())
    for bad in ("2x3x0", "2x3", "2x3x4x1", "2xax4"):
        with pytest.raises(SystemExit):
            eagle_eval.main(["--model", str(target_dir), "--eagle", str(head), "--trees", bad])
        assert "TOPKxDEPTHxNODES" in capsys.readouterr().err
    for argv, said in ((["--sizes", "8192"], "none fits the head's 397 tokens"), (["--sizes", "1,x"], "positive integers")):
        with pytest.raises(SystemExit):
            eagle_eval.main(["--model", str(target_dir), "--eagle", str(head), *argv])
        assert said in capsys.readouterr().err


@pytest.mark.slow
def test_bench_eagle_times_the_trees_and_the_chain_beside_plain_decoding(tmp_path, monkeypatch):
    """Without --acceptance-only, each shape's runs, the chain's and --tree auto's are timed between two runs of plain
    decoding of the same prompt; a speedup is the run's tokens a second over plain decoding's, and the r(n) of the
    passes the shapes verify is measured in the same run."""
    from minispec.harness import eagle_eval
    from minispec.model.config import ModelConfig

    from .helpers import chat_model_dir

    target_dir = chat_model_dir(tmp_path / "t", hidden_size=32, num_hidden_layers=3)
    head = write_random_eagle(tmp_path / "h", ModelConfig.from_dir(target_dir), range(3, 400), seed=3, scale=3.0)
    out = tmp_path / "timed.json"
    assert eagle_eval.main(["--model", str(target_dir), "--eagle", str(head), "--sizes", "100", "--prompts-per-set",
                            "2", "--max-new-tokens", "8", "--k", "3", "--trees", "2x3x4,1x2x2", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["timed"]) == {"greedy code", "greedy chat", "T=1 code", "T=1 chat"}
    assert all(set(v) == {"chain K=3", "2x3x4", "1x2x2", "auto"} for v in res["timed"].values())
    assert all(len(s) == 2 and all(x > 0 for x in s) for v in res["timed"].values() for s in v.values())
    assert set(res["timed_r"]) == {"1", "3", "4", "5", "17"} and res["timed_r"]["1"] == 1.0  # 1, K + 1, each tree's
    # nodes + 1, and --tree auto's largest (the default shape's 16 nodes + 1)

    def fake_side_by_side(plain, runs, done):  # plain decoding at 10 tokens a second; the runs take 0.5 s each
        assert len(plain()) == 8
        return None, 10.0, [(run(), 0.5) for run in runs]
    monkeypatch.setattr(eagle_eval, "side_by_side", fake_side_by_side)
    target = load_model(target_dir)
    eagle = load_eagle(head, target)
    bar = type("Bar", (), {"update": lambda self: None})()
    got = eagle_eval.timed_trees(target, eagle, [[5, 6, 7]], [eagle_eval.DynamicTree(2, 3, 4)], 3, 0.0, 8, None, bar)
    assert got == {name: [pytest.approx(8 / 0.5 / 10)] for name in ("chain K=3", "2x3x4", "auto")}  # 8 tokens each


def test_a_head_replaced_by_one_with_lower_layers_is_not_timed_by_the_old_ones_calibration(target, tmp_path):
    """The calibration key of a drafter that times itself names its weights' size: a head with lower layers put in
    the folder of one without (a promotion) is calibrated afresh; a head of the same shape shares the figures, which
    depend on the shape alone."""
    from minispec.policy.calibration import calibration_key

    plain = [load_eagle(write_random_eagle(tmp_path / f"p{i}", target.cfg, [1, 2, 3], seed=i), target)
             for i in range(2)]
    lower = load_eagle(write_random_eagle(tmp_path / "l", target.cfg, [1, 2, 3], lower_layers=[0, 1]), target)
    for head in (*plain, lower):
        head.name = "eagle:head"  # one folder's name, whatever head it holds
    keys = [calibration_key(head, ("guess", "fed")) for head in (*plain, lower)]
    assert keys[0] == keys[1] and keys[2] != keys[0]
