"""Are a row's logits the same whatever the pass it is computed in? Measured on the real model, per kernel.

    python -m minispec.harness.batch_invariance [--json docs/kernel/batch_invariance.json] [--kernels numpy,numba]

Greedy speculative output equals plain greedy output token for token only if the target's row for a position is
the same in a verification pass (n rows) as in a plain step (one row). For each kernel this feeds a code prompt of
``--positions`` tokens after a 32-token prefix: once one token per pass (the reference), then in passes of n rows
(n = 2, 4, 8, 16). For each n it records the share of rows whose logits are bitwise identical to the reference's,
the largest absolute difference, and the rows whose argmax changed, with the reference's top-2 margin there (a
flip needs a margin below the difference).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ..model.provenance import provenance

NS = (2, 4, 8, 16)


def rows_in_passes(model, ids: list[int], prefix: int, n: int) -> np.ndarray:
    """Logits of positions prefix..len(ids)-1, computed n rows per pass -> [len(ids) - prefix, V]."""
    cache = model.new_cache(len(ids))
    model.forward(ids[:prefix], cache, last=1)
    out = []
    for a in range(prefix, len(ids), n):
        out.append(model.forward(ids[a: a + n], cache))  # [n, V]
    return np.concatenate(out)


def measure(model, ids: list[int], prefix: int) -> dict:
    ref = rows_in_passes(model, ids, prefix, 1)
    top2 = np.sort(ref, axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    out = {}
    for n in NS:
        got = rows_in_passes(model, ids, prefix, n)
        same = np.all(got == ref, axis=1)
        flips = np.flatnonzero(got.argmax(1) != ref.argmax(1))
        out[str(n)] = dict(identical_rows=float(same.mean()), max_abs_diff=float(np.abs(got - ref).max()),
                           argmax_flips=[dict(row=int(r), margin=float(margin[r])) for r in flips])
    out["smallest_margin"] = float(margin.min())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minispec.harness.batch_invariance", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    ap.add_argument("--kernels", default="numpy,numba")
    ap.add_argument("--positions", type=int, default=64)
    a = ap.parse_args(argv)
    from ..model import load_model, load_tokenizer
    from ..model.fetch import resolve_model
    from .prompts import load_prompts

    target_dir = resolve_model(None)
    tok = load_tokenizer(target_dir)
    ids = [t for p in load_prompts("code", tok, 3) for t in p][: 32 + a.positions]
    record = dict(positions=len(ids) - 32, prefix=32, kernels={})
    for kernel in [k for k in a.kernels.split(",") if k]:
        print(f"[batch_invariance: {kernel}]", file=sys.stderr, flush=True)
        record["kernels"][kernel] = measure(load_model(target_dir, kernel=kernel), ids, 32)
    record["provenance"] = provenance(argv, "python -m minispec.harness.batch_invariance")
    text = json.dumps(record, indent=1)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
