"""The EAGLE feature drafter (eagle.py) on tiny models: level 3 for chain and tree with broken twins,
greedy identity, the catch-up over rounds, the features the target gives, loading, and parity with the
training recipe's torch head."""

import json

import numpy as np
import pytest

from minispec import generate, load_model, rejection
from minispec.drafters import make_drafter
from minispec.drafters.eagle import Eagle, load_eagle
from minispec.harness.exact_loop import loop_law
from minispec.model import ModelFormatError
from minispec.model.safetensors_io import read_safetensors
from minispec.model.tiny import tiny_config, write_random_model
from minispec.policy import AutoK
from minispec.sampling import Stream, Warp
from minispec.speculative import speculative_generate, tree_speculative_generate

from .helpers import V, assert_chain_is_unrolled, broken_residual, exact_three_tokens, write_random_eagle

FREQUENT = [0, 2, 3, 5]  # of the small pair's 6 tokens: 1 and 4 are never proposed, only reached via the residual


@pytest.fixture(scope="session")
def small_eagle_dir(tmp_path_factory, small_pair):
    return write_random_eagle(tmp_path_factory.mktemp("eagle"), small_pair[0].cfg, FREQUENT, seed=3, scale=3.0)


@pytest.fixture(scope="session")
def small_eagle(small_pair, small_eagle_dir):
    """A fresh head per run, from weights read once (20,000 runs)."""
    tensors = read_safetensors(small_eagle_dir / "eagle.safetensors")
    return lambda cls=Eagle: cls(small_pair[0], tensors, FREQUENT)


@pytest.fixture(scope="session")
def big_eagle_dir(tmp_path_factory, big_pair):
    return write_random_eagle(tmp_path_factory.mktemp("eagle_big"), big_pair[0].cfg, range(40), seed=4, scale=3.0)


class SmoothedEagle(Eagle):
    """A plausible bug: q smoothed with a floor (say, to avoid dividing by zero) while the guesses are still drawn
    from the unsmoothed q. The reported q is no longer the distribution the guess came from."""

    def propose(self, tokens, k, warp, draws, keep=None):
        toks, probs = super().propose(tokens, k, warp, draws, keep)
        return toks, 0.7 * probs + 0.3 / probs.shape[-1]


CASES = [pytest.param(None, dict(temperature=1.0), id="chain-T=1"),
         pytest.param(None, dict(temperature=0.7, top_k=4), id="chain-T=0.7,top_k=4"),
         pytest.param((2, 2), dict(temperature=1.0), id="tree-T=1"),
         pytest.param((2, 2), dict(temperature=1.3, top_p=0.8), id="tree-T=1.3,top_p=0.8")]


def eagle_law(target, make, prompt, shape, **w):
    """The loop's exact law of 3 tokens (harness/exact_loop.py): a chain of 2 guesses or a tree of ``shape``. (A
    feature head's round 1 is the prefill, with no features yet: its round 2 drafts tokens 2 and 3.)"""
    if shape is None:
        return loop_law(target, make, prompt, 3, V, k=2, **w)[0]
    return loop_law(target, make, prompt, 3, V, generate=tree_speculative_generate, shape=shape, **w)[0]


