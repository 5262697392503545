"""Level 4 of losslessness, on the real target: ``minispec check``.

1. Sampling (temperature 1), as in the seed paper: >= N tokens from speculative decoding and N from
   plain sampling, over many short runs (prompts from the three prompt sets, a fresh seed per run).
   Method: pool both samples, take the 200 most frequent token ids of the pooled sample as bins plus
   one "other" bin, and run a two-sample chi-square test of homogeneity on the 2 x 201 table
   (scipy.stats.chi2_contingency, no continuity correction). Tokens within one run are not
   independent, so short runs (default 48 tokens) over many prompts and seeds are used.
   The same test on a deliberately broken rule (resampling from p instead of the residual) shows
   the test's power.
2. Greedy: for each drafter, speculative output == plain greedy output token for token. A mismatch
   is reported with the target's top-2 logit gap at the first differing position: a float tie
   (the K+1-row verification pass and the 1-row decode take different BLAS paths) is shown, not hidden.
"""

from __future__ import annotations

import itertools
import json
import time

import numpy as np

from . import rejection
from .equivalence import chisquare_two_sample
from .generate import generate
from .progress import Progress
from .prompts import PROMPT_SETS, load_prompts
from .speculative import speculative_generate


def all_prompts(tok):
    sets = [load_prompts(name, tok) for name in PROMPT_SETS]
    return [p for group in itertools.zip_longest(*sets) for p in group if p is not None]  # interleaved


def sample_tokens(fn, prompts, n_tokens: int, run_tokens: int, seed0: int, bar) -> list[int]:
    out, i = [], 0
    while len(out) < n_tokens:
        toks = fn(prompts[i % len(prompts)], run_tokens, seed0 + i)
        out += toks
        bar.update(len(toks))
        i += 1
    return out


def token_bins(a: list[int], b: list[int], n_bins: int = 200):
    pooled = np.bincount(np.concatenate([a, b]))
    top = np.argsort(-pooled, kind="stable")[:n_bins]
    ca, cb = np.bincount(a, minlength=len(pooled)), np.bincount(b, minlength=len(pooled))
    return np.append(ca[top], ca.sum() - ca[top].sum()), np.append(cb[top], cb.sum() - cb[top].sum())


def sampling_check(target, drafter, tok, n_tokens=9200, run_tokens=48, k=4, broken=False, progress=True) -> dict:
    prompts = all_prompts(tok)
    stop = tok.eos_ids
    bar = Progress(2 * n_tokens, "level 4, T=1" + (" (broken rule)" if broken else ""), quiet=not progress)
    plain = sample_tokens(lambda p, n, s: generate(target, p, n, temperature=1.0, seed=s, stop_ids=stop),
                          prompts, n_tokens, run_tokens, 0, bar)
    real = rejection.residual
    if broken:
        rejection.residual = lambda target_row, draft_row: target_row / target_row.sum()
    try:
        spec = sample_tokens(lambda p, n, s: speculative_generate(target, drafter, p, n, k=k, temperature=1.0, seed=s,
                                                                  stop_ids=stop).tokens,
                             prompts, n_tokens, run_tokens, 10**6, bar)
    finally:
        rejection.residual = real
    bar.close()
    a, b = token_bins(plain, spec)
    chi2, dof, p = chisquare_two_sample(a, b)
    return dict(drafter=drafter.name, broken_rule=broken, plain_tokens=len(plain), speculative_tokens=len(spec),
                bins=len(a), chi2=chi2, dof=dof, p_value=p)


def greedy_check(target, drafters, tok, n_prompts=20, n_tokens=64, k=4, progress=True) -> list[dict]:
    prompts = all_prompts(tok)[:n_prompts]
    bar = Progress(n_prompts * (1 + len(drafters)), "level 4, greedy", quiet=not progress)
    rows = {d.name: dict(drafter=d.name, prompts=n_prompts, tokens=0, identical=0, mismatches=[]) for d in drafters}
    for i, p in enumerate(prompts):
        want = generate(target, p, n_tokens)
        bar.update()
        for d in drafters:
            got = speculative_generate(target, d, p, n_tokens, k=k).tokens
            bar.update()
            r = rows[d.name]
            r["tokens"] += len(got)
            if got == want:
                r["identical"] += 1
                continue
            j = next(j for j, (x, y) in enumerate(zip(got + [-1], want + [-2])) if x != y)
            ctx = list(p) + want[:j]
            top2 = np.sort(target.forward(ctx, target.new_cache(len(ctx)))[-1])[-2:]
            r["mismatches"].append(dict(prompt=i, position=j, plain=want[j] if j < len(want) else None,
                                        speculative=got[j] if j < len(got) else None,
                                        top2_logit_gap=float(top2[1] - top2[0])))
    bar.close()
    return list(rows.values())


def run_check(target, tok, sampling_drafter, greedy_drafters, n_tokens=9200, greedy_prompts=20, greedy_tokens=64,
              broken=True, progress=True) -> dict:
    t0 = time.perf_counter()
    res = dict(sampling=sampling_check(target, sampling_drafter, tok, n_tokens, progress=progress))
    if broken:
        res["sampling_broken_rule"] = sampling_check(target, sampling_drafter, tok, n_tokens, broken=True,
                                                     progress=progress)
    res["greedy"] = greedy_check(target, greedy_drafters, tok, greedy_prompts, greedy_tokens, progress=progress)
    res["seconds"] = time.perf_counter() - t0
    return res


def format_check(res: dict) -> str:
    lines = []
    for key in ("sampling", "sampling_broken_rule"):
        if key in res:
            s = res[key]
            lines.append(f"T=1 {'BROKEN rule' if s['broken_rule'] else 'real rule  '} ({s['drafter']}): "
                         f"{s['plain_tokens']} plain vs {s['speculative_tokens']} speculative tokens, {s['bins']} bins: "
                         f"chi2 = {s['chi2']:.1f}, dof = {s['dof']}, p = {s['p_value']:.3g}")
    for g in res["greedy"]:
        lines.append(f"greedy {g['drafter']}: {g['identical']}/{g['prompts']} prompts identical "
                     f"({g['tokens']} tokens)" + "".join(f"\n    mismatch {m}" for m in g["mismatches"]))
    lines.append(f"({res['seconds']:.0f} s)")
    return "\n".join(lines)


def main_check(args) -> int:
    from .cli import make_drafter, resolve_model, shipped_draft
    from .drafters import LayerSkip, PromptLookup
    from .model import load_model
    from .tokenizer import load_tokenizer

    target_dir = resolve_model(args.model)
    target, tok = load_model(target_dir), load_tokenizer(target_dir)
    spec = args.draft or shipped_draft() or "prompt-lookup"
    main = make_drafter(spec, target, target_dir) if spec != "prompt-lookup" else LayerSkip(target, layers=24)
    greedy = [main, PromptLookup(target.cfg.vocab_size)]
    if not isinstance(main, LayerSkip):
        greedy.append(LayerSkip(target, layers=24))
    if args.quick:
        res = run_check(target, tok, main, greedy, n_tokens=1000, greedy_prompts=3, greedy_tokens=32, broken=False)
    else:
        res = run_check(target, tok, main, greedy, n_tokens=args.tokens)
    print(format_check(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    ok = res["sampling"]["p_value"] > 1e-3 and res.get("sampling_broken_rule", {}).get("p_value", 0.0) < 1e-3 and all(
        m["top2_logit_gap"] < 1e-3 for g in res["greedy"] for m in g["mismatches"])
    return 0 if ok else 1
