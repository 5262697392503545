"""The peers of ``minispec bench specbench``: other engines on the same weights and questions, in the same run.

    transformers   ``model.generate`` (float32 on the CPU, 2 threads, greedy): plain; prompt lookup
                   (``prompt_lookup_num_tokens=3``); assisted generation with the shipped draft model
                   (``assistant_model=``, a float32 copy of its int8 weights, which transformers cannot read)

    llama.cpp      ``llama_cpp.Llama.generate`` (llama-cpp-python, 2 threads, greedy: temp 0) on a float32 GGUF of the
                   same weights (recipes/gguf_float32.py): plain; prompt lookup (``LlamaPromptLookupDecoding``, its
                   defaults). A draft model is not offered: the Python API's ``draft_model`` takes a
                   ``LlamaDraftModel``, whose only implementation is prompt lookup; a model drafter there would be
                   our own code around a second ``Llama``, not llama.cpp's

A peer mode is a function of the prompt's token ids -> its new token ids, stopping at the end-of-sequence token,
timed by specbench.py beside minispec's runs (once per turn each; minispec's plain decoding is timed before and
after). Each peer runs on 2 threads, its own best setting on 2 cores, as minispec runs under its own thread policy
(model/threads.py). One short generation per mode at load time warms it up, outside every timing. llama.cpp starts
each generation from an empty cache (``reset``): it would otherwise reuse the chat template's system prompt, which
every question shares, and skip part of the prompt that minispec and transformers read.
"""

from __future__ import annotations

import tempfile
from pathlib import Path


def transformers_modes(target_dir, draft_dir, max_new_tokens: int, eos_ids: list[int]) -> dict:
    """{"transformers plain": fn, "transformers prompt-lookup": fn, ["transformers assisted": fn]} (torch and
    transformers installed: ``peers_to_run`` skips the peer otherwise, and the report says so)."""
    import torch  # (an ImportError here: specbench.import_peer names it)
    import transformers

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


def llama_cpp_modes(gguf_path, max_new_tokens: int, eos_ids: list[int], n_ctx: int = 2048) -> dict:
    """{"llama.cpp plain": fn, "llama.cpp prompt-lookup": fn} on the GGUF at ``gguf_path`` (llama-cpp-python installed:
    ``peers_to_run`` skips the peer otherwise, and the report says so)."""
    import llama_cpp  # (an ImportError here: specbench.import_peer names it)
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    stop = {int(t) for t in eos_ids}

    def mode(draft=None):
        # logits_all with a draft: llama-cpp-python 0.3.36 turns it on itself then, but sizes its logits buffer by
        # the argument (n_batch rows), and a prompt longer than n_batch overflows it
        llm = llama_cpp.Llama(model_path=str(gguf_path), n_ctx=n_ctx, n_threads=2, n_threads_batch=2, verbose=False,
                              draft_model=draft, logits_all=draft is not None)

        def run(ids: list[int], n: int = max_new_tokens) -> list[int]:
            if len(ids) + n > n_ctx:
                raise ValueError(f"llama.cpp peer: prompt ({len(ids)} tokens) + {n} new tokens exceed its n_ctx {n_ctx}")
            llm.reset()  # an empty cache: no prefix of an earlier prompt reused (module docstring)
            out: list[int] = []
            for t in llm.generate(list(map(int, ids)), top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                                  reset=True):
                out.append(int(t))
                if out[-1] in stop or len(out) == n:
                    break
            return out
        return run

    modes = {"llama.cpp plain": mode(), "llama.cpp prompt-lookup": mode(LlamaPromptLookupDecoding())}
    for run in modes.values():
        run([min(stop, default=0) + 1] * 4, 2)  # warm-up, untimed
    return modes


PEERS = ("transformers", "llama.cpp")
NEEDS = {"transformers": ("torch", "transformers"), "llama.cpp": ("llama_cpp",)}  # the modules each peer imports


def peers_installed(peers=("transformers",)) -> list[str]:
    """The ``peers`` whose packages can be imported (checked without importing them)."""
    import importlib.util

    return [p for p in peers if all(importlib.util.find_spec(m) is not None for m in NEEDS[p])]


def version() -> dict:
    """The installed peers' package versions."""
    import importlib.metadata as md

    out = {}
    for name in ("transformers", "torch", "llama-cpp-python"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out
