"""Seeing speculation happen: the trace records every round without changing the run; --show colours the text
(plain-text marks without a terminal); the HTML page renders in a real browser (Chromium, where installed)."""

import io
import json
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from minispec import DraftModel, PromptLookup, speculative_generate, tree_speculative_generate
from minispec.trace import Trace, check_trace_path, write_trace
from minispec.trace.show import ShowStream

from .helpers import chat_model_dir, run_cli

PROMPT = [3, 17, 5, 9, 3, 17, 5]


@pytest.mark.parametrize("how", [dict(temperature=0.0), dict(temperature=1.0, seed=4),
                                 dict(temperature=1.0, seed=4, rule="block")], ids=["greedy", "seeded", "block"])
def test_tracing_does_not_change_the_output(big_pair, how):
    target, draft = big_pair
    plain = speculative_generate(target, DraftModel(draft), PROMPT, 30, k=3, **how)
    trace = Trace()
    traced = speculative_generate(target, DraftModel(draft), PROMPT, 30, k=3, trace=trace, **how)
    assert traced.tokens == plain.tokens
    assert trace.tokens() == traced.tokens and len(trace.rounds) == traced.stats.rounds
    assert sum(r.accepted for r in trace.rounds) == traced.stats.accepted


def test_each_rounds_kept_count_is_the_rules_decision(big_pair):
    """Token-wise: the guesses before the first draw above min(1, p/q); block: the last i whose draw is <= h_i."""
    target, draft = big_pair
    for rule in ("token", "block"):
        trace = Trace()
        speculative_generate(target, DraftModel(draft), PROMPT, 40, k=4, temperature=1.0, seed=2, rule=rule, trace=trace)
        drafting = [r for r in trace.rounds if r.k]
        assert drafting and any(0 < r.accepted < r.k for r in drafting)
        for r in drafting:
            if rule == "token":
                n = next((i for i, (u, a) in enumerate(zip(r.draws, r.accept)) if not u < a), r.k)
            else:
                n = max([i + 1 for i, (u, h) in enumerate(zip(r.draws, r.accept)) if u <= h], default=0)
            assert n == r.accepted, (rule, r)
            assert r.next_kind == ("bonus" if n == r.k else "correction")
            assert r.kinds()[: len(r.emitted)] == (["kept"] * n + [r.next_kind])[: len(r.emitted)]
            if n < r.k:
                assert r.residual_top and abs(sum(m for _, m in r.residual_top)) <= 1 + 1e-9


def test_the_rule_is_explained_by_what_it_declares_not_by_its_name(big_pair):
    """A token-wise rule named block_* is explained token-wise; block verification behind an anonymous lambda that
    declares itself joint (rejection.declares) is explained as block, its thresholds h_i and its weighted residual;
    the same lambda declaring nothing is "undeclared", its draws recorded and no residual claimed for it."""
    from minispec.rejection import accept_reject, block_verify, declares

    target, draft = big_pair

    @declares(joint=False)
    def block_lookalike(target_probs, draft_probs, draft_tokens, rng):  # token-wise, whatever its name says
        return accept_reject(target_probs, draft_probs, draft_tokens, rng)

    hidden_block = declares(joint=True)(lambda tp, dp, dt, rng: block_verify(tp, dp, dt, rng))
    undeclared = lambda tp, dp, dt, rng: block_verify(tp, dp, dt, rng)  # noqa: E731
    assert hidden_block.__name__ == undeclared.__name__ == "<lambda>"

    def traced(rule):
        trace = Trace()
        res = speculative_generate(target, DraftModel(draft), PROMPT, 40, k=4, temperature=1.0, seed=2, rule=rule,
                                   trace=trace)
        assert trace.tokens() == res.tokens
        return [r for r in trace.rounds if r.k]

    for rule, kind, same_as in ((block_lookalike, "token", "token"), (hidden_block, "block", "block"),
                                (undeclared, "undeclared", "block")):
        rounds, reference = traced(rule), traced(same_as)
        assert {r.rule for r in rounds} == {kind}, rule
        assert [(r.accepted, r.accept, r.draws) for r in rounds] == [(r.accepted, r.accept, r.draws) for r in reference]
        rejected = [(r, ref) for r, ref in zip(rounds, reference) if r.accepted < r.k]
        assert rejected
        for r, ref in rejected:
            assert r.residual_top == ([] if kind == "undeclared" else ref.residual_top)
    assert any(0 < r.accepted < r.k and r.residual_top != ref.residual_top
               for r, ref in zip(traced("token"), traced("block")))  # the two residuals differ on this run


