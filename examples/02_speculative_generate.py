"""SmolLM2-135M-Instruct with a draft: the text, the acceptance, and tokens/s against plain decoding.

    python examples/02_speculative_generate.py [--draft DIR|prompt-lookup|layer-skip] [--k 4]

Both runs are greedy, so the two texts must be identical; only the time differs.
"""

import argparse
import time

from minispec import generate, load_model, load_tokenizer
from minispec.cli import default_drafter_spec, make_drafter, resolve_model
from minispec.speculative import speculative_generate


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="target directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--draft", help="drafter (default: the shipped draft, else prompt-lookup)")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--prompt", default="Write a Python function that returns the n-th Fibonacci number.")
    args = ap.parse_args()
    target_dir = resolve_model(args.model)
    target, tok = load_model(target_dir), load_tokenizer(target_dir)
    drafter = make_drafter(args.draft or default_drafter_spec(), target, target_dir)
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": args.prompt}]))

    t0 = time.perf_counter()
    plain = generate(target, ids, args.max_new_tokens, stop_ids=tok.eos_ids)
    t_plain = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = speculative_generate(target, drafter, ids, args.max_new_tokens, k=args.k, stop_ids=tok.eos_ids)
    t_spec = time.perf_counter() - t0

    print(tok.decode(res.tokens, skip_special_tokens=True))
    print("-" * 60)
    s = res.stats
    print(f"drafter {drafter.name}, k={args.k}")
    print(f"identical to plain greedy decoding: {res.tokens == plain}")
    print(f"acceptance {s.acceptance_rate:.2f}; per position {[round(a, 2) for a in s.per_position_acceptance]}")
    print(f"tokens per target pass {s.mean_tokens_per_pass:.2f}; histogram {dict(sorted(s.tokens_per_pass.items()))}")
    print(f"time: draft {s.time_draft:.2f}s, verify {s.time_verify:.2f}s, rule {s.time_sample:.2f}s")
    print(f"plain {len(plain) / t_plain:.1f} tok/s, speculative {len(res.tokens) / t_spec:.1f} tok/s: "
          f"speedup {t_plain / t_spec * len(res.tokens) / len(plain):.2f}x")


if __name__ == "__main__":
    main()
