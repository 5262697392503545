"""The figures README and docs/ quote, computed from the committed measurements. ``docs_tables`` writes them in.

Two kinds:
  sections   whole tables or lists, ``SECTIONS[name](root) -> Markdown``;
  values     one figure in a sentence, ``values(root)[name] -> text``.
Every speed figure carries its spread: the interquartile range over the prompts it is the median of.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from fractions import Fraction
from functools import lru_cache
from math import prod
from pathlib import Path

from ..drafters.eagle import TENTHS
from ..model.safetensors_io import read_header
from ..policy.acceptance import expected_tokens, predicted_speedup
from .auto_eval import CONTROL
from .check import TREE_TWINS
from .measure import MEDIAN_FLOOR
from .study import honest, stored_bound

DRAFT, EAGLE, PL, LS, SELF = "draft:smoldraft-3l-192", "eagle:eagle-smollm2-135m", "prompt-lookup:3", "layer-skip:24", "self"
NAMES = {DRAFT: "shipped draft", EAGLE: "EAGLE head", PL: "prompt lookup", LS: "layer skip, 24 of 30 layers",
         SELF: "the target itself"}


@lru_cache(maxsize=None)
def load(root: Path, rel: str) -> dict:
    return json.loads((root / rel).read_text())


def run_line(res: dict) -> str:
    """Where a result comes from: command, date, commit and machine (its ``provenance``)."""
    p = res.get("provenance")
    if not p:
        return "provenance not recorded"
    m, commit = p["machine"], str(p["commit"] or "?")
    commit = commit[:7] + (" with uncommitted changes" if commit.endswith("+changes") else "")
    if p.get("backfilled"):  # written after the fact from git history: no run date, no machine
        return f"`{p['command']}`, added in commit {commit} on {p['date'][:10]} (provenance written after the fact)"
    cpu = ", ".join(str(x) for x in (m.get("cpu", m.get("processor")), m.get("cpu_generation"), m.get("simd")) if x)
    return (f"`{p['command']}`, {p['date'][:10]}, commit {commit}, "
            f"{m.get('cpus')} vCPUs ({cpu}), NumPy {m.get('numpy')}")


# ---- the study (docs/study/study.json) ------------------------------------------------------------------------

STUDY = "docs/study/study.json"


def study(root: Path) -> dict:
    return load(root, STUDY)


def row(s: dict, drafter: str, k, setting: str = "greedy") -> dict:
    return next(r for r in s["rows"] if r["drafter"] == drafter and r["k"] == k and r["setting"] == setting)


def best_fixed(s: dict, drafter: str, setting: str = "greedy", pset: str | None = None) -> dict:
    fixed = [r for r in s["rows"] if r["drafter"] == drafter and r["setting"] == setting and isinstance(r["k"], int)]
    return max(fixed, key=lambda r: (r["by_prompt_set"][pset] if pset else r)["speedup"])


def speed(r: dict, pset: str | None = None) -> str:
    """A speedup with its interquartile range over prompts, 0.83x (0.79-0.92), of one prompt set or all, marked
    noise where it is above what its runs' tokens per target pass allow (study.honest)."""
    return honest(r["by_prompt_set"][pset] if pset else r)


def tokens_per_second(s: dict, setting: str = "greedy") -> str:
    iqr = s.get("baseline_tok_s_iqr", {}).get(setting)
    return f"{s['baseline_tok_s'][setting]:.1f} tokens/s" + (f" ({iqr[0]:.1f}-{iqr[1]:.1f})" if iqr else "")


def r_of(s: dict, n: int) -> float:
    return s["r"][str(n)]


def c_of(s: dict, drafter: str) -> str:
    c = s["c"][drafter]
    return f"{c:.3f}" if c < 0.5 else f"{c:.2f}"


def study_table(root: Path) -> str:
    s = study(root)
    lines = [f"From [`{STUDY}`]({STUDY}) ({run_line(s)}): {s['prompts_per_set']} prompts per set ({', '.join(s['prompt_sets'])}), "
             f"{s['max_new_tokens']} new tokens, K in {', '.join(map(str, s['ks']))}; plain decoding "
             f"{tokens_per_second(s)} greedy; {s['seconds'] / 60:.1f} min in all. Each cell: the median speedup over "
             "plain decoding timed side by side, and in brackets the interquartile range over the prompts; a "
             "range that holds 1.00x is within noise, and \"noise\" marks a median above what its runs' tokens per "
             "target pass allow.", "",
             "| drafter | prompts | c | first guess kept (K = 1, greedy) | best fixed K, greedy | K = auto, greedy "
             "| tree, greedy | K = auto, T = 1 |", "|---|---|---|---|---|---|---|---|"]
    for drafter, pset in [(PL, "grounded"), (PL, None), (EAGLE, "code"), (EAGLE, None), (DRAFT, None), (LS, None),
                          (SELF, None)]:
        if not any(r["drafter"] == drafter for r in s["rows"]):
            continue
        b, one = best_fixed(s, drafter, pset=pset), row(s, drafter, 1)
        a = (one["by_prompt_set"][pset] if pset else one)["acceptance"]
        lines.append(f"| {NAMES[drafter]} | {pset or 'all'} | {c_of(s, drafter)} | {a:.2f} | {speed(b, pset)}, "
                     f"K = {b['k']} | {speed(row(s, drafter, 'auto'), pset)} | {speed(row(s, drafter, 'tree'), pset)} "
                     f"| {speed(row(s, drafter, 'auto', 'T=1'), pset)} |")
    return "\n".join(lines)


