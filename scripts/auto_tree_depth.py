"""The automatic dynamic tree with and without its depth choice, side by side (issue 43; docs/policy.md).

    MINISPEC_KERNEL=numba python scripts/auto_tree_depth.py [--prompts 8] [--tokens 64] [--top-k 4]

For each prompt of minispec/data's code and chat sets, greedy: plain decoding, the automatic tree as it is
(``AutoDynamicTree``: the depth of each growth chosen from what the growths so far were worth), the same tree with
every growth at the shape's full depth (``FullDepth``), the fixed 2x2x4 tree (the smallest of
docs/eagle/scaling.md's timed shapes, for scale), then plain decoding again
(``measure.side_by_side``); the speedup in tokens a second over plain decoding's, the median per set, and the tokens a
target pass. Time it on a quiet machine.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from minispec.drafters.dynamic_tree import DynamicTree
from minispec.drafters.eagle import load_eagle
from minispec.generate import generate
from minispec.harness.command import count, load_target
from minispec.harness.measure import side_by_side
from minispec.harness.prompts import load_prompts
from minispec.harness.provenance import provenance
from minispec.policy import auto_dynamic_tree
from minispec.policy.dynamic_tree_policy import AutoDynamicTree
from minispec.recipes.fetch import shipped_eagle
from minispec.speculative import tree_speculative_generate


class FullDepth(AutoDynamicTree):
    """The automatic tree without the depth choice: ``choose`` is told no depths, so every growth grows the shape's
    full depth (otherwise the policy as it is, its running mean of what growths were worth included)."""

    def choose(self, values, depths=None):
        return super().choose(values)


def full_depth(target, eagle, shape) -> FullDepth:
    made = auto_dynamic_tree(target, eagle, shape)  # the same calibrations (in memory after the first)
    policy = FullDepth(made.shape, made.verify_time, made.frontier_time, row_time=made.row_time)
    policy.calibrations = made.calibrations
    return policy


def fixed_2x2x4(target, eagle, shape) -> DynamicTree:
    return DynamicTree(2, 2, 4)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=count, default=8)
    p.add_argument("--tokens", type=count, default=64)
    p.add_argument("--top-k", type=int, default=DynamicTree().top_k,
                   help="children per node and nodes per frontier of the two automatic trees (default: DynamicTree's)")
    a = p.parse_args(argv)
    shape = DynamicTree(top_k=a.top_k)
    target, tok = load_target(None)
    eagle = load_eagle(shipped_eagle(), target)
    auto_dynamic_tree(target, eagle, shape)  # calibrated before any clock
    print(provenance(argv, "python scripts/auto_tree_depth.py"))
    for name in ("code", "chat"):
        rows = {"depth chosen": [], "full depth": [], "fixed 2x2x4": []}
        tpp = {k: [0, 0] for k in rows}
        for i, ids in enumerate(load_prompts(name, tok, a.prompts)):
            runs = [lambda ids=ids, make=make: tree_speculative_generate(target, eagle, ids, a.tokens,
                                                                         shape=make(target, eagle, shape),
                                                                         stop_ids=tok.eos_ids)
                    for make in (auto_dynamic_tree, full_depth, fixed_2x2x4)]  # each run's policy made afresh (the calibrations
            # are in memory: no clock there)
            plain, rate, timed = side_by_side(lambda ids=ids: generate(target, ids, a.tokens, stop_ids=tok.eos_ids), runs)
            for key, (res, seconds) in zip(rows, timed):
                assert res.tokens == plain, f"{name} prompt {i}: greedy output differs from plain decoding"
                rows[key].append(len(res.tokens) / seconds / rate)
                tpp[key][0] += len(res.tokens)
                tpp[key][1] += res.stats.rounds
        print(name + ": " + "; ".join(f"{k} {np.median(v):.2f}x [{min(v):.2f}, {max(v):.2f}], "
                                      f"{tpp[k][0] / tpp[k][1]:.2f} tokens a pass" for k, v in rows.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
