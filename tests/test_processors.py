"""Logits processors (processors.py) under speculation: their meaning, and levels 1 and 3 exactly, each with twins.

The reference is plain masked decoding: ``generate`` with the same processors, whose law on a tiny model is
computed here from full forwards (``masked_law``). A speculative loop with processors must have that law exactly;
each twin gets the prefix wrong in one way and must differ from it by an exact amount.
"""

import dataclasses
import importlib

import numpy as np
import pytest

from minispec import generate, sampling
from minispec.drafters import DraftModel, LayerSkip, PromptLookup
from minispec.drafters.dynamic_tree import DynamicTree
from minispec.harness.conform.twins import AdvancesOnGuesses
from minispec.harness.exact_law import continued_law, joint_law, paths, round_law
from minispec.harness.exact_loop import loop_law
from minispec.processors import Choices, FrequencyPenalty, MinNewTokens, NoRepeatNGram, PresencePenalty, RepetitionPenalty, build
from minispec.rejection import accept_reject
from minispec.sampling import Warp, sample
from minispec.speculative import speculative_generate, tree_speculative_generate

from .helpers import V, chat_model_dir, run_cli
from .test_adaptive import auto_policy
from .test_eagle import small_eagle, small_eagle_dir  # noqa: F401 (fixtures)

EXACT = dict(rtol=1e-5, atol=1e-7)  # float32 rounding, as tests/test_speculative.py
PROMPT = [1, 4, 2]
CHOICES = [[3, 5, 1], [3, 2], [5, 1, 3], [4]]

# one of each, with settings that move the law of 3 tokens after PROMPT on the 6-token pair
PROCESSORS = {
    "repetition": lambda: RepetitionPenalty(2.5),
    "frequency": lambda: FrequencyPenalty(1.5),
    "presence": lambda: PresencePenalty(2.0),
    "no-repeat-2gram": lambda: NoRepeatNGram(2),
    "min-new-tokens": lambda: MinNewTokens(2, stop_ids=[0, 5]),
    "choices": lambda: Choices(CHOICES, stop_ids=[0]),
}


def masked_law(target, prompt, m: int, processors, **w) -> np.ndarray:
    """P(first m tokens = y) [V^m] of plain decoding with ``processors``: each row from a full forward of its own
    prefix, processed and warped by ``Warp`` (the one place the order is written), no cache, no speculation."""
    warp = Warp(processors=tuple(processors), prompt_len=len(prompt), **{"temperature": 1.0, **w})

    def p_of(prefix):
        seq = list(prompt) + list(prefix)
        return warp(target.forward(seq, target.new_cache(len(seq)))[-1], seq)
    return joint_law(p_of, m, V)


def tv(a, b) -> float:
    return 0.5 * float(np.abs(a - b).sum())


# ---- what each processor means ----------------------------------------------------------------------------------

def test_each_processor_means_what_its_docstring_says():
    z = np.array([2.0, -1.0, 0.5, 3.0, -2.0, 1.0])
    prefix, prompt_len = [1, 3, 1, 0, 0, 3], 3  # generated: 0, 0, 3
    out = RepetitionPenalty(2.0)(z.copy(), prefix, prompt_len)  # prompt included: 1, 3 and 0
    np.testing.assert_array_equal(out, [1.0, -2.0, 0.5, 1.5, -2.0, 1.0])
    out = FrequencyPenalty(0.5)(z.copy(), prefix, prompt_len)  # generated only: 0 twice, 3 once
    np.testing.assert_array_equal(out, [1.0, -1.0, 0.5, 2.5, -2.0, 1.0])
    out = PresencePenalty(0.5)(z.copy(), prefix, prompt_len)
    np.testing.assert_array_equal(out, [1.5, -1.0, 0.5, 2.5, -2.0, 1.0])
    out = NoRepeatNGram(2)(z.copy(), prefix, prompt_len)  # after 3: 1 followed it before
    assert np.isneginf(out[1]) and np.isfinite(np.delete(out, 1)).all()
    out = MinNewTokens(4, [0, 5])(z.copy(), prefix, prompt_len)  # 3 generated < 4: stops forbidden
    assert np.isneginf(out[[0, 5]]).all() and np.isfinite(out[1:5]).all()
    assert np.array_equal(MinNewTokens(3, [0])(z.copy(), prefix, prompt_len), z)
    mask = Choices([[3, 5], [3], [4, 4]], stop_ids=[0])
    assert mask.allowed([]) == [3, 4] and mask.allowed([3]) == [5, 0] and mask.allowed([3, 5]) == [0]
    assert mask.allowed([5]) is None  # off the trie: a forbidden guess's later rows, never used
    out = mask(z.copy(), [9, 3], 1)
    assert np.isfinite(out[[0, 5]]).all() and np.isneginf(np.delete(out, [0, 5])).all()


