"""llama.cpp's target pass timed as minispec's is, for ``minispec bench forward --gguf FILE``.

The same measurement as ``policy.timing.forward_times``: after ``context`` cached tokens, one pass over n new tokens
that gives logits for every row (what verifying n - 1 guesses needs), the n values interleaved inside each repeat,
the median kept. It runs through llama-cpp-python (``Llama.eval`` with ``logits_all``: each row's logits copied out
as minispec's pass returns them), on 2 threads for one token and for a batch alike. Optional: without
llama-cpp-python installed, ``installed()`` is False and the bench says so.
"""

from __future__ import annotations

import importlib.util
import time

import numpy as np


def installed() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def gguf_times(path, ns, context: int = 256, repeats: int = 20, warmup: int = 3, threads: int = 2) -> dict:
    """-> {"ms": {n: median ms}, "vocab": V, "version": llama-cpp-python's} of llama.cpp's pass over n tokens after
    ``context`` cached ones, for the GGUF at ``path``."""
    import llama_cpp

    ns = tuple(ns)
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=context + max(ns), n_batch=max(512, max(ns)), n_threads=threads,
                          n_threads_batch=threads, logits_all=True, verbose=False)
    vocab = llm.n_vocab()
    rng = np.random.default_rng(0)
    llm.reset()
    llm.eval(rng.integers(0, vocab, context).tolist())
    times: dict[int, list] = {n: [] for n in ns}
    for r in range(warmup + repeats):
        for n in ns:
            ids = rng.integers(0, vocab, n).tolist()
            llm.n_tokens = context  # crop: the next eval removes every cached position from here on
            t0 = time.perf_counter()
            llm.eval(ids)
            if r >= warmup:
                times[n].append(time.perf_counter() - t0)
    got = np.asarray(llm.scores[context: context + max(ns)])  # the last pass's rows: logits of every row were made
    if not np.isfinite(got[: ns[-1]]).all():
        raise RuntimeError(f"{path}: llama.cpp gave non-finite logits")
    return {"ms": {n: 1e3 * float(np.median(t)) for n, t in times.items()}, "vocab": vocab,
            "version": llama_cpp.__version__}
