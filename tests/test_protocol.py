"""The drafter protocol (drafters/protocol.py): every shipped drafter declares what it can do, and two drafter kinds
that minispec has never seen, reading the target's features, are driven and timed through their capabilities alone:
``EchoFeatures`` (one guess) and ``Medusa`` (two heads, trees), the latter with fixed K, ``k="auto"``, trees,
``minispec check`` and ``minispec bench``, registered as a kind of ``--draft`` from this file."""

import json

import numpy as np
import pytest

from minispec.drafters import (
    CAPABILITIES,
    Drafter,
    DraftModel,
    DraftsText,
    HasFirstGuessRows,
    HasModel,
    HasOwnTokenizer,
    HasRoom,
    LayerSkip,
    PromptLookup,
    ProposesTrees,
    ReadsFeatures,
    TimesItself,
    TimesItsTreeLevels,
    has,
    register_drafter,
    unregister_drafter,
)
from minispec.generate import generate
from minispec.model.transformer import linear
from minispec.policy import timing
from minispec.sampling import top_probability
from minispec.speculative import speculative_generate, tree_speculative_generate
from minispec.tree import Tree, add_children

from .helpers import chat_model_dir, run_cli


def test_shipped_drafters_declare_their_capabilities(small_pair):
    target, draft = small_pair
    have = {type(d).__name__: {c.__name__ for c in CAPABILITIES if has(d, c)}
            for d in (DraftModel(draft), LayerSkip(target, 1), PromptLookup())}
    assert have["DraftModel"] >= {"Drafter", "HasModel", "ProposesTrees"} and "ReadsFeatures" not in have["DraftModel"]
    assert "HasFirstGuessRows" in have["DraftModel"] and not have["DraftModel"] & {"HasOwnTokenizer", "DraftsText"}
    assert "Drafter" in have["PromptLookup"] and not have["PromptLookup"] & {"HasModel", "TimesItself", "ReadsFeatures",
                                                                              "HasFirstGuessRows"}


def test_has_asks_for_capabilities_only(small_pair):
    with pytest.raises(TypeError, match="ask for a capability"):
        has(DraftModel(small_pair[1]), DraftModel)


class EchoFeatures:
    """A drafter kind minispec has never seen: it reads the target's features (the top layer's, after the norm)
    and guesses the target's own greedy token from the last one, through the target's head. It is not EAGLE."""

    def __init__(self, target):
        self.target, self.name, self.forwards, self.seen = target, "echo-features", 0, 0
        self.kernel = target.kernel  # the kernel its pass through the target's head runs on
        self.features = None

    def context(self, tokens) -> int:
        return 0

    def see_features(self, tokens, features) -> None:
        self.seen += 1
        self.features = np.asarray(features)[-1:]  # [1, D], the last position's

    def propose(self, tokens, k, warp, draws, keep=None):
        if self.features is None or k < 1:
            return [], np.zeros((0, self.target.cfg.vocab_size), np.float32)
        logits = self.features @ np.asarray(self.target.lm_head)  # [1, V]
        q = np.zeros((1, self.target.cfg.vocab_size), np.float32)
        guess = int(np.argmax(logits[0]))
        q[0, guess] = 1.0  # deterministic: one-hot, the distribution the guess was drawn from
        return [guess], q

    def measure_costs(self, clock, repeats: int) -> tuple[float, float]:  # its own cost hook
        self.timed = getattr(self, "timed", 0) + 1
        return 1e-5, 1e-6


def test_a_new_feature_drafter_is_driven_and_timed_through_its_capabilities(small_pair):
    target, _ = small_pair
    d = EchoFeatures(target)
    assert isinstance(d, Drafter) and isinstance(d, ReadsFeatures) and isinstance(d, TimesItself)
    res = speculative_generate(target, d, [1, 2, 3], 12, k=1)
    assert res.tokens == generate(target, [1, 2, 3], 12)  # greedy: the target's own tokens
    assert d.seen > 0 and res.stats.drafted > 0  # the loop handed it the target's features, and it drafted
    assert timing.self_timed_costs(d)(3) == (1e-5, 1e-6) and d.timed == 1  # timed by its own hook


