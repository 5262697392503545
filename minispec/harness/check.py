"""Level 4 of losslessness, on the real target: ``minispec check``.

1. Sampling (temperature 1). ``n_runs`` pairs of short runs: run i of plain sampling and run i of
   speculative sampling start from the same prompt (the three prompt sets, interleaved), each with a
   seed of its own. Two statistics compare the methods:
     tokens       the two-sample chi-square of token frequencies (the most frequent ids get a bin
                  each, rare ones share one: ``equivalence.token_bins``);
     acceptance   the mean over emitted tokens y of min(1, q(y) / p(y)), with p and q the target's and
                  the draft's distributions at that position (one teacher-forced pass of each per run).
                  For any method whose output follows p its expectation is sum min(p, q) at each
                  position; a rule that resamples from p instead of the residual raises it, by
                  sum min(p, q)^2 / p - (sum min(p, q))^2 >= 0 (Cauchy-Schwarz). It is aimed at the
                  bug the token frequencies dilute.
   Neither statistic's null distribution is assumed. When both methods sample p, the two runs of a
   pair are exchangeable, so the p-value is the share of random swaps of whole runs (2,000) whose
   statistic is at least as extreme (``equivalence.paired_permutation_test``): exact, however
   dependent the tokens within a run are. (The token-level chi-square p-value used before treated
   every token as independent and ran low: p = 0.037 and 0.044 on two full runs of the exact rule.)
   PASS: the smaller p-value, times 2 for the two tests (Bonferroni), is above ALPHA = 0.01.
2. Broken rule: the same comparison with ``equivalence.broken_accept_reject`` (resample from p, not
   the residual) must FAIL: it shows the test has the power to catch a wrong rule at this size.
3. Calibration (the full check): plain against plain, ``seeds`` times: each statistic's p-values
   should look uniform (a Kolmogorov-Smirnov test against U(0, 1) is shown).
4. Greedy: for each drafter, speculative output == plain greedy output token for token. A mismatch
   is reported with the target's top-2 logit gap at the first differing position: a float tie
   (the K+1-row verification pass and the 1-row decode take different BLAS paths) is shown, not hidden.
"""

from __future__ import annotations

import itertools
import json
import time

import numpy as np
from scipy import stats

from ..drafters import TLI, Eagle, LayerSkip, PromptLookup, make_drafter
from ..generate import generate
from ..model import load_model, load_tokenizer
from ..model.fetch import resolve_model, shipped_draft
from ..model.progress import Progress
from ..rejection import accept_reject, block_verify
from ..sampling import warp
from ..speculative import speculative_generate, tree_speculative_generate
from .equivalence import broken_accept_reject, broken_block_verify, mean_test, token_test
from .first_guess import eagle_first_guess_logits, tli_first_guess_rows
from .prompts import PROMPT_SETS, load_prompts


def all_prompts(tok):
    sets = [load_prompts(name, tok) for name in PROMPT_SETS]
    return [p for group in itertools.zip_longest(*sets) for p in group if p is not None]  # interleaved


ALPHA = 0.01


def sample_runs(method, prompts, n_runs: int, run_tokens: int, seed: int, bar) -> list[list[int]]:
    """Run i: method(prompt i, cycling; run_tokens; seed + i) -> its tokens."""
    runs = []
    for i in range(n_runs):
        runs.append(method(prompts[i % len(prompts)], run_tokens, seed + i))
        bar.update()
    return runs


def plain_sampler(target, stop):
    return lambda p, n, s: generate(target, p, n, temperature=1.0, seed=s, stop_ids=stop)


RULES = {"token": (accept_reject, broken_accept_reject), "block": (block_verify, broken_block_verify)}  # (rule, twin)


def speculative_sampler(target, drafter, stop, k: int, broken: bool, rule: str = "token"):
    rule = RULES[rule][int(broken)]
    return lambda p, n, s: speculative_generate(target, drafter, p, n, k=k, temperature=1.0, seed=s, stop_ids=stop,
                                                rule=rule).tokens


