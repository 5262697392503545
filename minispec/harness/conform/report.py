"""A check's report in words: its verdict, distance with uncertainty, power, smallest failing case and time."""

from __future__ import annotations


def word(good: bool) -> str:
    return "PASS" if good else "FAIL"


def fmt(x, spec: str = ".3g") -> str:
    return "n/a" if x is None else format(x, spec)


def case_text(row: dict) -> str:
    c = row["case"]
    warps = ", ".join(f"{k}={v}" for k, v in c["warps"].items()) or "no warp"
    return (f"{c['name']}, K={c['K']}, V={c['V']} ({warps}); at the empty context target {c['target_row']}, "
            f"draft {c['draft_row']}")


def tie_text(row: dict) -> str:
    """A loop setting with a tie at top-p's boundary (loop_check.py): which convention of keeping it the counts fit."""
    if row.get("tie_free", True):
        return ""
    fit = (f"they fit ties kept toward the {row['tie_convention']} (the figures are against that law)"
           if row.get("tie_convention") else "they fit neither (the figures are against the closer)")
    return (f"; a tie at top-p's boundary in some context, so the counts were tested against both conventions of "
            f"keeping it (the lower id, as minispec, or the higher, as transformers): {fit}")


def result_text(row: dict) -> str:
    if "fault" in row:
        return f"the peer's call failed: {row['fault']}: {row['detail']}" + (f" (call: {row['call']})" if "call" in row else "")
    if "p_value" in row and row["chi2"] == float("inf") and row.get("tie_free", True):
        return (f"drew a sequence the target's law gives probability 0 (TV {row['tv']:.4f}, {row['draws']} draws): "
                "wrong for certain")
    if "p_value" in row and row["chi2"] == float("inf"):
        return (f"drew a sequence the target's law gives probability 0 whichever way a tie at top-p's boundary is kept "
                f"(TV {row['tv']:.4f}, {row['draws']} draws): wrong, unless it keeps that tie one way in one context "
                "and the other way in another")
    if "p_value" in row:
        return (f"TV {row['tv']:.4f} +- {row['tv_se']:.4f} (a correct peer shows {row['tv_noise']:.4f} from noise), "
                f"chi2 {row['chi2']:.1f} on {row['df']} df, p = {row['p_value']:.3g} (alpha {row['alpha']:.2g}), "
                f"{row['draws']} draws; " + ("too few to test: cells expected under 5 times pooled, one is left, so "
                                             "only a draw the law forbids can fail it" if row.get("no_power") else
                                             f"a departure of TV >= {row['tv_80']:.3f} is caught with probability >= 0.8")
                + tie_text(row))
    return f"exact TV {row['tv']:.3g}" + (f", guesses kept per round {row['expected_kept']:.3f}" if "expected_kept" in row else "")


def greedy_text(p: dict, margin: float) -> str:
    """A greedy prompt whose tokens are not the target's greedy ones (loop_check.greedy_check; ``margin``: its
    TIE_MARGIN)."""
    if "fault" in p:
        return f"{p['fault']}: {p['detail']}"
    text = (f"got {p['got']}, want {p['want']} (first differ at position {p['position']}, top-2 logit gap "
            f"{p['top2_logit_gap']:.2g}); ")
    if "wrong_position" in p:
        return text + (f"at position {p['wrong_position']}, after its own tokens, its token's logit is "
                       f"{p['below_argmax']:.2g} below the target's largest")
    return text + (f"each of its tokens, after its own, within {margin:g} of the target's largest logit: a near-tie "
                   "taken the other way")


def format_rule(res: dict) -> str:
    lines = [f"{word(res['passed'])}  rule {res['function']}: {res['cases_run']}/{res['cases']} generated cases, "
             f"{res['failed']} failed, {res['mode']} ({res['seconds']:.1f} s)"]
    if res["mode"] == "exact":
        by_mc = [r for r in res["results"] if "monte_carlo_because" in r]
        lines.append(f"    exact law over every draw; a case passes at TV <= {res['exact_tol']:g}; largest TV "
                     f"{fmt(res['max_tv'])}" + (f"; {len(by_mc)} cases by Monte Carlo instead ({by_mc[0]['monte_carlo_because']}), "
                                                f"{res['draws_per_case']} rounds each, each catching a TV >= "
                                                f"{fmt(res['tv_80_max'])} with probability >= 0.8" if by_mc else ""))
    else:
        lines.append(f"    {res['mode_reason'] or 'Monte Carlo asked for'}: Monte Carlo, {res['draws_per_case']} rounds "
                     f"per case, alpha {res['alpha']} over all cases (Bonferroni); largest TV {fmt(res['max_tv'])}; every "
                     f"case catches a departure of TV >= {fmt(res['tv_80_max'])} with probability >= 0.8")
    if res["smallest_failing"]:
        s = res["smallest_failing"]
        lines.append(f"    smallest failing case: {case_text(s)}\n      {result_text(s)}")
    return "\n".join(lines)


def format_loop(res: dict) -> str:
    lines = [f"{word(res['passed'])}  loop {res['function']}: Monte Carlo, {res['runs_per_setting']} runs of "
             f"{res['tokens']} tokens per setting, tiny models (vocabulary {res['vocabulary']}), alpha {res['alpha']} "
             f"over the settings ({res['seconds']:.1f} s)"
             + (f"; logits processors {res['processors']} on both sides of the comparison" if res.get("processors") else "")]
    for r in res["results"]:
        s = r["setting"]
        lines.append(f"  {word(r['passed'])}  T={s['temperature']}, top-k {s['top_k']}, top-p {s['top_p']}: "
                     + result_text(r))
    g = res["greedy"]
    same = sum(p.get("got") == p.get("want") for p in g["prompts"])
    lines.append(f"  {word(g['passed'])}  greedy: {same}/{len(g['prompts'])} prompts identical to the target's own "
                 "greedy tokens" + "".join(f"\n      prompt {p['prompt']}: {greedy_text(p, g['tie_margin'])}"
                                           for p in g["prompts"] if p.get("got") != p.get("want")))
    return "\n".join(lines)


def format_report(res: dict) -> str:
    return format_rule(res) if res["level"] == "rule" else format_loop(res)
