"""The exact walk of the loop (harness/exact_loop.py) itself: its paths add up, and it leaves nothing patched."""

import numpy as np
import pytest

from minispec import rejection, sampling, speculative
from minispec.drafters import DraftModel, draft_model
from minispec.harness.exact_loop import loop_law, paths

from .helpers import V


def test_paths_of_a_known_process():
    """Two categorical draws and one uniform comparison: every outcome with its exact probability."""
    def run(rng):
        a = rng.choose([0.5, 0.5, 0.0])
        b = rng.choose([0.2, 0.8])
        return a, b, bool(rng.random() < 0.25)
    walked = dict(paths(run))
    assert len(walked) == 8 and sum(walked.values()) == pytest.approx(1.0)
    assert walked[(1, 1, True)] == pytest.approx(0.5 * 0.8 * 0.25)


def test_a_uniform_compared_twice_is_conditioned():
    def run(rng):
        u = rng.random()
        return (u < 0.5, u < 0.25)
    walked = dict(paths(run))
    assert walked == pytest.approx({(True, True): 0.25, (True, False): 0.25, (False, False): 0.5})


def test_loop_law_restores_what_it_replaces(pair):
    target, draft = pair
    real_sample, real_start = sampling.sample, speculative.start_run
    law, n = loop_law(target, lambda: DraftModel(draft), [1, 4, 2], 2, V, k=1, temperature=1.0)
    assert law.sum() == pytest.approx(1.0) and n > 10 and np.isfinite(law).all()
    assert sampling.sample is real_sample and speculative.start_run is real_start
    assert rejection.sample is real_sample and not hasattr(draft_model, "sample")  # the draft draws through sampling.Stream
    with pytest.raises(ValueError, match="emitted"):  # a stop token cuts a path short: refused, and still restored
        loop_law(target, lambda: DraftModel(draft), [1, 4, 2], 2, V, k=1, temperature=1.0, stop_ids=list(range(V)))
    assert rejection.sample is real_sample and speculative.start_run is real_start