@pytest.mark.parametrize("shape, w", CASES)
def test_level3_exact_eagle_law(small_pair, small_eagle, shape, w):
    target = small_pair[0]
    prompt = [1, 4, 2]
    law = eagle_law(target, small_eagle, prompt, shape, **w)
    np.testing.assert_allclose(law, exact_three_tokens(target, prompt, **w), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape", [None, (2, 2)], ids=["chain", "tree"])
def test_level3_exact_catches_broken_rule_with_eagle(small_pair, small_eagle, shape, monkeypatch):
    target = small_pair[0]
    prompt = [1, 4, 2]
    monkeypatch.setattr(rejection, "residual", broken_residual)
    tv = 0.5 * np.abs(eagle_law(target, small_eagle, prompt, shape, temperature=1.0)
                      - exact_three_tokens(target, prompt, temperature=1.0)).sum()
    assert tv > 0.01, tv


def test_level3_exact_catches_a_q_that_is_not_the_one_sampled(small_pair, small_eagle):
    target = small_pair[0]
    prompt = [1, 4, 2]
    tv = 0.5 * np.abs(eagle_law(target, lambda: small_eagle(SmoothedEagle), prompt, None, temperature=1.0)
                      - exact_three_tokens(target, prompt, temperature=1.0)).sum()
    assert tv > 0.01, tv


@pytest.mark.parametrize("k", [1, 3, 5, "auto"])
def test_greedy_chain_equals_plain(big_pair, big_eagle_dir, k):
    """"auto": an AutoK whose costs are injected (drafting pays), so that it drafts whatever the machine's speed."""
    target = big_pair[0]
    prompt = [3, 17, 5, 9]
    plain = generate(target, prompt, 40)
    eagle = load_eagle(big_eagle_dir, target)
    if k == "auto":
        assert speculative_generate(target, eagle, prompt, 40, k="auto").tokens == plain  # calibrated here: may not draft
        k = AutoK({n: 0.010 * (1 + 0.05 * (n - 1)) for n in range(1, 10)}, 0.0005, learn=False)
        eagle = load_eagle(big_eagle_dir, target)
    res = speculative_generate(target, eagle, prompt, 40, k=k)
    assert res.tokens == plain
    assert res.stats.drafted > 0 and eagle.forwards > 0  # it did draft


@pytest.mark.parametrize("shape", [(2, 3), (3, 2), "auto"])
def test_greedy_tree_equals_plain(big_pair, big_eagle_dir, shape):
    target = big_pair[0]
    prompt = [3, 17, 5, 9]
    assert tree_speculative_generate(target, load_eagle(big_eagle_dir, target), prompt, 40, shape=shape).tokens \
        == generate(target, prompt, 40)


def test_first_round_is_the_prefill_and_never_a_rare_token(big_pair, big_eagle_dir):
    """No features before the target has run the prompt: round 1 drafts nothing. Later guesses are frequent tokens."""
    target = big_pair[0]
    eagle = load_eagle(big_eagle_dir, target)
    assert eagle.propose([3, 17, 5, 9], 3, Warp(1.0), Stream(np.random.PCG64(0)))[0] == []
    seen = []
    orig = eagle.propose

    def spy(tokens, k, warp_, rng, keep=None):
        toks, probs = orig(tokens, k, warp_, rng, keep)
        seen.append((len(toks), probs))
        return toks, probs
    eagle.propose = spy
    speculative_generate(target, eagle, [3, 17, 5, 9], 30, k=3, temperature=1.0, seed=0)
    assert seen[0][0] == 0 and sum(n for n, _ in seen) > 0
    for _, probs in seen:
        assert np.all(probs[:, 40:] == 0) and np.allclose(probs.sum(-1), 1.0)


@pytest.mark.parametrize("prompt_len", [1, 300])
def test_short_and_long_prompts(tmp_path, prompt_len):
    """A 1-token prompt (no feature before the last token) and one longer than the head's first cache (256)."""
    target = load_model(write_random_model(tmp_path / "t", tiny_config(num_hidden_layers=1, max_position_embeddings=512)))
    head = write_random_eagle(tmp_path / "e", target.cfg, range(40), seed=4, scale=3.0)
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, 64, prompt_len)]
    for shape in (None, (2, 2)):
        eagle = load_eagle(head, target)
        res = (speculative_generate(target, eagle, prompt, 20, k=3) if shape is None
               else tree_speculative_generate(target, eagle, prompt, 20, shape=shape))
        assert res.tokens == generate(target, prompt, 20) and res.stats.drafted > 0


def test_a_stop_among_accepted_guesses_and_a_reused_head(big_pair, big_eagle_dir):
    """A stop token inside the accepted guesses ends the run with feature rows for tokens never emitted; the same
    head then serves another run (and the first again) exactly."""
    target = big_pair[0]
    eagle = load_eagle(big_eagle_dir, target)
    prompt = [3, 17, 5, 9]
    plain = generate(target, prompt, 40)
    res = None
    for stop in plain[5:]:  # a stop whose position lands inside a round of accepted guesses
        res = speculative_generate(target, eagle, prompt, 40, k=5, stop_ids=[stop])
        assert res.tokens == generate(target, prompt, 40, stop_ids=[stop])
    for p in ([7, 7, 1], prompt):
        assert speculative_generate(target, eagle, p, 30, k=4).tokens == generate(target, p, 30)