def test_penalties_match_transformers_processors():
    """The repetition penalty, the n-gram ban and the minimum length against transformers' own processors, on
    random logits and prefixes (its MinNewTokensLengthLogitsProcessor skips the prompt, as MinNewTokens)."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    rng = np.random.default_rng(0)
    for _ in range(20):
        n, prompt_len = int(rng.integers(2, 12)), int(rng.integers(1, 4))
        prefix = [int(t) for t in rng.integers(0, 8, n + prompt_len)]
        z = rng.standard_normal(8).astype(np.float32)
        ids, scores = torch.tensor([prefix]), torch.tensor(z[None])
        pairs = [(RepetitionPenalty(1.7), tf.RepetitionPenaltyLogitsProcessor(1.7)),
                 (NoRepeatNGram(2), tf.NoRepeatNGramLogitsProcessor(2)),
                 (NoRepeatNGram(3), tf.NoRepeatNGramLogitsProcessor(3)),
                 (MinNewTokens(6, [0, 7]), tf.MinNewTokensLengthLogitsProcessor(prompt_len, 6, [0, 7]))]
        for ours, theirs in pairs:
            want = theirs(ids, scores.clone())[0].numpy()
            got = ours(z.astype(np.float64), prefix, prompt_len)
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=ours.describe())


def test_bad_settings_are_refused_by_name():
    for kw, words in [(dict(repetition_penalty=0), "repetition penalty must be > 0"),
                      (dict(repetition_penalty=-1.0), "repetition penalty must be > 0"),
                      (dict(frequency_penalty=float("nan")), "frequency penalty must be a finite number"),
                      (dict(presence_penalty=float("inf")), "presence penalty must be a finite number"),
                      (dict(presence_penalty="1"), "presence penalty must be a finite number"),
                      (dict(no_repeat_ngram=0), "no-repeat n-gram size must be an integer >= 1"),
                      (dict(min_new_tokens=2), "needs the run's stop tokens"),
                      (dict(choices=[], stop_ids=[0]), "the choice list is empty"),
                      (dict(choices=[[1], []], stop_ids=[0]), "a choice is empty"),
                      (dict(choices=[[1, 2, 3]], stop_ids=[0], max_new_tokens=3), "no choice fits in max_new_tokens = 3"),
                      (dict(choices=["yes", [4]], stop_ids=[0]), "all texts or all token id sequences"),
                      (dict(choices=[[1, 2]], stop_ids=[0], min_new_tokens=3), "min_new_tokens = 3 with a choice of 2"),
                      (dict(choices=[[-1]], stop_ids=[0]), "a choice: token ids must be integers of at least 0, got -1"),
                      (dict(min_new_tokens=2, stop_ids=[-1]), "token ids must be integers of at least 0, got -1")]:
        with pytest.raises(ValueError, match=words):
            build(**kw)
    with pytest.raises(TypeError, match="not one text"):  # (bug: "yes" was three choices, "y", "e" and "s")
        build(choices="yes", stop_ids=[0], encode=list)
    assert build() == ()


def test_ids_outside_the_vocabulary_and_extreme_penalties_are_refused_in_the_run(big_pair):
    """A choice or stop id past the model's vocabulary is refused by name (bug: an IndexError mid-run); a penalty
    extreme enough to take a logit past float64's range is refused by name, with no NumPy warning first: to +inf
    (bug: the row's probabilities were NaN, and every draw gave the vocabulary's last token) or to -inf (bug: every
    seen token banned, where the penalty only lowers them: "allow no token", or a draft's row left unpenalised)."""
    import warnings

    target, _ = big_pair
    past = "takes a logit past float64's range"
    for procs, words in [((Choices([[99]], stop_ids=[0]),), "token id 99 is outside the model's vocabulary of 64"),
                         ((MinNewTokens(2, stop_ids=[70]),), "token id 70 is outside"),
                         ((RepetitionPenalty(1e-310),), f"repetition penalty 1e-310 {past}"),
                         ((FrequencyPenalty(-1e308),), f"frequency penalty -1e\\+308 {past}"),
                         ((NoRepeatNGram(2), FrequencyPenalty(-1e308)), f"frequency penalty -1e\\+308 {past}")]:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # refused by name, not after a RuntimeWarning
            with pytest.raises(ValueError, match=words):
                generate(target, [5, 9, 2, 5, 9], 6, processors=procs, temperature=1.0, seed=0, stop_ids=[0])
    with warnings.catch_warnings():  # to -inf: a seen logit of -2 times 1e308 (this model's logits are smaller)
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=f"repetition penalty 1e\\+308 {past}"):
            RepetitionPenalty(1e308)(np.array([-2.0, -3.0, 4.0]), [0, 1], 0)