def acceptance_of_tokens(target, drafter, prompt, run) -> np.ndarray:  # -> [len(run)]
    """min(1, q(y) / p(y)) for each token y of ``run`` at T = 1: what the rule would accept it with, had the
    draft proposed it. One teacher-forced pass of the target and of the draft over prompt + run."""
    seq = list(prompt) + list(run)
    rows = slice(len(prompt) - 1, len(seq) - 1)  # the rows that predict the run's tokens
    if isinstance(drafter, Eagle):  # a feature head: its first guess at every position, from the target's features
        features = []
        logits = target.forward(seq, target.new_cache(len(seq)), on_features=features.append)
        p, q = warp(logits[rows], 1.0), warp(eagle_first_guess_logits(drafter, seq, features[0])[rows], 1.0)  # [n, V] each
    elif isinstance(drafter, TLI):  # a draft with its own tokenizer: q' over the target's ids
        p = warp(target.forward(seq, target.new_cache(len(seq)))[rows], 1.0)  # [n, V]
        q = tli_first_guess_rows(drafter, seq, len(prompt), lambda z: warp(z, 1.0))  # [n, V]
    else:
        p = warp(target.forward(seq, target.new_cache(len(seq)))[rows], 1.0)  # [n, V]
        q = warp(drafter.pad(drafter.model.forward(seq, drafter.model.new_cache(len(seq))))[rows], 1.0)  # [n, V]
    idx = np.arange(len(run))
    return np.minimum(1.0, q[idx, run] / p[idx, run])


def compare(target, drafter, prompts, runs_a, runs_b, seed: int = 0, permutations: int = 2000) -> dict:
    """Both statistics (module docstring) for paired runs, and the verdict at ALPHA."""
    res = dict(tokens=token_test(runs_a, runs_b, seed=seed, permutations=permutations))
    if getattr(drafter, "model", None) is not None or isinstance(drafter, (Eagle, TLI)):
        values = [[acceptance_of_tokens(target, drafter, prompts[i % len(prompts)], r) for i, r in enumerate(runs)]
                  for runs in (runs_a, runs_b)]
        res["acceptance"] = mean_test(*values, seed=seed, permutations=permutations)
    tests = [res[k]["p_value"] for k in ("tokens", "acceptance") if k in res]
    res["p_value"] = min(1.0, len(tests) * min(tests))  # Bonferroni over the tests
    res["passed"] = res["p_value"] > ALPHA
    return res


def sampling_check(target, drafter, tok, plain_runs: list, k: int = 4, broken: bool = False, run_tokens: int = 48,
                   progress: bool = True, rule: str = "token") -> dict:
    """Speculative sampling at T = 1 with ``rule`` ("token" or "block"; ``broken``: its broken twin) against
    ``plain_runs``, run i of each on prompt i."""
    prompts = all_prompts(tok)
    bar = Progress(len(plain_runs), "level 4, T=1" + (" (broken rule)" if broken else ""), quiet=not progress)
    spec = sample_runs(speculative_sampler(target, drafter, tok.eos_ids, k, broken, rule), prompts, len(plain_runs),
                       run_tokens, 10**6, bar)
    bar.close()
    return dict(drafter=drafter.name, rule=RULES[rule][int(broken)].__name__, broken_rule=broken,
                **compare(target, drafter, prompts, plain_runs, spec))


def calibration_check(target, drafter, tok, seeds: int = 20, n_runs: int = 24, run_tokens: int = 32,
                      progress: bool = True) -> dict:
    """Plain against plain, ``seeds`` times: the p-values of each statistic, and a Kolmogorov-Smirnov test of
    their uniformity (the null hypothesis holds here, so a calibrated test gives U(0, 1) p-values)."""
    prompts, sample = all_prompts(tok), plain_sampler(target, tok.eos_ids)
    bar = Progress(2 * seeds * n_runs, "level 4, calibration (plain vs plain)", quiet=not progress)
    p_values = {}
    for j in range(seeds):
        a = sample_runs(sample, prompts, n_runs, run_tokens, 10**7 * (j + 1), bar)
        b = sample_runs(sample, prompts, n_runs, run_tokens, 10**7 * (j + 1) + 10**6, bar)
        for name, r in compare(target, drafter, prompts, a, b, seed=j).items():
            if isinstance(r, dict):
                p_values.setdefault(name, []).append(r["p_value"])
    bar.close()
    ks = {name: float(stats.kstest(ps, "uniform").pvalue) for name, ps in p_values.items()}
    return dict(seeds=seeds, runs=n_runs, run_tokens=run_tokens, p_values=p_values, ks_p_value=ks,
                passed=all(v > ALPHA for v in ks.values()))


