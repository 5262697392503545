"""The level-4 statistics on tiny models: calibrated (plain against plain gives uniform p-values) and
powerful (the broken rule is caught), both with fixed seeds."""

import numpy as np
import pytest
from scipy import stats

from minispec import DraftModel, load_model
from minispec.harness.check import ALPHA, compare, plain_sampler, sample_runs, speculative_sampler
from minispec.harness.equivalence import paired_permutation_test, token_bins
from minispec.model.progress import Progress
from minispec.model.tiny import tiny_config, write_random_model

PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("l4")
    target = load_model(write_random_model(d / "t", tiny_config(vocab_size=24, num_hidden_layers=2), seed=11))
    draft = load_model(write_random_model(d / "d", tiny_config(vocab_size=24, num_hidden_layers=1), seed=12))
    return target, DraftModel(draft, 24)


def runs(method, n, seed):
    return sample_runs(method, PROMPTS, n, 12, seed, Progress(n, quiet=True))


def test_plain_against_plain_gives_uniform_p_values(tiny):
    target, drafter = tiny
    plain = plain_sampler(target, [])
    p_values = {"tokens": [], "acceptance": []}
    for j in range(25):
        res = compare(target, drafter, PROMPTS, runs(plain, 30, 1000 * j), runs(plain, 30, 1000 * j + 500), seed=j,
                      permutations=500)
        for name in p_values:
            p_values[name].append(res[name]["p_value"])
    for name, ps in p_values.items():
        assert stats.kstest(ps, "uniform").pvalue > ALPHA, (name, np.round(sorted(ps), 2))


def test_the_real_rule_passes_and_the_broken_rule_is_caught(tiny):
    target, drafter = tiny
    plain = runs(plain_sampler(target, []), 60, 0)
    real = compare(target, drafter, PROMPTS, plain, runs(speculative_sampler(target, drafter, [], 4, False), 60, 10**6))
    broken = compare(target, drafter, PROMPTS, plain, runs(speculative_sampler(target, drafter, [], 4, True), 60, 10**6))
    assert real["passed"], real
    assert not broken["passed"] and broken["acceptance"]["mean_b"] > broken["acceptance"]["mean_a"], broken


def test_permutation_p_value_is_small_only_when_the_runs_differ():
    a = np.array([[5.0, 1.0]] * 20)  # [N, F]: every run of method a puts 5 tokens in bin 0, 1 in bin 1
    same = paired_permutation_test(a, a.copy(), lambda x, y: np.abs(x - y).sum(-1), permutations=200)
    differ = paired_permutation_test(a, a[:, ::-1].copy(), lambda x, y: np.abs(x - y).sum(-1), permutations=200)
    assert same["p_value"] == 1.0 and differ["p_value"] == 1 / 201


def test_token_bins_pool_rare_tokens():
    bins = token_bins([[1] * 20 + [2] * 3, [1] * 5 + [3] * 12], n_bins=10, min_count=10)
    assert list(bins) == [1, 3]  # token 2 (3 times) goes to "other"
