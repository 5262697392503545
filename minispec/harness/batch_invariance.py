"""Are a row's logits the same whatever the pass it is computed in? Measured on the real model, per kernel.

    python -m minispec.harness.batch_invariance [--json docs/kernel/batch_invariance.json] [--kernels numpy,numba]

Greedy speculative output equals plain greedy output token for token only if the target's row for a position is
the same in a verification pass (n rows) as in a plain step (one row). For each kernel this feeds a code prompt of
``--positions`` tokens after a 32-token prefix: once one token per pass (the reference), then in passes of n rows
(n = 2, 3, 4, 8, 16; a pass of 3 rows goes through the numba kernel's 2-row and 1-row tiles, one of 4 through its
4-row tile). For each n it records the
share of rows whose logits are bitwise identical to the reference's, the largest absolute difference, and the rows
whose argmax changed, with the reference's top-2 margin there (a flip needs a margin below the difference).

``tree``: the rows of one tree verification pass (tree.verify_tree: 3 branches of 3 nodes after the prefix, siblings
masked out of each other's keys), each against its own path fed one token per pass.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from .command import check_kernels, count
from .provenance import provenance

NS = (2, 3, 4, 8, 16)


def rows_in_passes(model, ids: list[int], prefix: int, n: int) -> np.ndarray:
    """Logits of positions prefix..len(ids)-1, computed n rows per pass -> [len(ids) - prefix, V]."""
    cache = model.new_cache(len(ids))
    model.forward(ids[:prefix], cache, last=1)
    out = []
    for a in range(prefix, len(ids), n):
        out.append(model.forward(ids[a: a + n], cache))  # [n, V]
    return np.concatenate(out)


def tree_rows(model, ids: list[int], prefix: int, width: int = 3, depth: int = 3) -> dict:
    """A tree's rows from one masked pass against each node's path run one row per pass (module docstring). The
    first branch follows ``ids``; the others take tokens from further on in it."""
    from ..tree import Tree, verify_tree

    tree, paths = Tree(), [[]]
    for b in range(width):
        node = 0
        for d in range(depth):
            node = tree.add(node, int(ids[prefix + 1 + d + 7 * b]), np.zeros(0, np.float32))
            paths.append(tree.path(node))
    cache = model.new_cache(prefix + 1 + len(tree))
    model.forward(ids[:prefix], cache, last=1)
    got = verify_tree(model, cache, [ids[prefix]], tree)  # [N+1, V]: the root, then the nodes
    ref = []
    for path in paths:
        cache = model.new_cache(prefix + 1 + depth)
        model.forward(ids[:prefix], cache, last=1)
        row = model.forward([ids[prefix]], cache)
        for token in [tree.tokens[n] for n in path]:
            row = model.forward([token], cache)
        ref.append(row[0])
    ref = np.array(ref)
    return dict(rows=len(ref), identical_rows=float(np.all(got == ref, axis=1).mean()),
                max_abs_diff=float(np.abs(got - ref).max()))


def measure(model, ids: list[int], prefix: int, tree: bool = True) -> dict:
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
    if tree:
        out["tree"] = tree_rows(model, ids, prefix)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minispec.harness.batch_invariance", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    ap.add_argument("--kernels", default="numpy,numba")
    ap.add_argument("--positions", type=count, default=64)
    ap.add_argument("--model", default=None, help="target directory (default: SmolLM2-135M-Instruct; its Q4_1 "
                                                  "conversion, minispec fetch smollm2 --q4_1, for the quantized target)")
    a = ap.parse_args(argv)
    check_kernels(ap, a.kernels, a.json)  # before any model loads (bug: an unknown kernel after the first one's runs)
    from ..model import load_model, load_tokenizer
    from ..recipes.fetch import resolve_model
    from .prompts import load_prompts

    target_dir = resolve_model(a.model)
    tok = load_tokenizer(target_dir)
    ids = [t for p in load_prompts("code", tok, 3) for t in p][: 32 + a.positions]
    record = dict(model=target_dir.name, positions=len(ids) - 32, prefix=32, kernels={})
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
