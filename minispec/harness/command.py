"""What the harness's commands share around their measuring: what they read (the target and its tokenizer, the
drafters they were given or the shipped ones), each checked before any run and refused with its name, and how
they hand back a result (printed, and stored as JSON when asked), and how they word a speed figure honestly (issue
45): a speedup above what its run's tokens per target pass allow is noise (``measure.speedup_bound``, ``noise_marks``), and a
figure measured on a busy machine says so (``busy_line``). A directory that is not a model raises ``ModelFormatError``
naming it (the CLI prints it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ..drafters import make_drafter
from ..model import load_model, load_tokenizer
from ..model.tokenizer import Tokenizer
from ..model.transformer import Model
from ..recipes.fetch import resolve_model, shipped_bpe_draft, shipped_draft, shipped_eagle
from .measure import busy_words, others_load
from .prompts import PROMPT_SETS, load_prompts
from .provenance import provenance

MODEL_HELP = "target directory (default: SmolLM2-135M-Instruct)"


def drafters_parser(prog: str, description: str, default_drafters: str, tokens: int) -> argparse.ArgumentParser:
    """The flags of a command that measures drafters on the last prompts of each evaluation set (``bench auto``,
    ``bench rules``): --model, --draft (repeated; default ``default_drafters``), --prompts, --tokens (default
    ``tokens``) and --json. The command adds its own."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--model", help=MODEL_HELP)
    p.add_argument("--draft", action="append", help=f"a drafter spec (repeat; default: {default_drafters})")
    p.add_argument("--prompts", type=count, default=3, help="prompts per set (default 3, the last of each set)")
    p.add_argument("--tokens", type=count, default=tokens, help=f"tokens per run (default {tokens})")
    p.add_argument("--json", help="also write the figures to this JSON file")
    return p


def last_prompts(tok, n: int) -> dict[str, list]:
    """The last ``n`` (1 or more) prompts of each evaluation set, by set: no test uses them."""
    if n < 1:
        raise ValueError(f"last_prompts: n must be at least 1, got {n}")
    return {s: load_prompts(s, tok)[-n:] for s in PROMPT_SETS}


def load_target(path=None) -> tuple[Model, Tokenizer]:
    """The target of a command and its tokenizer: the directory ``path`` (its ``--model``), or SmolLM2-135M-Instruct
    (fetched and converted on first use). The model keeps its directory: ``model.path``."""
    directory = resolve_model(path)
    return load_model(directory), load_tokenizer(directory)


def load_target_and_drafters(path, specs) -> tuple[Model, Tokenizer, dict]:
    """``load_target(path)`` and {spec: drafter} for every spec of ``specs`` ("none": None), each checked
    (``make_drafter``) before anything runs."""
    target, tok = load_target(path)
    return target, tok, {spec: make_drafter(spec, target) for spec in specs}


def shipped_drafters(own_tokenizer=("tli", "slem")) -> list[str]:
    """The specs of the drafters shipped in weights/ that are present: the draft, the EAGLE head, and the draft with
    its own tokenizer under each algorithm of ``own_tokenizer``."""
    draft, eagle, bpe = shipped_draft(), shipped_eagle(), shipped_bpe_draft()
    return [s for s in (draft, eagle) if s] + ([f"{algorithm}:{bpe}" for algorithm in own_tokenizer] if bpe else [])


def given_or_shipped(parser, given, shipped, missing: str) -> str:
    """What the command was given (a flag's value), else (None) the shipped default; with neither, or an empty value
    (an unset shell variable, not a wish for the default), ``parser.error`` (a usage error, before anything is
    loaded)."""
    if given is not None and not str(given).strip():
        parser.error(f"an empty value was given ({given!r}): {missing}")
    choice = shipped if given is None else given
    if choice is None:
        parser.error(missing)
    return choice


def check_json_path(path) -> None:
    """``--json FILE``: refused before the runs, not after them, when its directory does not exist or it names a
    directory."""
    if path and Path(path).is_dir():
        raise ValueError(f"--json {path}: a directory, not a file")
    if path and not Path(path).resolve().parent.is_dir():
        raise ValueError(f"--json {path}: directory {Path(path).resolve().parent} does not exist")


