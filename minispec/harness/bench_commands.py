"""The ``minispec bench`` subcommands, in one table: the dispatcher (``bench.main``), the study's ``--help`` and the
CLI's help all read it. Adding a benchmark is one line here and a ``main(argv) -> int`` in its own module.

This module imports nothing else of the harness, so the CLI can list the subcommands without loading them.
"""

from __future__ import annotations

import importlib

SUBCOMMANDS = {  # name -> ("module:function" called with the subcommand's arguments, what it measures)
    "forward": ("minispec.harness.bench:bench_forward", "the verify-cost curve t(n), r(n), for each kernel side by side"),
    "decode": ("minispec.harness.bench:bench_decode", "plain decoding against transformers' generate"),
    "draft": ("minispec.harness.draft_eval:main", "a draft model's acceptance by position and confidence"),
    "eagle": ("minispec.harness.eagle_eval:main", "the EAGLE head's reduced-head sizes, acceptance by position, c, memory"),
    "vocab": ("minispec.harness.crossvocab_eval:main", "drafts with their own tokenizer (SLEM, TLI) against the same-tokenizer draft"),
    "stop": ("minispec.harness.stop_eval:main", "the early stop on the draft's confidence"),
    "gpu-predict": ("minispec.harness.gpu:main", "costs on a GPU and the speedups they predict"),
    "auto": ("minispec.harness.auto_eval:main", "k=auto against plain decoding for every drafter, predicted rounds against measured"),
    "rules": ("minispec.harness.rules_eval:main", "the token-wise, block and coupled rules side by side at T = 1 and 0.7"),
    "power": ("minispec.harness.power:main", "the power of level 4: planted departures of exact size on tiny models"),
    "specbench": ("minispec.harness.specbench:main", "Spec-Bench's six tasks: every method against plain decoding, side by side"),
}
OWN_KERNEL_OPTION = {"forward", "decode"}  # these parse --kernel themselves; bench.main applies it for the others


def summary() -> str:
    """``forward`` (what it measures), ``decode`` (...), ...: for a help text."""
    return ", ".join(f"`{name}` ({what})" for name, (_, what) in SUBCOMMANDS.items())


def run(name: str, argv: list[str]) -> int:
    module, function = SUBCOMMANDS[name][0].split(":")
    return getattr(importlib.import_module(module), function)(argv)