def test_a_tree_and_a_plain_round_are_traced(big_pair):
    target, draft = big_pair
    trace = Trace()
    res = tree_speculative_generate(target, DraftModel(draft), PROMPT, 20, shape=(2, 2), trace=trace)
    assert trace.tokens() == res.tokens and all(r.rule == "tree" for r in trace.rounds)
    trace = Trace()
    res = speculative_generate(target, PromptLookup(), [1, 2, 3, 4, 5, 6], 10, k=0, trace=trace)
    assert trace.tokens() == res.tokens and {k for r in trace.rounds for k in r.kinds()} == {"plain"}


def test_json_rounds_add_up_and_a_bad_path_is_refused(big_pair, tmp_path):
    target, draft = big_pair
    trace = Trace()
    res = speculative_generate(target, DraftModel(draft), PROMPT, 25, k=3, temperature=1.0, seed=1, trace=trace)
    f = write_trace(trace, tmp_path / "t.json", decode=lambda t: f"<{t}>", drafter="d")
    data = json.loads(f.read_text())
    assert [t for r in data["rounds"] for t in r["emitted"]] == res.tokens
    assert data["summary"]["tokens"] == 25 and data["summary"]["target_passes"] == res.stats.rounds
    assert all(len(r["kinds"]) == len(r["emitted"]) == len(r["emitted_text"]) for r in data["rounds"])
    with pytest.raises(ValueError, match="must end in .json"):
        check_trace_path(tmp_path / "t.txt")
    with pytest.raises(ValueError, match="does not exist"):
        check_trace_path(tmp_path / "nowhere" / "t.html")


def test_the_pages_data_cannot_end_its_script_and_its_title_is_escaped():
    """Text from the run (a prompt, a token, a drafter's name) cannot break the page: its JSON holds no "<" (so neither
    "</script>" nor "<!-- <script>" can end or hide the element) and reads back the same; the title is escaped."""
    from minispec.trace.page import html_page

    data = {"summary": {"prompt": "<!-- <script> </script> a & b"}, "rounds": []}
    page = html_page(data, title="draft <b>")
    body = page.split('id="trace-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in body and json.loads(body) == data
    assert "<title>draft &lt;b&gt;</title>" in page and "<h1>draft &lt;b&gt;</h1>" in page


class FakeRound:
    def __init__(self, emitted, kinds):
        self.emitted, self._kinds = emitted, kinds

    def kinds(self):
        return self._kinds


class CharTokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(ord("a") + i) for i in ids)


def test_show_marks_each_token_by_its_origin_with_and_without_colour():
    out = io.StringIO()
    show = ShowStream(CharTokenizer(), out, colour=False)
    show(FakeRound([0, 1, 2], ["kept", "kept", "correction"]))
    show(FakeRound([3], ["plain"]))
    show(FakeRound([4, 5], ["kept", "bonus"]))
    assert out.getvalue() == "[ab]*cd[e]+f"
    out = io.StringIO()
    ShowStream(CharTokenizer(), out, colour=True)(FakeRound([0, 1], ["kept", "correction"]))
    assert out.getvalue() == "\x1b[32ma\x1b[0m\x1b[31mb\x1b[0m"