def speed_model(root: Path) -> str:
    """The worked example of the speed model (docs/speed.md), with the shipped draft's measured c, a and r(n)."""
    s = study(root)
    c, one, four = s["c"][DRAFT], row(s, DRAFT, 1), row(s, DRAFT, 4)
    a, r2, r5 = one["a_first"], r_of(s, 2), r_of(s, 5)
    e1, e4 = expected_tokens(a, 1), expected_tokens(a, 4)
    return "\n".join([
        f"- K = 1: E = {e1:.2f} tokens for {c:.3f} + r(2) = {c + r2:.2f} steps: **{e1 / (c + r2):.2f}x** predicted, "
        f"{speed(one)} measured;",
        f"- K = 4: E = {e4:.2f} tokens for 4 x {c:.3f} + r(5) = {4 * c + r5:.2f} steps: **{e4 / (4 * c + r5):.2f}x** "
        f"predicted, {speed(four)} measured;",
        f"- to pay at K = 1 it would need 1 + a > {c + r2:.2f}, a > {c + r2 - 1:.2f}; where r(n) = 1 (a GPU's "
        f"batch-parallel verification) the same draft would reach {e1 / (c + 1):.2f}x at K = 1 and "
        f"{e4 / (4 * c + 1):.2f}x at K = 4."])


def needed(target: float, c: float, r: dict, ks=range(1, 9)) -> float | None:
    """The smallest acceptance (first and later guesses alike) at which the best K reaches ``target``x, by
    bisection; ``target`` 1: the break-even acceptance, where some K pays. None where no K reaches it even at
    acceptance 1 (bug: the bisection then returned 1.0, as if a perfect first guess were enough)."""
    def reaches(a):
        return any(predicted_speedup(a, c, r[str(k + 1)], k) >= target for k in ks if str(k + 1) in r)
    if not reaches(1.0):
        return None
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if reaches(mid):
            hi = mid
        else:
            lo = mid
    return hi


def acceptance_text(a: float | None) -> str:
    """``needed``'s acceptance as the docs print it."""
    return "out of reach" if a is None else f"{a:.2f}"


def eagle_speed(root: Path) -> str:
    """docs/eagle.md's speed section: the run, costs, acceptance, the table per setting and prompt set, the
    prediction next to the measurement, and the other drafters of the same run."""
    s = study(root)
    c, ms, step = s["c"][EAGLE], s["draft_step_ms"], s["target_step_ms"]
    four, one = row(s, EAGLE, 4), row(s, EAGLE, 1)
    one_t1 = row(s, EAGLE, 1, "T=1")
    ks = [k for k in s["ks"] if any(r["drafter"] == EAGLE and r["k"] == k for r in s["rows"])]
    lines = [f"From the study ([`study/report.md`](study/report.md); {run_line(s)}; {s['seconds'] / 60:.1f} min): "
             f"{s['prompts_per_set']} evaluation prompts per set, {s['max_new_tokens']} new tokens, every speedup the "
             "median of per-prompt ratios to plain decoding timed before and after it in the same run, with the "
             "interquartile range over the prompts in brackets. The head costs "
             f"{ms[EAGLE]:.2f} ms per guess against a {step:.2f} ms target step: **c = {c:.3f}** (the shipped draft "
             f"model: {ms[DRAFT]:.2f} ms, c = {s['c'][DRAFT]:.3f}). Verifying n tokens in one pass costs r(n) target "
             f"steps: r(2) = {r_of(s, 2):.2f}, r(3) = {r_of(s, 3):.2f}, r(5) = {r_of(s, 5):.2f}.", "",
             "Acceptance (the share of rounds with at least j guesses kept, greedy, K = 4, all sets): "
             + ", ".join(f"{v:.2f}" for v in four["per_position"]) + f"; first guess a = {four['a_first']:.2f}, a "
             f"later guess given the one before b = {four['a_next']:.2f}. At K = 1 the first guess is kept "
             + " / ".join(f"{one['by_prompt_set'][p]['acceptance']:.2f}" for p in s["prompt_sets"])
             + f" on {' / '.join(s['prompt_sets'])} prompts greedy, "
             + " / ".join(f"{one_t1['by_prompt_set'][p]['acceptance']:.2f}" for p in s["prompt_sets"])
             + f" at T = 1. The shipped draft model: {row(s, DRAFT, 1)['a_first']:.2f} over all sets.", "",
             "| setting | prompt set | best fixed K | K = auto | tree (auto shape) |", "|---|---|---|---|---|"]
    for setting in s["settings"]:
        for pset in [*s["prompt_sets"], None]:
            b = best_fixed(s, EAGLE, setting, pset)
            lines.append(f"| {setting} | {pset or 'all'} | {speed(b, pset)}, K = {b['k']} | "
                         f"{speed(row(s, EAGLE, 'auto', setting), pset)} | {speed(row(s, EAGLE, 'tree', setting), pset)} |")
    pred = ", ".join(f"K = {k} {row(s, EAGLE, k)['predicted']:.2f}x / {speed(row(s, EAGLE, k))}" for k in ks)
    best = next(b for b in s["best"] if b["drafter"] == EAGLE and b["setting"] == "greedy")
    lines += ["", "Prediction next to measurement (greedy, all sets; speedup(K) = (1 + a (1 - b^K) / (1 - b)) / (K c + "
              f"r(K+1)) from the measured a, b, c, r): {pred}. The predicted best K is K = {best['predicted_best_k']}, "
              f"the measured one K = {best['best_k']}.", "",
              "Against the other drafters in the same run, greedy, all sets, each at its best fixed K: "
              + "; ".join(f"{NAMES[d]} {speed(best_fixed(s, d))} (K = {best_fixed(s, d)['k']})"
                          for d in (EAGLE, DRAFT, PL, LS, SELF) if any(r["drafter"] == d for r in s["rows"])) + "."]
    peer = s.get("peer")
    if peer:
        assisted = next((v for k, v in peer.items() if k.startswith("assistant")), None)
        if assisted:
            lines += ["", f"The peer: transformers' assisted generation with the shipped draft ran at "
                      f"{assisted['speedup']:.2f}x of transformers' own plain decoding (one run, no spread recorded); "
                      "transformers has no way to run a feature head, so EAGLE has no peer there."]
    return "\n".join(lines)