def test_catch_up_over_rounds_equals_one_pass(big_pair, big_eagle_dir):
    """After a run of rounds (drafted entries rolled back, true features fed) the head's state equals a fresh
    head fed the whole sequence's features in one pass."""
    target = big_pair[0]
    eagle = load_eagle(big_eagle_dir, target)
    toks = [3, 17, 5, 9] + speculative_generate(target, eagle, [3, 17, 5, 9], 25, k=3, temperature=1.0, seed=1).tokens
    toks = toks[: len(eagle.ftokens) + 1]  # what the head was given: the last round's features come after it is done
    assert len(toks) > 15
    seen = []
    target.forward(toks[:-1], target.new_cache(len(toks)), on_features=seen.append)
    feats = seen[0]
    fresh = load_eagle(big_eagle_dir, target)
    fresh.see_features(toks[:-1], feats)
    assert np.allclose(eagle.catch_up(toks), fresh.catch_up(toks), atol=1e-4)
    assert np.allclose(eagle.feats[: len(toks) - 1], feats, atol=1e-5)


def test_forward_hands_on_features_the_features_the_head_reads(big_pair):
    """``on_features`` receives the features of every row; the logits are what a pass without it returns."""
    target = big_pair[0]
    ids = [3, 17, 5, 9, 11]
    logits = target.forward(ids, target.new_cache(8))
    seen = []
    logits2 = target.forward(ids, target.new_cache(8), last=2, on_features=seen.append)
    (feats,) = seen
    assert feats.shape == (5, target.cfg.hidden_size) and feats.dtype == np.float32
    assert np.allclose(logits2, logits[-2:], atol=1e-5)
    assert np.allclose(feats @ np.asarray(target.lm_head), logits, atol=1e-4)


def test_make_drafter_loads_an_eagle_dir_and_refuses_bad_ones(big_pair, big_eagle_dir, small_pair, tmp_path):
    from minispec.drafters.eagle import is_eagle_dir

    target = big_pair[0]
    assert isinstance(make_drafter(str(big_eagle_dir), target), Eagle)
    assert is_eagle_dir(big_eagle_dir) and not is_eagle_dir(target.path) and not is_eagle_dir(tmp_path)
    with pytest.raises(ModelFormatError, match="hidden_size.*another target"):
        load_eagle(big_eagle_dir, small_pair[0])
    bad = write_random_eagle(tmp_path / "bad", target.cfg, range(40))
    (bad / "frequent_tokens.json").write_text(json.dumps([0, 1, 64] + list(range(2, 39))))
    with pytest.raises(ModelFormatError, match="frequent tokens must be distinct token ids in 0..63"):
        load_eagle(bad, target)
    (bad / "frequent_tokens.json").write_text(json.dumps(list(range(10))))
    with pytest.raises(ModelFormatError, match="reduced_vocab_size is 40.*lists 10"):
        load_eagle(bad, target)
    empty = write_random_eagle(tmp_path / "empty", target.cfg, [])  # a head that could propose nothing
    with pytest.raises(ModelFormatError, match="frequent tokens must be distinct token ids"):
        load_eagle(empty, target)
    assert load_eagle(write_random_eagle(tmp_path / "one", target.cfg, [7]), target).propose(
        [1, 2, 3], 0, None, None)[0] == []  # a single frequent token is a valid (if useless) head


