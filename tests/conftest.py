import os

import numpy as np
import pytest

# Tests never write the calibration cache to the user's home (the one test of that cache sets its own).
os.environ["MINISPEC_NO_CALIBRATION_CACHE"] = "1"
# Under pytest-xdist (`-n auto`, README's test command) the workers fill the cores, one test each: a model's products
# run on one thread in each (model/threads.py), not on every core in every worker, where threads would wait on threads.
if os.environ.get("PYTEST_XDIST_WORKER") and "MINISPEC_THREADS" not in os.environ:
    os.environ["MINISPEC_THREADS"] = "1"

from minispec import load_model
from minispec.model.tiny import tiny_config, write_random_model

from .helpers import CONFIGS, SMALL_V, make_config


@pytest.fixture(scope="session", params=list(CONFIGS))
def tiny_model_dir(request, tmp_path_factory):
    return write_random_model(tmp_path_factory.mktemp(request.param), make_config(request.param), seed=1)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def small_pair(tmp_path_factory):
    """A tiny target and draft with a 6-token vocabulary, for sequence-level statistics."""
    d = tmp_path_factory.mktemp("small_pair")
    small = dict(vocab_size=SMALL_V, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=1)
    target = load_model(write_random_model(d / "t", tiny_config(num_hidden_layers=2, **small), seed=10, scale=2.0))
    draft = load_model(write_random_model(d / "d", tiny_config(num_hidden_layers=1, **small), seed=20, scale=2.0))
    return target, draft


@pytest.fixture(scope="session")
def pair(small_pair):
    """The small pair under the name the level-3 tests use."""
    return small_pair


@pytest.fixture(scope="session")
def big_pair(tmp_path_factory):
    """A 3-layer target and a 1-layer draft (vocabulary 64), for greedy identity and stop tests."""
    d = tmp_path_factory.mktemp("big")
    target = load_model(write_random_model(d / "t", tiny_config(num_hidden_layers=3), seed=1))
    draft = load_model(write_random_model(d / "d", tiny_config(num_hidden_layers=1), seed=2))
    return target, draft
