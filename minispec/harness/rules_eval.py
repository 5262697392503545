"""``minispec bench rules``: the token-wise rule, block verification and the coupled rule side by side, for every
drafter, at T = 1 and T = 0.7.

Per drafter and temperature, over the evaluation prompts (the last ``--prompts`` of each set) and ``--seeds``
seeds each, at a fixed K: each rule's acceptance (guesses kept of guesses drafted) and tokens per target pass
(the same seeds, drafter and prompts; only the rule differs), and its speed over plain sampling, timed side by
side (plain, token-wise, block, coupled, plain, per prompt and seed). Block verification never keeps fewer
guesses in expectation (rejection.block_verify); the paper (Sun et al. 2025) measured 7-10% more tokens per pass
and 5-8% more speed on its models. The coupled rule keeps a guess with probability between (1 - TV)/(1 + TV) and
the token-wise rule's 1 - TV (keyed.coupled_acceptance), and gives the same text with every drafter. A run whose
speedup is above its tokens per target pass (``measure.speedup_bound``) is noise, counted per rule (``noise``), and
a median above its runs' median tokens per pass is marked noise.
"""

from __future__ import annotations

import sys

import numpy as np

from ..generate import generate
from ..speculative import speculative_generate
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
from .measure import others_load, side_by_side, speedup_bound
from .progress import Progress

RULES = ("token", "block", "coupled")
TEMPERATURES = (1.0, 0.7)


def temperature_key(t: float) -> str:
    return f"T={t:g}"


def one_setting(target, drafter, prompts, a, temperature: float, bar) -> dict:
    """{rule: acceptance, tokens per pass, median speedup, and how many of its runs were noise (faster than their tokens
    per target pass allow) with the most the median can honestly be} for one drafter at one temperature."""
    kept, drafted, emitted, passes = ({r: 0 for r in RULES} for _ in range(4))
    speed, bounds = {r: [] for r in RULES}, {r: [] for r in RULES}
    for p in prompts:
        for seed in range(a.seeds):
            runs = [lambda p=p, seed=seed, rule=rule: speculative_generate(
                target, drafter, p, a.tokens, k=a.k, temperature=temperature, seed=seed, rule=rule) for rule in RULES]
            _, plain_rate, results = side_by_side(lambda p=p, seed=seed: generate(target, p, a.tokens, temperature=temperature,
                                                                                     seed=seed), runs, bar.update)
            for rule, (res, seconds) in zip(RULES, results):
                kept[rule] += res.stats.accepted
                drafted[rule] += res.stats.drafted
                emitted[rule] += len(res.tokens)
                passes[rule] += res.stats.rounds
                speed[rule].append(len(res.tokens) / seconds / plain_rate)
                bounds[rule].append(speedup_bound(len(res.tokens), res.stats.rounds))
    return {rule: dict(acceptance=kept[rule] / max(drafted[rule], 1), tokens_per_pass=emitted[rule] / passes[rule],
                       speedup=float(np.median(speed[rule])), runs=len(speed[rule]),
                       noise=noise_count(speed[rule], bounds[rule]), speedup_bound=median_bound(bounds[rule]))
            for rule in RULES}


def run(a) -> dict:
    specs = a.draft or shipped_drafters(own_tokenizer=("tli",)) + ["prompt-lookup"]
    target, tok, drafters = load_target_and_drafters(a.model, specs)
    prompts = [p for ps in last_prompts(tok, a.prompts).values() for p in ps]
    bar = Progress(len(drafters) * len(TEMPERATURES) * len(prompts) * a.seeds * (len(RULES) + 2), "bench rules")
    out = {"k": a.k, "tokens": a.tokens, "temperatures": list(TEMPERATURES), "rules": list(RULES),
           "prompts": len(prompts), "seeds": a.seeds, "drafters": {},
           "load_before": others_load()}  # the other processes' load as the timings begin, and below as they end
    for drafter in drafters.values():
        out["drafters"][drafter.name] = {temperature_key(t): one_setting(target, drafter, prompts, a, t, bar)
                                         for t in TEMPERATURES}
    bar.close()
    out["load_after"] = others_load()
    return out


def report(res: dict) -> str:
    rows = []
    for name, by_t in res["drafters"].items():
        for t, d in by_t.items():
            rows.append([name, t] + [f"{d[r]['acceptance']:.3f} / {d[r]['tokens_per_pass']:.3f} / {d[r]['speedup']:.2f}x"
                                     + noise_marks(d[r]["speedup"], d[r].get("speedup_bound"), d[r].get("noise", 0),
                                                   d[r].get("runs", 0)) for r in RULES])
    cells = [d[r] for by_t in res["drafters"].values() for d in by_t.values() for r in RULES]
    return "\n".join(markdown_table(
        f"The rules side by side, K = {res['k']}, {res['tokens']} tokens, {res['prompts']} prompts x {res['seeds']} seeds "
        "(the same for every rule), each timed against plain sampling in the same run (median over runs). Each cell: "
        "acceptance (guesses kept of drafted) / tokens per target pass / speedup:",
        ["drafter", "T"] + [f"{r}" for r in RULES], rows)
        + noise_note(sum(c.get("noise", 0) for c in cells), sum(c.get("runs", 0) for c in cells)))


def main(argv=None) -> int:
    p = drafters_parser("minispec bench rules", __doc__.split("\n\n")[0], "the shipped drafters and prompt lookup", tokens=48)
    p.add_argument("--k", type=int, default=4, help="guesses per round (default 4)")
    p.add_argument("--seeds", type=count, default=2, help="seeds per prompt (default 2)")
    a = p.parse_args(argv)
    check_json_path(a.json)
    res = run(a)
    print_and_store(report(res), res, a.json, p.prog, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