def test_a_warp_with_processors_needs_the_prefix():
    warp = Warp(1.0, processors=(RepetitionPenalty(1.5),))
    with pytest.raises(TypeError, match="read the tokens before a row"):
        warp(np.zeros(6))
    banned = Warp(1.0, processors=(NoRepeatNGram(1),), prompt_len=0)  # every token of the prefix is banned
    with pytest.raises(ValueError, match="allow no token"):
        banned(np.zeros(3), [0, 1, 2], strict=True)
    assert np.allclose(banned(np.zeros(3), [0, 1, 2]), 1 / 3)  # a draft's row (not strict): the row as it came


# ---- level 1: one round, exactly -------------------------------------------------------------------------------

def tables(seed: int = 0):
    """Context-dependent [V] logits for target and draft after any prefix, fixed by ``seed``."""
    rng = np.random.default_rng(seed)
    target, draft = {}, {}

    def of(table, prefix):
        if prefix not in table:
            table[prefix] = 2.0 * rng.standard_normal(V)
        return table[prefix]
    return (lambda prefix: of(target, tuple(prefix))), (lambda prefix: of(draft, tuple(prefix)))


@pytest.mark.parametrize("name", list(PROCESSORS))
def test_level1_a_round_with_a_processor_has_the_processed_targets_law(name):
    """Level 1, exact (harness/exact_law.py): one K = 2 round of the token rule, its rows processed with their own
    prefixes, continued by the target, has the law of plain masked decoding; the twin that processes every row of
    the round with the round's starting prefix does not."""
    target_logits, draft_logits = tables()
    history = [1, 4, 2]  # the tokens before the round: the prompt, in PROMPT's ids
    warp = Warp(1.0, processors=(PROCESSORS[name](),), prompt_len=len(history))

    def p_of(prefix, start_only=False):
        seq = history + ([] if start_only else list(prefix))
        return warp(target_logits(prefix), seq)

    def q_of(prefix):
        return warp(draft_logits(prefix), history + list(prefix))

    law, _ = round_law(accept_reject, p_of, q_of, 2, V)
    m = 3
    want = joint_law(p_of, m, V)
    np.testing.assert_allclose(continued_law(law, p_of, m, V), want, atol=1e-12)
    stale, _ = round_law(accept_reject, lambda prefix: p_of(prefix, start_only=True), q_of, 2, V)
    assert tv(continued_law(stale, p_of, m, V), want) > 1e-3


