"""The speculative loop on tiny real models: level 3 losslessness, greedy identity, stops, stats."""

import numpy as np
import pytest

from minispec import generate, load_model, rejection
from minispec.drafters import DraftModel, LayerSkip, PromptLookup, same_tokenizer
from minispec.harness.equivalence import chisquare_gof
from minispec.harness.exact_loop import loop_law
from minispec.model.tiny import tiny_config, write_random_model
from minispec.speculative import speculative_generate

from .helpers import V, broken_residual, exact_three_tokens, exact_two_tokens

WARPS = [dict(temperature=1.0), dict(temperature=0.7, top_k=4), dict(temperature=1.3, top_p=0.8)]
EXACT = dict(rtol=1e-5, atol=1e-7)  # float32 rounding: a K+1-row pass and a full forward differ by ~1e-7 relative


@pytest.mark.parametrize("w", WARPS, ids=["T=1", "T=0.7,top_k=4", "T=1.3,top_p=0.8"])
@pytest.mark.parametrize("k", [1, 2, pytest.param(3, marks=pytest.mark.slow)])
def test_level3_exact_law_of_the_loop_is_the_targets(pair, w, k):
    """Level 3, exact: speculative_generate itself, walked over every branch of its randomness (the draft's
    samples, the rule's uniforms, the residual and bonus draws; harness/exact_loop.py), emits its first 3 tokens
    with the target's own law. Rounds 2 and 3 start from a cropped cache, so the cache is in the law too."""
    target, draft = pair
    prompt = [1, 4, 2]
    law, paths = loop_law(target, lambda: DraftModel(draft), prompt, 3, V, k=k, **w)
    assert paths > 50
    np.testing.assert_allclose(law, exact_three_tokens(target, prompt, **w), **EXACT)


def test_level3_exact_law_catches_broken_rule(pair, monkeypatch):
    """The same walk with the residual bug: its law of two tokens differs from the target's by an exact amount."""
    target, draft = pair
    prompt = [1, 4, 2]
    monkeypatch.setattr(rejection, "residual", broken_residual)
    law, _ = loop_law(target, lambda: DraftModel(draft), prompt, 2, V, k=2, temperature=1.0)
    tv = 0.5 * np.abs(law - exact_two_tokens(target, prompt, temperature=1.0)).sum()
    assert tv > 0.03, tv  # 0.060 on this pair


def drafters_for(target, draft):
    return [DraftModel(draft), LayerSkip(target, layers=1), PromptLookup(), DraftModel(target)]


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_equals_plain_greedy_for_every_drafter(big_pair, k):
    target, draft = big_pair
    rng = np.random.default_rng(k)
    for prompt in ([5, 6, 7], list(rng.integers(0, 64, 20)), [9] * 12):
        want = generate(target, prompt, 40)
        for d in drafters_for(target, draft):
            res = speculative_generate(target, d, prompt, 40, k=k)
            assert res.tokens == want, d.name


def test_self_draft_accepts_everything_greedy(big_pair):
    target, _ = big_pair
    res = speculative_generate(target, DraftModel(target), [1, 2, 3], 30, k=4)
    assert res.stats.acceptance_rate == 1.0
    assert res.stats.rounds == 6 and res.stats.tokens_per_pass == {5: 6}


def test_k0_is_plain_decoding(big_pair):
    target, draft = big_pair
    for w in (dict(temperature=0.0), dict(temperature=1.0, top_p=0.9)):
        res = speculative_generate(target, draft, [3, 1, 4], 25, k=0, seed=9, **w)
        assert res.tokens == generate(target, [3, 1, 4], 25, seed=9, **w)
        assert res.stats.drafted == 0 and res.stats.rounds == 25


@pytest.mark.parametrize("k", [1, 4, 7])
def test_max_new_tokens_and_stop_tokens_are_exact(big_pair, k):
    target, draft = big_pair
    prompt = [2, 7, 1, 8]
    for n in (1, 2, 5, 13):
        assert len(speculative_generate(target, DraftModel(target), prompt, n, k=k).tokens) == n
    full = generate(target, prompt, 30)
    stop = full[6]
    want = full[: full.index(stop) + 1]
    for d in drafters_for(target, draft):
        got = []
        res = speculative_generate(target, d, prompt, 30, k=k, stop_ids=[stop], on_token=got.append)
        assert res.tokens == want == got


def test_sampling_is_reproducible_and_stats_add_up(big_pair):
    target, draft = big_pair
    a = speculative_generate(target, draft, [1, 2, 3], 40, k=3, temperature=1.0, seed=4)
    b = speculative_generate(target, draft, [1, 2, 3], 40, k=3, temperature=1.0, seed=4)
    assert a.tokens == b.tokens
    s = a.stats
    assert sum(t * c for t, c in s.tokens_per_pass.items()) == 40
    assert s.accepted == sum(s.position_accepted) and s.drafted == sum(s.position_drafted)
    assert s.draft_forwards >= s.rounds
    assert 0 <= s.acceptance_rate <= 1 and len(s.per_position_acceptance) == 3