def greedy_check(target, drafters, tok, n_prompts=20, n_tokens=64, k=4, progress=True, trees=()) -> list[dict]:
    """Each drafter with a chain of ``k`` guesses, and each drafter in ``trees`` with a 3x3 tree as well."""
    prompts = all_prompts(tok)[:n_prompts]
    runs = [(d.name, d, None) for d in drafters] + [(f"{d.name}, tree 3x3", d, (3, 3)) for d in trees]
    bar = Progress(n_prompts * (1 + len(runs)), "level 4, greedy", quiet=not progress)
    rows = {name: dict(drafter=name, prompts=n_prompts, tokens=0, identical=0, mismatches=[]) for name, _, _ in runs}
    for i, p in enumerate(prompts):
        want = generate(target, p, n_tokens)
        bar.update()
        for name, d, shape in runs:
            got = (speculative_generate(target, d, p, n_tokens, k=k) if shape is None
                   else tree_speculative_generate(target, d, p, n_tokens, shape=shape)).tokens
            bar.update()
            r = rows[name]
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


def run_check(target, tok, sampling_drafter, greedy_drafters, n_runs: int = 192, greedy_prompts: int = 20,
              greedy_tokens: int = 64, calibration_seeds: int = 20, progress: bool = True, trees=(), rule: str = "token") -> dict:
    """The whole level-4 check (module docstring); ``calibration_seeds`` 0 skips the calibration."""
    t0 = time.perf_counter()
    bar = Progress(n_runs, "level 4, T=1 plain", quiet=not progress)
    plain = sample_runs(plain_sampler(target, tok.eos_ids), all_prompts(tok), n_runs, 48, 0, bar)
    bar.close()
    res = dict(target=target.name, rule=rule,
               sampling=sampling_check(target, sampling_drafter, tok, plain, progress=progress, rule=rule),
               sampling_broken_rule=sampling_check(target, sampling_drafter, tok, plain, broken=True, progress=progress,
                                                   rule=rule))
    if calibration_seeds:
        res["calibration"] = calibration_check(target, sampling_drafter, tok, calibration_seeds, progress=progress)
    res["greedy"] = greedy_check(target, greedy_drafters, tok, greedy_prompts, greedy_tokens, progress=progress,
                                 trees=trees)
    res["seconds"] = time.perf_counter() - t0
    res["passed"] = verdicts(res)
    return res


def verdicts(res: dict) -> dict:
    """What passed: the real rule is not told apart from plain sampling, the broken rule is, the calibration's
    p-values look uniform, and greedy output is identical up to float ties."""
    out = dict(sampling=res["sampling"]["passed"], broken_rule_caught=not res["sampling_broken_rule"]["passed"],
               greedy=all(m["top2_logit_gap"] < 1e-3 for g in res["greedy"] for m in g["mismatches"]))
    if "calibration" in res:
        out["calibration"] = res["calibration"]["passed"]
    return out


def format_sampling(s: dict) -> str:
    t = s["tokens"]
    line = (f"{t['runs']} paired runs, {t['tokens_a']} plain vs {t['tokens_b']} speculative tokens; tokens: chi2 "
            f"{t['statistic']:.1f} over {t['bins']} bins, permutation p = {t['p_value']:.3g}")
    if "acceptance" in s:
        a = s["acceptance"]
        line += (f"; acceptance of the emitted tokens: {a['mean_a']:.3f} plain vs {a['mean_b']:.3f} speculative, "
                 f"p = {a['p_value']:.3g}")
    return line + f"; combined p = {s['p_value']:.3g}"


