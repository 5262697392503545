"""The coupled rule (rejection.coupled_verify) and keyed sampling (keyed.py): level 1 exactly, over the noise; the
keyed sampler's law by Monte Carlo, with a planted twin; and the identity: a seed gives the same tokens with any
drafter, K, policy or tree, with or without a trace, as plain keyed sampling of the target."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minispec import generate
from minispec.drafters import DraftModel, LayerSkip, PromptLookup
from minispec.harness.equivalence import chisquare_gof, coupled_emits_the_guess
from minispec.harness.exact_law import continued_law, joint_law
from minispec.harness.exact_race import FixedNoise, race_law, round_law
from minispec.keyed import KeyedNoise, coupled_acceptance
from minispec.policy import FixedK
from minispec.rejection import coupled_verify, overlap
from minispec.rounds import start_run
from minispec.speculative import speculative_generate, tree_speculative_generate
from minispec.trace import Trace

from .helpers import V, exact_two_tokens, write_random_eagle


def rows(V_max: int, zeros: bool = True):
    """A probability row of 2..V_max tokens, some of them (not all) with no mass when ``zeros``."""
    def build(draw_):
        n = draw_(st.integers(2, V_max))
        w = np.array(draw_(st.lists(st.floats(0.05, 1.0), min_size=n, max_size=n)))
        if zeros:
            dead = draw_(st.lists(st.booleans(), min_size=n, max_size=n))
            w[np.array(dead)] = 0.0
            if w.sum() == 0:
                w[0] = 1.0
        return w / w.sum()
    return st.composite(lambda d: build(d))()


def pair_of_rows(V_max: int):
    """(p, q) over one vocabulary, in steps of 1/20 of the weights (so with zeros and ties, and no mass so small that
    a cell of the noise is a sliver below floating point); token 0 has mass under both."""
    @st.composite
    def build(d):
        n = d(st.integers(2, V_max))
        p, q = (np.array(d(st.lists(st.integers(0, 20), min_size=n, max_size=n)), dtype=np.float64) for _ in range(2))
        p[0], q[0] = p[0] + 1, q[0] + 1
        return p / p.sum(), q / q.sum()
    return build()


def one_guess(p, q, target_noise, draft_noise) -> int:
    """One round of the real code with K = 1: the draft's guess raced on ``draft_noise``, then coupled_verify on
    ``target_noise`` -> n_accepted (0 or 1)."""
    guess = draft_noise.draw(q, 0)
    return coupled_verify(np.stack([p, p]), q[None], [guess], target_noise)[0]


# -- level 1: exact, integrated over the noise (harness/exact_race.py) ------------------------------------------

@settings(max_examples=30, deadline=None)
@given(rows(4))
def test_level1_the_race_follows_p_exactly(p):
    """race(p) = argmin E/p is x with probability p(x), integrated over the noise (every cell of E's orders)."""
    law = race_law(lambda E: KeyedNoise.race(FixedNoise({0: E}), p, 0), [p])
    np.testing.assert_allclose([law.get(x, 0.0) for x in range(len(p))], p, atol=1e-9)


def test_level1_a_race_with_the_gumbel_sign_flipped_is_caught():
    """The twin argmax_x ln p(x) - g(x) = argmin_x 1 / (E(x) p(x)): the same machinery finds its law is not p."""
    p = np.array([0.5, 0.3, 0.2])
    law = race_law(lambda E: int(np.argmin(1.0 / (E * p))), [1.0 / p])
    off = 0.5 * sum(abs(law.get(x, 0.0) - p[x]) for x in range(3))
    assert off > 0.02, law  # its law is (0.533, 0.298, 0.170): TV 0.033


@settings(max_examples=20, deadline=None)
@given(rows(4, zeros=False), st.integers(1, 3))
def test_level1_keyed_children_are_draws_without_replacement(p, w):
    """tree.add_children on keyed noise: w children, each the race on what is left of p, are w draws from p without
    replacement (the Gumbel top-k), the law the token-wise tree rule needs of a node's children."""
    from minispec.tree import Tree, add_children

    w = min(w, len(p))

    def children(E):
        tree = Tree()
        add_children(tree, 0, np.zeros(len(p)), w, lambda logits, prefix=None: p, FixedNoise({0: E}))
        return tuple(tree.tokens[1:])
    law = race_law(children, [p])
    for picks, prob in law.items():
        want, left = 1.0, 1.0
        for x in picks:
            want, left = want * p[x] / left, left - p[x]
        assert prob == pytest.approx(want, abs=1e-9), (picks, prob, want)


@settings(max_examples=40, deadline=None)
@given(pair_of_rows(4))
@pytest.mark.slow
def test_level1_coupled_acceptance_is_the_closed_form_exactly(pq):
    """One round of the real code (the draft's guess raced with ``KeyedNoise.draw``, as a drafter draws, then ``coupled_verify``) on one
    keyed noise keeps the guess with probability sum_x 1 / (1 + sum_{y != x} max(p(y)/p(x), q(y)/q(x))), integrated
    over the noise; and the closed form lies between (1 - TV) / (1 + TV) and 1 - TV."""
    p, q = pq
    law = race_law(lambda E: one_guess(p, q, FixedNoise({0: E}), FixedNoise({0: E})), [p, q])
    alpha = coupled_acceptance(p, q)
    assert law.get(1, 0.0) == pytest.approx(alpha, abs=1e-9)
    tv = 1.0 - overlap(p, q)
    assert (1 - tv) / (1 + tv) - 1e-12 <= alpha <= 1 - tv + 1e-12


def test_level1_a_draft_racing_noise_of_its_own_is_caught():
    """The twin whose draft races on noise independent of the target's keeps a guess with sum_x p(x) q(x), exactly,
    and the closed form tells it apart. (Its output is still the target's: only its acceptance falls.)"""
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    law = race_law(lambda E, F: one_guess(p, q, FixedNoise({0: E}), FixedNoise({0: F})), [p], [q])
    assert law[1] == pytest.approx(float(p @ q), abs=1e-9)  # 0.31
    assert coupled_acceptance(p, q) - law[1] > 0.2  # 0.5385 against 0.31: caught


@settings(max_examples=200, deadline=None)
@given(pair_of_rows(40))
def test_the_fast_closed_form_equals_its_definition(pq):
    """coupled_acceptance sorts by q/p to sum in O(V log V); the definition's double sum gives the same, ties, zeros
    and all; so does its bound (1 - TV) / (1 + TV) <= alpha <= 1 - TV, at every size."""
    p, q = pq
    want = sum(1.0 / (1.0 + sum(max(p[y] / p[x], q[y] / q[x]) for y in range(len(p)) if y != x))
               for x in range(len(p)) if p[x] > 0 and q[x] > 0)
    assert coupled_acceptance(p, q) == pytest.approx(want, abs=1e-12)
    tv = 1.0 - overlap(p, q)
    assert (1 - tv) / (1 + tv) - 1e-12 <= coupled_acceptance(p, q) <= 1 - tv + 1e-12


def correction_on_the_next_positions_noise(target_probs, draft_probs, draft_tokens, noise):
    """A twin that, after a mismatch at position i, races p_i on position i+1's noise."""
    for i, x in enumerate(draft_tokens):
        if x != noise.race(target_probs[i], i):
            return i, noise.race(target_probs[i], i + 1)
    return len(draft_tokens), noise.race(target_probs[-1], len(draft_tokens))


@pytest.mark.parametrize("K", [1, 3])
def test_level1_a_coupled_round_is_lossless_exactly_and_its_twin_is_not(K):
    """exact_race.round_law integrates one round over the noise of every position (the draft racing a
    context-dependent table on the same noise): the round continued by the target has the target's law of K + 1
    tokens. The twin that emits the rejected guess does not. A twin that races on noise the integral did not cut
    (the next position's) is refused, not integrated wrongly."""
    def table(seed):
        return lambda prefix: np.random.default_rng([seed, len(prefix), *prefix]).dirichlet(np.full(3, 0.7))
    p_of, q_of = table(3), table(4)
    target = joint_law(p_of, K + 1, 3)
    law, kept = round_law(coupled_verify, p_of, q_of, K, 3)
    assert 0.5 * np.abs(continued_law(law, p_of, K + 1, 3) - target).sum() < 1e-12
    assert kept > 0
    law, _ = round_law(coupled_emits_the_guess, p_of, q_of, K, 3)
    assert 0.5 * np.abs(continued_law(law, p_of, K + 1, 3) - target).sum() > 0.1
    with pytest.raises(ValueError, match="not cut by"):
        round_law(correction_on_the_next_positions_noise, p_of, q_of, K, 3)


# -- the keyed sampler's law by Monte Carlo, and a twin that reuses its noise ---------------------------------

RUNS = 6000


def keyed_two_token_counts(target, prompt, **w):
    counts = np.zeros(V * V)
    for seed in range(RUNS):
        t = generate(target, prompt, 2, seed=seed, keyed=True, **w)
        counts[t[0] * V + t[1]] += 1
    return counts


@pytest.mark.parametrize("w", [dict(temperature=1.0), dict(temperature=0.7, top_k=4)], ids=["T=1", "T=0.7,top_k=4"])
@pytest.mark.slow
def test_keyed_sampling_draws_the_targets_two_token_law(pair, w):
    """generate(keyed=True) over 6,000 seeds: its two-token counts fit the target's exact table (chi-square)."""
    target, _ = pair
    prompt = [1, 4, 2]
    chi2, dof, p = chisquare_gof(keyed_two_token_counts(target, prompt, **w), exact_two_tokens(target, prompt, **w))
    assert p > 1e-3, (chi2, dof, p)


@pytest.mark.slow
def test_noise_reused_across_positions_is_caught(pair, monkeypatch):
    """The twin keys its noise by the seed alone, the same E at every position: each token still follows its own p,
    but the second is tied to the first, and the same chi-square test rejects the pair's law."""
    target, _ = pair
    prompt = [1, 4, 2]
    real = KeyedNoise.exponentials
    monkeypatch.setattr(KeyedNoise, "exponentials", lambda self, i, V_: real(KeyedNoise(self.seed), 0, V_))
    counts = keyed_two_token_counts(target, prompt, temperature=1.0)
    chi2, dof, p = chisquare_gof(counts, exact_two_tokens(target, prompt, temperature=1.0))
    assert p < 1e-6, (chi2, dof, p)


def test_keyed_noise_refuses_a_bad_seed_and_an_empty_row():
    with pytest.raises(ValueError, match="seed"):
        KeyedNoise(-1)
    with pytest.raises(ValueError, match="seed"):
        KeyedNoise(True)
    with pytest.raises(ValueError, match="mass"):
        KeyedNoise(0).race(np.zeros(4), 0)
    assert KeyedNoise(3).at(10).race(np.eye(4)[2], 5) == 2  # a one-hot row: its token, whatever the noise


def test_a_probe_of_a_coupled_run_measures_the_coupled_acceptance(big_pair):
    """k="auto" plans with what the rule keeps: a plain round's probe is measured with coupled_acceptance under the
    coupled rule, with overlap (1 - TV) under the token-wise one."""
    target, draft = big_pair
    p, q = np.full(64, 1 / 64), np.arange(64.0) / np.arange(64.0).sum()
    for rule, want in ((coupled_verify, coupled_acceptance(p, q)), (None, overlap(p, q))):
        run = start_run(target, DraftModel(draft), [1, 2, 3], 4, k=FixedK(2), temperature=1.0, seed=0, rule=rule)
        run.probe = q  # (a policy probes; a fixed integer K has none, and never probes)
        assert run.measure_probe(p, 0)[0] == pytest.approx(want)
    assert coupled_acceptance(p, q) < overlap(p, q)


# -- the identity: same seed, same tokens, any drafter -------------------------------------------------------

WARPS = [dict(temperature=0.8), dict(temperature=1.0, top_k=20), dict(temperature=1.3, top_p=0.9)]


@pytest.fixture(scope="module")
def big_eagle(tmp_path_factory, big_pair):
    from minispec.drafters.eagle import load_eagle

    d = write_random_eagle(tmp_path_factory.mktemp("eagle_coupled"), big_pair[0].cfg, range(40), seed=4, scale=3.0)
    return lambda: load_eagle(d, big_pair[0])


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("w", WARPS, ids=["T=0.8", "T=1,top_k=20", "T=1.3,top_p=0.9"])
def test_identity_every_drafter_k_policy_and_tree_give_the_keyed_samplers_tokens(big_pair, big_eagle, seed, w):
    """For a seed and a warp, the coupled rule emits exactly generate(keyed=True)'s tokens: with a draft model,
    layer skip, prompt lookup, an EAGLE head and the target as its own draft; K = 0, 1, 2, 4 and "auto"; trees
    2x2, 3x3 and "auto" for the drafters that build trees; traced or not."""
    target, draft = big_pair
    prompt = [5, 6, 7, 5, 6, 7, 5, 6]
    want = generate(target, prompt, 40, seed=seed, keyed=True, **w)
    assert want != generate(target, prompt, 40, seed=seed, **w)  # keyed sampling is not the stream's sampling
    makers = {"draft": lambda: DraftModel(draft), "layer-skip": lambda: LayerSkip(target, 1),
              "prompt-lookup": PromptLookup, "eagle": big_eagle, "self": lambda: DraftModel(target)}
    kept = 0
    for name, make in makers.items():
        for k in (0, 1, 2, 4, "auto"):
            res = speculative_generate(target, make(), prompt, 40, k=k, seed=seed, rule="coupled", **w)
            assert res.tokens == want, (name, k)
            kept += res.stats.accepted
        if name != "prompt-lookup":
            for shape in ((2, 2), (3, 3), "auto"):
                res = tree_speculative_generate(target, make(), prompt, 40, shape=shape, seed=seed, rule="coupled", **w)
                assert res.tokens == want, (name, shape)
        traced = speculative_generate(target, make(), prompt, 40, k=3, seed=seed, rule="coupled", trace=Trace(), **w)
        assert traced.tokens == want, (name, "traced")
        if name == "self":  # the target drafting for itself races p on p's noise: every guess is its own token
            res = speculative_generate(target, make(), prompt, 40, k=3, seed=seed, rule="coupled", **w)
            assert res.stats.accepted == res.stats.drafted > 0
    assert kept > 40  # guesses were kept, so the identity was not just plain rounds


def test_a_drafter_that_does_not_couple_keeps_the_text_and_loses_acceptance(big_pair, monkeypatch):
    """The twin: the draft model draws its guesses from the side stream (``sample``) instead of racing. The text is
    the same (the target's races decide it), but the target drafting for itself no longer keeps every guess: the
    coupling is what the self-draft's full acceptance above measures."""
    from minispec.keyed import KeyedNoise
    from minispec.sampling import sample

    target, _ = big_pair
    want = generate(target, [5, 6, 7], 40, seed=0, keyed=True, temperature=1.0)
    monkeypatch.setattr(KeyedNoise, "draw", lambda noise, probs, i: sample(probs, noise))  # a uniform of its side stream
    res = speculative_generate(target, DraftModel(target), [5, 6, 7], 40, k=3, seed=0, temperature=1.0, rule="coupled")
    assert res.tokens == want
    assert res.stats.accepted < 0.8 * res.stats.drafted


def test_identity_a_shorter_run_is_a_prefix_and_no_drafter_changes_a_token(big_pair):
    """Tokens per call do not matter either: 13 tokens are the first 13 of 40, for a chain, a tree and plain keyed
    sampling; and a stop token cuts every run at the same place."""
    target, draft = big_pair
    prompt = [1, 2, 3]
    long = generate(target, prompt, 40, seed=3, keyed=True, temperature=1.0)
    for run in (lambda n, **kw: generate(target, prompt, n, seed=3, keyed=True, temperature=1.0, **kw),
                lambda n, **kw: speculative_generate(target, DraftModel(draft), prompt, n, k=3, seed=3, temperature=1.0,
                                                     rule="coupled", **kw).tokens,
                lambda n, **kw: tree_speculative_generate(target, DraftModel(draft), prompt, n, shape=(2, 3), seed=3,
                                                          temperature=1.0, rule="coupled", **kw).tokens):
        assert run(13) == long[:13]
        stop = long[20]
        assert run(40, stop_ids=[stop]) == long[: long.index(stop) + 1]


def test_greedy_coupled_is_greedy(big_pair):
    """At T = 0 a race on a one-hot row is its token: the coupled rule is the greedy rule."""
    target, draft = big_pair
    want = generate(target, [4, 5], 30)
    assert speculative_generate(target, DraftModel(draft), [4, 5], 30, k=3, rule="coupled").tokens == want
    assert tree_speculative_generate(target, DraftModel(draft), [4, 5], 30, shape=(2, 2), rule="coupled").tokens == want


def test_an_unseeded_coupled_run_is_invariant_within_itself(big_pair):
    """Without a seed, the noise's key is drawn once per run: two runs differ, and a run's tokens are still those of
    its own keyed sampler (the trace's samples are the target's, position by position)."""
    target, draft = big_pair
    trace = Trace()
    res = speculative_generate(target, DraftModel(draft), [1, 2], 30, k=3, temperature=1.0, rule="coupled", trace=trace)
    for r in trace.rounds:
        assert r.rule == "coupled" and len(r.samples) == min(r.accepted + 1, r.k)  # compared up to the first mismatch
        assert r.samples[: r.accepted] == r.guesses[: r.accepted]  # a kept guess is the target's sample
        if r.accepted < r.k:
            assert r.samples[r.accepted] == r.next_token != r.guesses[r.accepted]  # the correction: the target's
    assert len(res.tokens) == 30
    again = speculative_generate(target, DraftModel(draft), [1, 2], 30, k=3, temperature=1.0, rule="coupled")
    assert again.tokens != res.tokens


def test_a_tree_refuses_block_and_a_rule_is_named(big_pair):
    target, draft = big_pair
    with pytest.raises(ValueError, match="block verification decides one chain"):
        tree_speculative_generate(target, DraftModel(draft), [1], 4, shape=(2, 2), rule="block")
    with pytest.raises(ValueError, match="'coupled'"):
        speculative_generate(target, DraftModel(draft), [1], 4, rule="keyed")


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf")
    from minispec import load_model
    from minispec.recipes.fetch import fetch_smollm2

    return load_model(fetch_smollm2(log=lambda m: None))


def smollm2_identity(target, cases, ks, shapes):
    """Every shipped drafter (the draft, layer skip, prompt lookup, the EAGLE head, and the draft with its own
    tokenizer under TLI and SLEM) gives plain keyed sampling's tokens, for each (seed, warp) of ``cases``, K and
    tree shape."""
    from minispec.drafters import ProposesTrees, has, make_drafter
    from minispec.harness.command import shipped_drafters
    from minispec.model.tokenizer import load_tokenizer

    tok = load_tokenizer(target.path)
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Name three uses of copper."}]))
    specs = ["prompt-lookup", "layer-skip"] + shipped_drafters()
    assert len(specs) == 6, specs  # the draft, the EAGLE head, tli: and slem: on the BPE draft
    kept = 0
    for seed, w in cases:
        want = generate(target, prompt, 24, seed=seed, keyed=True, **w)
        for spec in specs:
            drafter = make_drafter(spec, target)
            for k in ks:
                res = speculative_generate(target, drafter, prompt, 24, k=k, seed=seed, rule="coupled", **w)
                assert res.tokens == want, (spec, k, seed, w)
                kept += res.stats.accepted
            for shape in shapes if has(drafter, ProposesTrees) else ():
                res = tree_speculative_generate(target, drafter, prompt, 24, shape=shape, seed=seed, rule="coupled", **w)
                assert res.tokens == want, (spec, shape, seed, w)
    return kept


@pytest.mark.slow
def test_identity_on_smollm2_with_every_shipped_drafter(smollm2):
    """SmolLM2, six drafters, one text per (seed, warp): seed 0 at T = 1 with top-k 50, seed 11 at T = 0.7 with top-p
    0.9; K = 3, and 3x2 trees. (examples/07, in the default set, shows four drafters at T = 0.8.)"""
    cases = [(0, dict(temperature=1.0, top_k=50)), (11, dict(temperature=0.7, top_p=0.9))]
    assert smollm2_identity(smollm2, cases, ks=[3], shapes=[(3, 2)]) > 10


@pytest.mark.slow
def test_identity_on_smollm2_with_k_auto(smollm2):
    """k="auto" on SmolLM2 (each drafter's cost calibration takes tens of seconds: two drafters): the draft model and
    prompt lookup give keyed sampling's tokens."""
    from minispec.drafters import make_drafter
    from minispec.recipes.fetch import shipped_draft

    prompt = list(range(1000, 1020))
    want = generate(smollm2, prompt, 24, seed=5, keyed=True, temperature=0.9)
    for spec in ("prompt-lookup", shipped_draft()):
        res = speculative_generate(smollm2, make_drafter(spec, smollm2), prompt, 24, k="auto", seed=5, temperature=0.9,
                                   rule="coupled")
        assert res.tokens == want, spec


def test_the_cli_prints_one_text_for_every_drafter_and_traces_the_keyed_samples(tmp_path):
    """`minispec generate --rule coupled --temperature 0.8 --seed 7` prints the same text with --draft none, prompt
    lookup, layer skip (K = 2, auto) and a tree; the trace records, for each compared guess, the target's keyed
    sample; a tree with --rule block is refused by name."""
    import json

    from .helpers import chat_model_dir, run_cli

    model = str(chat_model_dir(tmp_path / "model"))
    common = ["generate", "--model", model, "--prompt", "hello there", "--rule", "coupled", "--temperature", "0.8",
              "--seed", "7", "--max-new-tokens", "24", "--no-compare"]
    texts = set()
    for extra in (["--draft", "none"], ["--draft", "prompt-lookup", "--k", "3"], ["--draft", "layer-skip", "--k", "2"],
                  ["--draft", "layer-skip", "--tree", "2x2"], ["--draft", "layer-skip"]):  # the last: --k auto
        code, out, err = run_cli(common + extra)
        assert code == 0, err
        texts.add(out)
    assert len(texts) == 1, texts
    trace_path = tmp_path / "run.json"
    code, _, err = run_cli(common + ["--draft", "layer-skip", "--k", "3", "--trace", str(trace_path)])
    assert code == 0, err
    rounds = json.loads(trace_path.read_text())["rounds"]
    assert all(r["rule"] == "coupled" and len(r["samples"]) == len(r["samples_text"]) for r in rounds)
    assert sum(len(r["samples"]) for r in rounds) > 0
    code, _, err = run_cli(common + ["--draft", "layer-skip", "--tree", "2x2", "--rule", "block"])
    assert code == 2 and "--rule block applies to chains" in err