def test_one_target_pass_per_round_the_prompt_riding_on_the_first(big_pair, monkeypatch):
    from minispec import tree_speculative_generate

    target, draft = big_pair
    passes = []  # tokens in each target pass
    real = target.forward_masked
    # in the instance's dict, removed after: setattr would leave the bound method there, and the session's target
    # would hand it to every model truncated from it (LayerSkip), which then ran the whole target
    monkeypatch.setitem(target.__dict__, "forward_masked", lambda ids, *a, **kw: passes.append(len(ids)) or real(ids, *a, **kw))
    prompt = list(range(1, 11))
    for run in (lambda: speculative_generate(target, DraftModel(draft), prompt, 20, k=3, temperature=1.0, seed=1),
                lambda: tree_speculative_generate(target, DraftModel(draft), prompt, 20, shape=(2, 3), seed=1)):
        passes.clear()
        res = run()
        assert len(passes) == res.stats.rounds and res.stats.tokens_per_pass
        assert passes[0] > len(prompt) and max(passes[1:]) < len(prompt)  # the prompt rode on the first pass only
        assert res.stats.time_prefill > 0


def test_prompt_lookup_proposals():
    pl = PromptLookup(max_ngram=3, vocab_size=20)
    # the last 3-gram (1, 2, 3) occurred before, followed by 4, 5, 6
    assert pl.continuation([1, 2, 3, 4, 5, 6, 9, 1, 2, 3], 3) == [4, 5, 6]
    assert pl.continuation([1, 2, 3, 4, 5, 6, 9, 1, 2, 3], 2) == [4, 5]
    # the most recent match wins; falls back to shorter n-grams
    assert pl.continuation([7, 8, 1, 7, 9, 2, 7], 2) == [9, 2]
    assert pl.continuation([1, 2, 3], 4) == []
    toks, probs = pl.propose([5, 6, 5], 3, None, None)
    assert toks == [6, 5] and probs.shape == (2, 20) and probs[0, 6] == 1 and probs[1, 5] == 1


def lookup_by_brute_force(seq, k, limit, max_ngram, min_ngram):
    """Prompt lookup spelled out: for n = the longest first, each earlier occurrence of the last n-gram, the most
    recent first, and what followed it (at most k tokens); distinct continuations, at most ``limit``."""
    L, out = len(seq), []
    for n in range(min(max_ngram, L - 1), min_ngram - 1, -1):
        for start in range(L - n - 1, -1, -1):  # an occurrence ends before the last token
            cont = list(seq[start + n: start + n + k])
            if seq[start: start + n] == seq[L - n:] and cont and cont not in out:
                out.append(cont)
                if len(out) == limit:
                    return out
    return out


def test_prompt_lookup_finds_what_a_brute_force_search_finds():
    """Proposals, and the trie of continuations, against the search done the slow way on 400 random texts over 3
    to 5 token values (bugs: an n-gram size skipped or one too many, a match one token off, a hit list taken
    every other entry, a trie that repeats a child)."""
    for max_ngram, min_ngram in ((True, 1), (3, True), (2.0, 1), (3, 0), (2, 3)):
        with pytest.raises(ValueError, match="min_ngram <= max_ngram"):
            PromptLookup(max_ngram, min_ngram)
    rng = np.random.default_rng(0)
    for case in range(400):
        seq = [int(t) for t in rng.integers(0, 3 + case % 3, rng.integers(1, 16))]
        max_ngram = int(rng.integers(1, 5))
        min_ngram = int(rng.integers(1, max_ngram + 1))
        pl, k, limit = PromptLookup(max_ngram, min_ngram, vocab_size=8), int(rng.integers(1, 5)), int(rng.integers(1, 4))
        want = lookup_by_brute_force(seq, k, limit, max_ngram, min_ngram)
        assert pl.continuations(seq, k, limit) == want, (seq, k, limit, max_ngram, min_ngram)
        toks, probs = pl.propose(seq, k, None, None)
        assert toks == (want[0] if want else []) and probs.shape == (len(toks), 8)
        assert pl.context(seq) == next((n for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1)
                                        if lookup_by_brute_force(seq, 1, 1, n, n)), 0)
        tree = pl.propose_tree(seq, limit, k)
        for node in range(len(tree) + 1):
            kids = [tree.tokens[c] for c in tree.children(node)]
            assert len(kids) == len(set(kids))  # a trie: one child per token
        assert all(tree.draft_probs[n][tree.tokens[n]] == 1 for n in range(1, len(tree) + 1))
        paths = {tuple(tree.tokens[m] for m in tree.path(n)) for n in range(1, len(tree) + 1)}
        assert paths == {tuple(c[:j]) for c in want for j in range(1, len(c) + 1)}


