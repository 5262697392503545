"""Benchmarks. ``python -m minispec.bench forward``: the cost of a target pass over n tokens.

Every figure is a median over repeats, and ratios are taken inside one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

import numpy as np


def forward_times(model, ns=(1, 2, 4, 8, 16), context: int = 256, repeats: int = 20, warmup: int = 3) -> dict:
    """Median seconds of ``model.forward`` over n new tokens after ``context`` cached tokens.

    The n values are interleaved inside each repeat so that machine noise hits them alike.
    """
    rng = np.random.default_rng(0)
    cache = model.new_cache(context + max(ns))
    model.forward(rng.integers(0, model.cfg.vocab_size, context), cache)
    times = {n: [] for n in ns}
    for r in range(warmup + repeats):
        for n in ns:
            ids = rng.integers(0, model.cfg.vocab_size, n)
            cache.rollback(context)
            t0 = time.perf_counter()
            model.forward(ids, cache)
            if r >= warmup:
                times[n].append(time.perf_counter() - t0)
    return {n: float(np.median(t)) for n, t in times.items()}


def stream_time(nbytes: int, repeats: int = 7) -> float:
    """Seconds for BLAS to stream ``nbytes`` of float32 weights once: one vector times a matrix that
    size (too big for any cache). A 1-token decode step cannot beat it."""
    w = np.ones((max(nbytes // 4 // 1536, 1), 1536), dtype=np.float32)  # [rows, 1536]
    x = np.ones((1, w.shape[0]), dtype=np.float32)
    x @ w
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        x @ w
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def bench_forward(argv) -> int:
    from .model import load_model
    from .tiny import SMOLLM2_SHAPE, tiny_config, write_random_model

    p = argparse.ArgumentParser(prog="minispec bench forward",
                                description="median ms of a target pass over n tokens, and r(n) = t(n)/t(1)")
    p.add_argument("--model", help="model directory (default: random weights of SmolLM2-135M's shape)")
    p.add_argument("--ns", default="1,2,4,8,16", help="comma-separated token counts (default 1,2,4,8,16)")
    p.add_argument("--context", type=int, default=256, help="cached tokens before the pass (default 256)")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = p.parse_args(argv)
    ns = tuple(int(x) for x in a.ns.split(","))
    if a.model:
        model = load_model(a.model)
    else:
        tmp = tempfile.mkdtemp()
        write_random_model(tmp, tiny_config(**SMOLLM2_SHAPE))
        model = load_model(tmp, name="random SmolLM2-135M shape")
    t = forward_times(model, ns, a.context, a.repeats)
    floor = stream_time(model.weight_bytes)
    res = {"model": model.name, "weight_bytes": model.weight_bytes, "context": a.context,
           "ms": {n: 1e3 * t[n] for n in ns}, "r": {n: t[n] / t[ns[0]] for n in ns},
           "weight_stream_ms": 1e3 * floor, "decode_over_stream": t[1] / floor if 1 in t else None}
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{model.name}: {model.weight_bytes / 1e6:.0f} MB of float32 weights, context {a.context}, "
          f"median of {a.repeats}")
    print(f"{'n':>4} {'ms':>8} {'r(n)':>6}")
    for n in ns:
        print(f"{n:>4} {res['ms'][n]:8.2f} {res['r'][n]:6.2f}")
    print(f"reading the weights once takes {res['weight_stream_ms']:.2f} ms; "
          f"1-token decode / weight stream = {res['decode_over_stream']:.2f}")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = {"forward": bench_forward}
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        print("usage: minispec bench {forward} [options]\n  forward  cost of a target pass over n tokens "
              "(r(n) curve)", file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