# ---- level 3: the whole loop, exactly ------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(PROCESSORS))
@pytest.mark.parametrize("shape", [None, (2, 2)], ids=["chain-k2", "tree-2x2"])
@pytest.mark.slow
def test_level3_the_loop_with_a_processor_has_plain_masked_decodings_law(pair, name, shape):
    """Level 3, exact (harness/exact_loop.py): the loop itself, walked over every draw, with a K = 2 chain or a 2x2
    tree and the token rule, emits its first 3 tokens (the tree: 2, a round's worth, which keeps the walk short) with the
    law of plain decoding with the same processor."""
    target, draft = pair
    procs = (PROCESSORS[name](),)
    m, run = (3, dict(k=2)) if shape is None else (2, dict(generate=tree_speculative_generate, shape=shape))
    law, paths = loop_law(target, lambda: DraftModel(draft), PROMPT, m, V, temperature=1.0, processors=procs, **run)
    assert paths > 10  # the walk branched (a choice mask leaves few paths)
    want = masked_law(target, PROMPT, m, procs)
    np.testing.assert_allclose(law, want, **EXACT)
    assert tv(want, masked_law(target, PROMPT, m, ())) > 0.01  # the processor matters here


def test_level3_plain_generate_with_processors_is_the_reference(pair, monkeypatch):
    """``generate`` itself (its cache, its one-row warp), walked over every draw, has the reference law."""
    target, _ = pair
    procs = (RepetitionPenalty(2.5), Choices(CHOICES, stop_ids=[0]))
    plain = importlib.import_module("minispec.generate")

    def run(rng):
        monkeypatch.setattr(plain, "sample", lambda probs, _: rng.choose(probs))
        return tuple(generate(target, PROMPT, 3, temperature=1.0, processors=procs))
    law = np.zeros(V ** 3)
    for tokens, prob in paths(run):
        law[np.ravel_multi_index(tokens, (V,) * 3)] += prob
    np.testing.assert_allclose(law, masked_law(target, PROMPT, 3, procs), **EXACT)


# ---- the twins, each caught exactly ---------------------------------------------------------------------------

def stale_chain(self, logits, tokens, guesses):
    """Twin: every row of the target pass processed with the round's starting prefix (the sequence only)."""
    return np.stack([self(row, list(tokens)) for row in logits]) if self.processors else sampling.warp(
        logits, self.temperature, self.top_k, self.top_p)


class UnprocessedDraw(DraftModel):
    """Twin: the guesses drawn from the draft's q without the processors, while the rule is told the processed q."""

    def propose(self, tokens, k, warp, draws, keep=None):
        plain = dataclasses.replace(warp, processors=())
        guesses, _ = super().propose(tokens, k, plain, draws, keep)
        rows = [warp(self.rows_after(tokens, guesses[:i]), list(tokens) + guesses[:i]) for i in range(len(guesses))]
        return guesses, np.array(rows).reshape(len(guesses), self.vocab)

    def rows_after(self, tokens, guesses):
        seq = list(tokens) + list(guesses)
        return self.pad(self.model.forward(seq, self.model.new_cache(len(seq)), last=1))[0]


class UnprocessedDraft(DraftModel):
    """The literal 'applied to p but not to q': q without the processors, consistently (drawn from and told)."""

    def propose(self, tokens, k, warp, rng, keep=None):
        return super().propose(tokens, k, dataclasses.replace(warp, processors=()), rng, keep)


def masked_after_the_rule(mask: Choices) -> dict:
    """Twin: the rule runs on unmasked rows, and the mask is applied after it to the token the rule samples itself
    (the correction or the bonus, redrawn from the masked p when forbidden): kept guesses pass unmasked. -> the
    loop's keyword arguments for one run (the emitted tokens, which the twin's prefix needs, are its own)."""
    emitted: list[int] = []

    def rule(target_probs, draft_probs, draft_tokens, rng):
        n, token = accept_reject(target_probs, draft_probs, draft_tokens, rng)
        allowed = mask.allowed(emitted + list(draft_tokens[:n]))
        if allowed is not None and token not in allowed:
            row = np.zeros(V)
            row[allowed] = target_probs[n][allowed]
            token = sample(row / row.sum(), rng)
        return n, token
    return dict(rule=rule, on_token=emitted.append)


