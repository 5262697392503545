"""``minispec bench auto``: does ``k="auto"`` keep its promise, never slower than plain decoding, for every drafter?

Per drafter and prompt set (and first for plain decoding against itself: the noise floor of the run), each
prompt is decoded plainly and with ``k="auto"`` (greedy), alternating, ``--repeats`` times each, with a fresh drafter
and policy made before each timed run (``measure.alternate``: the floor as ``../shared/design.md`` defines it); the
speedup is auto's fastest run against plain's fastest, and the median is over prompts; the report gives each set's
lowest prompt beside its median, and names a drafter's set below the floor (``measure.MEDIAN_FLOOR`` and
``PROMPT_FLOOR``: a median under 0.97x, or a prompt under 0.90x; the control, plain against plain, shows the noise
and is held to none). A prompt whose speedup is above its run's tokens per target pass (``measure.speedup_bound``)
is noise, not a speedup: each set counts them, and a median above its prompts' median tokens per pass is marked noise.
The load average (of the other processes) is recorded before and after: a run with either above 0.5 is marked busy. Per drafter, the cost
model's predicted seconds of a round next to the measured ones: drafting rounds and plain rounds apart, as
the mean of measured / predicted, with the share of rounds that drafted and the run's final slowdown.

``--calibration corrupted`` first stores, in a cache directory of its own, calibrations that are wrong the way a
busy machine's are (``corrupt_calibration``: the target's t(n) multiplied by ``BUSY``, t(1) x 2.6, t(2) x 6.1,
t(3) x 1.35, ...; every drafter's guess 3x too cheap), then runs: the cost model must distrust every stored figure
and measure it afresh.
"""

from __future__ import annotations

import json
import sys
import tempfile

import numpy as np

from ..drafters import make_drafter
from ..generate import generate
from ..policy import calibration as store
from ..policy import k_policy, notes_of
from ..rounds import SpecResult
from ..speculative import speculative_generate
from ..stats import SpecStats
from .calibration_store import DiskStore
from .command import (
    check_json_path,
    count,
    drafters_parser,
    last_prompts,
    load_target_and_drafters,
    markdown_table,
    median_bound,
    noise_count,
    noise_marks,
    noise_note,
    print_and_store,
    shipped_drafters,
)
from .measure import MEDIAN_FLOOR, PROMPT_FLOOR, alternate, busy_words, others_load, speedup_bound
from .progress import Progress
from .prompts import PROMPT_SETS

# t(n) on a busy machine over t(n) on a quiet one: the two calibrations docs/policy.md quotes ("A cost model that
# survives a noisy machine") for n = 1-5 and 9; n = 6-8 interpolated, and 1.9 past 9
BUSY = {1: 2.59, 2: 6.10, 3: 1.35, 4: 1.38, 5: 1.69, 6: 1.75, 7: 1.80, 8: 1.85, 9: 1.90}


def drafter_specs() -> list[str]:
    """"none" first: plain decoding against itself, the run's noise floor (a ratio off 1.00 is the machine); then
    prompt lookup, layer skip and every shipped drafter."""
    return ["none", "prompt-lookup", "layer-skip"] + shipped_drafters()


def corrupt_calibration(target, drafters) -> None:
    """Measure and store honest calibrations of the target and of every drafter, then rewrite every stored run of
    them (harness/calibration_store.py): each t(n) of the target multiplied by ``BUSY[n]``, each drafter's seconds per
    guess divided by 3."""
    for d in drafters:
        k_policy("auto", target, d)
    disk = store.attached_store()
    if not isinstance(disk, DiskStore):
        raise RuntimeError("bench auto --calibration corrupted needs the disk store (unset MINISPEC_NO_CALIBRATION_CACHE)")
    for f in disk.folder.glob("*.json"):
        data = json.loads(f.read_text())
        for run in data["runs"]:
            t = run["times"]
            if "guess" in t:
                t["guess"] /= 3
            elif store.is_key_of(data["key"], target):  # the target's t(n), not a drafter's tree levels
                for n in t:
                    t[n] *= BUSY.get(int(n), 1.9)
        f.write_text(json.dumps(data))
    store.forget_in_memory()  # as a new process: it reads the corrupted figures


