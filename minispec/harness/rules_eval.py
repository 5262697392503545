"""``minispec bench rules``: the token-wise rule and block verification side by side, at T = 1, for every drafter.

Per drafter, over the evaluation prompts (the last ``--prompts`` of each set) and ``--seeds`` seeds each, at a
fixed K: tokens per target pass of each rule (the same seeds, so the same drafter and prompts; only the rule
differs), and each rule's speed over plain sampling, timed side by side (plain, token-wise, block, plain, per
prompt and seed). Block verification never keeps fewer guesses in expectation (rejection.block_verify); the
paper (Sun et al. 2025) measured 7-10% more tokens per pass and 5-8% more speed on its models.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ..drafters import make_drafter
from ..generate import generate
from ..model import load_model, load_tokenizer
from ..model.fetch import resolve_model, shipped_bpe_draft, shipped_draft, shipped_eagle
from ..model.progress import Progress
from ..speculative import speculative_generate
from .measure import side_by_side
from .prompts import PROMPT_SETS, load_prompts
from .provenance import provenance

RULES = ("token", "block")


def drafter_specs() -> list[str]:
    draft, eagle, bpe = shipped_draft(), shipped_eagle(), shipped_bpe_draft()
    return [s for s in (draft, eagle) if s] + ([f"tli:{bpe}"] if bpe else []) + ["prompt-lookup"]


def run(a) -> dict:
    target_dir = resolve_model(a.model)
    target, tok = load_model(target_dir), load_tokenizer(target_dir)
    drafters = {spec: make_drafter(spec, target) for spec in (a.draft or drafter_specs())}
    prompts = [p for s in PROMPT_SETS for p in load_prompts(s, tok)[-a.prompts:]]
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
    lines = [f"Token-wise rule against block verification, T = 1, K = {res['k']}, {res['tokens']} tokens, "
             f"{res['prompts']} prompts x {res['seeds']} seeds (the same for both rules), each timed against plain "
             "sampling in the same run (median over runs):", "",
             "| drafter | tokens/pass, token-wise | tokens/pass, block | gain | speedup, token-wise | speedup, block |",
             "|---|---|---|---|---|---|"]
    for name, d in res["drafters"].items():
        t, b = d["token"], d["block"]
        lines.append(f"| {name} | {t['tokens_per_pass']:.3f} | {b['tokens_per_pass']:.3f} | "
                     f"{100 * (b['tokens_per_pass'] / t['tokens_per_pass'] - 1):+.1f}% | {t['speedup']:.2f}x | "
                     f"{b['speedup']:.2f}x |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="minispec bench rules", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="target directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--draft", action="append", help="a drafter spec (repeat; default: the shipped drafters and "
                                                    "prompt lookup)")
    p.add_argument("--k", type=int, default=4, help="guesses per round (default 4)")
    p.add_argument("--prompts", type=int, default=3, help="prompts per set (default 3, the last of each set)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per prompt (default 3)")
    p.add_argument("--tokens", type=int, default=48, help="tokens per run (default 48)")
    p.add_argument("--json", help="also write the figures to this JSON file")
    a = p.parse_args(argv)
    if a.json and not Path(a.json).resolve().parent.is_dir():  # refused before the runs, not after them
        raise ValueError(f"--json {a.json}: directory {Path(a.json).resolve().parent} does not exist")
    res = run(a)
    print(report(res))
    if a.json:
        origin = provenance(None if argv is None else [*p.prog.split(), *argv])  # date, commit, command, machine
        Path(a.json).write_text(json.dumps(dict(res, provenance=origin), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