def test_numpy_head_matches_the_training_head():
    """The torch head that train_eagle.py trains and the NumPy head that drafts compute the same f^."""
    torch = pytest.importorskip("torch")
    import tempfile

    from minispec.recipes.train_eagle import build_head, head_tensors
    with tempfile.TemporaryDirectory() as d:
        target = load_model(write_random_model(d, tiny_config(num_hidden_layers=1), seed=5))
    c = target.cfg
    torch.manual_seed(0)
    head = build_head(c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size, c.rope_theta,
                      c.rms_norm_eps)
    eagle = Eagle(target, {k: v.numpy() for k, v in head_tensors(head).items()}, list(range(c.vocab_size)))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, c.vocab_size, 12)
    feats = rng.standard_normal((12, c.hidden_size)).astype(np.float32)
    with torch.no_grad():
        want = head(torch.from_numpy(np.asarray(target.embed)[ids][None]), torch.from_numpy(feats[None]))[0].numpy()
    assert np.allclose(eagle.head(ids, feats, 0), want, atol=1e-4)


def test_the_heads_early_stop_and_tree_shape(big_pair, big_eagle_dir):
    """The head asks ``keep`` before each guess as DraftModel does, and stops where it refuses; its tree has the
    width and depth asked for (bugs: the guess number off by one, a level of the tree dropped)."""
    from minispec.tree import propose_tree

    target = big_pair[0]
    prompt, greedy = [3, 4, 5, 6, 7], Warp(0.0)
    eagle = load_eagle(big_eagle_dir, target)
    target.forward(prompt[:-1], target.new_cache(len(prompt)), on_features=lambda f: eagle.see_features(prompt[:-1], f))
    asked = []
    tokens, probs = eagle.propose(prompt, 5, greedy, Stream(np.random.PCG64(0)), lambda j, reach: asked.append(j) or j < 3)
    assert len(tokens) == 2 and probs.shape == (2, target.cfg.vocab_size) and asked == [1, 2, 2, 3]
    for width, depth in ((2, 1), (3, 3)):
        tree = propose_tree(eagle, prompt, width, depth, greedy, Stream(np.random.PCG64(0)))
        assert len(tree.children(0)) == width and len(tree) == width * depth and tree.depths().max() == depth


def test_a_prompt_longer_than_twice_the_feature_buffer(tmp_path):
    """The head's feature buffer starts at 256 rows and grows to hold the whole prompt at once (bug: grown to the
    smaller of twice its size and the prompt, which a 600-token prompt overflows)."""
    target = load_model(write_random_model(tmp_path / "t", tiny_config(num_hidden_layers=2, max_position_embeddings=1024),
                                           seed=6))
    eagle = load_eagle(write_random_eagle(tmp_path / "e", target.cfg, range(40), seed=7, scale=3.0), target)
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, 64, 600)]
    res = speculative_generate(target, eagle, prompt, 12, k=3)
    assert res.tokens == generate(target, prompt, 12) and res.stats.drafted > 0
    assert len(eagle.feats) >= 600 and eagle.feats.dtype == np.float32  # grown in float32


def test_a_tree_run_hands_the_head_the_features_of_the_kept_nodes(big_pair, big_eagle_dir):
    """After tree rounds (the kept nodes compacted in the cache, tree.kept_rows), the head holds the target's true
    features of every token so far (bug: the feature rows of the wrong nodes handed on)."""
    target = big_pair[0]
    eagle = load_eagle(big_eagle_dir, target)
    prompt = [3, 17, 5, 9]
    toks = prompt + tree_speculative_generate(target, eagle, prompt, 25, shape=(2, 3), temperature=1.0, seed=2).tokens
    n = len(eagle.ftokens)
    assert n > 15 and eagle.ftokens == toks[:n]
    seen = []
    target.forward(toks[:n], target.new_cache(n), on_features=seen.append)
    assert np.allclose(eagle.feats[:n], seen[0], atol=1e-4)


