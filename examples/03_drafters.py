"""The three drafters on the same prompts: a trained draft model, prompt lookup, layer skip.

    python examples/03_drafters.py [--prompts 3] [--max-new-tokens 64]

Greedy, K = 4. Prints acceptance, tokens per target pass and tokens/s for each, next to plain
decoding measured in the same run, and checks the outputs are identical.
"""

import argparse
import time

from minispec import generate, load_model, load_tokenizer
from minispec.cli import make_drafter, resolve_model, shipped_draft
from minispec.prompts import PROMPT_SETS, load_prompts
from minispec.speculative import speculative_generate


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="target directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--prompts", type=int, default=2, help="prompts per prompt set (default 2)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    args = ap.parse_args()
    target_dir = resolve_model(args.model)
    target, tok = load_model(target_dir), load_tokenizer(target_dir)
    specs = ["layer-skip", "prompt-lookup"]
    if shipped_draft():
        specs.insert(0, shipped_draft())
    drafters = [make_drafter(s, target, target_dir) for s in specs]
    prompts = [p for name in PROMPT_SETS for p in load_prompts(name, tok, args.prompts)]

    total = {"plain": 0.0, **{d.name: 0.0 for d in drafters}}
    accepted = {d.name: [0, 0, 0, 0] for d in drafters}  # accepted, drafted, tokens, passes
    n_tokens, identical = 0, True
    for p in prompts:
        t0 = time.perf_counter()
        want = generate(target, p, args.max_new_tokens)
        total["plain"] += time.perf_counter() - t0
        n_tokens += len(want)
        for d in drafters:
            t0 = time.perf_counter()
            res = speculative_generate(target, d, p, args.max_new_tokens, k=args.k)
            total[d.name] += time.perf_counter() - t0
            identical &= res.tokens == want
            a = accepted[d.name]
            a[0] += res.stats.accepted
            a[1] += res.stats.drafted
            a[2] += len(res.tokens)
            a[3] += res.stats.rounds
    print(f"{len(prompts)} prompts x {args.max_new_tokens} tokens, greedy, k={args.k}; outputs identical: {identical}")
    print(f"{'drafter':<34} {'accept':>7} {'tok/pass':>9} {'tok/s':>7} {'speedup':>8}")
    print(f"{'plain decoding':<34} {'':>7} {1.0:>9.2f} {n_tokens / total['plain']:>7.1f} {1.0:>8.2f}")
    for d in drafters:
        a = accepted[d.name]
        print(f"{d.name:<34} {a[0] / max(a[1], 1):>7.2f} {a[2] / a[3]:>9.2f} {n_tokens / total[d.name]:>7.1f} "
              f"{total['plain'] / total[d.name]:>8.2f}")


if __name__ == "__main__":
    main()
