"""The peers of ``minispec bench specbench``: other engines on the same weights and questions, in the same run.

    transformers   ``model.generate`` (float32 on the CPU, 2 threads, greedy): plain; prompt lookup
                   (``prompt_lookup_num_tokens=3``); assisted generation with the shipped draft model
                   (``assistant_model=``, a float32 copy of its int8 weights, which transformers cannot read)

A peer mode is a function of the prompt's token ids -> its new token ids, stopping at the end-of-sequence token,
timed by specbench.py beside minispec's runs (once per turn each; minispec's plain decoding is timed before and
after). transformers runs on 2 threads, its own best setting on 2 cores, as minispec runs under its own thread policy
(model/threads.py). One short generation per mode at load time warms torch up, outside every timing. llama.cpp
(llama-cpp-python) is not wired in yet.
"""

from __future__ import annotations

import tempfile
from pathlib import Path


def transformers_modes(target_dir, draft_dir, max_new_tokens: int, eos_ids: list[int]) -> dict:
    """{"transformers plain": fn, "transformers prompt-lookup": fn, ["transformers assisted": fn]}, or {} when torch or
    transformers is not installed (the report says so)."""
    try:
        import torch
        import transformers
    except ImportError:
        return {}
    from ..model.weights import float_copy

    torch.set_num_threads(2)
    load = transformers.AutoModelForCausalLM.from_pretrained
    target = load(str(target_dir), dtype=torch.float32).eval()
    draft = None
    if draft_dir is not None:
        with tempfile.TemporaryDirectory() as tmp:
            draft = load(str(float_copy(draft_dir, Path(tmp) / "draft")), dtype=torch.float32).eval()

    def mode(**kw):
        def run(ids: list[int], n: int = max_new_tokens) -> list[int]:
            x = torch.tensor([list(ids)])
            with torch.no_grad():
                out = target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                                      do_sample=False, eos_token_id=list(eos_ids), pad_token_id=eos_ids[0], **kw)
            return out[0, x.shape[1]:].tolist()
        return run

    modes = {"transformers plain": mode(), "transformers prompt-lookup": mode(prompt_lookup_num_tokens=3)}
    if draft is not None:
        modes["transformers assisted"] = mode(assistant_model=draft)
    for run in modes.values():
        run([int(eos_ids[0]) + 1] * 4, 2)  # warm-up, untimed
    return modes


def peers_installed() -> bool:
    """Whether transformers and torch can be imported (checked without importing them)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def version() -> dict:
    try:
        import torch
        import transformers
    except ImportError:
        return {}
    return dict(transformers=transformers.__version__, torch=torch.__version__)