TWINS = {  # name -> (the loop's keyword arguments for one run, or a drafter; the processor the law is held to)
    "stale prefix": lambda draft: (dict(processors=(RepetitionPenalty(2.5),)), None, RepetitionPenalty(2.5)),
    "q drawn unprocessed, told processed": lambda draft: (dict(processors=(RepetitionPenalty(2.5),)),
                                                          lambda: UnprocessedDraw(draft), RepetitionPenalty(2.5)),
    "automaton advanced on a rejected guess": lambda draft: (lambda: dict(processors=(AdvancesOnGuesses(CHOICES, stop_ids=[0]),)),
                                                             None, Choices(CHOICES, stop_ids=[0])),
    "mask applied after the rule": lambda draft: (lambda: masked_after_the_rule(Choices(CHOICES, stop_ids=[0])),
                                                  None, Choices(CHOICES, stop_ids=[0])),
}


@pytest.mark.parametrize("name", list(TWINS))
def test_level3_twins_are_caught_exactly(pair, monkeypatch, name):
    """Each twin gets the prefix wrong in one way; its exact law of 2 tokens differs from plain masked decoding's."""
    target, draft = pair
    run, make, reference = TWINS[name](draft)
    if name == "stale prefix":
        monkeypatch.setattr(Warp, "chain", stale_chain)
    kw = dict(fresh=run) if callable(run) else run
    law, _ = loop_law(target, make or (lambda: DraftModel(draft)), PROMPT, 2, V, k=2, temperature=1.0, **kw)
    gap = tv(law, masked_law(target, PROMPT, 2, (reference,)))
    assert gap > 1e-3, gap  # 0.032, 0.070, 0.816 and 0.018 in the order of TWINS


def test_level3_q_without_the_processors_is_lossless(pair):
    """The literal 'processed p, unprocessed q' is no bug: the rule needs only the q the guesses were drawn from.
    Only acceptance suffers (harness/exact_law.py's expected guesses kept would show it)."""
    target, draft = pair
    procs = (RepetitionPenalty(2.5),)
    law, _ = loop_law(target, lambda: UnprocessedDraft(draft), PROMPT, 2, V, k=2, temperature=1.0, processors=procs)
    np.testing.assert_allclose(law, masked_law(target, PROMPT, 2, procs), **EXACT)


# ---- greedy identity and the coupled rule, with every drafter ------------------------------------------------

def drafters_for(target, draft):
    return {"draft": DraftModel(draft), "layer-skip": LayerSkip(target, layers=1), "prompt-lookup": PromptLookup(),
            "self": DraftModel(target)}


def test_greedy_with_processors_equals_plain_greedy_for_every_drafter(big_pair):
    """At T = 0 the output with processors is plain greedy's with them, token for token, chains and trees."""
    target, draft = big_pair
    prompt = [5, 9, 5, 9, 5, 9, 2]
    for procs in [(RepetitionPenalty(1.8), NoRepeatNGram(3)), (FrequencyPenalty(0.7), PresencePenalty(0.4)),
                  (MinNewTokens(12, [6]),)]:  # 6: the token plain greedy repeats here
        want = generate(target, prompt, 24, processors=procs)
        assert want != generate(target, prompt, 24)  # the processors change the greedy text here
        for name in drafters_for(target, draft):
            got = speculative_generate(target, drafters_for(target, draft)[name], prompt, 24, k=3, processors=procs)
            assert got.tokens == want, (name, procs)
            tree = tree_speculative_generate(target, drafters_for(target, draft)[name], prompt, 24, shape=(2, 3),
                                             processors=procs)
            assert tree.tokens == want, (name, procs, "tree")


def test_choices_emit_only_allowed_outputs(big_pair):
    target, draft = big_pair
    choices = [[11, 12, 13], [11, 40], [41, 42, 43, 44], [17]]
    for seed in range(12):
        for drafter in (DraftModel(draft), PromptLookup()):
            out = speculative_generate(target, drafter, [5, 9, 2], 10, k=3, temperature=1.0, seed=seed, stop_ids=[0],
                                       processors=(Choices(choices, stop_ids=[0]),)).tokens
            assert out[-1] == 0 and out[:-1] in choices, out


