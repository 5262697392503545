"""``minispec bench stop``: the early stop on the draft's confidence (policy/auto_k.py: AutoK.keep), measured.

Per prompt, side by side in one run: plain decoding (before and after), fixed K = 1 and K, the
same K cut by the early stop (``StoppedK``), and K = auto with and without the stop. Speedup is
the median over prompts of each run's tokens/s over plain decoding's; greedy runs must equal
plain decoding token for token.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ..drafters import HasModel, has, make_drafter
from ..generate import generate
from ..policy import auto_k, stopped_k
from ..recipes.fetch import shipped_draft
from ..speculative import speculative_generate
from .command import MODEL_HELP, count, given_or_shipped, load_target
from .measure import side_by_side
from .progress import Progress
from .prompts import PROMPT_SETS, load_prompts


def configs(target, k: int) -> dict:
    """name -> (drafter -> what speculative_generate takes as k)."""
    def auto_without_stop(d):
        policy = auto_k(target, d)
        policy.keep = None
        return policy

    return {"K=1": lambda d: 1, f"K={k}": lambda d: k, f"K={k} + stop": lambda d: stopped_k(target, d, k),
            "auto": lambda d: "auto", "auto, no stop": auto_without_stop}


def run(target, drafter, prompts: dict, k: int, temperatures, max_new_tokens: int, stop_ids=(), bar=None) -> dict:
    """temperature -> config name -> [(prompt set, speedup over plain, tokens per pass, guesses per round)]."""
    cfgs, out = configs(target, k), {}
    for temp in temperatures:
        rows = out[temp] = {name: [] for name in cfgs}
        for pset, plist in prompts.items():
            for i, ids in enumerate(plist):
                w = dict(temperature=temp, seed=7 + i, stop_ids=stop_ids)
                names = list(cfgs)

                def spec(name, ids=ids, w=w):
                    return speculative_generate(target, drafter, ids, max_new_tokens, k=cfgs[name](drafter), **w)

                plain, plain_tok_s, results = side_by_side(lambda ids=ids, w=w: generate(target, ids, max_new_tokens, **w),
                                                           [lambda n=n: spec(n) for n in names])
                got = {}
                for name, (res, dt) in zip(names, results):
                    got[name] = (len(res.tokens) / dt, res.stats)
                    if temp == 0 and res.tokens != plain:
                        raise AssertionError(f"{name}: greedy output differs from plain decoding")
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
    res = run(target, drafter, prompts, a.k, temps, a.max_new_tokens, tok.eos_ids, bar)
    bar.close()
    print(f"draft {drafter.name}, {a.max_new_tokens} new tokens, {a.prompts_per_set} prompts per set; speedup over "
          "plain decoding (median over prompts), mean tokens per target pass, mean guesses verified per round")
    for temp, rows in res.items():
        print(f"\n{'greedy' if temp == 0 else f'T={temp:g}'}")
        print(f"  {'':<16}" + "".join(f"{s:>10}" for s in PROMPT_SETS) + f"{'all':>10}{'tok/pass':>10}{'guesses':>9}")
        for name, r in rows.items():
            per_set = [np.median([x[1] for x in r if x[0] == s]) for s in PROMPT_SETS]
            print(f"  {name:<16}" + "".join(f"{v:>9.2f}x" for v in per_set) + f"{np.median([x[1] for x in r]):>9.2f}x"
                  f"{np.mean([x[2] for x in r]):>10.2f}{np.mean([x[3] for x in r]):>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
