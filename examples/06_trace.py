"""See speculation happen: traces of SmolLM2 with prompt lookup and with the shipped draft model, side by side.

    python examples/06_trace.py [--out DIR] [--max-new-tokens 64]

Writes OUT/prompt-lookup.html and OUT/draft.html (self-contained pages: open them in a browser) and their .json,
for one prompt that asks the model to rewrite a text it was given. OUT is a new temporary folder unless --out is
given, so nothing is left in the clone. Then says what to look for: where prompt lookup copies a run of tokens in
one round, and how often the draft's first guess is rejected.
"""

import argparse
import tempfile
from pathlib import Path

from minispec import load_model, load_tokenizer, make_drafter, resolve_model, shipped_draft, speculative_generate
from minispec.trace import Trace, write_trace

PROMPT = ("Rewrite the following text with every sentence on its own line.\n\nThe city council met on Tuesday to "
          "discuss the new bicycle lanes on Main Street. Supporters said the lanes would make cycling safer. Several "
          "shop owners worried about losing parking spaces.")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="target directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--out", default=None, help="directory for the pages (default: a new temporary folder)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    args = ap.parse_args()
    if args.k < 0 or args.max_new_tokens < 1:  # refused before the model loads
        ap.error("--k must be at least 0 and --max-new-tokens at least 1")
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        ap.error(f"--out {args.out}: exists and is not a directory")
    target_dir = resolve_model(args.model)
    target, tok = load_model(target_dir), load_tokenizer(target_dir)
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": PROMPT}]))
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="minispec-traces-"))
    out.mkdir(parents=True, exist_ok=True)
    found = {}
    for name, spec in (("prompt-lookup", "prompt-lookup"), ("draft", shipped_draft() or "layer-skip")):
        drafter = make_drafter(spec, target)
        trace = Trace()
        res = speculative_generate(target, drafter, ids, args.max_new_tokens, k=args.k, stop_ids=tok.eos_ids, trace=trace)
        for suffix in (".html", ".json"):
            write_trace(trace, out / f"{name}{suffix}", decode=lambda t: tok.decode([t]), title=f"minispec trace: {drafter.name}",
                        drafter=drafter.name, rule="token", k=str(args.k), temperature=0.0, prompt=PROMPT)
        best = max(trace.rounds, key=lambda r: r.accepted)
        drafting = [r for r in trace.rounds if r.k]
        first_rejected = sum(r.accepted == 0 for r in drafting)
        found[name] = (res, trace, best, drafting, first_rejected)
        print(f"{drafter.name}: {len(res.tokens)} tokens in {len(trace.rounds)} target passes "
              f"({len(res.tokens) / len(trace.rounds):.2f} per pass); pages in {out / name}.html")
    res_pl, trace_pl, best, _, _ = found["prompt-lookup"]
    _, _, _, drafting, first_rejected = found["draft"]
    print()
    print("What to look for:")
    print(f"- prompt lookup copies: its best round kept {best.accepted} of {best.k} guesses in one target pass, "
          f"{tok.decode(best.emitted)!r} (round {trace_pl.rounds.index(best) + 1}: a row of green chips in "
          f"{out / 'prompt-lookup.html'}). Where the output repeats the input, the text to copy is right there.")
    if drafting:
        print(f"- the draft model's first guess was rejected in {first_rejected} of {len(drafting)} drafting rounds: "
              "red chips right at the start of a row. Hover one for p(x), q(x) and the draw that rejected it.")
    print("- take away: one target pass per row; the longer a row's green run, the more that pass bought.")


if __name__ == "__main__":
    main()
