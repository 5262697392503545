"""A seed reproduces its run on the same machine under every K policy, the adaptive ones included.

The adaptive policies choose K (or a tree) from costs; a seeded run keeps the calibrated costs (cached per
model and machine) instead of following its own clock, so the same seed makes the same choices and draws
the same random numbers (policy/__init__.py, "Seeds"). Checked at T = 0.8, where the choices matter.
"""

import json
import os
import subprocess
import sys

import pytest

from minispec import PromptLookup, load_model, speculative_generate, tree_speculative_generate
from minispec.model.tiny import tiny_config, write_random_model
from minispec.policy import calibration, costs

POLICIES = {"fixed": dict(k=3), "auto": dict(k="auto"), "tree fixed": dict(shape=(2, 3)), "tree auto": dict(shape="auto")}
PROMPT = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]


def run(target, drafter, how, seed=7, n=40):
    loop = tree_speculative_generate if "shape" in how else speculative_generate
    return loop(target, drafter, PROMPT, n, temperature=0.8, seed=seed, **how).tokens


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("seeds")
    t = write_random_model(d / "t", tiny_config(num_hidden_layers=3), seed=1)
    dr = write_random_model(d / "d", tiny_config(num_hidden_layers=1), seed=2)
    return t, dr


@pytest.mark.parametrize("drafter", ["lookup", "draft"])
@pytest.mark.parametrize("policy", list(POLICIES))
def test_same_seed_same_tokens_in_one_process(pair, policy, drafter):
    target = load_model(pair[0])
    first = run(target, PromptLookup() if drafter == "lookup" else load_model(pair[1]), POLICIES[policy])
    # a new drafter object and a reloaded model: the cached calibration is found by model, not by object
    again = run(load_model(pair[0]), PromptLookup() if drafter == "lookup" else load_model(pair[1]), POLICIES[policy])
    assert first == again


def test_seeded_auto_policies_keep_their_calibrated_costs(pair):
    target, draft = load_model(pair[0]), load_model(pair[1])
    from minispec.rounds import start_run

    for how in (dict(k="auto"), dict(shape="auto")):
        pol = start_run(target, draft, PROMPT, 4, seed=1, temperature=0.8, **how).policy
        assert pol.learn is False
        pol = start_run(target, draft, PROMPT, 4, seed=None, temperature=0.8, **how).policy
        assert pol.learn is True
        pol = start_run(target, draft, PROMPT, 4, seed=1, **how).policy  # greedy: the output does not depend on K
        assert pol.learn is True


def test_drafter_costs_are_cached_by_model_not_by_drafter_object(pair, monkeypatch):
    from minispec.drafters import DraftModel

    monkeypatch.setattr(calibration, "_MEMORY", {})
    model = load_model(pair[1])
    first = costs.drafter_costs(DraftModel(model))

    def no_propose(*a, **k):
        raise AssertionError("measured again")

    second_drafter = DraftModel(load_model(pair[1]))
    monkeypatch.setattr(second_drafter, "propose", no_propose)
    assert costs.drafter_costs(second_drafter) == first


SCRIPT = """
import json, sys
from minispec import PromptLookup, load_model, speculative_generate, tree_speculative_generate
from minispec.harness.calibration_store import use_disk_store
use_disk_store()  # a library caller keeps its calibrations on disk this way (the CLI does it for its own)
target, draft = load_model(sys.argv[1]), load_model(sys.argv[2])
prompt = {prompt}
out = {{}}
for name, how in {policies}.items():
    for which, drafter in (("lookup", PromptLookup()), ("draft", draft)):
        loop = tree_speculative_generate if "shape" in how else speculative_generate
        out[name + " " + which] = loop(target, drafter, prompt, 30, temperature=0.8, seed=11, **how).tokens
print(json.dumps(out))
"""


def test_same_seed_same_tokens_in_fresh_processes(pair, tmp_path):
    """Two processes share the disk cache of calibrations: the second uses what the first measured, as it is
    (``MINISPEC_TRUST_CALIBRATION``: without it, a probe that disagrees would have it measured afresh)."""
    env = dict(os.environ, MINISPEC_CACHE=str(tmp_path / "cache"), MINISPEC_TRUST_CALIBRATION="1")
    env.pop("MINISPEC_NO_CALIBRATION_CACHE", None)
    code = SCRIPT.format(prompt=PROMPT, policies={k: v for k, v in POLICIES.items()})
    outs = [subprocess.run([sys.executable, "-c", code, str(pair[0]), str(pair[1])], env=env, capture_output=True,
                           text=True, timeout=300, check=True).stdout for _ in range(2)]
    assert json.loads(outs[0]) == json.loads(outs[1])
    assert list((tmp_path / "cache" / "calibration").glob("*.json"))


def test_the_cli_and_the_loops_ask_one_rule_whether_a_run_follows_its_clock(tmp_path, monkeypatch):
    """policy.follows_clock: unseeded, greedy or keyed (rule="coupled") runs learn from their clock; a seeded run at
    T > 0 of a stream's rule does not. The CLI's policies are built with its answer for the CLI's own seed,
    temperature and rule, as the loops' are."""
    from minispec import cli
    from minispec.policy import follows_clock

    from .helpers import chat_model_dir, run_cli

    assert follows_clock(None, 0.8) and follows_clock(3, 0.0) and follows_clock(None, 0.0)
    assert not follows_clock(0, 0.8)  # seed 0 is a seed
    assert follows_clock(0, 0.8, keyed=True)  # a keyed rule's tokens do not depend on the policy's choices
    asked = []
    monkeypatch.setattr(cli, "follows_clock", lambda *a: asked.append(a) or follows_clock(*a))
    model_dir = chat_model_dir(tmp_path / "model")
    for rule in ("token", "coupled"):
        code, _, err = run_cli(["generate", "--model", str(model_dir), "--prompt", "hi", "--draft", "prompt-lookup",
                                "--temperature", "0.8", "--seed", "5", "--max-new-tokens", "3", "--no-compare",
                                "--rule", rule])
        assert code == 0, err
    assert asked == [(5, 0.8, False), (5, 0.8, True)]