def word(good: bool) -> str:
    return "PASS" if good else "FAIL"


def format_check(res: dict) -> str:
    ok = res["passed"]
    lines = [f"Level 4 on {res['target']}: is speculative decoding's output the target's own?",
             f"A comparison tells two methods apart when its combined p-value is at or below {ALPHA} "
             "(two permutation tests, Bonferroni).", ""]
    lines.append(f"{word(ok['sampling'])}  T=1, the real rule ({res['sampling'].get('rule', 'accept_reject')}, "
                 f"{res['sampling']['drafter']}, K = 4): "
                 + format_sampling(res["sampling"]) + (f" > {ALPHA}: not told apart from plain sampling"
                                                        if ok["sampling"] else f" <= {ALPHA}: the outputs differ"))
    lines.append(f"{word(ok['broken_rule_caught'])}  T=1, a deliberately BROKEN rule "
                 f"({res['sampling_broken_rule'].get('rule', 'broken_accept_reject')}): "
                 + format_sampling(res["sampling_broken_rule"])
                 + (f" <= {ALPHA}: caught, so the test can see a wrong rule at this size"
                    if ok["broken_rule_caught"] else f" > {ALPHA}: NOT caught, the test is too weak at this size"))
    if "calibration" in res:
        c = res["calibration"]
        ks = ", ".join(f"{name} {p:.3g}" for name, p in c["ks_p_value"].items())
        lines.append(f"{word(ok['calibration'])}  calibration, plain vs plain over {c['seeds']} seeds "
                     f"({c['runs']} runs x {c['run_tokens']} tokens each): Kolmogorov-Smirnov p of their p-values against "
                     f"uniform: {ks} (> {ALPHA}: the null distribution holds)")
    for g in res["greedy"]:
        lines.append(f"{word(not g['mismatches'] or ok['greedy'])}  greedy, {g['drafter']}: {g['identical']}/{g['prompts']} "
                     f"prompts identical to plain decoding ({g['tokens']} tokens)"
                     + "".join(f"\n    mismatch {m}" for m in g["mismatches"]))
    lines += ["", f"{word(all(ok.values()))} overall ({res['seconds']:.0f} s)"]
    return "\n".join(lines)


def main_check(args) -> int:
    target_dir = resolve_model(args.model)
    target, tok = load_model(target_dir), load_tokenizer(target_dir)
    spec = args.draft or shipped_draft() or "layer-skip"
    main = make_drafter(spec, target)
    cross = getattr(main, "draft_model", None) is not None  # a draft with its own tokenizer (slem.py, tli.py)
    if getattr(main, "model", None) is None and not isinstance(main, Eagle) and not cross:
        raise ValueError(f"--draft {spec}: the T=1 check needs a drafter with its own distribution (a draft model, "
                         "an EAGLE head, a draft with its own tokenizer, or layer-skip); prompt lookup is checked greedily")
    if cross:  # greedy: both algorithms over the same draft
        algorithm, _, draft_dir = spec.partition(":")
        draft_dir = draft_dir if algorithm in ("slem", "tli") else spec
        greedy = [main]
        if main.algorithm == "TLI" or len(main.cross.shared_draft):  # TLI needs shared tokens
            greedy.append(make_drafter(f"{'tli' if main.algorithm == 'SLEM' else 'slem'}:{draft_dir}", target))
    else:
        greedy = [main, PromptLookup()] + ([] if isinstance(main, LayerSkip) else [LayerSkip(target)])
    trees = [main] if hasattr(main, "see_features") else []  # a feature head: its trees too
    if args.quick:
        res = run_check(target, tok, main, greedy, n_runs=24, greedy_prompts=3, greedy_tokens=32, calibration_seeds=0,
                        trees=trees, rule=args.rule)
    else:
        res = run_check(target, tok, main, greedy, n_runs=args.runs, calibration_seeds=0 if args.no_calibration else 20,
                        trees=trees, rule=args.rule)
    print(format_check(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0 if all(res["passed"].values()) else 1