@pytest.mark.parametrize("k", [1, "auto"])
def test_the_new_drafter_under_fixed_and_automatic_k(small_pair, k):
    target, _ = small_pair
    res = speculative_generate(target, EchoFeatures(target), [1, 2, 3], 10, k=k, temperature=1.0, seed=2)
    assert len(res.tokens) == 10
    if k == 1:  # a fixed K drafts every round it can; k="auto" drafts only where its clock says guesses pay
        assert res.stats.drafted > 0


def silu(x):
    return x / (1.0 + np.exp(-x))


class Medusa:
    """A drafter kind minispec does not ship: two Medusa heads (Cai et al. 2024, arXiv 2401.10774) on the target's
    features. The loop hands over the features of the tokens the target's cache kept, so at a proposal after
    tokens x_0..x_{L-1} the last known one is f_{L-2}, whose own next token x_{L-1} the target already chose; head j
    (j = 1, 2) guesses x_{L-1+j} from it: logits_j = lm_head(f + SiLU(f W_j)), the paper's residual block with the
    target's head. The guesses do not condition on each other, so q_2 is the same whatever x_L was drawn: a valid
    q for the rule. Trees: the top ``width`` (or ``width`` draws without replacement) of head 1, each followed by
    one draw of head 2. Random heads: the acceptance is low, and every guess is still checked."""

    def __init__(self, target, seed: int = 0):
        D = target.cfg.hidden_size
        rng = np.random.default_rng(seed)
        self.target, self.forwards, self.vocab = target, 0, target.cfg.vocab_size
        self.name = f"medusa:{target.name}:{seed}"  # names its weights: its timings are cached under it
        self.w = [rng.standard_normal((D, D)).astype(np.float32) / np.sqrt(D) for _ in range(2)]  # W_1, W_2: [D, D]
        self.feats, self.ftokens = np.zeros((0, D), np.float32), []  # [n, D]: f_0..f_{n-1} of x_0..x_{n-1}
        self.timed = 0  # calls of its cost hook
        self.kernel = target.kernel  # its heads run through the target's head (TimesItself keys its timings by it)

    def context(self, tokens) -> int:
        return 0

    def see_features(self, tokens, features) -> None:
        start = len(tokens) - len(features)
        if self.ftokens[:start] != [int(t) for t in tokens[:start]]:  # features of another text: start again
            self.feats, self.ftokens = self.feats[:0], []
            return
        self.feats = np.concatenate([self.feats[:start], np.asarray(features, np.float32)])  # [len(tokens), D]
        self.ftokens = [int(t) for t in tokens]

    def logits(self, j: int, f) -> np.ndarray:  # head j (0 or 1): f [T, D] -> [T, V]
        return linear(f + silu(f @ self.w[j]), self.target.lm_head)

    def both_heads(self, f) -> np.ndarray:  # f [1, D] -> [2, V]: heads 1 and 2 in one pass of the target's head
        return linear(np.concatenate([f + silu(f @ w) for w in self.w]), self.target.lm_head)

    def last_feature(self, tokens):
        n = len(tokens) - 1  # features needed: f_0..f_{n-1}, of tokens[:n]
        if n < 1 or len(self.ftokens) < n or self.ftokens[:n] != [int(t) for t in tokens[:n]]:
            return None
        return self.feats[n - 1: n]  # [1, D]: f_{L-2}

    def propose(self, tokens, k, warp, draws, keep=None):
        f = self.last_feature(tokens) if k > 0 else None
        draft_tokens, draft_probs, reach = [], [], 1.0
        heads = self.both_heads(f) if f is not None else ()  # [2, V]
        for j in range(min(k, len(heads))):
            logits = heads[j]  # [V]
            reach *= top_probability(logits)
            if keep is not None and not keep(j + 1, reach):
                break
            q = warp(logits)  # [V]
            draft_tokens.append(draws.draw(q, j))
            draft_probs.append(q)
        self.forwards += bool(draft_tokens)
        return draft_tokens, np.array(draft_probs).reshape(len(draft_tokens), self.vocab)

    def propose_tree(self, tokens, width, depth, warp, draws) -> Tree:
        tree, f = Tree(), self.last_feature(tokens)
        if f is None:
            return tree
        first, second = self.both_heads(f)  # [V] each
        level = add_children(tree, 0, first, width, warp, draws)
        for node in level if depth > 1 else []:
            add_children(tree, node, second, 1, warp, draws, 1)
        return tree

    def first_guess_rows(self, tokens, start, warp, features=None):  # head 1 after every prefix, teacher-forced
        f = np.asarray(features, np.float32)[max(0, start - 2): len(tokens) - 2]  # f_{m-2} for m = start..len-1
        rows = warp(self.logits(0, f)) if len(f) else np.zeros((0, self.vocab))
        uniform = np.full((len(tokens) - start - len(rows), self.vocab), 1.0 / self.vocab)  # m < 2: no feature yet
        return np.concatenate([uniform, rows])

    def measure_costs(self, clock, repeats: int) -> tuple[float, float]:  # seconds per guess, per token caught up
        f = np.ones((1, self.target.cfg.hidden_size), np.float32)
        self.timed, times = self.timed + 1, []
        for _ in range(repeats + 1):  # the first is a warm-up
            t0 = clock()
            self.both_heads(f)
            times.append((clock() - t0) / 2)
        return float(np.median(times[1:])), 0.0  # it reads the target's features: nothing to catch up

    def level_times(self, clock, widths, repeats: int) -> dict[int, float]:
        per_head = self.measure_costs(clock, repeats)[0]
        return {w: per_head for w in widths}  # a level of any width costs one head over f_{L-2}


