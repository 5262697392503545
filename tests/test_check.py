"""Level 4 on the real SmolLM2 target: the reduced version runs in CI; the full one is `-m heavy`."""

import pytest

pytest.importorskip("gguf")

from minispec import load_model, load_tokenizer  # noqa: E402
from minispec.check import format_check, run_check, token_bins  # noqa: E402
from minispec.cli import make_drafter, shipped_draft  # noqa: E402
from minispec.convert import fetch_smollm2  # noqa: E402
from minispec.drafters import LayerSkip, PromptLookup  # noqa: E402


@pytest.fixture(scope="module")
def setup():
    d = fetch_smollm2(log=lambda m: None)
    target, tok = load_model(d), load_tokenizer(d)
    spec = shipped_draft() or "prompt-lookup"
    main = make_drafter(spec, target, d) if spec != "prompt-lookup" else LayerSkip(target, layers=24)
    return target, tok, main


def test_token_bins_keep_every_token():
    a, b = token_bins([1, 1, 2, 3, 9], [1, 2, 2, 7], n_bins=2)
    assert a.sum() == 5 and b.sum() == 4 and len(a) == 3


def check_result(res):
    assert res["sampling"]["p_value"] > 1e-3, format_check(res)
    for g in res["greedy"]:
        for m in g["mismatches"]:  # only a genuine float tie may flip a greedy token
            assert m["top2_logit_gap"] < 1e-3, format_check(res)


def test_level4_reduced(setup):
    target, tok, main = setup
    res = run_check(target, tok, main, [main, PromptLookup(target.cfg.vocab_size)], n_tokens=1000,
                    greedy_prompts=3, greedy_tokens=32, broken=False, progress=False)
    assert res["sampling"]["plain_tokens"] >= 1000 and res["sampling"]["speculative_tokens"] >= 1000
    check_result(res)


@pytest.mark.heavy
def test_level4_full(setup):
    target, tok, main = setup
    greedy = [main, PromptLookup(target.cfg.vocab_size), LayerSkip(target, layers=24)]
    res = run_check(target, tok, main, greedy, n_tokens=9200, broken=True, progress=False)
    check_result(res)
    # The broken rule must fail the same 1e-3 threshold the real rule passes. It is not far below it:
    # with this draft's low acceptance at T=1 (~0.2 per token) most tokens come from the residual
    # step either way, so the bias is small (measured: p = 4.3e-5 broken vs 0.037 real).
    assert res["sampling_broken_rule"]["p_value"] < 1e-3, format_check(res)