def round_ratios(timed) -> dict:
    """Mean measured / predicted seconds of drafting and of plain rounds, and the share that drafted; for drafting
    rounds also of their two sides apart: the drafting side (guesses, label, catching up) and the target pass (with
    the rule)."""
    mean = lambda xs: float(np.mean(xs)) if xs else None  # noqa: E731
    drafting = [t for t in timed if t.drafted and t.predicted > 0]
    plain = [t.measured / t.predicted for t in timed if not t.drafted and t.predicted > 0]
    return dict(drafting=mean([t.measured / t.predicted for t in drafting]), plain=mean(plain),
                drafted_share=len(drafting) / max(1, len(drafting) + len(plain)),
                drafting_side=mean([t.measured_drafting / t.predicted_drafting for t in drafting
                                    if t.predicted_drafting > 0]),
                target_pass=mean([(t.measured - t.measured_drafting) / (t.predicted - t.predicted_drafting)
                                  for t in drafting if t.predicted > t.predicted_drafting]))


def run(a) -> dict:
    target, tok, drafters = load_target_and_drafters(a.model, a.draft or drafter_specs())
    if a.calibration == "corrupted":
        corrupt_calibration(target, drafters.values())
    prompts = last_prompts(tok, a.prompts)
    bar = Progress(len(drafters) * len(PROMPT_SETS) * a.prompts * a.repeats * 2, "bench auto")
    out = {"tokens": a.tokens, "repeats": a.repeats, "calibration": a.calibration, "load_before": others_load(),
           "drafters": {}}
    for spec, drafter in drafters.items():
        row, by_prompt, bounds, policies = {}, {}, {}, []
        for name, ids in prompts.items():
            ratios, bounds[name] = [], []
            for p in ids:
                def prepare(p=p, spec=spec, policies=policies):  # a fresh drafter and policy, before the clock
                    if spec == "none":  # the control: plain decoding, as a result of the same shape
                        return lambda: SpecResult(generate(target, p, a.tokens), SpecStats())
                    fresh = make_drafter(spec, target)
                    policy = k_policy("auto", target, fresh, learn=True)
                    policies.append(policy)
                    return lambda: speculative_generate(target, fresh, p, a.tokens, k=policy)

                plain_seconds, (res, seconds) = alternate(lambda p=p: generate(target, p, a.tokens), prepare,
                                                          a.repeats, bar.update)
                ratios.append((len(res.tokens) / seconds) / (a.tokens / plain_seconds))
                bounds[name].append(speedup_bound(len(res.tokens), res.stats.rounds))  # None for the control
            row[name] = float(np.median(ratios))
            by_prompt[name] = [float(x) for x in ratios]  # the floor's second condition reads each prompt's
        timed = [t for policy in policies for t in policy.timed]
        notes = sorted({n for policy in policies for n in notes_of(policy.calibrations)})
        slowdown = float(np.median([policy.slowdown for policy in policies])) if policies else 1.0
        out["drafters"][CONTROL if drafter is None else drafter.name] = dict(
            speedup=row, by_prompt=by_prompt, rounds=round_ratios(timed), slowdown=slowdown, notes=notes,
            by_prompt_tokens_per_pass=bounds,  # each prompt's: the most its speedup can be (None: the control)
            noise={s: noise_count(by_prompt[s], bounds[s]) for s in by_prompt})
    bar.close()
    out["load_after"] = others_load()
    return out


CONTROL = "plain (control)"  # plain decoding against itself: the run's noise, held to no floor