def test_the_heads_state_in_every_round_equals_a_fresh_heads(big_pair, big_eagle_dir):
    """In every round of sampled runs (chain and tree, one head reused across prompts), the feature the head
    drafts from equals that of a fresh head given the target's features of the whole text at once: its cache
    reuse is invisible (bugs: a stale entry kept, an entry re-run one too few, the predicted feature's position
    lost, the features of an earlier run trusted). Only the first round of a run, the prefill, has none."""
    target = big_pair[0]
    eagle, checked, run = load_eagle(big_eagle_dir, target), [], {"first": True}
    real_catch_up = eagle.catch_up

    def checked_catch_up(tokens):
        f = real_catch_up(tokens)
        seen = []
        target.forward(tokens[:-1], target.new_cache(len(tokens)), on_features=seen.append)
        fresh = load_eagle(big_eagle_dir, target)
        fresh.see_features(tokens[:-1], seen[0])
        want = fresh.catch_up(tokens)
        if not run["first"]:
            assert f is not None and want is not None, tokens
            np.testing.assert_allclose(f, want, atol=1e-4)
            checked.append(len(tokens))
        run["first"] = False
        return f

    eagle.catch_up = checked_catch_up
    for seed, prompt in enumerate(([3, 17, 5, 9], [3, 17, 6], [8] * 5, [3, 17, 5, 9, 1])):
        run["first"] = True
        assert speculative_generate(target, eagle, prompt, 16, k=3, temperature=1.0, seed=seed).stats.drafted > 0
        run["first"] = True
        res = tree_speculative_generate(target, eagle, prompt, 12, shape=(2, 2), temperature=1.0, seed=seed)
        assert res.stats.drafted > 0
    assert len(checked) > 20


def test_the_heads_logits_room_and_a_refused_first_guess(big_pair, big_eagle_dir):
    """The head's logits are float32 and -inf outside its frequent tokens, its room is what the context has left,
    and a ``keep`` that refuses the first guess gets no guesses (bug: the early stop returns nothing at all)."""
    target = big_pair[0]
    eagle = load_eagle(big_eagle_dir, target)
    prompt = [3, 4, 5, 6, 7]
    target.forward(prompt[:-1], target.new_cache(len(prompt)), on_features=lambda f: eagle.see_features(prompt[:-1], f))
    logits = eagle.logits(eagle.catch_up(prompt)[None])
    assert logits.dtype == np.float32 and logits.shape == (1, target.cfg.vocab_size)
    assert np.isfinite(logits[0, :40]).all() and np.isneginf(logits[0, 40:]).all()
    assert eagle.room(prompt) == target.cfg.max_position_embeddings - len(prompt)
    toks, probs = eagle.propose(prompt, 3, Warp(0.0), Stream(np.random.PCG64(0)), lambda j, reach: False)
    assert toks == [] and probs.shape == (0, target.cfg.vocab_size)


@pytest.mark.parametrize("make", ["eagle", "draft"])
def test_a_one_wide_greedy_tree_is_the_greedy_chain(big_pair, big_eagle_dir, make):
    """A tree of width 1 is a chain: with the same seed (one draw per level, one per guess) its nodes are the chain's
    guesses and its q rows the chain's, at T = 1 (bugs: the tree's positions or mask one slot off, which only a
    tree pass reads)."""
    from minispec.drafters import DraftModel
    from minispec.tree import propose_tree

    target, draft = big_pair
    sampled = Warp(1.0)
    for seed, prompt in enumerate(([3, 4, 5, 6, 7], [9, 1, 9, 1, 9, 1, 30, 2], [5] * 9)):
        drafters = []
        for _ in range(2):
            d = load_eagle(big_eagle_dir, target) if make == "eagle" else DraftModel(draft)
            if make == "eagle":
                target.forward(prompt[:-1], target.new_cache(len(prompt)),
                               on_features=lambda f, d=d, p=prompt: d.see_features(p[:-1], f))
            drafters.append(d)
        toks, probs = drafters[0].propose(prompt, 4, sampled, Stream(np.random.PCG64(seed)))
        tree = propose_tree(drafters[1], prompt, 1, 4, sampled, Stream(np.random.PCG64(seed)))
        assert len(toks) == 4 and tree.tokens[1:] == toks and tree.parents[1:] == [0, 1, 2, 3]
        np.testing.assert_allclose(np.array(tree.draft_probs[1:]), probs, atol=1e-5)