def test_draft_with_padded_vocab(tmp_path, big_pair):
    target, _ = big_pair
    cfg = tiny_config(num_hidden_layers=1, vocab_size=80)
    padded = load_model(write_random_model(tmp_path / "p", cfg, seed=5))
    want = generate(target, [1, 2, 3], 20)
    assert speculative_generate(target, DraftModel(padded, 64), [1, 2, 3], 20, k=3).tokens == want
    assert len(speculative_generate(target, padded, [1, 2, 3], 20, k=3, temperature=1.0, seed=0).tokens) == 20
    far = load_model(write_random_model(tmp_path / "f", tiny_config(num_hidden_layers=1, vocab_size=2000)))
    with pytest.raises(ValueError, match="tokenizer"):
        DraftModel(far, 64)
    edge = load_model(write_random_model(tmp_path / "e", tiny_config(num_hidden_layers=1, vocab_size=64 + 1024)))
    assert DraftModel(edge, 64).vocab == 64  # 1,024 padding rows, the most allowed
    with pytest.raises(ValueError, match="more than padding"):
        DraftModel(edge, 63)


def test_same_tokenizer_means_same_ids(tmp_path):
    import json

    for name, vocab in (("a", {"x": 0, "y": 1, "z": 2}), ("b", {"x": 0, "z": 1, "y": 2})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}, "added_tokens": []}))
    assert not same_tokenizer(tmp_path / "a", tmp_path / "b")  # the same tokens under other ids: not the same
    assert same_tokenizer(tmp_path / "a", tmp_path / "a")


def test_bad_k_and_bad_drafter(big_pair):
    target, _ = big_pair
    with pytest.raises(ValueError, match="k must be"):
        speculative_generate(target, target, [1], 3, k=-1)
    with pytest.raises(TypeError, match="drafter"):
        speculative_generate(target, object(), [1], 3)


@pytest.mark.parametrize("w", WARPS[1:], ids=["T=0.7,top_k=4", "T=1.3,top_p=0.8"])
@pytest.mark.slow
def test_level3_plain_generate_matches_the_exact_table(pair, w):
    """Plain sampling (cached prefill + one decode step, warp, sample) draws the two-token table that the
    level-3 tests compare speculation against, computed here from uncached full forwards."""
    target, _ = pair
    prompt = [1, 4, 2]
    exact = exact_two_tokens(target, prompt, **w)
    assert exact.sum() == pytest.approx(1, abs=1e-9) and (exact == 0).sum() > 0  # the warps cut some pairs out
    def counts(n, **warps):
        c = np.zeros(V * V)
        for seed in range(n):
            toks = generate(target, prompt, 2, seed=seed, **warps)
            c[toks[0] * V + toks[1]] += 1
        return c
    chi2, dof, p = chisquare_gof(counts(10_000, **w), exact)  # a draw the warp forbids gives p = 0
    assert p > 1e-3, (chi2, dof, p)
    twin = dict(w, temperature=1.2 * w["temperature"])  # the twin: a sampler 20% hotter, its top-k/top-p kept
    assert chisquare_gof(counts(3_000, **twin), exact)[2] < 1e-6  # seen by the same test


def test_a_draft_whose_context_is_full_gives_way_to_plain_rounds(tmp_path, big_pair):
    """A draft model with a shorter context than the run: once it is full, rounds go on without it, and the output
    is still the target's (bug: room counted past the draft's context)."""
    target, _ = big_pair
    short = load_model(write_random_model(tmp_path / "s", tiny_config(num_hidden_layers=1, max_position_embeddings=24),
                                          seed=4))
    prompt = list(range(1, 11))
    for k in (1, 3):
        res = speculative_generate(target, DraftModel(short), prompt, 40, k=k)
        assert res.tokens == generate(target, prompt, 40) and res.stats.drafted > 0


def test_default_names_and_layers(tmp_path, big_pair):
    target, draft = big_pair
    assert DraftModel(draft).name == f"draft:{draft.name}" and DraftModel(draft, name="mine").name == "mine"
    five = load_model(write_random_model(tmp_path / "five", tiny_config(num_hidden_layers=5), seed=2))
    assert LayerSkip(five).name == "layer-skip:4" and LayerSkip.default_layers(draft) == 1  # 4/5 of 5; at least 1
    assert LayerSkip(five, 5).name == "layer-skip:5"  # every layer: the target itself, allowed (bug: refused)
    for bad in (True, 2.0, 0, 4):
        with pytest.raises(ValueError, match="layer-skip layers"):
            LayerSkip(target, bad)


def test_a_draft_model_reads_the_whole_prompt_again_in_a_second_run(big_pair, monkeypatch):
    """A draft model forgets its cache when a run starts, so a second run costs what its first did (bug: it reused
    the cache of the last run's shared prefix, a head start no fresh drafter has)."""
    from minispec.drafters import DraftModel

    target, draft = big_pair
    fed, forward = [], draft.forward
    monkeypatch.setattr(draft, "forward", lambda ids, cache, **kw: fed.append(len(ids)) or forward(ids, cache, **kw))
    d, prompt = DraftModel(draft), [3, 5, 7, 9, 11, 13]
    for _ in range(2):
        fed.clear()
        speculative_generate(target, d, prompt, 10, k=3, temperature=0.0)
        assert fed[0] == len(prompt)  # the draft's first pass of the run reads the whole prompt