def eagle_targets(root: Path) -> str:
    """docs/eagle.md's targets, issue 43's goals, judged by the kernel study with the numba kernel
    (docs/kernel/study_numba.json) with the NumPy kernel's figures beside them (study_numpy.json), the default dynamic
    tree at its fixed shape (``minispec bench eagle --trees``, docs/eagle/trees_shipped.json: tokens a pass, which no
    kernel changes), and the memory measured by ``minispec bench eagle`` (docs/eagle/bench_eagle_shipped.json)."""
    studies = {k: load(root, f"docs/kernel/study_{k}.json") for k in ("numba", "numpy")}
    mem = load(root, "docs/eagle/bench_eagle_shipped.json")["memory"]
    fixed = load(root, "docs/eagle/trees_shipped.json")["trees"]

    def yes(ok):
        return "yes" if ok else "no"

    def met(v, goal):  # by the median; "within noise" where the interquartile range holds the goal; "no" for a
        # median that is itself noise (above its runs' tokens per target pass: study.stored_bound)
        bound = stored_bound(v)
        if v.get("speedup") is not None and bound is not None and v["speedup"] > bound:
            return "no (the median is noise)"
        q1, q3 = v.get("speedup_q1"), v.get("speedup_q3")
        spread_holds = q1 is not None and q1 < goal <= q3 or q1 is not None and q1 <= goal < q3
        return yes(v["speedup"] >= goal) + (" by the median, within noise" if spread_holds else "")

    def first_guess(s, pset):
        return row(s, EAGLE, 1)["by_prompt_set"][pset]["acceptance"]

    def tree_passes(s):
        return row(s, EAGLE, "tree")["by_prompt_set"]["code"]["tokens_per_pass"]

    def best_of_auto_and_tree(s, pset, setting):
        auto = row(s, EAGLE, "auto", setting)["by_prompt_set"][pset]
        tree = row(s, EAGLE, "tree", setting)["by_prompt_set"][pset]
        return ("auto", auto) if auto["speedup"] >= tree["speedup"] else ("tree", tree)

    nb, npy = studies["numba"], studies["numpy"]
    lines = ["| target | numba kernel | met | NumPy kernel |", "|---|---|---|---|"]
    for pset, goal in (("code", 0.70), ("chat", 0.55)):
        lines.append(f"| first guess kept >= {goal:.2f} greedy on {pset} | {first_guess(nb, pset):.2f} | "
                     f"{yes(first_guess(nb, pset) >= goal)} | {first_guess(npy, pset):.2f} |")
    lines.append(f"| c <= 0.10 | {nb['c'][EAGLE]:.3f} | {yes(nb['c'][EAGLE] <= 0.10)} | {npy['c'][EAGLE]:.3f} |")
    lines.append(f"| tokens per target pass on code with the automatic tree >= 2.5, greedy | {tree_passes(nb):.2f} | "
                 f"{yes(tree_passes(nb) >= 2.5)} | {tree_passes(npy):.2f} |")
    v = fixed["4x5x16"]["greedy code"]["tokens_per_pass"]  # the default tree (``DynamicTree()``)
    lines.append(f"| tokens per target pass on code with the default tree at its fixed shape (4x5x16) >= 2.5, greedy | "
                 f"{v:.2f} | {yes(v >= 2.5)} | - |")
    for pset, setting, goal in (("code", "greedy", 1.61), ("chat", "greedy", 1.3), ("code", "T=1", 1.3)):
        (name, v), (name_np, v_np) = best_of_auto_and_tree(nb, pset, setting), best_of_auto_and_tree(npy, pset, setting)
        lines.append(f"| {setting}, best of auto K and tree, >= {goal}x on {pset} | {honest(v)} ({name}) | "
                     f"{met(v, goal)} | {honest(v_np)} ({name_np}) |")
    t1, t1_np = row(nb, EAGLE, "auto", "T=1"), row(npy, EAGLE, "auto", "T=1")
    lines.append(f"| T=1 with K = auto >= {MEDIAN_FLOOR}x | {speed(t1)} overall; "
                 + ", ".join(f"{p} {speed(t1, p)}" for p in nb["prompt_sets"]) + f" | {met(t1, MEDIAN_FLOOR)} | "
                 f"{speed(t1_np)} |")
    loop, plain = mem["added_mb"], mem["added_over_plain_mb"]
    lines.append(f"| the head adds <= 40 MB resident | {loop:.1f} MB over the same loop with prompt lookup; {plain:.1f} MB "
                 f"over plain decoding | over the loop, {yes(loop <= 40)}; over plain decoding, {yes(plain <= 40)} | - |")
    return "\n".join(lines)


def eagle_values(root: Path) -> dict[str, str]:
    """The figures of docs/eagle.md's "what limits it", from the kernel study with the numba kernel (where the goals
    are judged): the cap r(n) puts on a perfect first guess, the acceptance the speed goals need, and what the
    measured a, b and c would give where r(n) = 1."""
    s = load(root, "docs/kernel/study_numba.json")
    c, r = s["c"][EAGLE], s["r"]
    a = {p: row(s, EAGLE, 1)["by_prompt_set"][p]["acceptance"] for p in s["prompt_sets"]}
    b = row(s, EAGLE, 4)["a_next"]
    return {"eagle.r2": f"{r_of(s, 2):.2f}", "eagle.cap": f"2 / ({r_of(s, 2):.2f} + {c:.3f}) = {2 / (r_of(s, 2) + c):.2f}x",
            "eagle.needs.1.61": acceptance_text(needed(1.61, c, r)), "eagle.needs.1.3": acceptance_text(needed(1.3, c, r)),
            "eagle.b": f"{b:.2f}",
            "eagle.gpu.code": f"(1 + {a['code']:.2f} + {a['code']:.2f} x {b:.2f}) / (2 x {c:.3f} + 1) = "
                              f"{predicted_speedup(a['code'], c, 1.0, 2, b):.2f}x",
            "eagle.gpu.chat": f"{predicted_speedup(a['chat'], c, 1.0, 2, b):.2f}x"}


