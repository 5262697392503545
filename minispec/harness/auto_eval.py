"""``minispec bench auto``: does ``k="auto"`` keep its promise, never slower than plain decoding, for every drafter?

Per drafter and prompt set (and first for plain decoding against itself: the noise floor of the run), each
prompt is decoded plainly, with ``k="auto"``, and plainly again (side by side, greedy), ``--repeats`` times;
the speedup is auto's best tokens/s over plain's best, and the median is over prompts. Per drafter, the cost
model's predicted seconds of a round next to the measured ones: drafting rounds and plain rounds apart, as
the mean of measured / predicted, with the share of rounds that drafted and the run's final slowdown.

``--calibration corrupted`` first stores a calibration like the one a busy machine once wrote (t(n) of the
target scaled as in docs/policy.md: t(1) x 2.6, t(2) x 6.1, t(3) x 1.35, ...; every drafter's guess 3x too
cheap) in a cache directory of its own, then runs: the calibration must be distrusted and measured afresh.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..drafters import make_drafter
from ..generate import generate
from ..model import load_model, load_tokenizer
from ..model.fetch import resolve_model, shipped_bpe_draft, shipped_draft, shipped_eagle
from ..model.progress import Progress
from ..policy import calibration as store
from ..policy import k_policy, notes_of
from ..rounds import SpecResult
from ..speculative import speculative_generate
from ..stats import SpecStats
from .measure import side_by_side
from .prompts import PROMPT_SETS, load_prompts
from .provenance import provenance

BUSY = {1: 2.59, 2: 6.10, 3: 1.35, 4: 1.38, 5: 1.69, 6: 1.75, 7: 1.80, 8: 1.85, 9: 1.90}  # busy / quiet t(n), measured


def drafter_specs() -> list[str]:
    """"none" first: plain decoding against itself, the run's noise floor (a ratio off 1.00 is the machine)."""
    draft, eagle, bpe = shipped_draft(), shipped_eagle(), shipped_bpe_draft()
    specs = ["none", "prompt-lookup", "layer-skip"] + [s for s in (draft, eagle) if s]
    return specs + ([f"tli:{bpe}", f"slem:{bpe}"] if bpe else [])


def corrupt_calibration(target, drafters) -> None:
    """Measure and store honest calibrations, then scale the stored figures as a busy machine once had them."""
    for d in drafters:
        k_policy("auto", target, d)
    f = store.cache_dir() / "calibration.json"
    data = json.loads(f.read_text())
    for entry in data.values():
        t = entry["times"]
        if "guess" in t:
            t["guess"] /= 3
        else:
            for n in t:
                t[n] *= BUSY.get(int(n), 1.9)
    f.write_text(json.dumps(data))
    store._MEMORY.clear()  # a new process: it reads the corrupted file


def round_ratios(timed) -> dict:
    """Mean measured / predicted seconds of drafting and of plain rounds, and the share that drafted."""
    drafting = [m / p for k, p, m in timed if k and p > 0]
    plain = [m / p for k, p, m in timed if not k and p > 0]
    return dict(drafting=float(np.mean(drafting)) if drafting else None, plain=float(np.mean(plain)) if plain else None,
                drafted_share=len(drafting) / max(1, len(drafting) + len(plain)))