def test_coupled_rule_with_processors_gives_the_same_text_with_any_drafter(big_pair):
    """The coupled rule's tokens depend on the seed alone (keyed.py), processors included: every drafter gives the
    keyed plain sampler's text."""
    target, draft = big_pair
    procs = (RepetitionPenalty(1.5), NoRepeatNGram(2))
    for seed in range(3):
        want = generate(target, [5, 9, 2], 16, temperature=1.0, seed=seed, keyed=True, processors=procs)
        for name, drafter in drafters_for(target, draft).items():
            got = speculative_generate(target, drafter, [5, 9, 2], 16, k=3, temperature=1.0, seed=seed,
                                       rule="coupled", processors=procs).tokens
            assert got == want, (name, seed)


def test_a_drafter_that_ignores_the_prefix_is_refused_by_name(big_pair):
    """A drafter written before processors, calling warp(logits) without the prefix, fails with the reason."""
    target, draft = big_pair

    class Old(DraftModel):
        def propose(self, tokens, k, warp, draws, keep=None):
            return super().propose(tokens, k, lambda z, prefix=None: warp(z), draws, keep)
    with pytest.raises(TypeError, match="read the tokens before a row"):
        speculative_generate(target, Old(draft), [5, 9, 2], 4, k=2, processors=(RepetitionPenalty(1.3),))
    with pytest.raises(TypeError, match="processors must be logits processors"):
        speculative_generate(target, DraftModel(draft), [5, 9, 2], 4, k=2, processors=(1.3,))


# ---- the command line ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    return chat_model_dir(tmp_path_factory.mktemp("procs") / "model")


def test_cli_greedy_with_a_repetition_penalty_prints_plain_decodings_text(chat_model):
    base = ["generate", "--model", str(chat_model), "--prompt", "a b a b a b", "--max-new-tokens", "24", "--no-stop",
            "--repetition-penalty", "1.3", "--no-compare"]
    code, plain, err = run_cli(base + ["--draft", "none"])
    assert code == 0, err
    for draft in (["--draft", "prompt-lookup", "--k", "3"], ["--draft", "layer-skip", "--tree", "2x2"]):
        code, out, err = run_cli(base + draft)
        assert code == 0, err
        assert out == plain, draft
    assert len(plain) > len("a b a b a b\n") + 20
    assert run_cli(base[:-3] + ["--no-compare", "--draft", "none"])[1] != plain  # the penalty changes the text


def test_cli_choices_print_only_a_choice(chat_model):
    choices = ["alpha", "beta gamma", "delta"]
    for seed in range(4):
        code, out, err = run_cli(["generate", "--model", str(chat_model), "--prompt", "pick", "--chat", "--choices",
                                  "|".join(choices), "--temperature", "1", "--seed", str(seed), "--no-compare",
                                  "--draft", "prompt-lookup", "--k", "2"])
        assert code == 0, err
        assert out.strip() in choices, out


# ---- the slow set: the other rules, K chosen by the policy, and the other drafters, exactly -----------------------

