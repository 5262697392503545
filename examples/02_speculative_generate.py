"""SmolLM2-135M-Instruct with a draft: the text, the acceptance, and tokens/s against plain decoding.

    python examples/02_speculative_generate.py [--draft DIR|prompt-lookup|layer-skip] [--k 4]

Both runs are greedy, so the two texts must be identical; only the time differs. No run can beat plain decoding by
more than its tokens per target pass (a pass over more tokens costs at least as much as one over one): a measured
speedup above that is noise, and is printed as noise.
"""

import argparse
import time

from minispec import generate, load_model, load_tokenizer, make_drafter, resolve_model, speculative_generate
from minispec.harness.command import noise_words
from minispec.harness.measure import busy_words, others_load, speedup_bound


def speed_line(plain_tok_s: float, spec_tok_s: float, tokens: int, target_passes: int) -> str:
    """Both speeds and their ratio: a speedup, or noise where it is above what the run's ``tokens`` in
    ``target_passes`` target passes allow (the load changed between the timings)."""
    speedup, bound = spec_tok_s / plain_tok_s, speedup_bound(tokens, target_passes)
    words = f"speedup {speedup:.2f}x" if speedup <= bound else noise_words(speedup, bound)
    return f"plain {plain_tok_s:.1f} tok/s, speculative {spec_tok_s:.1f} tok/s: {words}"


def speed_shown(speedup: float, tokens: int, target_passes: int, k: int) -> str:
    """What the speed figure showed, for the closing words: where it came from, or that it was noise."""
    bound = speedup_bound(tokens, target_passes)
    if speedup > bound:
        return (f"{noise_words(speedup, bound)} (the machine's load changed between the timings: run it again, or use "
                "`minispec bench`)")
    return f"{speedup:.2f}x here, from {bound:.2f} tokens per target pass against the price of a pass over {k + 1} tokens"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="target directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--draft", default="prompt-lookup",
                    help="a draft model directory, prompt-lookup or layer-skip (default: prompt-lookup, the drafter "
                         "measured to pay on a CPU; try weights/smoldraft-3l-192, the shipped draft)")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--prompt", default="Write a Python function that returns the n-th Fibonacci number.")
    args = ap.parse_args()
    if args.k < 0 or args.max_new_tokens < 1:  # refused before the model loads
        ap.error("--k must be at least 0 and --max-new-tokens at least 1")
    target_dir = resolve_model(args.model)
    target, tok = load_model(target_dir), load_tokenizer(target_dir)
    drafter = make_drafter(args.draft, target)
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": args.prompt}]))

    def timed(fn):
        t0 = time.perf_counter()
        return fn(), time.perf_counter() - t0

    generate(target, ids[:4], 2)  # warm up, outside every timing
    load_before = others_load()  # the other processes' load as the timings begin, and below as they end
    plain, t_before = timed(lambda: generate(target, ids, args.max_new_tokens, stop_ids=tok.eos_ids))
    res, t_spec = timed(lambda: speculative_generate(target, drafter, ids, args.max_new_tokens, k=args.k, stop_ids=tok.eos_ids))
    _, t_after = timed(lambda: generate(target, ids, args.max_new_tokens, stop_ids=tok.eos_ids))
    t_plain = (t_before + t_after) / 2  # plain decoding before and after: machine noise hits both sides alike

    print(tok.decode(res.tokens, skip_special_tokens=True))
    print("-" * 60)
    s = res.stats
    print(f"drafter {drafter.name}, k={args.k}")
    print(f"identical to plain greedy decoding: {res.tokens == plain}")
    if s.drafted:
        print(f"acceptance {s.acceptance_rate:.2f} ({s.accepted} of {s.drafted} guesses); by position "
              f"{[round(a, 2) for a in s.per_position_acceptance]}")
    else:
        print(f"{drafter.name} proposed nothing in {s.rounds} rounds (no earlier match to copy): plain decoding")
    print(f"tokens per target pass {s.mean_tokens_per_pass:.2f}; histogram {dict(sorted(s.tokens_per_pass.items()))}")
    print(f"time: draft {s.time_draft:.2f}s, verify and rule {s.time_verify:.2f}s, prompt {s.time_prefill:.2f}s")
    speedup = (len(res.tokens) / t_spec) / (len(plain) / t_plain)
    print(speed_line(len(plain) / t_plain, len(res.tokens) / t_spec, len(res.tokens), s.rounds)
          + busy_words(load_before, others_load()))
    print()
    print(f"What this showed: greedy speculative output is {'identical' if res.tokens == plain else 'NOT identical'} to "
          f"plain decoding, token for token ({len(plain)} tokens); that is the algorithm's promise. The speed is not "
          f"promised: {speed_shown(speedup, len(res.tokens), s.rounds, args.k)}. `python examples/03_drafters.py` "
          "explains the price of a pass with measured numbers.")
    if t_spec < 3:
        print(f"(a {t_spec:.1f}s run is too short for a steady speed figure: use --max-new-tokens 256, or `minispec bench`)")


if __name__ == "__main__":
    main()
