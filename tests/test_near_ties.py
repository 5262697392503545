"""Greedy identity at near-ties on SmolLM2 (minispec/harness/near_ties.py): under the numba kernel, whose rows are
batch-invariant, every drafter's greedy speculative output equals plain greedy output token for token through a
position whose top-2 logit margin is below 1e-4. The cases are committed (docs/kernel/near_ties.json, found by
``--find``): the default test checks that they are prompts of the committed generations with margins under the
threshold; the slow one runs every drafter through the two earliest (the cheapest to decode), checks plain decoding
still meets the near-tie, and catches a twin target whose multi-row passes break near-ties the other way."""

import json
from pathlib import Path

import numpy as np
import pytest

from minispec.harness import near_ties

CASES = Path(__file__).resolve().parents[1] / "docs" / "kernel" / "near_ties.json"


def test_the_committed_cases_are_near_ties_of_the_committed_generations():
    record = json.loads(CASES.read_text())
    assert record["cases"] and all(c["margin"] < record["margin"] <= 1e-4 for c in record["cases"])
    prompts = [p for p, _ in near_ties.chat_windows()]
    assert all(c["prompt"] == prompts[c["window"]] for c in record["cases"])


@pytest.mark.slow
def test_every_drafter_is_greedy_identical_through_a_near_tie_under_the_numba_kernel():
    pytest.importorskip("numba")
    from minispec.model import load_model
    from minispec.recipes.fetch import fetch_smollm2

    target = load_model(fetch_smollm2(log=lambda m: None), kernel="numba")
    cases = sorted(json.loads(CASES.read_text())["cases"], key=lambda c: c["position"])[:2]  # the two earliest
    rows = near_ties.identity(target, near_ties.every_drafter(target), cases)
    assert all(r["identical"] == r["runs"] == len(cases) for r in rows.values()), rows
    from minispec.generate import generate

    for c in cases:  # plain decoding, with this code, still goes through the near-tie
        want = generate(target, c["prompt"], c["position"] + 1)
        ctx = list(c["prompt"]) + want[: c["position"]]
        top2 = np.sort(target.forward(ctx, target.new_cache(len(ctx)))[-1])[-2:]
        assert top2[1] - top2[0] < 1e-4  # the run went through the near-tie
    real = target.forward_masked

    def moved(ids, cache, positions, mask, last=None, on_features=None):  # the twin: a pass of 2 or more rows
        out = real(ids, cache, positions, mask, last, on_features)  # breaks its near-ties the other way: each row's
        if len(ids) > 1:  # runner-up gains 2e-4, so an argmax with a margin under that flips, and no other
            second = np.argsort(out, axis=1)[:, -2]  # [rows]
            out[np.arange(len(out)), second] += np.float32(2e-4)
        return out
    target.forward_masked = moved
    every = near_ties.every_drafter(target)
    rows = near_ties.identity(target, {name: every[name] for name in ("draft", "eagle")}, cases)
    assert any(r["mismatches"] for r in rows.values()), rows