PROMPT = [5, 9, 2, 7]


def test_medusa_declares_what_it_can_do(small_pair):
    d = Medusa(small_pair[0])
    assert all(has(d, c) for c in (Drafter, ReadsFeatures, ProposesTrees, HasFirstGuessRows, TimesItself,
                                   TimesItsTreeLevels))
    assert not any(has(d, c) for c in (HasModel, HasOwnTokenizer, DraftsText, HasRoom))


@pytest.mark.parametrize("k", [2, 4, "auto"])
def test_medusa_with_fixed_and_automatic_k(big_pair, k):
    target, _ = big_pair
    d = Medusa(target)
    res = speculative_generate(target, d, PROMPT, 24, k=k)
    assert res.tokens == generate(target, PROMPT, 24)  # greedy: the target's own tokens
    sampled = speculative_generate(target, Medusa(target), PROMPT, 24, k=k, temperature=1.0, seed=3)
    assert len(sampled.tokens) == 24
    if k != "auto":  # a fixed K drafts every round; k="auto" drafts only where its clock says guesses pay
        assert res.stats.drafted > 0 and d.forwards > 0 and sampled.stats.drafted > 0


@pytest.mark.parametrize("shape", [(3, 2), (2, 4), "auto"])
def test_medusa_trees(big_pair, shape):
    target, _ = big_pair
    res = tree_speculative_generate(target, Medusa(target), PROMPT, 24, shape=shape)
    assert res.tokens == generate(target, PROMPT, 24)
    assert res.stats.drafted > 0 or shape == "auto"  # "auto" drafts only where its clock says a tree pays
    sampled = tree_speculative_generate(target, Medusa(target), PROMPT, 24, shape=shape, temperature=1.0, seed=3)
    assert len(sampled.tokens) == 24


@pytest.fixture
def medusa_kind():
    """``--draft medusa`` builds a Medusa; the list holds each one built."""
    made = []
    register_drafter("medusa", lambda target, arg: made.append(Medusa(target)) or made[-1])
    yield made
    unregister_drafter("medusa")


