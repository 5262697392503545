"""The whole loop, with no download: a tiny random target, its first layers as the drafter.

    python examples/00_tiny_loop.py [--k 4] [--max-new-tokens 24] [--temperature 0]

Writes a tiny Llama-shaped target (random weights, 4 layers, a vocabulary of 64 ids) as a real safetensors
directory in a temporary folder, loads it the way SmolLM2 is loaded, and drafts with its first 3 layers
(layer skip: the same model, stopped early). Then it prints each round: the K guesses, how many the rule kept,
and the token the target added (the correction after a rejection, the bonus after K kept guesses). At
temperature 0 it checks the speculative output against plain decoding: the same tokens.

Random weights write no words, so the tokens are ids. `examples/02_speculative_generate.py` is the same loop on
SmolLM2 (a 538 MB download).
"""

import argparse
import tempfile

from minispec import generate, load_model, make_drafter, speculative_generate
from minispec.model.tiny import tiny_config, write_random_model
from minispec.trace import Trace


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=4, help="guesses per round (default 4)")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0, help="the sampling seed at temperature > 0")
    args = ap.parse_args()
    if args.k < 1 or args.max_new_tokens < 1 or args.temperature < 0:
        ap.error("--k and --max-new-tokens must be at least 1, --temperature at least 0")

    with tempfile.TemporaryDirectory() as d:
        config = tiny_config(num_hidden_layers=4, eos_token_id=None)  # no stop token: every run has its full length
        target = load_model(write_random_model(d, config, seed=3, scale=2.0))
    drafter = make_drafter("layer-skip", target, layers=3)
    prompt = [5, 9, 14, 5, 9]
    print(f"target: {target.cfg.num_layers} layers, vocabulary {target.cfg.vocab_size}; drafter: {drafter.name}; "
          f"K = {args.k}, temperature {args.temperature:g}; prompt {prompt}\n")

    trace = Trace()
    res = speculative_generate(target, drafter, prompt, args.max_new_tokens, k=args.k, temperature=args.temperature,
                               seed=args.seed, trace=trace)
    for n, r in enumerate(trace.rounds, 1):
        if r.k == 0:
            print(f"round {n:2d}: no guesses, the target adds {r.next_token}")
            continue
        kept = f"kept {r.accepted} of {r.k}"
        print(f"round {n:2d}: guesses {r.guesses}  {kept:<10}  then the {r.next_kind} {r.next_token}   -> emitted {r.emitted}")
    passes = len(trace.rounds)
    print(f"\n{len(res.tokens)} tokens in {passes} target passes: {len(res.tokens) / passes:.2f} tokens per pass "
          f"(plain decoding makes 1)")

    if args.temperature == 0:
        plain = generate(target, prompt, args.max_new_tokens)
        print(f"plain decoding : {plain}")
        print(f"speculative    : {res.tokens}")
        print("identical: the rule keeps a guess only where it is the target's own greedy token" if plain == res.tokens
              else "DIFFERENT: at a near-tie of two logits, the batched pass rounded differently")
    else:
        print("at temperature > 0 the tokens differ from a plain run's, but follow the target's distribution: "
              "tests/test_exact_loop.py integrates the loop's law exactly on models this size")


if __name__ == "__main__":
    main()
