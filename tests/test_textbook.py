"""The textbook round is the real algorithm: ``speculative_sampling`` emits exactly the tokens of the engine's
``speculative_generate`` with a draft model, greedy and sampled, for the same K, temperature and seed."""

import ast
from pathlib import Path

import numpy as np
import pytest

import minispec
from minispec import generate, rejection, speculative_sampling
from minispec.drafters import DraftModel
from minispec.harness.equivalence import chisquare_gof
from minispec.speculative import speculative_generate

from .helpers import V, broken_residual, exact_two_tokens

PROMPTS = [[3, 17, 5, 9], [1], [40, 2, 2, 2, 7, 33, 12, 8, 1, 0, 63]]


@pytest.mark.parametrize("k", [0, 1, 3, 5])
def test_greedy_equals_the_engine_and_plain_decoding(big_pair, k):
    target, draft = big_pair
    for prompt in PROMPTS:
        mine = speculative_sampling(target, draft, prompt, 30, k=k)
        assert mine == speculative_generate(target, DraftModel(draft), prompt, 30, k=k).tokens
        assert mine == generate(target, prompt, 30)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("k", [1, 4])
def test_sampled_equals_the_engine_token_for_token_over_many_seeds(big_pair, temperature, k):
    """The same random draws in the same order: the two loops are the same algorithm, not two of a kind."""
    target, draft = big_pair
    for seed in range(40):
        prompt = PROMPTS[seed % len(PROMPTS)]
        mine = speculative_sampling(target, draft, prompt, 20, k=k, temperature=temperature, seed=seed)
        engine = speculative_generate(target, DraftModel(draft), prompt, 20, k=k, temperature=temperature, seed=seed)
        assert mine == engine.tokens, seed


@pytest.mark.slow
def test_its_output_is_the_targets_and_a_broken_rule_is_caught(small_pair, monkeypatch):
    """Level 3 for the textbook round itself: the first two tokens of 20,000 seeded runs against the target's exact
    law; the same count with the broken residual fails."""
    target, draft = small_pair
    prompt, exact = [1, 4, 2], exact_two_tokens(target, [1, 4, 2], temperature=1.0)

    def counts():
        c = np.zeros(V * V)
        for seed in range(20_000):
            a, b = speculative_sampling(target, draft, prompt, 2, k=2, temperature=1.0, seed=seed)
            c[a * V + b] += 1
        return c

    assert chisquare_gof(counts(), exact)[2] > 1e-3
    monkeypatch.setattr(rejection, "residual", broken_residual)
    assert chisquare_gof(counts(), exact)[2] < 1e-6


def test_refuses_a_draft_with_another_vocabulary(big_pair, small_pair):
    with pytest.raises(ValueError, match="draft's vocabulary .* must be the target's"):
        speculative_sampling(big_pair[0], small_pair[1], [1, 2], 5)


def test_it_is_short_and_imports_only_the_rule_sampling_and_the_model():
    f = Path(minispec.__file__).parent / "textbook.py"
    tree = ast.parse(f.read_text())
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    body = fn.body[1:] if isinstance(fn.body[0].value if isinstance(fn.body[0], ast.Expr) else None, ast.Constant) else fn.body
    lines = {n.lineno for stmt in body for n in ast.walk(stmt) if hasattr(n, "lineno")}
    assert len(lines) <= 40, len(lines)  # lines of code, docstring and comments aside
    imported = {n.module for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "model", "rejection", "sampling"}, imported