def head_name(path: str) -> str:
    """A head directory as docs name it: the shipped head by its folder, a cached one by the folder it sits in."""
    parts = Path(path).parts
    return parts[-1] if parts[-1] != "head" or len(parts) < 2 else parts[-2]


def eagle_confidence(root: Path) -> str:
    """docs/eagle.md's "Its confidence": each head's first guesses on the target's greedy answers by the head's
    confidence in tenths (the label of eagle.py's ``context``), and the share of each tenth equal to the target's
    greedy token (docs/eagle/answers_s15.json, recipes/eagle_answers.py)."""
    a = load(root, "docs/eagle/answers_s15.json")
    cols = [(h, s) for h in a["heads"] for s in a["heads"][h]]
    lines = [f"Teacher-forced on the target's greedy answers ({a['tokens']} tokens) to every prompt of each set "
             f"({run_line(a)}): for each tenth of the head's top probability, the share of its first guesses that "
             "fall there, then (after the colon) the share of those equal to the target's greedy token; the last row, "
             "every first guess's. Heads are named by their folder: eagle-smollm2-135m is the shipped head-s11, "
             "eagle-s15 head-s15.", "",
             "| confidence | " + " | ".join(f"{head_name(h)}, {s}" for h, s in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for t in range(TENTHS):
        cells = []
        for h, s in cols:
            bins = a["heads"][h][s]["first_by_confidence"]
            n = sum(b["positions"] for b in bins)
            b = bins[t]
            cells.append(f"{b['positions'] / n:.3f}: {b['greedy']:.2f}" if b["positions"] else "-")
        lines.append(f"| [{t / TENTHS:.1f}, {(t + 1) / TENTHS:.1f}) | " + " | ".join(cells) + " |")
    lines.append("| all | " + " | ".join(f"{a['heads'][h][s]['greedy'][0]:.3f}" for h, s in cols) + " |")
    return "\n".join(lines)


def bf16_values(root: Path) -> dict[str, str]:
    """The EAGLE head stored in bfloat16 against the float32 head it was trained as (docs/eagle/bf16.json)."""
    b = load(root, "docs/eagle/bf16.json")
    return {"bf16.positions": str(b["positions"]), "bf16.tv_mean": f"{b['tv_mean']:.4f}", "bf16.tv_max": f"{b['tv_max']:.4f}",
            "bf16.acceptance": f"{b['acceptance']['BF16']:.4f} (float32: {b['acceptance']['F32']:.4f})",
            "bf16.agreement": f"{b['greedy_agreement']['BF16']:.3f} (float32: {b['greedy_agreement']['F32']:.3f})"}


def study_values(root: Path) -> dict[str, str]:
    s = study(root)
    r = s["r"]
    rs = [r_of(s, n) for n in range(9, 17) if str(n) in r]
    out = {
        "study.r2": f"{r_of(s, 2):.2f}", "study.r3": f"{r_of(s, 3):.2f}", "study.r5": f"{r_of(s, 5):.2f}",
        "study.r9-16": f"{min(rs):.1f}-{max(rs):.1f}" if rs else "-",
        "study.r2-r5": f"{r_of(s, 2):.2f}-{r_of(s, 5):.2f}",
        "study.minutes": f"{s['seconds'] / 60:.0f} min",
        "study.tok_s": tokens_per_second(s),
        "study.break_even": f"{acceptance_text(needed(1.0, 0.0, r))}-{acceptance_text(needed(1.0, 0.1, r))}",
        "study.a.draft": f"{row(s, DRAFT, 1)['a_first']:.2f}",
        "study.a.eagle": f"{row(s, EAGLE, 1)['a_first']:.2f}",
    }
    for name, d in (("draft", DRAFT), ("eagle", EAGLE), ("pl", PL), ("ls", LS)):
        out[f"study.c.{name}"] = c_of(s, d)
    for pset in s["prompt_sets"]:
        out[f"study.a.eagle.{pset}"] = f"{row(s, EAGLE, 1)['by_prompt_set'][pset]['acceptance']:.2f}"
        for setting, tag in (("greedy", "greedy"), ("T=1", "t1")):
            out[f"study.auto.{tag}.eagle.{pset}"] = speed(row(s, EAGLE, "auto", setting), pset)
            out[f"study.auto.{tag}.draft.{pset}"] = speed(row(s, DRAFT, "auto", setting), pset)
            out[f"study.auto.{tag}.pl.{pset}"] = speed(row(s, PL, "auto", setting), pset)
        b = best_fixed(s, PL, pset=pset)
        out[f"study.best.pl.{pset}"] = f"{speed(b, pset)} at K = {b['k']}"
        out[f"study.tree.pl.{pset}"] = speed(row(s, PL, "tree"), pset)
    out["study.auto.t1.draft"] = speed(row(s, DRAFT, "auto", "T=1"))
    out["study.auto.t1.eagle"] = speed(row(s, EAGLE, "auto", "T=1"))
    out["study.step_ms"] = f"{s['target_step_ms']:.1f} ms"
    widths = sorted(r["speedup_q3"] - r["speedup_q1"] for r in s["rows"])
    out["study.iqr_widths"] = f"{widths[0]:.2f}-{widths[-1]:.2f}x wide (median {statistics.median(widths):.2f}x)"
    out["study.auto.t1.draft.tokens_per_pass"] = f"{row(s, DRAFT, 'auto', 'T=1')['tokens_per_pass']:.2f}"
    out["study.k1.draft"] = speed(row(s, DRAFT, 1))
    gaps = [abs(b["speedup"] - b["predicted"]) for b in s["best"] if b["setting"] == "greedy"]
    out["study.prediction_gap"] = f"{max(gaps):.2f}x"
    return out


# ---- k = auto against plain decoding (docs/policy/auto_*.json) ------------------------------------------------

def auto_values(root: Path) -> dict[str, str]:
    """Per calibration: the range of speedups where drafting does not pay (every drafter and prompt set but prompt
    lookup's grounded prompts), prompt lookup on grounded prompts, and the plain-against-plain control's range,
    which is the run's noise."""
    out = {}
    for calibration in ("honest", "corrupted"):
        d = load(root, f"docs/policy/auto_{calibration}.json")["drafters"]
        rest = [v for name, sp in d.items() if name != CONTROL for ps, v in sp["speedup"].items()
                if not (name == PL and ps == "grounded")]
        control = list(d[CONTROL]["speedup"].values())
        out[f"auto.{calibration}.range"] = f"{min(rest):.2f}x-{max(rest):.2f}x"
        out[f"auto.{calibration}.pl.grounded"] = f"{d[PL]['speedup']['grounded']:.2f}x"
        out[f"auto.{calibration}.control"] = f"{min(control):.2f}x-{max(control):.2f}x"
    out["auto.repeats"] = str(load(root, "docs/policy/auto_honest.json")["repeats"])
    return out


# ---- drafts with their own tokenizer (docs/crossvocab/vocab.json) --------------------------------------------

TLI, SLEM = "tli:bpe8k-draft-4l-384", "slem:bpe8k-draft-4l-384"
SHARED = "docs/crossvocab/shared_tokens.json"


def crossvocab_values(root: Path) -> dict[str, str]:
    v = load(root, "docs/crossvocab/vocab.json")
    shared = load(root, SHARED)  # scripts/shared_tokens.py: counted from the two tokenizer files
    out = {"vocab.shared": f"{shared['shared']:,} of the shipped draft's {shared['draft_vocab']:,}",
           "vocab.c.tli": f"{v['c'][TLI]:.3f}", "vocab.c.slem": f"{v['c'][SLEM]:.3f}", "vocab.c.draft": f"{v['c'][DRAFT]:.3f}",
           "vocab.prompts": str(v["prompts_per_set"])}
    for r in v["rows"]:
        if r["k"] == 1 and r["setting"] == "greedy":
            tag = {TLI: "tli", SLEM: "slem", DRAFT: "draft"}[r["drafter"]]
            out[f"vocab.k1.{tag}.{r['prompt_set']}.accepted"] = f"{r['accepted_per_pass']:.2f}"
            out[f"vocab.k1.{tag}.{r['prompt_set']}.speedup"] = f"{r['speedup']:.2f}x"
    for tag, name in (("tli", TLI), ("slem", SLEM), ("draft", DRAFT)):
        out[f"vocab.best.{tag}"] = \
            f"{max(r['speedup'] for r in v['rows'] if r['drafter'] == name and r['setting'] == 'greedy'):.2f}x"
    return out


def crossvocab_table(root: Path, setting: str, rows_wanted) -> str:
    """docs/crossvocab.md's tables: accepted target tokens per pass / characters per pass / speedup, per prompt set
    (medians of the run's prompts: ``bench vocab`` records no spread; one run)."""
    v = load(root, "docs/crossvocab/vocab.json")
    names = {TLI: "TLI", SLEM: "SLEM", DRAFT: "shipped draft"}
    sets = list(dict.fromkeys(r["prompt_set"] for r in v["rows"]))
    lines = [f"| K | drafter | {sets[0]}: accepted / chars / speedup | " + " | ".join(sets[1:]) + " |",
             "|---|---|" + "---|" * len(sets)]
    for k, drafter in rows_wanted:
        cells = []
        for pset in sets:
            r = next(r for r in v["rows"] if (r["drafter"], r["k"], r["setting"], r["prompt_set"]) == (drafter, k, setting, pset))
            cells.append(f"{r['accepted_per_pass']:.2f} / {r['chars_per_pass']:.1f} / {r['speedup']:.2f}x")
        lines.append(f"| {k} | {names[drafter]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---- the token-wise rule against block verification (docs/block/rules.json) -----------------------------------

def rules_values(root: Path) -> dict[str, str]:
    r = load(root, "docs/block/rules.json")  # minispec bench rules --json: per drafter, per temperature, per rule
    d = r["drafters"].values()

    def spread(xs, unit: str) -> str:  # the range over drafters, signed: "-1.0% to +5.8%"
        digits = 1 if unit == "%" else 2
        return f"{min(xs):+.{digits}f}{unit} to {max(xs):+.{digits}f}{unit}"

    def gain(t: str, rule: str) -> list[float]:  # % more tokens per pass than the token-wise rule, per drafter
        return [100 * (v[t][rule]["tokens_per_pass"] / v[t]["token"]["tokens_per_pass"] - 1) for v in d]

    def faster(t: str, rule: str) -> list[float]:  # speedup minus the token-wise rule's, per drafter
        return [v[t][rule]["speedup"] - v[t]["token"]["speedup"] for v in d]

    def acceptance(t: str, rule: str) -> str:
        xs = [v[t][rule]["acceptance"] for v in d]
        return f"{min(xs):.3f}-{max(xs):.3f}"

    out = {"rules.gain": spread(gain("T=1", "block"), "%"), "rules.faster": spread(faster("T=1", "block"), "x"),
           "rules.runs": str(r["prompts"] * r["seeds"]), "rules.k": str(r["k"])}
    for t in r["temperatures"]:
        key, name = f"t{t:g}", f"T={t:g}"  # a figure's name: rules.coupled.t0.7.gain
        out[f"rules.coupled.{key}.gain"] = spread(gain(name, "coupled"), "%")
        out[f"rules.coupled.{key}.faster"] = spread(faster(name, "coupled"), "x")
        out[f"rules.coupled.{key}.acceptance"] = acceptance(name, "coupled")
        out[f"rules.token.{key}.acceptance"] = acceptance(name, "token")
    exact = load(root, RULES_EXACT)  # python examples/05_rules.py --json: integrated exactly, no sampling
    for case in ("paper", "table"):
        out[f"rules.exact.{case}.k"] = str(exact[case]["K"])
        for name, v in exact[case]["rules"].items():
            out[f"rules.exact.{case}.{name.replace(' ', '-')}.kept"] = fraction(v["kept"])
            out[f"rules.exact.{case}.{name.replace(' ', '-')}.tv"] = f"{v['tv']:.3f}"
    return out


RULES_EXACT = "docs/block/rules_exact.json"


def fraction(x: float) -> str:
    """An exact figure as a small fraction where it is one (11/9, to the 6 digits a measurement is stored with), else
    to 3 decimals."""
    f = Fraction(x).limit_denominator(9)
    return f"{f.numerator}/{f.denominator}" if f.denominator > 1 and abs(float(f) - x) < 1e-5 * abs(x) else f"{x:.3f}"


# ---- the power of level 4 (docs/power/power.json) -------------------------------------------------------------

POWER = "docs/power/power.json"


def power_table(root: Path) -> str:
    res = load(root, POWER)
    sizes = [str(n) for n in res["sizes"]]
    lines = [f"| departure | TV per token | {' | '.join(f'N = {n}' for n in sizes)} |", "|---|---|" + "---|" * len(sizes)]
    for name, d in res["departures"].items():
        family, strength = name.split("@")
        if float(strength) == 0:
            continue
        lines.append(f"| {family}, s = {strength} | {d['tv_per_token']:.4f} | "
                     + " | ".join(f"{d['rejected'][n]} of {res['repeats']}" for n in sizes) + " |")
    return "\n".join(lines)


def power_values(root: Path) -> dict[str, str]:
    res = load(root, POWER)
    out = {"power.run": f"{run_line(res)}; {res['seconds']:.0f} s", "power.repeats": str(res["repeats"]), "power.run_tokens": str(res["run_tokens"]),
           "power.smollm2.tv": f"{res['smollm2']['tv_per_round_start']:.3f}",
           "power.null": ", ".join(f"{res['departures']['residual@0']['rejected'][str(n)]}" for n in res["sizes"])}
    for name, d in res["departures"].items():
        key = "power." + name.replace("@", "-")
        out[key + ".tv"] = f"{d['tv_per_token']:.3f}"
        for n in res["sizes"]:
            out[f"{key}.{n}"] = f"{d['rejected'][str(n)]} of {res['repeats']}"
    faint = [d["rejected"][str(max(res["sizes"]))] for d in res["departures"].values() if 0 < d["tv_per_token"] < 0.01]
    out["power.faint.most"] = f"{max(faint)} of {res['repeats']}" if faint else "-"
    out["power.largest"] = str(max(res["sizes"]))
    draft = load(root, "docs/level4_draft.json")["sampling"]["tokens"]
    out["level4.draft.tokens"] = f"{draft['tokens_a']:,}"
    out["level4.draft.runs_of_16"] = f"{draft['tokens_a'] / 16:.0f}"
    return out


# ---- level 4 (docs/level4_<kind>.json) -------------------------------------------------------------------

LEVEL4 = ["draft", "eagle", "tli", "slem", "block", "coupled", "eagle_tree", "eagle_tree_quick"]  # docs/level4_<kind>.json, in this order
# when present; a run with ``--tree`` (eagle_tree) gives a second row, its dynamic tree's



def _p(x: float) -> str:
    return f"{x:.2g}"


def level4_table(root: Path) -> str:
    rows = ["| drafter (rule) | paired runs | real rule: p (per statistic; combined) | broken twin: combined p | "
            "greedy identical | time | run |", "|---|---|---|---|---|---|---|"]
    runs: dict[str, list[str]] = {}
    for kind in LEVEL4:
        f = root / "docs" / f"level4_{kind}.json"
        if not f.is_file():
            continue
        r = json.loads(f.read_text())
        s = r["sampling"]
        stats = ", ".join(f"{k} {_p(s[k]['p_value'])}" for k in ("tokens", "acceptance", "prefix") if k in s)
        prov = r.get("provenance")
        run = f"{prov['date'][:10]}, {str(prov['commit'] or '?')[:7]}" if prov else f"committed in {added_in(f)}"
        if "identity" in s:  # a keyed rule: every run must be plain keyed sampling's tokens
            stats += f"; identical to keyed sampling {s['identity']['identical']}/{s['identity']['runs']}"
        twins = []
        for key, label in (("sampling_broken_rule", r["sampling_broken_rule"]["rule"]),
                           ("sampling_trusted_boundary", "boundary token trusted by prefix")):
            if key in r:
                t = r[key]
                twins.append(f"{label}: {_p(t['p_value'])} ({'caught' if not t['passed'] else 'NOT caught'})"
                             + (f", identical to keyed sampling {t['identity']['identical']}/{t['identity']['runs']}"
                                if "identity" in t else ""))
        greedy = "; ".join(f"{g['drafter']} {g['identical']}/{g['prompts']}" for g in r["greedy"]) or "in the run above"
        rows.append(f"| {s['drafter']} ({s['rule']}) | {s['tokens']['runs']} | {stats}; **{_p(s['p_value'])}** "
                    f"({'PASS' if s['passed'] else 'FAIL'}) | {'; '.join(twins)} | {greedy} | "
                    f"{r['seconds'] / 60:.0f} min | [{run}](docs/level4_{kind}.json) |")
        if "tree_sampling" in r:  # minispec check --tree: EAGLE-2's dynamic tree, and its twin
            twin = next((k for k in TREE_TWINS if k in r), None)  # the twin the run used (check.py's TREE_TWINS)
            if twin is None:
                raise ValueError(f"{f}: a dynamic tree's level-4 run without its twin (one of {', '.join(TREE_TWINS)})")
            t, tw, shape = r["tree_sampling"], r[twin], r["tree_sampling"]["tree"]
            tstats = ", ".join(f"{k} {_p(t[k]['p_value'])}" for k in ("tokens", "acceptance") if k in t)
            rows.append(f"| {t['drafter']} ({t['rule']}, dynamic tree {shape['top_k']}x{shape['depth']}x{shape['nodes']}) "
                        f"| {t['tokens']['runs']} | {tstats}; **{_p(t['p_value'])}** ({'PASS' if t['passed'] else 'FAIL'}) "
                        f"| {TREE_TWINS[twin]}: {_p(tw['p_value'])} "
                        f"({'caught' if not tw['passed'] else 'NOT caught'}) | in the run above | in the run above | "
                        f"[{run}](docs/level4_{kind}.json) |")
        if prov:
            runs.setdefault(run_line(r), []).append(kind)
    rows += [""] + [f"Run{'s' if len(kinds) > 1 else ''} ({', '.join(kinds)}): {line}." for line, kinds in runs.items()]
    return "\n".join(rows)


def added_in(f: Path) -> str:
    """An older result without provenance: the commit (and day) that added it."""
    import subprocess

    try:
        out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%h %cs", "--", str(f)], cwd=f.parents[1],
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return f"{out[-2]}, {out[-1]}" if len(out) >= 2 else "?"




def level4_values(root: Path) -> dict[str, str]:
    out = {}
    for kind in LEVEL4:
        f = root / "docs" / f"level4_{kind}.json"
        if not f.is_file():
            continue
        r, key = json.loads(f.read_text()), f"level4.{kind}"
        out[f"{key}.runs"] = str(r["sampling"]["tokens"]["runs"])
        out[f"{key}.minutes"] = f"{r['seconds'] / 60:.0f} min"
        out[f"{key}.run"] = run_line(r)
        for side in ("sampling", "sampling_broken_rule", "sampling_trusted_boundary"):
            if side not in r:
                continue
            tag = {"sampling": "rule", "sampling_broken_rule": "twin", "sampling_trusted_boundary": "boundary"}[side]
            out[f"{key}.{tag}.p"] = f"{r[side]['p_value']:.2g}"
            if "identity" in r[side]:
                out[f"{key}.{tag}.identity"] = f"{r[side]['identity']['identical']} of {r[side]['identity']['runs']}"
            for stat in ("tokens", "acceptance", "prefix"):
                if stat in r[side]:
                    out[f"{key}.{tag}.{stat}.p"] = f"{r[side][stat]['p_value']:.2g}"
                    if "mean_a" in r[side][stat]:
                        out[f"{key}.{tag}.{stat}.means"] = (f"{r[side][stat]['mean_b']:.3f} against "
                                                            f"{r[side][stat]['mean_a']:.3f}")
    return out


# ---- mutation testing (docs/mutation/mutmut.json, scripts/mutmut_report.py) ----------------------------------

MUTMUT = "docs/mutation/mutmut.json"
REASONS = "docs/mutation/equivalent.json"
DETECTED = ("killed", "timeout")  # a mutant that makes the tests fail, or run 30 times longer than they do


def survivor_key(s: dict) -> str:
    """How docs/mutation/equivalent.json names a survivor: file, function and the words changed; no line or mutant
    number, which move when code moves."""
    return f"{s['file']} {s['function']}: {s['change']}"


def survivors(root: Path) -> list[dict]:
    """mutmut's undetected mutants (survived, or no test calls their function), each with its reason class."""
    eq = load(root, REASONS)
    out = []
    for s in load(root, MUTMUT)["survivors"]:
        why = eq["survivors"].get(survivor_key(s))
        if why is None:
            raise KeyError(f"mutant {survivor_key(s)} was not detected and {REASONS} does not say why it is harmless")
        if why not in eq["classes"]:
            raise KeyError(f"{REASONS}: {survivor_key(s)} has the reason class {why!r}, which classes does not define")
        out.append(dict(s, why=why))
    return out


def mutation_counts(root: Path) -> dict[str, dict[str, int]]:
    """file -> {"mutants", "detected", "undetected"}."""
    out = {}
    for f, counts in load(root, MUTMUT)["files"].items():
        n = sum(counts.values())
        found = sum(counts.get(s, 0) for s in DETECTED)
        out[f] = {"mutants": n, "detected": found, "undetected": n - found}
    return out


def mutation_table(root: Path) -> str:
    res = load(root, MUTMUT)
    counts = mutation_counts(root)
    lines = ["| group | files | test files | mutants | killed | timed out | not detected | time |", "|---|---|---|---|---|---|---|---|"]
    for g, info in res["groups"].items():
        mine = ["minispec/" + f for f in info["files"]]
        raw = [res["files"].get(f, {}) for f in mine]
        lines.append(f"| {g} | {', '.join(f'`{f}`' for f in info['files'])} | {', '.join(info['tests'])} | "
                     f"{sum(counts[f]['mutants'] for f in mine if f in counts):,} | {sum(r.get('killed', 0) for r in raw):,} | "
                     f"{sum(r.get('timeout', 0) for r in raw)} | {sum(counts[f]['undetected'] for f in mine if f in counts)} | "
                     f"{info['seconds'] / 60:.1f} min |")
    total = {k: sum(c[k] for c in counts.values()) for k in ("mutants", "detected", "undetected")}
    killed = sum(c.get("killed", 0) for c in res["files"].values())
    lines.append(f"| all | {len(counts)} files | | {total['mutants']:,} | {killed:,} | {total['detected'] - killed} | "
                 f"{total['undetected']} | {sum(g['seconds'] for g in res['groups'].values()) / 60:.1f} min |")
    runs = [f"{g}: {info['date']}, commit {info['commit'][:7]}" for g, info in res["groups"].items()]
    return ("\n".join(lines) + f"\n\n{res['provenance']['tool']} on {res['provenance']['machine']}, "
            f"{res['provenance']['max_children']} mutants at a time. Runs: " + "; ".join(runs) + ".")


def mutation_classes(root: Path) -> str:
    """How many undetected mutants each reason covers, per file."""
    eq, alive = load(root, REASONS), survivors(root)
    lines = ["| reason | why the law (and greedy identity) is unchanged | mutants | in |", "|---|---|---|---|"]
    for c, text in eq["classes"].items():
        mine = [s for s in alive if s["why"] == c]
        if mine:
            files = ", ".join(f"{Path(f).stem} {n}" for f, n in Counter(s["file"] for s in mine).items())
            lines.append(f"| {c} | {text} | {len(mine)} | {files} |")
    return "\n".join(lines)


def mutation_values(root: Path) -> dict[str, str]:
    counts = mutation_counts(root)
    total = {k: sum(c[k] for c in counts.values()) for k in ("mutants", "detected", "undetected")}
    res = load(root, MUTMUT)
    return {"mutation.mutants": f"{total['mutants']:,}", "mutation.killed": f"{total['detected']:,}",
            "mutation.survived": str(total["undetected"]), "mutation.files": str(len(counts)),
            "mutation.tool": res["provenance"]["tool"],
            "mutation.minutes": f"{sum(g['seconds'] for g in res['groups'].values()) / 60:.0f}"}


def weights_values(root: Path) -> dict[str, str]:
    """The shipped drafters' parameter counts, read from their committed safetensors headers, and the EAGLE head's
    kept vocabulary (its frequent_tokens.json)."""
    out = {}
    for tag, f in (("draft", "weights/smoldraft-3l-192/model.safetensors"), ("eagle", "weights/eagle-smollm2-135m/eagle.safetensors"),
                   ("bpe", "weights/bpe8k-draft-4l-384/model.safetensors")):
        header = read_header(root / f)[0]
        n = sum(prod(v["shape"]) for k, v in header.items()  # an int8 matrix's row scales are not parameters
                if not (k.endswith("_scale") and header.get(k[:-len("_scale")], {}).get("dtype") == "I8"))
        out[f"weights.{tag}.params"] = f"{n / 1e6:.1f}M"
    out["weights.eagle.frequent"] = f"{len(load(root, 'weights/eagle-smollm2-135m/frequent_tokens.json')):,}"
    tr = load(root, "weights/smoldraft-3l-192/training.json")  # its training record: loss at some steps, and the last
    steps = ("0", "50", "100", "200", "300", "450")
    out["weights.draft.loss"] = ", ".join(f"{tr['loss_curve'][k]:.2f} at {'step ' if k == '0' else ''}{k}" for k in steps) \
        + f", {tr['final_loss']:.2f} at {tr['steps']}"
    ev = load(root, "weights/smoldraft-3l-192/eval.json")  # the draft's training-time evaluation (bench draft --json)
    out["weights.draft.eval.c"] = f"{ev['c']:.3f} ({ev['c'] * ev['target_step_ms']:.2f} ms vs {ev['target_step_ms']:.1f} ms)"
    for setting, tag in (("greedy", "greedy"), ("T=1", "t1")):
        m, q1, q3 = ev["speed"][setting]["speedup"]
        out[f"weights.draft.eval.{tag}"] = f"{m:.2f}x ({q1:.2f}-{q3:.2f})"
    return out


def line_counts(root: Path) -> dict[str, str]:
    """The lines of the files the reading order names (docs/reading.md)."""
    files = ["minispec/rejection.py", "minispec/textbook.py", "minispec/model/transformer.py"]
    return {f"lines.{Path(f).stem}": str(len((root / f).read_text().splitlines())) for f in files}


def draft_card_acceptance(root: Path) -> str:
    """The shipped draft's acceptance at K = 1..8 and its direct runs, from its eval.json (``bench draft --json``)."""
    acc = load(root, "weights/smoldraft-3l-192/eval.json")["acceptance"]
    lines = ["| acceptance | " + " | ".join(f"K={k}" for k in range(1, 9)) + " | direct K=1, K=4 |",
             "|---|" + "---|" * 9]
    for name, row in acc.items():
        a, d = row["acceptance"], row["direct"]
        lines.append(f"| {name.replace(' ', ', ')} | " + " | ".join(f"{a[str(k)]:.3f}" for k in range(1, 9))
                     + f" | {d['1']:.3f}, {d['4']:.3f} |")
    return "\n".join(lines)


SECTIONS = {"level4": level4_table, "draft_card_acceptance": draft_card_acceptance,
            "study": study_table, "speed_model": speed_model, "power": power_table,
            "eagle_speed": eagle_speed, "eagle_targets": eagle_targets, "eagle_confidence": eagle_confidence,
            "mutation": mutation_table,
            "mutation_classes": mutation_classes,
            "vocab_greedy": lambda root: crossvocab_table(root, "greedy", [(1, TLI), (1, SLEM), (1, DRAFT), (4, TLI),
                                                                           (4, DRAFT)]),
            "vocab_t1": lambda root: crossvocab_table(root, "T=1", [(1, TLI), (1, SLEM), (1, DRAFT), (2, TLI), (2, DRAFT)])}


def values(root: Path) -> dict[str, str]:
    return {**study_values(root), **auto_values(root), **crossvocab_values(root), **rules_values(root),
            **power_values(root), **level4_values(root),
            **eagle_values(root), **bf16_values(root), **line_counts(root), **weights_values(root),
            **mutation_values(root)}