def test_the_head_asked_twice_about_texts_of_the_same_length(big_pair, big_eagle_dir):
    """The drafter protocol allows any text: after proposing for one, a text of the same length with another last
    token gets that text's feature, not the last one's (bug: the recovery of f^_n skipped when only the last token
    changed)."""
    target = big_pair[0]
    prompt = [3, 17, 5, 9, 2]
    eagle = load_eagle(big_eagle_dir, target)
    target.forward(prompt, target.new_cache(8), on_features=lambda f: eagle.see_features(prompt, f))
    for last in (4, 11, 4):
        fresh = load_eagle(big_eagle_dir, target)
        target.forward(prompt, target.new_cache(8), on_features=lambda f, fresh=fresh: fresh.see_features(prompt, f))
        np.testing.assert_allclose(eagle.catch_up(prompt + [last]), fresh.catch_up(prompt + [last]), atol=1e-4)


def test_eagle_inputs_are_checked_one_by_one(big_pair, big_eagle_dir, tmp_path):
    """Each check of a head directory and of the frequent tokens refuses on its own (bugs: checks joined with "and",
    a bool taken for a token id, a list expected of anything) and names the file; what loads is labelled by its
    directory and held in float32 whatever the file's dtype."""
    from minispec.drafters.eagle import is_eagle_dir

    target = big_pair[0]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert not is_eagle_dir(broken)
    bad = write_random_eagle(tmp_path / "bad", target.cfg, range(40))
    for tokens in (5, {"0": 1}, [True] + list(range(1, 40)), [0.0] + list(range(1, 40))):
        (bad / "frequent_tokens.json").write_text(json.dumps(tokens))
        with pytest.raises(ModelFormatError, match="frequent_tokens.json"):
            load_eagle(bad, target)
    assert load_eagle(big_eagle_dir, target).name == f"eagle:{big_eagle_dir.name}"
    tensors = {k: v.astype(np.float64) for k, v in read_safetensors(big_eagle_dir / "eagle.safetensors").items()}
    V = target.cfg.vocab_size
    for ids in ([[1, 2], [3, 4]], [], [0.0, 1.0], [-1, 2], [0, V], [3, 3], [1, 2, 2]):
        with pytest.raises(ModelFormatError, match="distinct token ids"):
            Eagle(target, tensors, ids)
    head = Eagle(target, tensors, range(40))
    assert head.name == "eagle" and all(a.dtype == np.float32 for a in (head.w_fc, head.b_fc, head.layers[0].w_qkv))
    prompt = [3, 4, 5, 6, 7]
    target.forward(prompt[:-1], target.new_cache(8), on_features=lambda f: head.see_features(prompt[:-1], f))
    assert head.catch_up(prompt).dtype == np.float32 and head.feats.dtype == np.float32


def test_features_of_another_text_are_dropped_and_a_shorter_text_is_served(big_pair, big_eagle_dir):
    """Features handed on for a text that does not extend the one the head holds are dropped (the head waits for a
    prefill); a text shorter than the last one asked about gets its own feature (bugs: the dropped list set to
    None, the feature of the longer text returned)."""
    target = big_pair[0]
    eagle = load_eagle(big_eagle_dir, target)
    text = [3, 17, 5, 9, 2, 8, 8]
    target.forward(text, target.new_cache(8), on_features=lambda f: eagle.see_features(text, f))

    def fresh_catch_up(tokens):  # a new head, which has been asked nothing before
        fresh = load_eagle(big_eagle_dir, target)
        target.forward(text, target.new_cache(8), on_features=lambda f: fresh.see_features(text, f))
        return fresh.catch_up(tokens)

    for tokens in (text + [1], text[:5], text[:4] + [1], text):  # longer, then a prefix of it, then others
        np.testing.assert_allclose(eagle.catch_up(tokens), fresh_catch_up(tokens), atol=1e-4)
    eagle.see_features([4, 4, 4, 4], np.zeros((1, target.cfg.hidden_size), np.float32))  # not an extension of text
    assert eagle.ftokens == [] and eagle.catch_up([4, 4, 4, 4, 1]) is None
    target.forward(text, target.new_cache(8), on_features=lambda f: eagle.see_features(text, f))
    np.testing.assert_allclose(eagle.catch_up(text + [1]), fresh_catch_up(text + [1]), atol=1e-4)


