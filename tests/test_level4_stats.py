"""The level-4 statistics on tiny models: calibrated (plain against plain gives uniform p-values) and
powerful (the broken rule is caught), both with fixed seeds."""

import numpy as np
import pytest
from scipy import stats

from minispec import DraftModel, load_model
from minispec.harness import check
from minispec.harness.check import ALPHA, RULES, PrefixMass, broken_twins, compare, json_path, plain_sampler
from minispec.harness.equivalence import chisquare_gof, paired_permutation_test, token_bins
from minispec.harness.progress import Progress
from minispec.model.tiny import tiny_config, write_random_model

PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("l4")
    target = load_model(write_random_model(d / "t", tiny_config(vocab_size=24, num_hidden_layers=2), seed=11))
    draft = load_model(write_random_model(d / "d", tiny_config(vocab_size=24, num_hidden_layers=1), seed=12))
    return target, DraftModel(draft, 24)


def runs(method, n, seed):
    return check.sample_runs(method, PROMPTS, n, 12, seed, Progress(n, quiet=True))


@pytest.mark.slow
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
    twin = []  # the twin: both sides drawn with the same seeds (a calibration that reuses the plain side's seeds), so
    for j in range(10):  # the runs are not independent, and the p-values pile up at 1: the same KS test sees it
        same = runs(plain, 30, 1000 * j)
        twin.append(compare(target, drafter, PROMPTS, same, same, seed=j, permutations=500)["tokens"]["p_value"])
    assert stats.kstest(twin, "uniform").pvalue < ALPHA, np.round(sorted(twin), 2)


def test_the_real_rule_passes_and_the_broken_rule_is_caught(tiny):
    target, drafter = tiny
    plain = runs(plain_sampler(target, []), 60, 0)
    real_rule, twin = RULES["token"]
    real = compare(target, drafter, PROMPTS, plain, runs(check.speculative_sampler(target, drafter, [], 4, real_rule), 60, 10**6))
    broken = compare(target, drafter, PROMPTS, plain, runs(check.speculative_sampler(target, drafter, [], 4, twin), 60, 10**6))
    assert real["passed"], real
    assert not broken["passed"] and broken["acceptance"]["mean_b"] > broken["acceptance"]["mean_a"], broken


def test_the_coupled_rule_passes_is_keyed_sampling_run_for_run_and_its_twin_is_caught(tiny):
    """Level 4 for the keyed rule: its runs are not told apart from plain (stream) sampling, and each one is plain
    keyed sampling's tokens; the twin that emits the rejected guess is told apart, and is not keyed sampling."""
    target, drafter = tiny
    plain = runs(plain_sampler(target, []), 60, 0)
    keyed = runs(plain_sampler(target, [], keyed=True), 60, check.SPECULATIVE_SEED)
    real_rule, twin = RULES["coupled"]
    real_runs = runs(check.speculative_sampler(target, drafter, [], 4, real_rule), 60, check.SPECULATIVE_SEED)
    twin_runs = runs(check.speculative_sampler(target, drafter, [], 4, twin), 60, check.SPECULATIVE_SEED)
    real, broken = compare(target, drafter, PROMPTS, plain, real_runs), compare(target, drafter, PROMPTS, plain, twin_runs)
    assert real["passed"], real
    assert check.identity(real_runs, keyed) == dict(runs=60, identical=60, first_difference=None)
    assert not broken["passed"] and broken["acceptance"]["mean_b"] > broken["acceptance"]["mean_a"], broken
    assert check.identity(twin_runs, keyed)["identical"] < 30


def test_identity_names_the_first_run_and_token_that_differ():
    assert check.identity([[1, 2], [3, 4, 5], [6]], [[1, 2], [3, 4], [7]]) == dict(
        runs=3, identical=1, first_difference=dict(run=1, position=2))


def test_permutation_p_value_is_small_only_when_the_runs_differ():
    a = np.array([[5.0, 1.0]] * 20)  # [N, F]: every run of method a puts 5 tokens in bin 0, 1 in bin 1
    same = paired_permutation_test(a, a.copy(), lambda x, y: np.abs(x - y).sum(-1), permutations=200)
    differ = paired_permutation_test(a, a[:, ::-1].copy(), lambda x, y: np.abs(x - y).sum(-1), permutations=200)
    assert same["p_value"] == 1.0 and differ["p_value"] == 1 / 201


