"""Helpers shared by the test modules (import them from here, never from another test file)."""

import numpy as np

from minispec.model.tiny import tiny_config
from minispec.sampling import warp

SMALL_V = 6  # level 3 needs a vocabulary small enough to enumerate every 2-token continuation
V = SMALL_V


def exact_two_tokens(target, prompt, **w):
    """P(t1, t2) from the target's own conditionals, warped as plain generate warps them (full forwards,
    no cache reuse), as a flat [V * V] table."""
    p1 = warp(target.forward(prompt, target.new_cache(len(prompt)))[-1], **w)
    out = np.zeros((V, V))
    for t1 in range(V):
        seq = prompt + [t1]
        out[t1] = p1[t1] * warp(target.forward(seq, target.new_cache(len(seq)))[-1], **w)
    return out.ravel()


def broken_residual(p, q):
    """The classic bug, planted with monkeypatch on ``rejection.residual``: resample from p, not norm(max(0, p - q))."""
    return p / p.sum()


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