def floor_words(d: dict, s: str, control: bool = False) -> str:
    """A set's median speedup, its lowest prompt's, and where the floor is missed, which of its two conditions (none
    for the ``control``, whose figures show how far noise alone moves them); a median above what its prompts' tokens per
    target pass allow is marked noise, with the prompts that were (``set_noise``)."""
    low = min(d["by_prompt"][s]) if d.get("by_prompt") else None
    missed = [] if control else [w for w, bad in (("median", d["speedup"][s] < MEDIAN_FLOOR),
                                                  ("a prompt", low is not None and low < PROMPT_FLOOR)) if bad]
    return (f"{d['speedup'][s]:.2f}x" + set_noise(d, s) + ("" if low is None else f" (lowest {low:.2f}x)")
            + (f" below the floor: {' and '.join(missed)}" if missed else ""))


def set_noise(d: dict, s: str) -> str:
    """" noise (2 of 3)" where set ``s``'s median speedup is above its prompts' median tokens per target pass, " (1 of 3
    noise)" where only some prompts' speedups were above theirs; "" where none was, or the prompts' tokens per pass were
    not stored."""
    speedups, bounds = (d.get("by_prompt") or {}).get(s, []), (d.get("by_prompt_tokens_per_pass") or {}).get(s, [])
    if len(bounds) != len(speedups):
        return ""
    return noise_marks(d["speedup"][s], median_bound(bounds), noise_count(speedups, bounds), len(speedups))


def report(res: dict) -> str:
    fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    rows = [[name, *(floor_words(d, s, name == CONTROL) for s in PROMPT_SETS), fmt(d["rounds"]["drafting"]), fmt(d["rounds"]["plain"]),
             fmt(d["rounds"].get("drafting_side")), fmt(d["rounds"].get("target_pass")),
             f"{d['rounds']['drafted_share']:.2f}"] for name, d in res["drafters"].items()]
    lines = markdown_table(f"k=auto against plain decoding, greedy, {res['tokens']} tokens, each side's fastest of {res['repeats']} "
                           f"alternating runs, calibration {res['calibration']}: speedup (median over prompts), and the cost "
                           "model's rounds (mean measured / predicted seconds)",
                           ["drafter", *PROMPT_SETS, "drafting rounds", "plain rounds", "drafting rounds: drafting side",
                            "drafting rounds: target pass", "rounds that drafted"], rows)
    notes = sorted({n for d in res["drafters"].values() for n in d["notes"]})
    loads = ", ".join(f"{k.replace('_', ' ')} {res[k]:.2f}" for k in ("load_before", "load_after") if res.get(k) is not None)
    busy = busy_words(res.get("load_before"), res.get("load_after"))  # busy where either says so (design.md's quiet
    # is the load as the measurement starts; a load that began during it shows at its end)
    counted = [(d["by_prompt"][s], d["by_prompt_tokens_per_pass"][s]) for d in res["drafters"].values()
               for s in d.get("by_prompt_tokens_per_pass", {}) if s in d.get("by_prompt", {})]
    noise = noise_note(sum(noise_count(sp, b) for sp, b in counted), sum(len(sp) for sp, b in counted if None not in b),
                       "prompts")
    return "\n".join(lines + ([""] + [f"- {n}" for n in notes] if notes else []) + noise
                     + ([f"\nLoad average of the other processes: {loads}{busy}."] if loads else []))


def main(argv=None) -> int:
    p = drafters_parser("minispec bench auto", __doc__.split("\n\n")[0], "every shipped drafter, prompt lookup and layer skip",
                        tokens=64)
    p.add_argument("--repeats", type=count, default=2, help="alternating runs per prompt; each side's best counts (default 2)")
    p.add_argument("--calibration", choices=["honest", "corrupted"], default="honest")
    a = p.parse_args(argv)
    check_json_path(a.json)
    before = store.attached_store()
    try:
        if a.calibration == "corrupted":  # a store of its own: the user's calibrations stay as they are
            store.use_store(DiskStore(tempfile.mkdtemp(prefix="minispec-corrupted-")))
            store.forget_in_memory()  # measured afresh, stored there, then corrupted
        res = run(a)
    finally:
        store.use_store(before)
        if a.calibration == "corrupted":
            store.forget_in_memory()  # the corrupted figures' replacements belong to the temporary store
    print_and_store(report(res), res, a.json, p.prog, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