def slow_runs(target, draft, make_eagle):
    """name -> (make a drafter, the loop's keyword arguments, tokens walked)."""
    dynamic = DynamicTree(top_k=2, depth=2, nodes=3)
    return {
        "block rule": (lambda: DraftModel(draft), dict(k=2, rule="block"), 3),
        "k auto": (lambda: DraftModel(draft), dict(fresh=lambda: dict(k=auto_policy())), 3),
        "layer-skip": (lambda: LayerSkip(target, layers=1), dict(k=2), 3),
        "prompt-lookup": (lambda: PromptLookup(max_ngram=1), dict(k=2), 3),
        "eagle chain": (make_eagle, dict(k=2), 3),  # a reduced head: processed on its full-vocabulary q
        "eagle tree": (make_eagle, dict(generate=tree_speculative_generate, shape=(2, 2)), 3),
        "eagle dynamic tree": (make_eagle, dict(generate=tree_speculative_generate, shape=dynamic), 3),
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", ["repetition", "choices"])
@pytest.mark.parametrize("run", ["block rule", "k auto", "layer-skip", "prompt-lookup", "eagle chain", "eagle tree",
                                 "eagle dynamic tree"])
def test_level3_processors_with_the_other_rules_policies_and_drafters(pair, small_eagle, name, run):  # noqa: F811
    target, draft = pair
    make, kw, m = slow_runs(target, draft, small_eagle)[run]
    procs = (PROCESSORS[name](),)
    fresh = kw.pop("fresh", None)
    law, _ = loop_law(target, make, PROMPT, m, V, temperature=1.0, processors=procs,
                      fresh=fresh, **kw)
    np.testing.assert_allclose(law, masked_law(target, PROMPT, m, procs), **EXACT)


def test_a_draft_of_its_own_tokenizer_is_refused_by_name(big_pair):
    """SLEM and TLI draft in their own tokens (drafters/protocol.py: HasOwnTokenizer): a processor reads the target's
    ids, so the run refuses before any work."""
    target, draft = big_pair

    class OwnTokens(DraftModel):
        cross, draft_model, algorithm = None, None, "TLI"

        def summary(self):
            return "a draft of its own tokenizer"
    with pytest.raises(ValueError, match="TLI .* drafts in its own tokens"):
        speculative_generate(target, OwnTokens(draft), [5, 9, 2], 4, k=2, processors=(RepetitionPenalty(1.3),))
    assert speculative_generate(target, OwnTokens(draft), [5, 9, 2], 4, k=2).tokens  # without processors: runs


def test_a_row_with_no_token_allowed_is_an_error_in_speculation_as_in_plain_decoding(big_pair):
    """Settings that leave nothing allowed on a real sequence (the only choice repeats a bigram the n-gram ban
    forbids): plain decoding raises, and so does the speculative loop, at the target row where it happens, even
    past a round's first row (a draft's rows may fall back; the target's may not)."""
    target, draft = big_pair
    procs = (Choices([[7, 7, 7]], stop_ids=[0]), NoRepeatNGram(2))
    with pytest.raises(ValueError, match="allow no token after 2 generated tokens"):
        generate(target, [5, 9, 2], 6, processors=procs)
    for drafter in (DraftModel(draft), PromptLookup()):
        with pytest.raises(ValueError, match="allow no token after 2 generated tokens"):
            speculative_generate(target, drafter, [5, 9, 2], 6, k=3, processors=procs)


def test_a_row_after_a_guess_the_target_forbids_is_never_an_error(big_pair):
    """Prompt lookup guesses 10, 10, 12 (the prompt's own continuation); the choices allow 10 then 11, so the target's
    row after the second 10 forbids nothing it reads, but the row after 10, 10 is left with no token by the n-gram
    ban. That row follows a guess with p = 0, which every rule rejects: it is never read, and speculation gives plain
    decoding's text (bug: the loop raised there, where plain decoding, which never reaches that prefix, went on)."""
    target, draft = big_pair
    prompt, procs = [20, 5, 10, 10, 12, 30, 5], (Choices([[10, 11], [10, 10, 12]], stop_ids=[0]), NoRepeatNGram(3))
    plain = generate(target, prompt, 6, stop_ids=[0], processors=procs)
    assert plain == [10, 11, 0]
    for drafter in (PromptLookup(), DraftModel(draft)):
        assert speculative_generate(target, drafter, prompt, 6, k=3, stop_ids=[0], processors=procs).tokens == plain
        assert tree_speculative_generate(target, drafter, prompt, 6, shape=(2, 3), stop_ids=[0],
                                         processors=procs).tokens == plain
    for seed in range(3):
        out = speculative_generate(target, PromptLookup(), prompt, 6, k=3, stop_ids=[0], processors=procs,
                                   temperature=1.0, seed=seed).tokens
        assert out in ([10, 11, 0], [10, 10, 12, 0])
