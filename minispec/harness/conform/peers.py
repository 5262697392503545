"""``python -m minispec.harness.conform.peers``: transformers' peers through the kit, stored as docs/peers/peers.json
(with provenance and versions) for docs/peers.md (peers_figures.py).

    rule    transformers' _speculative_sampling: expected to pass
    rule    the same with assistant_ensemble_weight w (static ensemble verification, DIVERSE): lossy by design,
            expected to fail; its distance measured at several w (w = 1 is the lossless rule)
    loop    assisted generation with a draft model (assistant_model=), do_sample=True with temperature, top-k, top-p
    loop    prompt lookup (prompt_lookup_num_tokens=3)
    loop    assisted generation with assistant_ensemble_weight 0.5: expected to fail
    loop    universal assisted decoding (a draft of its own vocabulary, with both tokenizers), and the same with
            the one-line order fix of transformers_peers.universal_sorted
    loop    assisted generation and prompt lookup with logits processors: repetition_penalty, no_repeat_ngram_size,
            and a choice list through prefix_allowed_tokens_fn (the loop contract's ninth argument)
Each stored result keeps its per-case rows without the bulk (rounded figures).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..provenance import provenance
from .loop_check import check_loop
from .report import format_report
from .rule_check import check_rule
from .twins import CHOICES

WEIGHTS = (0.25, 0.5, 0.75, 0.9, 1.0)
PROCESSORS = [("repetition", "`repetition_penalty=3.0`", dict(repetition_penalty=3.0)),
              ("ngram", "`no_repeat_ngram_size=2`", dict(no_repeat_ngram=2)),
              ("choices", "a choice list (`prefix_allowed_tokens_fn=`)", CHOICES)]
LOOP_WEIGHT = 0.5


def peers(quick: bool = False, group: str = "plain"):
    """[(key, what, expected verdict, a function that runs its check)] of ``group``: "plain" (docs/peers/peers.json)
    or "processors" (the loops with logits processors, docs/peers/processors.json)."""
    from . import transformers_peers as tp

    draws, runs = (300, 300) if quick else (None, None)
    if group == "processors":
        return [row for key, what, settings in PROCESSORS for row in (
            (f"plain_{key}", f"plain sampling (no draft, the control) with {what}", "pass",
             lambda s=settings: check_loop(tp.plain, runs=runs, processors=s)),
            (f"assisted_{key}", f"assisted generation with {what}", "pass",
             lambda s=settings: check_loop(tp.assisted, runs=runs, processors=s)),
            (f"prompt_lookup_{key}", f"prompt lookup with {what}", "pass",
             lambda s=settings: check_loop(tp.prompt_lookup, runs=runs, processors=s)))]
    rows = [("rule", "transformers `_speculative_sampling`", "pass",
             lambda: check_rule(tp.speculative_sampling, draws=draws))]
    for w in WEIGHTS:
        rows.append((f"rule_ensemble_{w:g}", f"`_speculative_sampling`, `assistant_ensemble_weight={w:g}`",
                     "pass" if w == 1.0 else "fail", lambda w=w: check_rule(tp.ensemble(w), draws=draws)))
    rows += [("assisted", "assisted generation, `assistant_model=`", "pass", lambda: check_loop(tp.assisted, runs=runs)),
             ("prompt_lookup", "prompt lookup, `prompt_lookup_num_tokens=3`", "pass",
              lambda: check_loop(tp.prompt_lookup, runs=runs)),
             ("assisted_ensemble", f"assisted generation, `assistant_ensemble_weight={LOOP_WEIGHT:g}`", "fail",
              lambda: check_loop(tp.ensemble_loop(LOOP_WEIGHT), runs=runs)),
             ("universal", "universal assisted decoding, a draft of its own vocabulary", "pass",
              lambda: check_loop(tp.universal, runs=runs, own_vocabulary=True)),
             ("universal_sorted", "the same, its pruned head kept in assistant-id order (a one-line fix)", "pass",
              lambda: check_loop(tp.universal_sorted, runs=runs, own_vocabulary=True))]
    return rows


def slim(res: dict) -> dict:
    """The stored form: numbers rounded; a rule's per-case rows reduced to its first case (K = 1, random rows: the
    ensemble's closed form is checked there) and each case's TV, in the order of cases.py."""
    def r(x):
        if isinstance(x, float):
            return float(f"{x:.6g}")
        if isinstance(x, dict):
            return {k: r(v) for k, v in x.items() if k != "seconds" or "level" in x}
        if isinstance(x, list):
            return [r(v) for v in x]
        return x
    out = dict(res)
    if res["level"] == "rule" and "results" in res:
        rows = out.pop("results")
        out.update(first_case=rows[0], tv_by_case=[row.get("tv") for row in rows],
                   failed_cases=[f"{row['case']['name']}, K={row['case']['K']}, V={row['case']['V']}" for row in rows
                                 if not row["passed"]])
    return r(out)


def versions() -> dict:
    import torch
    import transformers

    return dict(transformers=transformers.__version__, torch=torch.__version__)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minispec.harness.conform.peers", description=__doc__.splitlines()[0])
    ap.add_argument("--set", dest="group", choices=["plain", "processors"], default="plain",
                    help="plain: the rule and loops (default); processors: the loops with logits processors")
    ap.add_argument("--out", help="the JSON file (default docs/peers/peers.json, or docs/peers/processors.json)")
    ap.add_argument("--quick", action="store_true", help="300 draws per case and runs per setting (a smoke run)")
    ap.add_argument("--only", action="append", help="a peer's key (repeat); default every peer")
    a = ap.parse_args(argv)
    out = Path(a.out or ("docs/peers/processors.json" if a.group == "processors" else "docs/peers/peers.json"))
    stored = json.loads(out.read_text()) if out.exists() and a.only else dict(peers={})
    t0 = time.perf_counter()
    for key, what, expected, run in peers(a.quick, a.group):
        if a.only and key not in a.only:
            continue
        res = run()
        print(f"[{key}] {what} (expected: {expected})\n{format_report(res)}\n", flush=True)
        stored["peers"][key] = dict(what=what, expected=expected, as_expected=res["passed"] == (expected == "pass"),
                                    **slim(res))
    stored.update(versions=versions(), seconds=time.perf_counter() - t0 + (stored.get("seconds", 0) if a.only else 0),
                  provenance=provenance(argv, ap.prog))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(stored, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