@pytest.fixture(scope="module")
def chat_target(tmp_path_factory):
    return chat_model_dir(tmp_path_factory.mktemp("medusa") / "target", hidden_size=32)


@pytest.mark.slow  # 19 s: the default set stays under 6 minutes
def test_minispec_check_runs_medusa(chat_target, medusa_kind, tmp_path):
    """Level 4 through the command, with 16 paired runs (seeded): the real rule is not told apart from plain sampling,
    the planted residual bug is (Medusa's random heads leave much to resample), greedy output is the
    target's for its chains and its trees, and the command exits 0."""
    out = tmp_path / "check.json"
    code, stdout, err = run_cli(["check", "--model", str(chat_target), "--draft", "medusa", "--quick", "--runs", "16",
                                 "--json", str(out)])
    res = json.loads(out.read_text())
    assert res["sampling"]["drafter"].startswith("medusa:") and "acceptance" in res["sampling"]  # its first-guess rows read
    assert res["passed"] == dict(sampling=True, broken_rule_caught=True, greedy=True), stdout
    name = res["sampling"]["drafter"]
    assert {name, f"{name}, tree 3x3"} <= {g["drafter"] for g in res["greedy"]}  # its chains and its trees
    assert all(g["identical"] == g["prompts"] for g in res["greedy"])
    assert code == 0 and "PASS  T=1, the real rule" in stdout


def test_minispec_bench_runs_medusa(chat_target, medusa_kind, tmp_path):
    out = tmp_path / "auto.json"
    code, stdout, err = run_cli(["bench", "auto", "--model", str(chat_target), "--draft", "medusa", "--prompts", "1",
                                 "--tokens", "12", "--repeats", "1", "--json", str(out)])
    assert code == 0, err
    row, = json.loads(out.read_text())["drafters"].values()
    assert set(row["speedup"]) == {"chat", "code", "grounded"}
    assert len(medusa_kind) > 1  # a fresh one before each timed run (measure.alternate)
    assert any(m.timed > 0 for m in medusa_kind)  # k=auto's cost model timed it by its own hook (its random heads need not pay)


def test_docs_drafters_table_matches_the_shipped_drafters():
    """docs/drafters.md's table of the shipped drafters' capabilities, against ``has`` on each one (real files)."""
    from pathlib import Path

    from minispec import load_model
    from minispec.drafters import make_drafter

    from .helpers import TARGET_DIR

    root = Path(__file__).resolve().parent.parent
    if not (TARGET_DIR / "model.safetensors").exists():
        from minispec.recipes.fetch import fetch_smollm2

        fetch_smollm2(TARGET_DIR, progress=False, log=lambda m: None)
    target = load_model(TARGET_DIR)
    doc = (root / "docs" / "drafters.md").read_text()
    table = doc[doc.index("## The shipped drafters"):doc.index("## A new kind")]
    rows = {cells[0].strip("` "): {c.strip("` ") for c in cells[1].split(",")}
            for line in table.splitlines() if line.startswith("| `")
            for cells in [line.strip("|").split("|")]}
    specs = {"DraftModel": root / "weights" / "smoldraft-3l-192", "LayerSkip": "layer-skip",
             "PromptLookup": "prompt-lookup", "Eagle": root / "weights" / "eagle-smollm2-135m",
             "TLI": f"tli:{root / 'weights' / 'bpe8k-draft-4l-384'}", "SLEM": f"slem:{root / 'weights' / 'bpe8k-draft-4l-384'}"}
    assert set(rows) == set(specs)
    for kind, spec in specs.items():
        d = make_drafter(str(spec), target)
        assert type(d).__name__ == kind
        assert {c.__name__ for c in CAPABILITIES if has(d, c)} - {"Drafter"} == rows[kind], kind
    names = {c.__name__ for c in CAPABILITIES} - {"Drafter"}
    assert all(f"| `{n}` |" in doc for n in names)  # every capability described
