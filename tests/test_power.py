"""The power study's planted departures (harness/power.py): their sizes are exact, and the study runs."""

import numpy as np
import pytest

from minispec.harness.exact_law import first_token_law
from minispec.harness.power import planted_rule, power_study, round_tv

V = 5


@pytest.mark.parametrize("kind, s", [("residual", 0.0), ("residual", 0.3), ("residual", 1.0), ("bias", 0.5),
                                     ("bias", 2.0)])
def test_round_tv_is_the_planted_rules_exact_law(kind, s):
    """The closed form of TV(first token, p) equals the law of the planted rule's own code, integrated over its
    draws (exact_law.first_token_law), for K = 1 on random rows."""
    rng = np.random.default_rng(7)
    for _ in range(5):
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V) * 0.7)
        first = first_token_law(planted_rule(kind, s), np.stack([p, p]), q[None])
        assert np.isclose(first.sum(), 1.0)
        want = 0.5 * np.abs(first - p).sum()
        assert round_tv(p[None], q[None], kind, s)[0] == pytest.approx(want, abs=1e-12)
    assert (round_tv(p[None], q[None], kind, s)[0] < 1e-12) == (s == 0)


def test_power_study_runs_and_its_null_has_no_departure(small_pair):
    target, draft = small_pair
    res = power_study(target, draft, [[1, 2], [3]], sizes=(4, 8), repeats=1, run_tokens=4, progress=False)
    rows = res["departures"]
    assert rows["residual@0"]["tv_per_token"] < 1e-12
    assert rows["residual@1"]["tv_per_token"] > rows["residual@0.2"]["tv_per_token"] > 0
    assert set(rows["bias@1"]["power"]) == {"4", "8"}