def count(text: str) -> int:
    """An argparse type: a whole number of at least 1 (bug: a count of 0 meant "every prompt" where it reached
    ``load_prompts``, and a ZeroDivisionError or KeyError after the models loaded elsewhere)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is not at least 1")
    return n


def check_out_dir(parser, path) -> None:
    """``--out DIR``: refused before the runs, not after them, when it names something that is not a directory."""
    if path and Path(path).exists() and not Path(path).is_dir():
        parser.error(f"--out {path}: exists and is not a directory")


def check_kernels(ap, kernels: str, json_path) -> None:
    """``--kernels`` (comma-separated) and ``--json`` refused by name (``ap.error``) before any model loads."""
    from ..model.kernel import KERNELS, KernelUnavailable, check_kernel

    names = [k for k in kernels.split(",") if k]
    if not names:
        ap.error(f"--kernels names no kernel: give one or more of {', '.join(KERNELS)}, comma-separated")
    try:
        for k in names:
            check_kernel(k)
        check_json_path(json_path)
    except (ValueError, KernelUnavailable) as e:
        ap.error(str(e))


def markdown_table(title: str, columns: list[str], rows) -> list[str]:
    """A command's report as Markdown lines: its title, a blank line, then a table of ``columns`` with a row of
    cells (text) per item of ``rows``."""
    return [title, "", *("| " + " | ".join(cells) + " |" for cells in [columns, ["---"] * len(columns), *rows])]


def print_and_store(report: str, res: dict, path, prog: str, argv=None, indent: int = 1) -> None:
    """Print a command's ``report`` and, when ``--json`` named a ``path``, store its figures ``res`` there with their
    provenance: date, commit, machine, and the command as typed (``prog`` and ``argv``, also when ``main(argv)`` is
    called in-process; None: this process's own command line). The machine is called busy where the other processes'
    load was above the bound as the run began (``res["load_before"]``, where the command recorded it) or is now."""
    print(report)
    busy = busy_words(res.get("load_before"), others_load())
    if busy:
        print(f"[{busy[2:]}]", file=sys.stderr)
    if path:
        origin = provenance(argv, prog)
        Path(path).write_text(json.dumps(dict(res, provenance=origin), indent=indent))


def busy_line(*loads) -> str:
    """The line a command prints beside its speed figures when the machine was busy: the highest of ``loads`` (the
    other processes' load average, ``measure.others_load()``, as the run began and as it ended; None: unknown) above
    ``measure.BUSY_LOAD``, in brackets (``measure.busy_words``); "" when quiet or unknown."""
    words = busy_words(*loads)
    return f"[{words[2:]}]" if words else ""


def noise_count(speedups, bounds) -> int:
    """How many runs' measured speedups exceed their bounds (``measure.speedup_bound``; None: no bound): noise, not speedups."""
    return sum(1 for s, b in zip(speedups, bounds) if b is not None and s > b)


def median_bound(bounds) -> float | None:
    """The most a median of the runs' speedups can be while none exceeds its bound: the median of their bounds (a
    median never grows unless a value does); None where a run's bound is unknown, or there is no run."""
    bounds = list(bounds)
    return float(np.median(bounds)) if bounds and all(b is not None for b in bounds) else None


def noise_marks(speedup: float, bound: float | None, noise: int = 0, runs: int = 0) -> str:
    """What follows a speedup in a report: " noise" where it is above its ``bound`` (a run's tokens per target pass, or
    for a median ``median_bound``), and how many of the ``runs`` behind it were noise: "1.31x noise (5 of 9)", "1.02x (2
    of 9 noise)"; "" for an honest figure (or one without a bound)."""
    over = bound is not None and speedup > bound
    count = f"{noise} of {runs}" if noise else ""
    if over:
        return " noise" + (f" ({count})" if count else "")
    return f" ({count} noise)" if count else ""


def noise_words(speedup: float, bound: float | None) -> str:
    """A single run's speedup in words: "1.23x", or where it exceeds its run's tokens per target pass (``bound``), as
    noise, not a speedup (the CLI's ``compare_with_plain`` says it so)."""
    if bound is None or speedup <= bound:
        return f"{speedup:.2f}x"
    return (f"{speedup:.2f}x, which is noise, not a speedup: a run of {bound:.2f} tokens per target pass cannot be faster "
            "than that")


def noise_note(noise: int, runs: int, what: str = "runs") -> list[str]:
    """A report's line on its noise: how many of its ``runs`` (``what`` they are: runs, prompts, questions) measured
    more than their tokens per target pass allow, after a blank line; [] when none did."""
    if not noise:
        return []
    return ["", f"Noise: {noise} of {runs} {what} measured faster than their tokens per target pass allow (no run can beat "
            "plain decoding by more): the load changed between the timings. \"noise\" marks a figure above its runs' "
            "tokens per pass; \"(n of m noise)\", the runs behind a figure that were."]
