"""Greedy identity at near-ties, on SmolLM2: where the target's top two logits are closer than ``--margin`` (1e-4),
does greedy speculative output still equal plain greedy output?

    python -m minispec.harness.near_ties --find --json docs/kernel/near_ties.json     # the cases (once)
    python -m minispec.harness.near_ties --json docs/kernel/near_ties.json            # every drafter, both kernels

**Finding the cases** (``--find``) costs one forward pass per window, not a decoding run: the committed greedy chat
generations (weights/eagle-data/generations-s2.npz: the target's own greedy answers, made by transformers) are fed
whole to the numba-kernel target, whose rows are batch-invariant (numba_kernel.py), so a row of that pass is the row
plain decoding computes. A case is an answer position j whose top-2 margin is below ``--margin`` and where every
earlier answer token is minispec's own argmax: greedy decoding from the prompt reaches the near-tie. Kept: the
prompt's ids, j, the margin.

**The identity** (the default): for each kernel and each case, plain greedy decoding of j + 8 tokens, then each
drafter's greedy speculative run, compared token for token. A run that parts from plain decoding is recorded with
the position and the plain row's margin there. The numba kernel's rows do not depend on the pass, so its runs must
all be identical (tests/test_near_ties.py asserts it); NumPy's rows move by up to about 1e-4 between passes of
different sizes (docs/kernel/batch_invariance.json), enough to flip an argmax whose margin is below the move at
that row, which these cases need not be.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ..recipes.windows import read_windows
from .check import TIE_MARGIN, margin
from .command import check_kernels
from .provenance import provenance

ROOT = Path(__file__).resolve().parents[2]
GENERATIONS = ROOT / "weights" / "eagle-data" / "generations-s2.npz"
ASSISTANT = [1, 520, 9531, 198]  # "<|im_start|>assistant\n" in SmolLM2's tokenizer: where an answer starts
AFTER = 8  # tokens decoded from the near-tie on (it included)


def chat_windows(path: Path = GENERATIONS) -> list[tuple[list[int], list[int]]]:
    """(prompt, greedy answer) of every greedy chat window of the committed generations, in their order."""
    t, st, sh, settings = read_windows(path)
    kinds = settings["kinds"]
    out = []
    for a, b, s in zip(st[:-1], st[1:], sh):
        if kinds[s % len(kinds)] != "chat-greedy":
            continue
        w = t[a:b].tolist()
        cut = next((i + len(ASSISTANT) for i in range(len(w) - len(ASSISTANT)) if w[i: i + len(ASSISTANT)] == ASSISTANT), None)
        if cut is not None and cut < len(w) - 1:
            out.append((w[:cut], w[cut:]))
    return out


def find(model, windows, margin: float, limit: int, bar=None) -> tuple[list[dict], int]:
    """(near-tie cases (module docstring) among ``windows``, at most ``limit``; the windows scanned). ``model`` must
    be batch-invariant."""
    cases, scanned = [], 0
    for n, (prompt, answer) in enumerate(windows):
        scanned = n + 1
        ids = prompt + answer
        logits = model.forward(ids, model.new_cache(len(ids)))[len(prompt) - 1: -1]  # [len(answer), V]: row j -> answer[j]
        top2 = np.sort(logits, axis=1)[:, -2:]  # [len(answer), 2]
        gaps = top2[:, 1] - top2[:, 0]
        own = logits.argmax(1) == np.array(answer)  # the answer token is minispec's argmax
        for j in range(len(answer)):
            if gaps[j] < margin and own[:j].all():
                cases.append(dict(window=n, prompt=prompt, position=j, margin=float(gaps[j]),
                                  top2=[int(x) for x in np.argsort(logits[j])[-2:][::-1]]))
                break
        if bar is not None:
            bar.update()
        if len(cases) >= limit:
            break
    return cases, scanned


def identity(target, drafters: dict, cases: list[dict]) -> dict:
    """{drafter: {runs, identical, mismatches: [{case, position, margin}]}} for greedy decoding (module docstring)."""
    from ..generate import generate
    from ..speculative import speculative_generate, tree_speculative_generate
    from .check import first_difference

    out = {name: dict(runs=0, identical=0, mismatches=[]) for name in drafters}
    for c_i, case in enumerate(cases):
        n = case["position"] + AFTER
        want = generate(target, case["prompt"], n)
        for name, (drafter, shape) in drafters.items():
            got = (speculative_generate(target, drafter, case["prompt"], n, k=4) if shape is None
                   else tree_speculative_generate(target, drafter, case["prompt"], n, shape=shape)).tokens
            row = out[name]
            row["runs"] += 1
            if got == want:
                row["identical"] += 1
                continue
            j = first_difference(got, want)
            row["mismatches"].append(dict(case=c_i, position=j, margin=margin(target, list(case["prompt"]) + want[:j])))
    return out


def every_drafter(target) -> dict:
    """name -> (drafter, None for a chain of 4 or a tree shape): the shipped draft model, the EAGLE head (chain,
    3x3 tree, dynamic tree), prompt lookup, layer skip."""
    from ..drafters.dynamic_tree import DynamicTree
    from ..drafters.factory import make_drafter

    eagle = make_drafter(str(ROOT / "weights" / "eagle-smollm2-135m"), target)
    return {"draft": (make_drafter(str(ROOT / "weights" / "smoldraft-3l-192"), target), None),
            "eagle": (eagle, None), "eagle, tree 3x3": (eagle, (3, 3)),
            "eagle, dynamic tree": (eagle, DynamicTree()), "prompt-lookup": (make_drafter("prompt-lookup", target), None),
            "layer-skip": (make_drafter("layer-skip", target), None)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minispec.harness.near_ties", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True, help="the cases file: written by --find, read and completed otherwise")
    ap.add_argument("--find", action="store_true", help="find the cases (numba kernel) and write them")
    ap.add_argument("--margin", type=float, default=TIE_MARGIN)
    ap.add_argument("--cases", type=int, default=4, help="stop after this many cases (--find)")
    ap.add_argument("--windows", type=int, default=400, help="scan at most this many windows (--find)")
    ap.add_argument("--kernels", default="numpy,numba")
    a = ap.parse_args(argv)
    if not 0 < a.margin < 1 or a.cases < 1 or a.windows < 1:
        ap.error("--margin must be in (0, 1), --cases and --windows at least 1")
    check_kernels(ap, a.kernels, a.json)  # before any model loads (bug: an unknown kernel after the first one's runs)
    from ..model import load_model
    from ..recipes.fetch import fetch_smollm2
    from .progress import Progress

    target_dir = fetch_smollm2(log=lambda m: print(m, file=sys.stderr))
    path = Path(a.json)
    if a.find:
        windows = chat_windows()[: a.windows]
        bar = Progress(len(windows), "near-ties: windows scanned")
        cases, scanned = find(load_model(target_dir, kernel="numba"), windows, a.margin, a.cases, bar)
        bar.close()
        record = dict(margin=a.margin, windows_scanned=scanned, cases=cases,
                      found=provenance(argv, "python -m minispec.harness.near_ties"))
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"{len(cases)} near-ties (margin < {a.margin:g}): " + ", ".join(f"{c['margin']:.1e}" for c in cases))
        return 0
    try:
        record = json.loads(path.read_text())
        cases = record["cases"]
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {path}: no cases to run ({e}); make them with --find", file=sys.stderr)
        return 2
    record["identity"] = {}
    for kernel in [k for k in a.kernels.split(",") if k]:
        print(f"[near-ties: {kernel}]", file=sys.stderr, flush=True)
        target = load_model(target_dir, kernel=kernel)
        record["identity"][kernel] = identity(target, every_drafter(target), cases)
    record["provenance"] = provenance(argv, "python -m minispec.harness.near_ties")
    path.write_text(json.dumps(record, indent=1) + "\n")
    for kernel, rows in record["identity"].items():
        print(kernel + ": " + "; ".join(f"{name} {r['identical']}/{r['runs']}" for name, r in rows.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