def test_generate_show_and_trace_from_the_cli(tmp_path, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    model_dir = chat_model_dir(tmp_path / "model")
    page = tmp_path / "run.html"
    argv = ["generate", "--model", str(model_dir), "--prompt", "a b a b a b", "--draft", "prompt-lookup", "--k", "3",
            "--max-new-tokens", "12", "--no-stop", "--no-compare", "--temperature", "1.0"]
    code, plain_out, err = run_cli(argv)
    assert code == 0, err
    code, out, err = run_cli(argv + ["--show", "--trace", str(page)])
    assert code == 0, err
    assert "[legend:" in err and "\x1b[" not in out and f"written to {page}" in err
    html = page.read_text()
    assert "<script" in html and "http" not in html.split("<body>")[1].split("trace-data")[0]  # no network
    code, out, err = run_cli(argv + ["--trace", str(tmp_path / "run.txt")])
    assert code == 2 and "must end in .json" in err and out == ""  # refused before any output


class DomCounter(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.chips, self.root = 0, [], {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html":
            self.root = a
        classes = (a.get("class") or "").split()
        if "round" in classes:
            self.rows += 1
        if "chip" in classes and a.get("data-kind"):
            self.chips.append(a["data-kind"])


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")
def test_the_page_renders_in_a_real_browser(big_pair, tmp_path):
    target, draft = big_pair
    trace = Trace()
    res = speculative_generate(target, DraftModel(draft), PROMPT, 30, k=3, temperature=1.0, seed=5, trace=trace)
    page = write_trace(trace, tmp_path / "t.html", decode=lambda t: f"<!--t{t}<script> ", drafter="tiny <b>draft")  # text
    # from the run that must neither end nor hide the page's script
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    counter = DomCounter()
    counter.feed(dom)
    assert counter.root.get("data-rendered") == "ok" and "data-script-error" not in counter.root, counter.root
    assert counter.rows == len(trace.rounds) == res.stats.rounds  # one row per round
    assert counter.chips == [k for r in trace.rounds for k in r.kinds()]  # one chip per token, coloured by decision
    assert len(counter.chips) == len(res.tokens)


def test_the_summary_counts_plain_rounds_by_their_real_cause(tmp_path):
    model_dir = chat_model_dir(tmp_path / "model")
    base = ["generate", "--model", str(model_dir), "--prompt", "a b a b", "--no-stop", "--no-compare"]
    code, out, err = run_cli(base + ["--draft", "layer-skip", "--layers", "1", "--k", "0", "--max-new-tokens", "4"])
    assert code == 0 and "--k 0 asks for plain rounds" in err and "nothing to propose" not in err, err
    code, out, err = run_cli(base + ["--draft", "layer-skip", "--layers", "1", "--k", "100", "--max-new-tokens", "8"])
    assert code == 0 and "because one token was still wanted" in err and "judged" not in err, err


def test_a_chain_only_drafter_with_a_tree_is_refused_before_any_output(tmp_path):
    from pathlib import Path

    bpe = Path(__file__).resolve().parents[1] / "weights" / "bpe8k-draft-4l-384"
    model_dir = chat_model_dir(tmp_path / "model")
    code, out, err = run_cli(["generate", "--model", str(model_dir), "--prompt", "hi", "--draft", f"tli:{bpe}",
                              "--tree", "2x2", "--no-compare"])
    assert code == 2 and out == "" and "drafts chains only" in err, err


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("own", [False, True])
def test_a_tree_round_names_its_next_token_by_where_the_walk_ended(big_pair, temperature, own):
    """A 2 x 3 tree of a draft model has every leaf at depth 3: a round that kept 3 nodes ended at a leaf (its
    next_token is the bonus), one that kept fewer ended at a node whose children were all rejected (the correction),
    and k counts the tree's nodes, not the kept ones. The target as its own draft keeps every path (bonuses only);
    the random draft is mostly rejected (corrections)."""
    target, draft = big_pair
    trace = Trace()
    tree_speculative_generate(target, DraftModel(target if own else draft), PROMPT, 40, shape=(2, 3),
                              temperature=temperature, seed=1, trace=trace)
    kinds = set()
    for r in trace.rounds:
        if r.k == 0:
            assert r.next_kind == "plain"
            continue
        assert r.k == 6 or r.accepted < 3  # 2 x 3 nodes, fewer only where the run's end cut the tree
        assert r.next_kind == ("bonus" if r.accepted == 3 else "correction"), (r.k, r.accepted, r.next_kind)
        kinds.add(r.next_kind)
    assert ("bonus" in kinds) if own else ("correction" in kinds), kinds
