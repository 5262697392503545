"""``minispec bench rules``: the token-wise rule and block verification side by side, at T = 1, for every drafter.

Per drafter, over the evaluation prompts (the last ``--prompts`` of each set) and ``--seeds`` seeds each, at a
fixed K: tokens per target pass of each rule (the same seeds, so the same drafter and prompts; only the rule
differs), and each rule's speed over plain sampling, timed side by side (plain, token-wise, block, plain, per
prompt and seed). Block verification never keeps fewer guesses in expectation (rejection.block_verify); the
paper (Sun et al. 2025) measured 7-10% more tokens per pass and 5-8% more speed on its models.
"""

from __future__ import annotations

import sys

import numpy as np

from ..generate import generate
from ..model.progress import Progress
from ..speculative import speculative_generate
from .command import check_json_path, drafters_parser, last_prompts, load_target_and_drafters, markdown_table, print_and_store, shipped_drafters
from .measure import side_by_side

RULES = ("token", "block")


def run(a) -> dict:
    specs = a.draft or shipped_drafters(own_tokenizer=("tli",)) + ["prompt-lookup"]
    target, tok, drafters = load_target_and_drafters(a.model, specs)
    prompts = [p for ps in last_prompts(tok, a.prompts).values() for p in ps]
    bar = Progress(len(drafters) * len(prompts) * a.seeds * 4, "bench rules")
    out = {"k": a.k, "tokens": a.tokens, "temperature": 1.0, "prompts": len(prompts), "seeds": a.seeds, "drafters": {}}
    for drafter in drafters.values():
        emitted, passes, speed = {r: 0 for r in RULES}, {r: 0 for r in RULES}, {r: [] for r in RULES}
        for p in prompts:
            for seed in range(a.seeds):
                runs = [lambda p=p, seed=seed, rule=rule, drafter=drafter: speculative_generate(
                    target, drafter, p, a.tokens, k=a.k, temperature=1.0, seed=seed, rule=rule) for rule in RULES]
                _, plain_rate, results = side_by_side(lambda p=p, seed=seed: generate(target, p, a.tokens, temperature=1.0,
                                                                                         seed=seed), runs, bar.update)
                for rule, (res, seconds) in zip(RULES, results):
                    emitted[rule] += len(res.tokens)
                    passes[rule] += res.stats.rounds
                    speed[rule].append(len(res.tokens) / seconds / plain_rate)
        out["drafters"][drafter.name] = {rule: dict(tokens_per_pass=emitted[rule] / passes[rule],
                                                    speedup=float(np.median(speed[rule]))) for rule in RULES}
    bar.close()
    return out


def report(res: dict) -> str:
    rows = []
    for name, d in res["drafters"].items():
        t, b = d["token"], d["block"]
        rows.append([name, f"{t['tokens_per_pass']:.3f}", f"{b['tokens_per_pass']:.3f}",
                     f"{100 * (b['tokens_per_pass'] / t['tokens_per_pass'] - 1):+.1f}%", f"{t['speedup']:.2f}x", f"{b['speedup']:.2f}x"])
    return "\n".join(markdown_table(
        f"Token-wise rule against block verification, T = 1, K = {res['k']}, {res['tokens']} tokens, {res['prompts']} "
        f"prompts x {res['seeds']} seeds (the same for both rules), each timed against plain sampling in the same run "
        "(median over runs):",
        ["drafter", "tokens/pass, token-wise", "tokens/pass, block", "gain", "speedup, token-wise", "speedup, block"], rows))


def main(argv=None) -> int:
    p = drafters_parser("minispec bench rules", __doc__.split("\n\n")[0], "the shipped drafters and prompt lookup", tokens=48)
    p.add_argument("--k", type=int, default=4, help="guesses per round (default 4)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per prompt (default 3)")
    a = p.parse_args(argv)
    check_json_path(a.json)
    res = run(a)
    print_and_store(report(res), res, a.json, p.prog, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
