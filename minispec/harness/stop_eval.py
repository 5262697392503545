"""``minispec bench stop``: the early stop on the draft's confidence (policy/auto_k.py: AutoK.keep), measured.

Per prompt, side by side in one run: plain decoding (before and after), fixed K = 1 and K, the
same K cut by the early stop (``StoppedK``), and K = auto with and without the stop, each policy built
(and its calibration read) before the clock starts. Speedup is the median over prompts of each run's
tokens/s over plain decoding's; greedy runs must equal plain decoding token for token, but for a
near-tie (a top-2 margin under check.TIE_MARGIN), which is reported with its margin.
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
from .command import MODEL_HELP, count, given_or_shipped, load_target
from .measure import side_by_side
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
    """{"rows": temperature -> config name -> [(prompt set, speedup over plain, tokens per pass, guesses per round)],
    "near_ties": the greedy differences from plain decoding at a top-2 margin under TIE_MARGIN, each with its margin}
    (design.md's greedy identity). A greedy difference at a larger margin is a ValueError naming it."""
    out = {"rows": {}, "near_ties": []}
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
                    got[name] = (len(res.tokens) / dt, res.stats)
                    if temp == 0 and res.tokens != plain:  # (bug: any difference was an AssertionError, near-ties too)
                        j = first_difference(res.tokens, plain)
                        gap = margin(target, list(ids) + plain[:j])
                        if gap >= TIE_MARGIN:
                            raise ValueError(f"{name}: greedy output differs from plain decoding at token {j} of a "
                                             f"{pset} prompt, at a top-2 margin of {gap:.3g} (not a near-tie)")
                        out["near_ties"].append(dict(config=name, prompt_set=pset, prompt=i, position=j, margin=gap))
                for name, (tok_s, st) in got.items():
                    rows[name].append((pset, tok_s / plain_tok_s, st.mean_tokens_per_pass, st.drafted / st.rounds))
                if bar is not None:
                    bar.update()
    return out


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
    ties = res["near_ties"]
    print(f"draft {drafter.name}, {a.max_new_tokens} new tokens, {a.prompts_per_set} prompts per set; speedup over "
          "plain decoding (median over prompts), mean tokens per target pass, mean guesses verified per round")
    for temp, rows in res["rows"].items():
        print(f"\n{'greedy' if temp == 0 else f'T={temp:g}'}")
        print(f"  {'':<16}" + "".join(f"{s:>10}" for s in PROMPT_SETS) + f"{'all':>10}{'tok/pass':>10}{'guesses':>9}")
        for name, r in rows.items():
            per_set = [np.median([x[1] for x in r if x[0] == s]) for s in PROMPT_SETS]
            print(f"  {name:<16}" + "".join(f"{v:>9.2f}x" for v in per_set) + f"{np.median([x[1] for x in r]):>9.2f}x"
                  f"{np.mean([x[2] for x in r]):>10.2f}{np.mean([x[3] for x in r]):>9.2f}")
    for t in ties:
        print(f"near-tie: {t['config']}, {t['prompt_set']} prompt {t['prompt']}, token {t['position']}: greedy output "
              f"differs from plain decoding at a top-2 margin of {t['margin']:.3g} (under {TIE_MARGIN:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
