"""The three drafters on the same prompts: a trained draft model, prompt lookup, layer skip.

    python examples/03_drafters.py [--prompts 1] [--max-new-tokens 24]

Greedy, K = 4. Prints acceptance, tokens per target pass and tokens/s for each, next to plain
decoding measured in the same run, checks the outputs are identical, and explains each speedup
with the cost model: a round that drafts K guesses costs K c + r(K + 1) target steps (c: a guess's
cost, r(n): a pass over n tokens, both measured here), and the speedup is the tokens the rounds
emitted over what they cost. No drafter can beat plain decoding by more than its tokens per target
pass (a pass over more tokens costs at least as much as one over one): a measured speedup above
that is noise (the machine's load changed between the timings), and is printed as noise.
"""

import argparse
import sys
import time

from minispec import generate, load_model, load_tokenizer, make_drafter, resolve_model, shipped_draft, speculative_generate
from minispec.harness.command import noise_words
from minispec.harness.measure import busy_words, others_load, speedup_bound
from minispec.harness.prompts import PROMPT_SETS, load_prompts
from minispec.policy import forward_times
from minispec.policy.timing import guess_time


def speed_cell(speedup: float, tokens: int, target_passes: int) -> str:
    """The table's speedup: "1.23", or "2.10 noise" where it is above the drafter's tokens per target pass."""
    return f"{speedup:.2f}" + (" noise" if speedup > speedup_bound(tokens, target_passes) else "")


def speed_verdict(speedup: float, tokens: int, target_passes: int) -> str:
    """Whether a drafter paid: "pays at 1.23x", "is slower than plain decoding at 0.80x", or, above what its tokens per
    target pass allow, noise, not a speedup."""
    bound = speedup_bound(tokens, target_passes)
    if speedup > bound:
        return f"measured {noise_words(speedup, bound)} (the machine's load changed between the timings)"
    return f"pays at {speedup:.2f}x" if speedup > 1 else f"is slower than plain decoding at {speedup:.2f}x"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="target directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--prompts", type=int, default=1, help="prompts per prompt set (default 1)")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--k", type=int, default=4)
    args = ap.parse_args()
    if args.prompts < 1 or args.k < 0 or args.max_new_tokens < 1:  # refused before the model loads
        ap.error("--prompts and --max-new-tokens must be at least 1, --k at least 0")
    target_dir = resolve_model(args.model)
    target, tok = load_model(target_dir), load_tokenizer(target_dir)
    specs = ["layer-skip", "prompt-lookup"]
    if shipped_draft():
        specs.insert(0, shipped_draft())
    drafters = [make_drafter(s, target) for s in specs]
    prompts = [p for name in PROMPT_SETS for p in load_prompts(name, tok, args.prompts)]

    total = {"plain": 0.0, **{d.name: 0.0 for d in drafters}}
    accepted = {d.name: [0, 0, 0, 0] for d in drafters}  # accepted, drafted, tokens, passes
    rounds = {d.name: [] for d in drafters}  # (guesses drafted, accepted) of every round
    n_tokens, identical = 0, True
    load_before = others_load()  # the other processes' load as the timings begin, and below as they end
    for i, p in enumerate(prompts, 1):
        print(f"[prompt {i} of {len(prompts)}: plain decoding and {len(drafters)} drafters]", file=sys.stderr, flush=True)
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
            rounds[d.name] += res.stats.rounds_log
    print(f"[timing a target pass over 1..{args.k + 1} tokens]", file=sys.stderr, flush=True)
    t = forward_times(target, range(1, args.k + 2), context=128, repeats=10)
    r = {n: t[n] / t[1] for n in t}  # r(n): a pass over n tokens, in target steps
    print(f"{len(prompts)} prompts x {args.max_new_tokens} tokens, greedy, k={args.k}; outputs identical: {identical}"
          f"{busy_words(load_before, others_load())}")
    print(f"{'drafter':<34} {'accept':>7} {'tok/pass':>9} {'tok/s':>7} {'speedup':>8} {'c':>6} {'modelled':>10}")
    print(f"{'plain decoding':<34} {'':>7} {1.0:>9.2f} {n_tokens / total['plain']:>7.1f} {1.0:>8.2f}")
    verdicts = []
    for d in drafters:
        a = accepted[d.name]
        acc = a[0] / max(a[1], 1)
        c = guess_time(d, prompts[0] * 4, repeats=5) / t[1]
        steps = sum(k * c + r[k + 1] for k, _ in rounds[d.name])  # what the rounds cost, in target steps
        tokens = sum(n + 1 for _, n in rounds[d.name])  # the accepted guesses and next_token (correction or bonus)
        speedup = (a[2] / total[d.name]) / (n_tokens / total["plain"])  # tokens/s over plain's (the same tokens: greedy)
        print(f"{d.name:<34} {acc:>7.2f} {a[2] / a[3]:>9.2f} {n_tokens / total[d.name]:>7.1f} "
              f"{speed_cell(speedup, a[2], a[3]):>8} {c:>6.3f} {tokens / steps:>9.2f}x")
        full = sum(1 for k, _ in rounds[d.name] if k == args.k)
        verdicts.append(f"- {d.name} {speed_verdict(speedup, a[2], a[3])}; the cost model says {tokens / steps:.2f}x. Its "
                        f"{len(rounds[d.name])} rounds emitted {tokens} tokens ({tokens / len(rounds[d.name]):.2f} a round, "
                        f"guesses accepted {acc:.2f} of the time) and cost {steps:.0f} target steps; {full} rounds "
                        f"drafted all {args.k} guesses at {args.k} x {c:.3f} + r({args.k + 1}) = {args.k * c + r[args.k + 1]:.2f} "
                        "steps each.")
    print()
    print(f"Why (the cost model; a target step is {1e3 * t[1]:.1f} ms here, and a pass over {args.k + 1} tokens "
          f"costs r({args.k + 1}) = {r[args.k + 1]:.2f} steps, not 1: this CPU does not verify {args.k} guesses for free):")
    print("\n".join(verdicts))
    print("- take away: speculation pays only when E / (K c + r(K + 1)) > 1. Here that needs a cheap drafter "
          "(small c) whose guesses are accepted far more often than these; prompt lookup gets there when the "
          "output copies the prompt (`--k auto` also chooses K = 0 when nothing pays).")


if __name__ == "__main__":
    main()