def test_features_kept_when_the_buffer_grows_mid_run(tmp_path):
    """The feature buffer grows (256 rows, then twice) while a run is under way: the rows already held move over
    (bug: they are lost, read as NaN by a later text that is a shorter prefix, whose q is then NaN)."""
    target = load_model(write_random_model(tmp_path / "t", tiny_config(num_hidden_layers=2, max_position_embeddings=1024),
                                           seed=6))
    head_dir = write_random_eagle(tmp_path / "e", target.cfg, range(40), seed=7, scale=3.0)
    eagle = load_eagle(head_dir, target)
    text = [int(t) for t in np.random.default_rng(2).integers(0, 64, 300)]
    seen = []
    target.forward(text, target.new_cache(310), on_features=seen.append)
    eagle.see_features(text[:200], seen[0][:200])
    eagle.see_features(text, seen[0][200:])  # rows 200..299 arrive later: the buffer grows past 256 here
    assert len(eagle.feats) >= 300 and np.isfinite(eagle.feats[:300]).all()
    fresh = load_eagle(head_dir, target)
    fresh.see_features(text, seen[0])
    np.testing.assert_allclose(eagle.catch_up(text[:150] + [1]), fresh.catch_up(text[:150] + [1]), atol=1e-4)


def test_the_training_time_test_computes_what_the_drafter_computes():
    """train_eagle_ttt's unrolled step i at position j is the NumPy head's (i+1)-th guess in a chain after the
    context x_0..x_{j+1}: the true entries 0..j in its cache, then its own predicted features (bugs: the chain's
    query attending to predicted features of other positions, or at the wrong RoPE position)."""
    torch = pytest.importorskip("torch")
    import tempfile

    from minispec.recipes.train_eagle import build_head, head_tensors
    from minispec.recipes.train_eagle_ttt import unrolled
    with tempfile.TemporaryDirectory() as d:
        target = load_model(write_random_model(d, tiny_config(num_hidden_layers=1), seed=5))
    c = target.cfg
    torch.manual_seed(1)
    head = build_head(c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size, c.rope_theta,
                      c.rms_norm_eps, max_len=32)
    eagle = Eagle(target, {k: v.numpy() for k, v in head_tensors(head).items()}, list(range(c.vocab_size)))
    rng = np.random.default_rng(2)
    L, steps = 12, 3
    ids = rng.integers(0, c.vocab_size, L)
    feats = rng.standard_normal((L, c.hidden_size)).astype(np.float32)
    E = torch.from_numpy(np.ascontiguousarray(np.asarray(target.embed), dtype=np.float32))
    with torch.no_grad():
        outs = unrolled(head, E, torch.from_numpy(ids[None]), torch.from_numpy(feats[None]), torch.tensor([L]), steps,
                        (c.num_heads, c.num_kv_heads, c.head_dim))
    assert_chain_is_unrolled(eagle, ids, feats, outs, steps, atol=1e-4)
    for j in (0, 4, 7):
        for i in range(steps):
            assert outs[i][2][0, j] == 1 and outs[i][2][0, L - 1 - i:].sum() == 0  # valid while x_{j+1+i} exists


def test_a_head_used_for_a_second_run_runs_as_a_fresh_one(big_pair, big_eagle_dir):
    """A run starts from the drafter as loaded (rounds.start_run: Forgets): a head that ran before drafts nothing in
    round 1 and gives a seeded T = 1 run the fresh head's tokens (bug: it read the last run's features, drafted in
    round 1 and shifted every later draw)."""
    target, prompt = big_pair[0], [3, 5, 7, 9, 11, 13]
    fresh = speculative_generate(target, load_eagle(big_eagle_dir, target), prompt, 20, k=3, temperature=1.0, seed=0)
    head = load_eagle(big_eagle_dir, target)
    runs = [speculative_generate(target, head, prompt, 20, k=3, temperature=1.0, seed=0) for _ in range(2)]
    assert [r.tokens for r in runs] == [fresh.tokens] * 2
    assert [r.stats.log[0].drafted for r in runs] == [0, 0]
