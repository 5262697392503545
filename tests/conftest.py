import numpy as np
import pytest

from minispec import load_model
from minispec.tiny import tiny_config, write_random_model

# name -> config overrides; covers Llama (MHA and GQA), Qwen2 (q/k/v bias), Mistral, tied and untied
CONFIGS = {
    "llama-gqa": dict(arch="LlamaForCausalLM"),
    "llama-mha-tied": dict(arch="LlamaForCausalLM", num_key_value_heads=4, tie_word_embeddings=True),
    "qwen2-bias": dict(arch="Qwen2ForCausalLM", num_attention_heads=4, num_key_value_heads=1),
    "mistral": dict(arch="MistralForCausalLM", sliding_window=None, num_hidden_layers=3),
}


def make_config(name):
    kw = dict(CONFIGS[name])
    return tiny_config(kw.pop("arch"), **kw)


@pytest.fixture(scope="session", params=list(CONFIGS))
def tiny_model_dir(request, tmp_path_factory):
    return write_random_model(tmp_path_factory.mktemp(request.param), make_config(request.param), seed=1)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


SMALL_V = 6  # level 3 needs a vocabulary small enough to enumerate every 2-token continuation


@pytest.fixture(scope="session")
def small_pair(tmp_path_factory):
    """A tiny target and draft with a 6-token vocabulary, for sequence-level statistics."""
    d = tmp_path_factory.mktemp("small_pair")
    small = dict(vocab_size=SMALL_V, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=1)
    target = load_model(write_random_model(d / "t", tiny_config(num_hidden_layers=2, **small), seed=10, scale=2.0))
    draft = load_model(write_random_model(d / "d", tiny_config(num_hidden_layers=1, **small), seed=20, scale=2.0))
    return target, draft


@pytest.fixture(scope="session")
def big_pair(tmp_path_factory):
    """A 3-layer target and a 1-layer draft (vocabulary 64), for greedy identity and stop tests."""
    d = tmp_path_factory.mktemp("big")
    target = load_model(write_random_model(d / "t", tiny_config(num_hidden_layers=3), seed=1))
    draft = load_model(write_random_model(d / "d", tiny_config(num_hidden_layers=1), seed=2))
    return target, draft