def test_the_goodness_of_fit_pools_rare_cells_until_they_are_expected_often_enough():
    """Cells expected under 5 times are pooled; a pool still expected under 5 joins the smallest cell kept (bug: it
    stood alone, so 3 draws of a cell expected 0.2 times gave p ~ 1e-8, a false alarm far beyond the test's alpha)."""
    probs = np.array([0.5, 0.4999, 0.0001])  # 2,000 draws: the last cell is expected 0.2 times
    chi2, dof, p = chisquare_gof([1000, 997, 3], probs)
    assert dof == 1 and p > 0.5
    assert chisquare_gof([1000, 997, 3], np.array([0.5, 0.4999, 0.0]))[2] == 0.0  # a draw the law forbids still fails
    chi2, dof, p = chisquare_gof([400, 300, 200, 40, 30, 30], np.array([0.4, 0.3, 0.2, 0.04, 0.03, 0.03]))
    assert dof == 5 and p > 0.99  # cells expected 40, 30, 30 are not rare: each a bin of its own


def test_token_bins_pool_rare_tokens():
    bins = token_bins([[1] * 20 + [2] * 3, [1] * 5 + [3] * 12], n_bins=10, min_count=10)
    assert list(bins) == [1, 3]  # token 2 (3 times) goes to "other"


def test_prefix_mass_sums_the_tokens_that_extend_the_emitted_one():
    """m(y) = sum of p(z) over tokens z != y whose bytes start with y's (an empty token extends nothing)."""
    tb = [b"a", b"ab", b"abc", b"b", b"", b"ab", b"a\xff", b"a\xff\x01"]
    p = np.array([[0.1, 0.2, 0.3, 0.1, 0.2, 0.05, 0.03, 0.02]])
    m = PrefixMass(tb)
    want = {0: 0.2 + 0.3 + 0.05 + 0.03 + 0.02, 1: 0.3 + 0.05, 2: 0.0, 3: 0.0, 4: 0.0, 5: 0.3 + 0.2, 6: 0.02, 7: 0.0}
    for y, v in want.items():
        assert m(p, [y])[0] == pytest.approx(v, abs=1e-12), y


def test_broken_twins_and_the_json_files_they_go_to(tiny):
    target, drafter = tiny
    assert list(broken_twins(drafter)) == ["sampling_broken_rule"]
    assert broken_twins(drafter, "block")["sampling_broken_rule"][1] is RULES["block"][1]
    assert broken_twins(drafter, "coupled")["sampling_broken_rule"][1] is RULES["coupled"][1]
    assert json_path("docs/level4_{kind}.json", drafter, True) == "docs/level4_draft.json"
    assert json_path("out.json", drafter, False) == "out.json"


def test_check_refuses_bad_draft_lists(tmp_path):
    from types import SimpleNamespace

    from minispec.harness.check import main_check

    args = SimpleNamespace(draft=["a", "b"], json="out.json", model=None, quick=True, rule="token", runs=24,
                           no_calibration=True)
    with pytest.raises(ValueError, match="{kind}"):
        main_check(args)
    args.draft, args.json = ["a", "a"], None
    with pytest.raises(ValueError, match="named twice"):
        main_check(args)


def test_prompt_passes_give_a_whole_pass_rows_and_features(tiny):
    """``PromptPasses`` keeps each prompt's cache and scores a run by a pass over the prompt's last token and the
    run: its rows and features are one whole pass's, to rounding, for a one-token prompt too, and on the second run
    from a prompt (the kept cache reused, not written over)."""
    target, _ = tiny
    passes = check.PromptPasses(target)
    for prompt, run in [([1, 2, 3], [4, 5, 6]), ([1, 2, 3], [7, 8]), ([10], [11, 12, 13, 14]), ([1, 2, 3], [4, 5, 6])]:
        seq, got = prompt + run, []
        whole = target.forward(seq, target.new_cache(len(seq)), on_features=got.append)
        logits, features = passes(prompt, run, features=True)
        np.testing.assert_allclose(logits, whole[len(prompt) - 1: len(seq) - 1], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(features, got[0], rtol=1e-5, atol=1e-5)
        assert passes(prompt, run, features=False)[1] is None
    assert len(passes.kept) == 2
