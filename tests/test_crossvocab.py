"""Drafts with their own tokenizer (crossvocab.py, slem.py, tli.py): token bytes, TLI's law exactly (level
1), one round of each rule by Monte Carlo (level 2), tiny models with two different tiny tokenizers
(level 3), each with its broken twin; greedy identity, and how a draft directory selects the algorithm.

The tiny target spells text over {a, b, c} with 6 tokens: a, b, c, ab, ba, bc (merges a+b, b+a, b+c), so
"abc" is ab + c, and "a" + "bc" is another split of the same text. One draft is character-level (a, b, c);
the other has c, a, b, ca, cab, bb: "ca" and "cab" and "bb" are not target tokens (TLI cannot propose them;
SLEM re-tokenises them: cab -> c + ab)."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minispec import generate, load_model
from minispec.drafters import DraftModel, make_drafter
from minispec.drafters.crossvocab import CrossVocab, intersection, token_bytes
from minispec.drafters.slem import SLEM, BoundaryKeepingSLEM, exact_match
from minispec.drafters.tli import TLI
from minispec.harness.equivalence import chisquare_gof, prefix_match
from minispec.harness.exact_loop import loop_law
from minispec.model import ModelFormatError
from minispec.model.tiny import tiny_config, write_random_model
from minispec.rejection import accept_reject, overlap, residual
from minispec.sampling import Stream, Warp, sample, warp
from minispec.speculative import speculative_generate

from .helpers import V, exact_three_tokens, exact_two_tokens, three_token_counts

TARGET_VOCAB = {"a": 0, "b": 1, "c": 2, "ab": 3, "ba": 4, "bc": 5}
TARGET_MERGES = [("a", "b"), ("b", "a"), ("b", "c")]
DRAFTS = {"chars": ({"a": 0, "b": 1, "c": 2}, []),
          "bpe": ({"c": 0, "a": 1, "b": 2, "ca": 3, "cab": 4, "bb": 5}, [("c", "a"), ("ca", "b"), ("b", "b")])}
PROMPT = [0, 4, 2]  # a, ba, c
RUNS = 20_000


def write_tokenizer(d, vocab, merges):
    from tokenizers import Tokenizer, models

    Tokenizer(models.BPE(vocab=vocab, merges=merges)).save(str(d / "tokenizer.json"))
    return d


@pytest.fixture(scope="session")
def cross_models(tmp_path_factory):
    """The tiny target (6 tokens) and the two drafts, each directory with its tokenizer.json."""
    d = tmp_path_factory.mktemp("crossvocab")
    small = dict(hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=1)
    target_dir = write_random_model(d / "t", tiny_config(num_hidden_layers=2, vocab_size=V, **small), seed=10, scale=2.0)
    write_tokenizer(target_dir, TARGET_VOCAB, TARGET_MERGES)
    drafts = {}
    for i, (name, (vocab, merges)) in enumerate(DRAFTS.items()):
        dd = write_random_model(d / name, tiny_config(num_hidden_layers=1, vocab_size=len(vocab), **small),
                                seed=20 + i, scale=2.0)
        drafts[name] = write_tokenizer(dd, vocab, merges)
    return load_model(target_dir), drafts


def fresh_drafters(cross_models, name, cls):
    """A function giving a fresh drafter per run (20,000 runs), from the draft and tokenizers read once."""
    target, drafts = cross_models
    model = load_model(drafts[name])
    cross = CrossVocab(target.path, drafts[name], V, model.cfg.vocab_size)
    return lambda: cls(model, cross, V)


# --- token bytes -------------------------------------------------------------------------------------------

def test_token_bytes_of_a_byte_level_and_a_sentencepiece_style_tokenizer(tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = ["def f(x):\n    return x  # café", "naïve über 北京 ok", "hello world, hello there"] * 20
    for kind in ("byte-level", "metaspace"):
        tok = Tokenizer(models.BPE(byte_fallback=kind == "metaspace", unk_token=None))
        if kind == "byte-level":
            tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
            alphabet = pre_tokenizers.ByteLevel.alphabet()
        else:
            tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
            tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
            alphabet = [f"<0x{b:02X}>" for b in range(256)]
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|end|>"], show_progress=False,
                                      initial_alphabet=alphabet if kind == "byte-level" else [])
        tok.train_from_iterator(texts, trainer)
        if kind == "metaspace":  # the byte tokens go into the model's vocabulary, where byte fallback finds them
            tj = json.loads(tok.to_str())
            vocab = tj["model"]["vocab"]
            vocab.update({b: len(vocab) + i for i, b in enumerate(alphabet)})
            tok = Tokenizer.from_str(json.dumps(tj))
        (tmp_path / kind).mkdir()
        tok.save(str(tmp_path / kind / "tokenizer.json"))
        table = token_bytes(tmp_path / kind)
        for text in ("def f(x):\n    return x", "über café 北京 Ω", "hello there<|end|>"):
            ids = tok.encode(text, add_special_tokens=False).ids
            assert b"".join(table[i] for i in ids) == text.encode(), (kind, text)


def test_token_bytes_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(ModelFormatError, match="no tokenizer.json"):
        token_bytes(tmp_path)
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {"a": 0}},
                                                         "added_tokens": []}))
    with pytest.raises(ModelFormatError, match="WordPiece"):
        token_bytes(tmp_path)
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {"a": -3}}, "added_tokens": []}))
    with pytest.raises(ModelFormatError, match="token ids"):
        token_bytes(tmp_path)


def test_token_bytes_refuses_a_malformed_file_by_name(tmp_path):
    """Each part of tokenizer.json is checked on its own: a vocabulary that is not an object, an added token without
    its content (bugs: the checks joined with "and" instead of "or" let either through)."""
    for bad, why in (({"model": {"type": "BPE", "vocab": ["a"]}, "added_tokens": []}, "vocab"),
                     ({"model": {"type": "BPE", "vocab": {"a": 0}}, "added_tokens": {}}, "added_tokens"),
                     ({"model": {"type": "BPE", "vocab": {"a": 0}}, "added_tokens": [{"id": 1}]}, "content")):
        (tmp_path / "tokenizer.json").write_text(json.dumps(bad))
        with pytest.raises(ModelFormatError, match=why):
            token_bytes(tmp_path)


def test_token_ids_are_checked_one_by_one_and_padding_rows_are_blank(tmp_path):
    """One bad id among good ones is refused (bug: any instead of all); a table longer than the model's vocabulary
    is cut where the extra ids are blank, refused where one is a token the model has no row for."""
    from minispec.drafters.crossvocab import fit

    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {"a": 0, "b": -3}},
                                                         "added_tokens": []}))
    with pytest.raises(ModelFormatError, match="token ids"):
        token_bytes(tmp_path)
    for pre, want in (({"type": "Metaspace"}, b" a"), (None, "\u2581a".encode())):  # "▁" is a space only for Metaspace
        (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {"\u2581a": 0}},
                                                             "pre_tokenizer": pre, "added_tokens": []}))
        assert token_bytes(tmp_path) == [want], pre
    assert fit([b"a", b"b", b"", b""], 2, "draft", tmp_path) == [b"a", b"b"]
    assert fit([b"a"], 3, "draft", tmp_path) == [b"a", b"", b""]
    with pytest.raises(ModelFormatError, match="ids up to 2"):
        fit([b"a", b"", b"c"], 2, "draft", tmp_path)


def test_special_ids_are_the_added_tokens_marked_special(tmp_path):
    from minispec.drafters.crossvocab import special_ids

    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {"a": 0}}, "added_tokens": [
        {"id": 1, "content": "<s>", "special": True}, {"id": 2, "content": "x", "special": False},
        {"id": "3", "content": "<e>", "special": True}]}))
    assert special_ids(tmp_path) == {1}


def test_intersection_maps_tokens_spelled_alike():
    shared_draft, shared_target = intersection([b"a", b"b", b"ab", b""], [b"ab", b"x", b"a", b"ba"])
    assert shared_draft.tolist() == [0, 2] and shared_target.tolist() == [2, 0]


# --- level 1: TLI's law, exactly ---------------------------------------------------------------------------

def rule_law(target_row, draft_row):
    """P(first emitted token = t) under Algorithm 1 with one guess x ~ draft_row: q(t) min(1, p(t)/q(t)) +
    P(reject) residual(t) (rejection.py's own residual)."""
    accept = np.where(draft_row > 0, np.minimum(draft_row, target_row), 0.0)
    return accept + (1.0 - overlap(target_row, draft_row)) * residual(target_row, draft_row)


class TLIStub(TLI):
    """TLI's restrict and target_row without a model: the intersection of two byte tables."""

    def __init__(self, target_bytes, draft_bytes):
        from types import SimpleNamespace

        self.vocab = len(target_bytes)
        self.cross = SimpleNamespace(**dict(zip(("shared_draft", "shared_target"), intersection(target_bytes, draft_bytes))))


spellings = st.lists(st.text("abc", min_size=1, max_size=3), min_size=2, max_size=8, unique=True)


@settings(max_examples=200, deadline=None)
@given(spellings, spellings, st.integers(0, 2**32 - 1), st.sampled_from([{}, {"top_k": 2}, {"top_p": 0.7}]),
       st.sampled_from([0.0, 0.5, 1.0, 2.0]))
def test_level1_tli_law_is_the_targets(target_words, draft_words, seed, w, temperature):
    target_bytes = [t.encode() for t in target_words]
    draft_bytes = [t.encode() for t in draft_words]
    tli = TLIStub(target_bytes, draft_bytes)
    if not len(tli.cross.shared_draft):
        return  # nothing to propose: the round is plain decoding
    rng = np.random.default_rng(seed)
    p = warp(rng.standard_normal(len(target_bytes)) * 2, temperature, **w)
    q = tli.target_row(tli.restrict(rng.standard_normal(len(draft_bytes)) * 2, Warp(temperature, **w)))
    assert abs(q.sum() - 1) < 1e-9 and np.all(q[np.setdiff1d(np.arange(len(p)), tli.cross.shared_target)] == 0)
    np.testing.assert_allclose(rule_law(p, q), p, atol=1e-12)


def test_level1_tli_without_renormalising_is_not_the_target():
    """Draft mass 0.5 outside the intersection: the unnormalised q' = (0.4, 0.1) over the shared tokens."""
    tli = TLIStub([b"a", b"b", b"c"], [b"a", b"b", b"zz"])
    full = np.array([0.4, 0.1, 0.5])  # the draft's q over a, b, zz
    p = np.array([0.2, 0.3, 0.5])
    good = tli.target_row(full[tli.cross.shared_draft] / full[tli.cross.shared_draft].sum())
    np.testing.assert_allclose(rule_law(p, good), p, atol=1e-12)
    unnormalised = tli.target_row(full[tli.cross.shared_draft])  # what a forgotten renormalisation reports
    law = good * np.minimum(1, np.divide(p, unnormalised, out=np.ones_like(p), where=unnormalised > 0))
    law += (1 - law.sum()) * residual(p, unnormalised)  # the guess came from ``good``, the rule read ``unnormalised``
    assert np.abs(law - p).max() > 0.05


# --- level 2: one round of each rule, Monte Carlo ----------------------------------------------------------

def unigram_rounds(propose, rule, p, runs, seed=0):
    """Counts of the first two tokens of a text the target writes i.i.d. from ``p`` (a context-free target),
    round after round: propose(tokens, rng) -> (guesses, q rows), then ``rule`` on p rows."""
    counts = np.zeros(V * V)
    rng = np.random.default_rng(seed)
    for _ in range(runs):
        tokens, out = list(PROMPT), []
        while len(out) < 2:
            guesses, rows = propose(tokens, rng)
            n, t = rule(np.tile(p, (len(guesses) + 1, 1)), rows, guesses, rng)
            out += guesses[:n] + [t]
            tokens += guesses[:n] + [t]
        counts[out[0] * V + out[1]] += 1
    return counts


P_UNIGRAM = np.array([0.10, 0.30, 0.15, 0.20, 0.05, 0.20])  # a, b, c, ab, ba, bc


def slem_round(cross, keep_boundary=False):
    """SLEM's proposal with a context-free draft: 3 characters drawn i.i.d., re-tokenised by SLEM.candidates."""
    slem = SLEM.__new__(SLEM)
    slem.cross = cross

    def propose(tokens, rng):
        text = bytes(rng.choice(list(b"abc"), size=3, p=[0.3, 0.5, 0.2]).astype(np.uint8))
        guesses = slem.candidates(tokens, text, ended=keep_boundary)[:2]
        return guesses, np.eye(V)[guesses]
    return propose


@pytest.fixture(scope="session")
def chars_cross(cross_models):
    target, drafts = cross_models
    return CrossVocab(target.path, drafts["chars"], V, 3)


@pytest.mark.parametrize("rule", [pytest.param(accept_reject, marks=pytest.mark.slow), exact_match],
                         ids=["one-hot-rule", "exact-match"])
def test_level2_slem_round(chars_cross, rule):
    counts = unigram_rounds(slem_round(chars_cross), rule, P_UNIGRAM, RUNS)
    chi2, dof, pv = chisquare_gof(counts, np.outer(P_UNIGRAM, P_UNIGRAM).ravel())
    assert pv > 1e-3, (chi2, dof, pv)


def test_level2_slem_trusting_the_boundary_token_fails(chars_cross):
    rule = prefix_match(chars_cross.target_bytes)
    counts = unigram_rounds(slem_round(chars_cross, keep_boundary=True), rule, P_UNIGRAM, RUNS)
    chi2, dof, pv = chisquare_gof(counts, np.outer(P_UNIGRAM, P_UNIGRAM).ravel())
    assert pv < 1e-6, (chi2, dof, pv)


def tli_round(broken=None):
    """TLI's proposal with a context-free draft over the 'bpe' draft vocabulary (c, a, b, ca, cab, bb)."""
    draft_bytes = [b"c", b"a", b"b", b"ca", b"cab", b"bb"]
    tli = TLIStub([t.encode() for t in TARGET_VOCAB], draft_bytes)
    logits = np.log(np.array([0.1, 0.2, 0.25, 0.15, 0.2, 0.1]))
    target_of_first = {d: TARGET_VOCAB[b.decode()[:1]] for d, b in enumerate(draft_bytes)}

    def propose(tokens, rng):
        q = tli.restrict(logits, Warp(1.0))
        if broken == "outside":  # drawn from the whole draft vocabulary (a token outside mapped to its first
            d = sample(warp(logits, 1.0), rng)  # character), while the rule is told q'
            return [target_of_first[d]], tli.target_row(q)[None]
        j = sample(q, rng)
        if broken == "unnormalised":
            q = warp(logits, 1.0)[tli.cross.shared_draft]  # the full softmax's mass on the shared tokens
        return [int(tli.cross.shared_target[j])], tli.target_row(q)[None]
    return propose


@pytest.mark.parametrize("broken", [None, "unnormalised", "outside"])
def test_level2_tli_round(broken):
    counts = unigram_rounds(tli_round(broken), accept_reject, P_UNIGRAM, RUNS)
    chi2, dof, pv = chisquare_gof(counts, np.outer(P_UNIGRAM, P_UNIGRAM).ravel())
    assert (pv > 1e-3) if broken is None else (pv < 1e-6), (broken, chi2, dof, pv)


# --- level 3: tiny models, two tokenizers ------------------------------------------------------------------

class UnnormalisedTLI(TLI):
    """TLI reporting the draft's full softmax on the shared tokens (not renormalised) while sampling from q'."""

    def restrict(self, draft_logits, warp):
        self._full = warp(draft_logits)[self.cross.shared_draft]
        return super().restrict(draft_logits, warp)

    def target_row(self, q):
        return super().target_row(self._full)


L3 = [pytest.param("chars", SLEM, dict(temperature=1.0), 2, id="slem-chars-T=1"),
      pytest.param("bpe", SLEM, dict(temperature=0.7, top_k=4), 2, id="slem-bpe-T=0.7,top_k=4"),
      pytest.param("bpe", TLI, dict(temperature=1.0), 3, id="tli-bpe-T=1"),
      pytest.param("chars", TLI, dict(temperature=1.3, top_p=0.8), 3, id="tli-chars-T=1.3,top_p=0.8")]


def exact_tokens(target, m, **w):
    return (exact_two_tokens if m == 2 else exact_three_tokens)(target, PROMPT, **w)


@pytest.mark.parametrize("name, cls, w, m", L3)
def test_level3_exact_law(cross_models, name, cls, w, m):
    """Level 3, exact (harness/exact_loop.py): the loop with a draft of its own tokenizer, walked over every draw
    (the draft's own tokens included), emits its first m tokens with the target's law. SLEM draws up to 2K + 2 of
    its own tokens a round, so 3 tokens are 194,000 paths (320 s): SLEM is walked for 2 tokens, and
    ``test_level3_monte_carlo_slem_three_tokens`` (slow) samples 3."""
    target = cross_models[0]
    make = fresh_drafters(cross_models, name, cls)
    law, paths = loop_law(target, make, PROMPT, m, V, k=2, **w)
    assert paths > 20
    np.testing.assert_allclose(law, exact_tokens(target, m, **w), rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_level3_monte_carlo_slem_three_tokens(cross_models):
    target = cross_models[0]
    make = fresh_drafters(cross_models, "chars", SLEM)
    runs = [speculative_generate(target, make(), PROMPT, 4, k=2, seed=s, temperature=1.0).stats for s in range(200)]
    assert sum(r.accepted for r in runs) > 0.03 * sum(r.drafted for r in runs)  # guesses are in play
    counts = three_token_counts(target, make, PROMPT, RUNS, temperature=1.0)
    chi2, dof, pv = chisquare_gof(counts, exact_three_tokens(target, PROMPT, temperature=1.0))
    assert pv > 1e-3, (chi2, dof, pv)


def test_level3_exact_catches_a_trusted_boundary_token(cross_models):
    target, drafts = cross_models
    cross = CrossVocab(target.path, drafts["bpe"], V, 6)
    model = load_model(drafts["bpe"])
    law, _ = loop_law(target, lambda: BoundaryKeepingSLEM(model, cross, V), PROMPT, 2, V, k=2, temperature=1.0,
                      rule=prefix_match(cross.target_bytes))
    tv = 0.5 * np.abs(law - exact_two_tokens(target, PROMPT, temperature=1.0)).sum()
    assert tv > 0.01, tv


@pytest.mark.slow
def test_level3_exact_catches_tli_without_renormalising(cross_models):
    target, drafts = cross_models
    cross = CrossVocab(target.path, drafts["bpe"], V, 6)
    model = load_model(drafts["bpe"])
    law, _ = loop_law(target, lambda: UnnormalisedTLI(model, cross, V), PROMPT, 3, V, k=2, temperature=1.0)
    tv = 0.5 * np.abs(law - exact_three_tokens(target, PROMPT, temperature=1.0)).sum()
    assert tv > 0.01, tv


# --- greedy identity, stops, selection ---------------------------------------------------------------------

WORDS = ("the cat sat on the mat while the dog ran to the barn and back again because it was raining "
         "def main(): return sorted(items, key=len) if items else None ")


@pytest.fixture(scope="session")
def bigger_models(tmp_path_factory):
    """A 3-layer target and a 1-layer draft with BPE vocabularies trained on different texts (64 and 48 tokens)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    d = tmp_path_factory.mktemp("crossvocab_big")
    dirs = []
    for name, vocab, text, layers, seed in (("t", 64, WORDS, 3, 1), ("d", 48, WORDS[::-1], 1, 2)):
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_next")
        tok.train_from_iterator([text] * 5, trainers.BpeTrainer(vocab_size=vocab, show_progress=False))
        out = write_random_model(d / name, tiny_config(num_hidden_layers=layers, vocab_size=tok.get_vocab_size()), seed=seed)
        tok.save(str(out / "tokenizer.json"))
        dirs.append(out)
    return load_model(dirs[0]), dirs[1]


@pytest.fixture(scope="session")
def renumbered_draft(tmp_path_factory, bigger_models):
    """The target itself under another tokenizer: the same tokens and merges with their ids permuted, and the
    embedding and head rows permuted alike. Greedy, it agrees with the target on every token, so a round
    should accept most guesses: the translation in both directions is what is tested."""
    from minispec.model.safetensors_io import read_safetensors, write_safetensors

    target = bigger_models[0]
    d = tmp_path_factory.mktemp("renumbered")
    perm = np.random.default_rng(5).permutation(target.cfg.vocab_size)  # target id i -> draft id perm[i]
    tj = json.loads((target.path / "tokenizer.json").read_text())
    tj["model"]["vocab"] = {tok: int(perm[i]) for tok, i in tj["model"]["vocab"].items()}
    (d / "tokenizer.json").write_text(json.dumps(tj))
    (d / "config.json").write_text((target.path / "config.json").read_text())
    tensors = read_safetensors(target.path / "model.safetensors")
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        rows = np.empty_like(tensors[name])
        rows[perm] = tensors[name]
        tensors[name] = rows
    write_safetensors(d / "model.safetensors", tensors)
    return d


@pytest.mark.parametrize("algorithm", ["slem", "tli"])
@pytest.mark.parametrize("k", [1, 3, 5, "auto"])
def test_greedy_equals_plain(bigger_models, algorithm, k):
    target, draft_dir = bigger_models
    prompt = [3, 7, 1, 9]
    want = generate(target, prompt, 40)
    got = speculative_generate(target, make_drafter(f"{algorithm}:{draft_dir}", target), prompt, 40, k=k)
    assert got.tokens == want
    if k == 3:
        assert got.stats.drafted > 0  # the drafter did propose


@pytest.mark.parametrize("algorithm", ["slem", "tli"])
@pytest.mark.parametrize("k", [1, 4])
def test_the_target_under_another_tokenizer_is_accepted(bigger_models, renumbered_draft, algorithm, k):
    target = bigger_models[0]
    prompt = [3, 7, 1, 9]
    drafter = make_drafter(f"{algorithm}:{renumbered_draft}", target)
    assert len(drafter.cross.shared_draft) == target.cfg.vocab_size  # every token, under another id
    got = speculative_generate(target, drafter, prompt, 40, k=k)
    assert got.tokens == generate(target, prompt, 40)
    assert got.stats.accepted >= 0.8 * got.stats.drafted > 0, got.stats  # guesses are the target's own
    if algorithm == "tli":  # at T = 1, q' = p wherever the two read the same tokens: min(1, p/q') = 1. The draft
        # reads the text in its tokenizer's own split; where the target sampled another split of the same text
        # (random tiny models often do), their contexts differ and so do q' and p. (SLEM keeps a guess only when
        # the target draws that very token: rarely, at T = 1 on these near-uniform models.)
        sampled = speculative_generate(target, drafter, prompt, 40, k=k, temperature=1.0, seed=3)
        assert sampled.stats.accepted >= 0.3 * sampled.stats.drafted > 0, sampled.stats


def test_tli_drafting_for_the_target_itself_proposes_the_targets_greedy_continuation(bigger_models, renumbered_draft):
    """The target under another numbering, greedy, reading a prompt in its own canonical split: its k guesses are the
    target's next k greedy tokens, each drafted after the one before (bug: a draft step skipped, so a guess is drawn
    from the row of the position before)."""

    target = bigger_models[0]
    drafter = make_drafter(f"tli:{renumbered_draft}", target)
    prompt = drafter.cross.target_ids("the cat sat on the mat and")
    for k in (1, 2, 4, 6):
        guesses, rows = drafter.propose(prompt, k, Warp(0.0), Stream(np.random.PCG64(0)))
        assert guesses == generate(target, prompt, k), k
        assert rows.shape == (k, target.cfg.vocab_size) and np.allclose(rows.sum(axis=1), 1.0)


def test_room_is_what_the_drafts_context_has_left(bigger_models):
    """Guesses that fit in the draft's context: none once its reading of the text fills it (bug: one more)."""
    target, draft_dir = bigger_models
    tli = make_drafter(f"tli:{draft_dir}", target)
    limit = tli.cfg.max_position_embeddings
    words = tli.cross.target_ids(WORDS * (1 + 4 * limit // len(WORDS)))
    full = next(n for n in range(1, len(words)) if len(tli.read(words[:n]) or []) >= limit - 1)
    assert tli.room(words[:full]) == 0
    assert tli.room(words[:3]) == limit - len(tli.read(words[:3])) - 1 > 0
    # a text that ends inside a character (CrossVocab.text: None) cannot be read yet: no room, no guesses (bugs: its
    # draft ids asked for anyway)
    for drafter in (tli, make_drafter(f"slem:{draft_dir}", target)):
        drafter.cross.text = lambda tokens: None
        assert drafter.read(words[:4]) is None and drafter.room(words[:4]) == 0  # (words[:3] is memoised)
        assert drafter.propose(words[:5], 3, Warp(1.0), Stream(np.random.PCG64(0)))[0] == []


def test_a_tokenizer_without_added_tokens(bigger_models, tmp_path):
    """"added_tokens" may be absent from a tokenizer.json: no special tokens then, and the pieces read as before (bug:
    the missing list read as None)."""
    from minispec.drafters.crossvocab import special_ids

    target, draft_dir = bigger_models
    tj = json.loads((draft_dir / "tokenizer.json").read_text())
    tj.pop("added_tokens", None)
    (tmp_path / "tokenizer.json").write_text(json.dumps(tj))
    assert special_ids(tmp_path) == set()
    plain = token_bytes(tmp_path)
    assert plain == token_bytes(draft_dir)[: len(plain)] and len(plain) > 10


@pytest.mark.parametrize("algorithm", ["slem", "tli"])
def test_a_stop_token_ends_the_run(bigger_models, algorithm):
    target, draft_dir = bigger_models
    plain = generate(target, [3, 7, 1, 9], 30)
    stop = plain[12]
    want = plain[: plain.index(stop) + 1]
    got = speculative_generate(target, make_drafter(f"{algorithm}:{draft_dir}", target), [3, 7, 1, 9], 30, k=4,
                               stop_ids=[stop]).tokens
    assert got == want


def test_a_draft_with_another_tokenizer_selects_tli_or_slem(cross_models, tmp_path):
    target, drafts = cross_models
    d = make_drafter(str(drafts["chars"]), target)  # a, b, c: all three are target tokens
    assert isinstance(d, TLI) and d.name.startswith("tli:")
    d = make_drafter(str(drafts["bpe"]), target)  # 3 of its 6 tokens are target tokens: TLI
    assert isinstance(d, TLI)
    assert isinstance(make_drafter(f"slem:{drafts['bpe']}", target), SLEM)
    with pytest.raises(ValueError, match="drafts chains only"):
        from minispec.speculative import tree_speculative_generate
        tree_speculative_generate(target, d, PROMPT, 4, shape=(2, 2))
    far = write_random_model(tmp_path / "far", tiny_config(num_hidden_layers=1, vocab_size=4))
    write_tokenizer(far, {"x": 0, "y": 1, "z": 2, "w": 3}, [])
    with pytest.raises(ValueError, match="TLI has nothing to propose"):
        make_drafter(f"tli:{far}", target)
    assert isinstance(make_drafter(f"slem:{far}", target), SLEM)  # it can always try: the target checks every guess
    assert isinstance(make_drafter(str(far), target), SLEM)  # no shared token: SLEM by default
    with pytest.raises(ValueError, match="not a model directory"):
        make_drafter(f"slem:{tmp_path / 'missing'}", target)


def test_a_draft_with_the_targets_tokenizer_stays_a_draft_model(cross_models, tmp_path):
    target, _ = cross_models
    same = write_random_model(tmp_path / "same", tiny_config(num_hidden_layers=1, vocab_size=V))
    write_tokenizer(same, TARGET_VOCAB, TARGET_MERGES)
    assert isinstance(make_drafter(str(same), target), DraftModel)


# --- the benchmark -----------------------------------------------------------------------------------------

def test_accepted_chars_counts_the_accepted_guesses_of_each_round():
    from minispec.harness.crossvocab_eval import accepted_chars

    token_bytes = [b"", b"a", b"bb", b"ccc", b"dddd", b"eeeee"]
    # round 1 accepted 1 guess (token 1) then emitted 2; round 2 accepted 2 (tokens 3, 4) then emitted 5
    assert accepted_chars([1, 2, 3, 4, 5], [(2, 1), (3, 2)], token_bytes) == 1 + 3 + 4


def test_bench_vocab_end_to_end(bigger_models):
    from minispec.harness.crossvocab_eval import format_report, run

    from .helpers import ToyTokenizer

    target, draft_dir = bigger_models
    drafters = {d.name: d for d in (make_drafter(f"{a}:{draft_dir}", target) for a in ("slem", "tli"))}
    res = run(target, drafters, ToyTokenizer(), token_bytes(target.path), (1, 2), ("greedy", "T=1"), 1, 8,
              log=lambda m: None)
    assert len(res["rows"]) == 2 * 2 * 2 * 3  # drafters x K x settings x prompt sets
    assert all(np.isfinite(r["accepted_per_pass"]) and r["speedup"] > 0 for r in res["rows"])
    assert set(res["c_in_runs"]) == set(drafters) and all(v > 0 for v in res["c"].values())
    report = format_report(res)
    assert "| slem:d | 2 |" in report and "not run" in report


def test_level4_acceptance_statistic_reads_tlis_q(bigger_models, renumbered_draft):
    """check.per_token_values' acceptance with TLI: min(1, q'(y)/p(y)) at each emitted token, from TLI's teacher-forced
    q'. The target itself under another tokenizer gives q' = p where the two read the same split: near 1."""
    from minispec.harness.check import per_token_values

    target, draft_dir = bigger_models
    prompt = [3, 7, 1, 9]
    run = generate(target, prompt, 24, temperature=1.0, seed=0)
    same = per_token_values(target, make_drafter(f"tli:{renumbered_draft}", target), prompt, run)["acceptance"]
    other = per_token_values(target, make_drafter(f"tli:{draft_dir}", target), prompt, run)["acceptance"]
    assert same.shape == other.shape == (24,)
    assert same.mean() > 0.7 and other.mean() < same.mean(), (same, other)


def test_slem_has_cache_room_for_every_step_of_a_long_proposal(tmp_path):
    """SLEM may step its draft 2K + 1 times for K guesses (a draft whose tokens are finer than the target's): the
    cache has room for them all (bug: 64 steps were made room for, and K = 32 overflowed it)."""
    draft = load_model(write_random_model(tmp_path / "d", tiny_config(num_hidden_layers=1, max_position_embeddings=4096),
                                          seed=2))
    letters = "ABCDEFGH"

    class Pairs:  # target tokens: the 64 two-letter pairs; draft tokens: single letters (id % 8)
        target_bytes = [(letters[i // 8] + letters[i % 8]).encode() for i in range(64)]
        draft_bytes = [letters[i % 8].encode() for i in range(64)]
        draft_blank, draft_specials = np.zeros(64, bool), set()

        def text(self, ids):
            return b"".join(self.target_bytes[int(i)] for i in ids).decode()

        def draft_ids(self, s):
            return [letters.index(c) for c in s]

        def target_ids(self, s):
            return [letters.index(s[j]) * 8 + letters.index(s[j + 1]) for j in range(0, len(s) - 1, 2)]

    slem, rng = SLEM(draft, Pairs(), 64), Stream(np.random.PCG64(0))
    slem.propose(list(range(5)), 32, Warp(1.0), rng)
    tokens = [i % 64 for i in range(106)]
    assert slem.room(tokens) >= 32
    guesses, rows = slem.propose(tokens, 32, Warp(1.0), rng)
    assert 1 <= len(guesses) <= 32 and rows.shape == (len(guesses), 64)
