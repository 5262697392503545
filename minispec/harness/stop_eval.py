"""``minispec bench stop``: the early stop on the draft's confidence (policy/auto_k.py: AutoK.keep), measured.

Per prompt, side by side in one run: plain decoding (before and after), fixed K = 1 and K, the
same K cut by the early stop (``StoppedK``), and K = auto with and without the stop, each policy built
(and its calibration read) before the clock starts. Speedup is the median over prompts of each run's
tokens/s over plain decoding's; greedy runs must equal plain decoding token for token, but for a
near-tie (a top-2 margin under check.TIE_MARGIN), which is reported with its margin. A prompt whose speedup is above
its run's tokens per target pass (``measure.speedup_bound``) is noise, counted beside each median, and a median
above its prompts' median tokens per pass is marked noise; a busy machine is named beside the figures.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ..drafters import HasModel, has, make_drafter
from ..generate import generate
from ..policy import auto_k, follows_clock, stopped_k
from ..recipes.fetch import shipped_draft
from ..speculative import speculative_generate
from .check import TIE_MARGIN, first_difference, margin
from .command import (
    MODEL_HELP,
    busy_line,
    count,
    given_or_shipped,
    load_target,
    median_bound,
    noise_count,
    noise_marks,
    noise_note,
)
from .measure import others_load, side_by_side, speedup_bound
from .progress import Progress
from .prompts import PROMPT_SETS, load_prompts


def configs(target, k: int, learn: bool) -> dict:
    """name -> (drafter -> what speculative_generate takes as k: a fixed K, or a policy, built before the clock
    starts, its calibration read then; ``learn`` as the loop would choose it, ``follows_clock``)."""
    def auto_without_stop(d):
        policy = auto_k(target, d, learn=learn)
        policy.keep = None
        return policy

    return {"K=1": lambda d: 1, f"K={k}": lambda d: k, f"K={k} + stop": lambda d: stopped_k(target, d, k),
            "auto": lambda d: auto_k(target, d, learn=learn), "auto, no stop": auto_without_stop}


def run(target, drafter, prompts: dict, k: int, temperatures, max_new_tokens: int, stop_ids=(), bar=None) -> dict:
    """{"rows": temperature -> config name -> [(prompt set, speedup over plain, tokens per pass, guesses per round,
    the most the speedup can be: the run's tokens per target pass)],
    "near_ties": the greedy differences from plain decoding at a top-2 margin under TIE_MARGIN, each with its margin}
    (design.md's greedy identity), "load_before" and "load_after": the other processes' load average. A greedy
    difference at a larger margin is a ValueError naming it."""
    out = {"rows": {}, "near_ties": [], "load_before": others_load()}
    for temp in temperatures:
        rows = out["rows"][temp] = {name: [] for name in configs(target, k, True)}
        for pset, plist in prompts.items():
            for i, ids in enumerate(plist):
                w = dict(temperature=temp, seed=7 + i, stop_ids=stop_ids)
                cfgs = configs(target, k, follows_clock(w["seed"], temp))  # a seeded run at T > 0 keeps its costs
                names = list(cfgs)
                made = {name: cfgs[name](drafter) for name in names}  # before the clock (bug: inside it, so the first
                # run of each policy paid for reading, probing or measuring its calibration, and plain decoding did not)

                def spec(name, ids=ids, w=w, made=made):
                    return speculative_generate(target, drafter, ids, max_new_tokens, k=made[name], **w)

                plain, plain_tok_s, results = side_by_side(lambda ids=ids, w=w: generate(target, ids, max_new_tokens, **w),
                                                           [lambda n=n: spec(n) for n in names])
                got = {}
                for name, (res, dt) in zip(names, results):
                    got[name] = (len(res.tokens) / dt, res.stats, speedup_bound(len(res.tokens), res.stats.rounds))
                    if temp == 0 and res.tokens != plain:  # (bug: any difference was an AssertionError, near-ties too)
                        j = first_difference(res.tokens, plain)
                        gap = margin(target, list(ids) + plain[:j])
                        if gap >= TIE_MARGIN:
                            raise ValueError(f"{name}: greedy output differs from plain decoding at token {j} of a "
                                             f"{pset} prompt, at a top-2 margin of {gap:.3g} (not a near-tie)")
                        out["near_ties"].append(dict(config=name, prompt_set=pset, prompt=i, position=j, margin=gap))
                for name, (tok_s, st, bound) in got.items():
                    rows[name].append((pset, tok_s / plain_tok_s, st.mean_tokens_per_pass, st.drafted / st.rounds, bound))
                if bar is not None:
                    bar.update()
    out["load_after"] = others_load()
    return out


def median_words(r: list) -> str:
    """The median speedup of rows ``r`` (``run``'s), marked noise where it is above their median tokens per target
    pass, with how many were above theirs: "1.12x", "1.31x noise (4 of 6)", "1.02x (1 of 6 noise)"."""
    speedups, bounds = [x[1] for x in r], [x[4] if len(x) > 4 else None for x in r]
    m = float(np.median(speedups))
    return f"{m:.2f}x" + noise_marks(m, median_bound(bounds), noise_count(speedups, bounds), len(speedups))


def report(res: dict, drafter: str, max_new_tokens: int, prompts_per_set: int) -> str:
    """What ``minispec bench stop`` prints: per temperature and configuration, the median speedup per prompt set and
    over all (noise marked), tokens per pass and guesses a round; the near-ties; the noise and a busy machine."""
    lines = [f"draft {drafter}, {max_new_tokens} new tokens, {prompts_per_set} prompts per set; speedup over plain "
             "decoding (median over prompts), mean tokens per target pass, mean guesses verified per round"]
    noisy = runs = 0
    for temp, rows in res["rows"].items():
        cells = {name: [median_words([x for x in r if x[0] == s]) for s in PROMPT_SETS] + [median_words(r)]
                 for name, r in rows.items()}
        w = max([10] + [len(c) + 2 for v in cells.values() for c in v])  # 10 as before, wider where noise is marked
        lines += ["", f"{'greedy' if temp == 0 else f'T={temp:g}'}",
                  f"  {'':<16}" + "".join(f"{s:>{w}}" for s in [*PROMPT_SETS, "all"]) + f"{'tok/pass':>10}{'guesses':>9}"]
        for name, r in rows.items():
            lines.append(f"  {name:<16}" + "".join(f"{c:>{w}}" for c in cells[name])
                         + f"{np.mean([x[2] for x in r]):>10.2f}{np.mean([x[3] for x in r]):>9.2f}")
            noisy += noise_count([x[1] for x in r], [x[4] if len(x) > 4 else None for x in r])
            runs += len(r)
    for t in res["near_ties"]:
        lines.append(f"near-tie: {t['config']}, {t['prompt_set']} prompt {t['prompt']}, token {t['position']}: greedy "
                     f"output differs from plain decoding at a top-2 margin of {t['margin']:.3g} (under {TIE_MARGIN:g})")
    busy = busy_line(res.get("load_before"), res.get("load_after"))
    return "\n".join(lines + noise_note(noisy, runs, "prompt runs") + ([busy] if busy else []))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="minispec bench stop",
                                description="early stop on the draft's confidence: fixed K with and without it, "
                                            "K = auto with and without it, against plain decoding, side by side")
    p.add_argument("--model", help=MODEL_HELP)
    p.add_argument("--draft", help="draft model directory (default: the shipped draft)")
    p.add_argument("--k", type=int, default=4, help="the fixed K to cut (default 4)")
    p.add_argument("--prompts-per-set", type=count, default=6, help="prompts from each of code, chat, grounded (default 6)")
    p.add_argument("--max-new-tokens", type=count, default=64)
    p.add_argument("--temperatures", default="0,1", help="comma-separated; 0 is greedy (default 0,1)")
    a = p.parse_args(argv)
    if not 2 <= a.k <= 8:
        p.error("--k must be in 2..8: the first guess is never cut, and the cost model is calibrated up to 9 rows")
    spec = given_or_shipped(p, a.draft, shipped_draft(),
                            "no draft model: pass --draft DIR (the early stop needs a drafter with its own probabilities)")
    target, tok = load_target(a.model)
    drafter = make_drafter(spec, target)
    if drafter is None or not has(drafter, HasModel):
        p.error(f"{spec}: the early stop needs a draft model (prompt lookup's guesses are certain)")
    temps = [float(t) for t in a.temperatures.split(",")]
    prompts = {s: load_prompts(s, tok, a.prompts_per_set) for s in PROMPT_SETS}
    generate(target, prompts["code"][0][:8], 4)  # warm up
    bar = Progress(len(temps) * sum(map(len, prompts.values())), "bench stop")
    try:
        res = run(target, drafter, prompts, a.k, temps, a.max_new_tokens, tok.eos_ids, bar)
    except ValueError as e:
        bar.close()
        print(f"error: {e}", file=sys.stderr)
        return 1
    bar.close()
    print(report(res, drafter.name, a.max_new_tokens, a.prompts_per_set))
    return 0


if __name__ == "__main__":
    sys.exit(main())
