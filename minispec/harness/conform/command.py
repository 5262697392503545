"""``minispec conform rule|loop MODULE:FUNCTION``: the kit's command. Exit 0 when every check passes, 1 when one
fails, 2 on a usage error (a module that is missing, a name that is not a function, a wrong signature).

This module imports only the standard library at the top, so the CLI can add the subcommand without loading the
kit."""

from __future__ import annotations

import argparse
import math


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0 (bug: ``--timeout inf`` passed, the timer could not take it,
    and every call of the peer was reported as the peer's fault)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text!r}")
    return value


def add_parser(sub) -> None:
    """``conform`` and its two subcommands, on the CLI's subparsers; each calls ``main`` with its arguments."""
    c = sub.add_parser("conform", help="check another implementation's rule or loop against minispec's exact checks "
                                       "(`minispec conform rule --help`)")
    levels = c.add_subparsers(dest="level", required=True)
    r = levels.add_parser("rule", help="a function with accept_reject's contract: (target_probs [K+1, V], draft_probs "
                                       "[K, V], draft_tokens [K], rng: numpy Generator) -> (n_accepted, next_token)")
    r.add_argument("function", help="MODULE:FUNCTION, for example minispec.rejection:accept_reject or my_rule.py:verify")
    r.add_argument("--mc", action="store_true", help="Monte Carlo even where the exact law can be walked")
    r.add_argument("--greedy", action="store_true", help="only the cases with a greedy (one-hot) target: for a rule "
                                                         "that is valid at temperature 0 only")
    lo = levels.add_parser("loop", help="a function generate(target_dir, draft_dir, prompt_ids, max_new_tokens, "
                                        "temperature, top_k, top_p, seed) -> list[int] on Hugging Face-format directories")
    lo.add_argument("function", help="MODULE:FUNCTION, for example minispec.harness.conform.adapters:loop")
    lo.add_argument("--runs", type=int, help="runs per setting (default 1500, 6000 with --thorough)")
    lo.add_argument("--own-vocabulary", action="store_true", help="the draft has a vocabulary of its own (6 tokens, "
                                                                 "one merge): for a loop that drafts across tokenizers")
    for flag, kind, what in [("--repetition-penalty", float, "the repetition penalty (> 0)"),
                             ("--frequency-penalty", float, "the frequency penalty"),
                             ("--presence-penalty", float, "the presence penalty"),
                             ("--no-repeat-ngram", int, "the no-repeat n-gram size")]:
        lo.add_argument(flag, type=kind, help=f"{what}, as minispec/processors.py means it: the loop is then called with "
                                              "a ninth argument, processors, a dict of these settings")
    for p in (r, lo):
        p.add_argument("--thorough", action="store_true", help="more cases and draws: more power, longer")
        p.add_argument("--timeout", type=seconds, default=None,
                       help="seconds one call of the function may take (default 10 for a rule, 60 for a loop)")
        p.add_argument("--json", help="also write the report to this JSON file, with its provenance")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func=main)


def main(args) -> int:
    from ..command import check_json_path, print_and_store
    from .contract import load
    from .report import format_report

    check_json_path(args.json)
    if getattr(args, "runs", None) is not None and args.runs < 10:
        raise ValueError(f"--runs {args.runs}: at least 10")
    names = ("repetition_penalty", "frequency_penalty", "presence_penalty", "no_repeat_ngram")
    processors = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    if processors:
        from ...processors import build

        build(**processors)  # bad values refused by name before any call
    fn = load(args.function, args.level, processors=bool(processors))
    if args.level == "rule":
        from .cases import generated_cases
        from .rule_check import check_rule

        cases = generated_cases(args.thorough)
        if args.greedy:
            cases = [c for c in cases if c.warps.get("temperature") == 0]
        res = check_rule(fn, args.thorough, args.timeout or 10.0, progress=not args.quiet,
                         mode="mc" if args.mc else "auto", cases=cases)
    else:
        from .loop_check import check_loop

        res = check_loop(fn, args.thorough, args.timeout or 60.0, progress=not args.quiet, runs=args.runs,
                         own_vocabulary=args.own_vocabulary, processors=processors or None)
    res["function"] = args.function
    print_and_store(format_report(res), res, args.json, "minispec conform")
    return 0 if res["passed"] else 1