def run(a) -> dict:
    target_dir = resolve_model(a.model)
    target, tok = load_model(target_dir), load_tokenizer(target_dir)
    drafters = {spec: make_drafter(spec, target) for spec in (a.draft or drafter_specs())}
    if a.calibration == "corrupted":
        corrupt_calibration(target, drafters.values())
    prompts = {s: load_prompts(s, tok)[-a.prompts:] for s in PROMPT_SETS}  # the last of each set: no test uses them
    bar = Progress(len(drafters) * len(PROMPT_SETS) * a.prompts * a.repeats * 3, "bench auto")
    out = {"tokens": a.tokens, "repeats": a.repeats, "calibration": a.calibration, "drafters": {}}
    for drafter in drafters.values():
        row, timed, notes, slowdowns = {}, [], set(), []
        for name, ids in prompts.items():
            ratios = []
            for p in ids:
                best_plain = best_auto = 0.0  # each side's best of ``repeats`` alternating runs
                for _ in range(a.repeats):
                    policy = k_policy("auto", target, drafter, learn=True) if drafter is not None else None
                    notes.update(notes_of(policy.calibrations) if policy else [])

                    def auto(p=p, drafter=drafter, policy=policy):
                        if policy is None:  # the control: plain decoding, as a result of the same shape
                            return SpecResult(generate(target, p, a.tokens), SpecStats())
                        return speculative_generate(target, drafter, p, a.tokens, k=policy)

                    _, plain_rate, runs = side_by_side(lambda p=p: generate(target, p, a.tokens), [auto], bar.update)
                    (res, seconds), = runs
                    best_plain, best_auto = max(best_plain, plain_rate), max(best_auto, len(res.tokens) / seconds)
                    timed += policy.timed if policy else []
                    slowdowns.append(policy.slowdown if policy else 1.0)
                ratios.append(best_auto / best_plain)
            row[name] = float(np.median(ratios))
        out["drafters"]["plain (control)" if drafter is None else drafter.name] = dict(speedup=row, rounds=round_ratios(timed),
                                                               slowdown=float(np.median(slowdowns)), notes=sorted(notes))
    bar.close()
    return out


def report(res: dict) -> str:
    lines = [f"k=auto against plain decoding, greedy, {res['tokens']} tokens, best of {res['repeats']} alternating runs, "
             f"calibration {res['calibration']}: "
             "speedup (median over prompts), and the cost model's rounds (mean measured / predicted seconds)", "",
             "| drafter | " + " | ".join(PROMPT_SETS) + " | drafting rounds | plain rounds | rounds that drafted |",
             "|---|" + "---|" * (len(PROMPT_SETS) + 3)]
    for name, d in res["drafters"].items():
        r = d["rounds"]
        fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
        lines.append(f"| {name} | " + " | ".join(f"{d['speedup'][s]:.2f}x" for s in PROMPT_SETS)
                     + f" | {fmt(r['drafting'])} | {fmt(r['plain'])} | {r['drafted_share']:.2f} |")
    notes = sorted({n for d in res["drafters"].values() for n in d["notes"]})
    return "\n".join(lines + ([""] + [f"- {n}" for n in notes] if notes else []))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="minispec bench auto", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="target directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--draft", action="append", help="a drafter spec (repeat; default: every shipped drafter, "
                                                    "prompt lookup and layer skip)")
    p.add_argument("--prompts", type=int, default=3, help="prompts per set (default 3, the last of each set)")
    p.add_argument("--tokens", type=int, default=64, help="tokens per run (default 64)")
    p.add_argument("--repeats", type=int, default=2, help="alternating runs per prompt; each side's best counts (default 2)")
    p.add_argument("--calibration", choices=["honest", "corrupted"], default="honest")
    p.add_argument("--json", help="also write the figures to this JSON file")
    a = p.parse_args(argv)
    if a.json and not Path(a.json).resolve().parent.is_dir():  # refused before the runs, not after them
        raise ValueError(f"--json {a.json}: directory {Path(a.json).resolve().parent} does not exist")
    saved = {k: os.environ.get(k) for k in ("MINISPEC_CACHE", "MINISPEC_NO_CALIBRATION_CACHE")}
    try:
        if a.calibration == "corrupted":  # a cache of its own: the user's calibrations stay as they are
            os.environ["MINISPEC_CACHE"] = tempfile.mkdtemp(prefix="minispec-corrupted-")
            os.environ.pop("MINISPEC_NO_CALIBRATION_CACHE", None)
            store._MEMORY.clear()  # measured afresh, stored there, then corrupted
        res = run(a)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if a.calibration == "corrupted":
            store._MEMORY.clear()  # the corrupted figures' replacements belong to the temporary cache
    print(report(res))
    if a.json:
        origin = provenance(None if argv is None else [*p.prog.split(), *argv])  # date, commit, command, machine
        Path(a.json).write_text(json.dumps(dict(res, provenance=origin), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
