"""``minispec bench eagle``: the EAGLE head's design choices on the evaluation prompts.

For each reduced-head size (the head's frequent tokens; other sizes come from its
token_frequency_order.json): the cost ratio c (seconds per guess over seconds per target step,
measured side by side), and acceptance by position at K = 4, greedy and T = 1, per prompt set.
With ``--trees``, EAGLE-2's dynamic tree at each fixed shape, with the first size's head, greedy
and T = 1, per prompt set: the tokens emitted over the target passes of all its prompts, and the
nodes verified a round. No cost model sizes the tree, so these are what the head and the tree
reach whatever the machine's r(n). Without ``--acceptance-only`` (a quiet machine), each prompt's
runs with every shape and with the chain at K are also timed beside plain decoding of the same
prompt, run before and after them (``measure.side_by_side``), and so is ``--tree auto`` (its
calibration measured first, untimed): the speedup in tokens a second,
per prompt, its median per set, and the r(n) the kernel had in the same run: what the tree's
tokens a pass buy on this machine. Then the resident memory the head adds: the resident set of
a fresh process that loaded the target and generated with the head, minus that of one that ran
the same loop with prompt lookup (no weights); and minus that of plain decoding. A timed prompt whose speedup is above
its run's tokens per target pass (``measure.speedup_bound``) is noise, counted beside each median, and a median
above its prompts' median tokens per pass is marked noise. The other processes' load is recorded as the measuring
begins and ends; a busy machine is named beside the timed figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from ..drafters.dynamic_tree import DynamicTree
from ..drafters.eagle import Eagle, load_eagle
from ..generate import generate
from ..model.safetensors_io import read_safetensors
from ..policy import auto_dynamic_tree
from ..policy.timing import clock, forward_times
from ..recipes.fetch import shipped_eagle
from ..speculative import speculative_generate, tree_speculative_generate
from .command import (
    MODEL_HELP,
    busy_line,
    check_json_path,
    count,
    given_or_shipped,
    load_target,
    median_bound,
    noise_count,
    noise_marks,
    noise_note,
)
from .measure import others_load, side_by_side, speedup_bound
from .progress import Progress
from .prompts import load_prompts
from .provenance import provenance

SETTINGS = (("greedy", 0.0), ("T=1", 1.0))  # (name, temperature): every figure is measured at both

RSS_SCRIPT = """
import os, sys, minispec
t = minispec.load_model(sys.argv[1])
d = minispec.make_drafter(sys.argv[2], t)
ids = list(range(100, 160))
minispec.speculative_generate(t, d, ids, 32, k=4) if d else minispec.generate(t, ids, 32)
print(int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
"""


def resident_after_run(target_dir, spec, kernel: str) -> int:
    """Resident bytes of a fresh process that loaded the target and ``spec`` with ``kernel`` and generated 32 tokens
    (bug: the child loaded with $MINISPEC_KERNEL, else numpy, whatever kernel the rest was measured with)."""
    out = subprocess.run([sys.executable, "-c", RSS_SCRIPT, str(target_dir), spec], capture_output=True, text=True,
                         check=True, env=dict(os.environ, MINISPEC_KERNEL=kernel))
    return int(out.stdout.split()[-1])


def acceptance(target, eagle, prompts, k, temperature, max_new_tokens, stop, bar) -> dict:
    acc, drafted, tokens, rounds = np.zeros(k), np.zeros(k), 0, 0
    for i, p in enumerate(prompts):
        res = speculative_generate(target, eagle, p, max_new_tokens, k=k, temperature=temperature, seed=i, stop_ids=stop)
        s = res.stats
        acc[: len(s.position_accepted)] += s.position_accepted
        drafted[: len(s.position_drafted)] += s.position_drafted
        tokens, rounds = tokens + len(res.tokens), rounds + s.rounds
        bar.update()
    return dict(per_position=[float(a / d) if d else None for a, d in zip(acc, drafted)],
                acceptance=float(acc.sum() / drafted.sum()) if drafted.sum() else None, tokens_per_pass=tokens / rounds)


def tree_tokens_per_pass(target, eagle, prompts, shape: DynamicTree, temperature, max_new_tokens, stop, bar) -> dict:
    """Tokens emitted per target pass with the dynamic tree of a fixed ``shape``, over ``prompts``; the nodes
    verified per round beside it."""
    tokens, rounds, nodes = 0, 0, 0
    for i, p in enumerate(prompts):
        res = tree_speculative_generate(target, eagle, p, max_new_tokens, shape=shape, temperature=temperature,
                                        seed=i, stop_ids=stop)
        tokens, rounds = tokens + len(res.tokens), rounds + res.stats.rounds
        nodes += sum(r.tree[0] for r in res.stats.log if r.tree)
        bar.update()
    return dict(tokens_per_pass=tokens / rounds, nodes_per_round=nodes / rounds)


def timed_trees(target, eagle, prompts, shapes: list[DynamicTree], k: int, temperature, max_new_tokens, stop,
                bar, bounds: dict | None = None) -> dict:
    """Each prompt's runs with the chain at ``k``, with the dynamic tree of each of ``shapes`` and with the automatic one
    (``--tree auto``: the cost model sizes it each round, calibrated before the clocks; at T = 1 a seeded run's policy
    keeps its calibrated costs instead of learning them, as ``minispec generate --seed`` does), timed between two runs
    of plain decoding of the same prompt (``measure.side_by_side``) -> {method: speedups per prompt}, a speedup being
    the run's tokens a second over plain decoding's. ``bounds``, when given, gets {method: each prompt's tokens per
    target pass}: the most its speedup can be."""
    methods = {f"chain K={k}": lambda p, i: speculative_generate(target, eagle, p, max_new_tokens, k=k,
                                                               temperature=temperature, seed=i, stop_ids=stop)}
    for shape in [*shapes, "auto"]:  # "auto": --tree auto, its cost model calibrated here, before any clock
        name = shape if shape == "auto" else f"{shape.top_k}x{shape.depth}x{shape.nodes}"
        methods[name] = (lambda p, i, shape=shape: tree_speculative_generate(
            target, eagle, p, max_new_tokens, shape=shape, temperature=temperature, seed=i, stop_ids=stop))
    auto_dynamic_tree(target, eagle)  # the calibrations it reads, measured once (then in memory)
    speedups: dict = {name: [] for name in methods}
    bounds = {} if bounds is None else bounds
    bounds.update({name: [] for name in methods})
    for i, p in enumerate(prompts):
        plain = lambda p=p, i=i: generate(target, p, max_new_tokens, temperature=temperature, seed=i,  # noqa: E731
                                          stop_ids=stop)
        _, plain_rate, runs = side_by_side(plain, [lambda f=f, p=p, i=i: f(p, i) for f in methods.values()],
                                           bar.update)
        for name, (res, seconds) in zip(methods, runs):
            speedups[name].append(len(res.tokens) / seconds / plain_rate)
            bounds[name].append(speedup_bound(len(res.tokens), res.stats.rounds))
    return speedups


def tree_shapes(text: str) -> list[DynamicTree]:
    """``--trees``: comma-separated TOPKxDEPTHxNODES, three positive integers each."""
    shapes = []
    for part in text.split(","):
        fields = part.lower().split("x")
        try:
            if len(fields) != 3:
                raise ValueError(f"{part!r} has {len(fields)} fields, not 3")
            shapes.append(DynamicTree(*(int(x) for x in fields)))
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"expected TOPKxDEPTHxNODES[,...] (e.g. 4x5x16,8x6x32), got {text!r} "
                                             f"({e})") from None
    return shapes


def sizes_arg(text: str) -> list[int]:
    """``--sizes``: comma-separated positive integers."""
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, comma-separated (e.g. 8192,16384), got {text!r}")
    return sizes


def full_order(listed, V: int) -> list[int]:
    """token_frequency_order.json lists the ids most frequent first, without the tail of the ids the training data
    never showed (``recipes.train_eagle.trimmed_order``): those follow, in increasing order."""
    if not isinstance(listed, list) or not all(isinstance(t, int) and 0 <= t < V for t in listed) \
            or len(set(listed)) != len(listed):
        raise ValueError(f"token_frequency_order.json: expected distinct token ids in [0, {V})")
    seen = set(listed)
    return listed + [t for t in range(V) if t not in seen]


def size_row(target, eagle, sets: dict, k: int, max_new_tokens: int, stop, bar, timing: bool = True) -> dict:
    """One reduced-head size: c (the head's seconds per guess over a target step timed before and after it; None
    without ``timing``), the head's MB, and ``acceptance`` per setting (greedy, T = 1) and prompt set."""
    row = dict(c=None, guess_ms=None, target_step_ms=None, head_mb=eagle.weight_bytes / 1e6)
    if timing:
        t_step = forward_times(target, (1,), context=64, repeats=10)[1]
        per_guess = eagle.measure_costs(clock, repeats=10)[0]
        t_step = (t_step + forward_times(target, (1,), context=64, repeats=10)[1]) / 2  # bracket the head's timing
        row.update(c=per_guess / t_step, guess_ms=1e3 * per_guess, target_step_ms=1e3 * t_step)
    for setting, temp in SETTINGS:
        for name, prompts in sets.items():
            row[f"{setting} {name}"] = acceptance(target, eagle, prompts, k, temp, max_new_tokens, stop, bar)
    return row


def memory_row(target_dir, head_dir, shipped, kernel: str) -> dict:
    """The resident memory of fresh processes (``resident_after_run``) under ``kernel``, the one the rest was measured
    with: plain decoding, prompt lookup (the same loop, no weights) and the head; what the head adds; and its arrays'
    size."""
    plain, lookup = resident_after_run(target_dir, "none", kernel), resident_after_run(target_dir, "prompt-lookup", kernel)
    with_head = resident_after_run(target_dir, str(head_dir), kernel)
    return dict(plain_rss_mb=plain / 1e6, prompt_lookup_rss_mb=lookup / 1e6, eagle_rss_mb=with_head / 1e6,
                added_mb=(with_head - lookup) / 1e6, added_over_plain_mb=(with_head - plain) / 1e6,
                head_arrays_mb=shipped.weight_bytes / 1e6)


def timed_words(name: str, speedups: list, bounds: list | None) -> str:
    """A method's timed speedups: "auto 1.21x [1.02, 1.50]", their median over prompts, lowest and highest, the median
    marked noise where it is above the prompts' median tokens per target pass (``bounds``; None: not recorded), with
    how many prompts were above theirs."""
    bounds = [None] * len(speedups) if bounds is None else bounds
    m = float(np.median(speedups))
    return (f"{name} {m:.2f}x{noise_marks(m, median_bound(bounds), noise_count(speedups, bounds), len(speedups))} "
            f"[{min(speedups):.2f}, {max(speedups):.2f}]")


def report(res: dict) -> str:
    """The table of sizes, settings and sets, and the memory, as the command prints them."""
    lines = [f"EAGLE head {res['head']}, K = {res['k']}, {res['prompts_per_set']} prompts per set, {res['max_new_tokens']} "
             "new tokens", "| reduced head | c | head MB | setting | set | acceptance by position | tokens/pass |",
             "|---|---|---|---|---|---|---|"]
    for size, row in res["sizes"].items():
        for key, v in row.items():
            if isinstance(v, dict):
                setting, name = key.split(" ")
                pos = " ".join("-" if x is None else f"{x:.2f}" for x in v["per_position"])
                c = "-" if row["c"] is None else f"{row['c']:.3f}"
                lines.append(f"| {size} | {c} | {row['head_mb']:.1f} | {setting} | {name} | {pos} | "
                             f"{v['tokens_per_pass']:.2f} |")
    for shape, row in res["trees"].items():
        for key, v in row.items():
            lines.append(f"dynamic tree {shape}, {key}: {v['tokens_per_pass']:.2f} tokens/pass "
                         f"({v['nodes_per_round']:.1f} nodes a round)")
    if res.get("timed"):
        r = res["timed_r"]
        lines.append("timed beside plain decoding of the same prompt, speedup in tokens a second, median over prompts "
                     "[lowest, highest]; this run's r(n) at 256 cached tokens: " + ", ".join(f"r({n}) {v:.2f}" for n, v in r.items()))
        bounds = res.get("timed_tokens_per_pass", {})  # each prompt's tokens per target pass (not in older results)
        noisy = runs = 0
        for key, methods in res["timed"].items():
            for name, v in methods.items():
                b = bounds.get(key, {}).get(name, [None] * len(v))
                noisy, runs = noisy + noise_count(v, b), runs + (len(v) if None not in b else 0)
            lines.append(f"  {key}: " + "; ".join(timed_words(name, v, bounds.get(key, {}).get(name))
                                                  for name, v in methods.items()))
        lines += noise_note(noisy, runs, "timed prompts")
    m = res["memory"]
    if m is None:
        return "\n".join(lines + ["(acceptance only: no timing, no memory)"])
    busy = busy_line(res.get("load_before"), res.get("load_after"))  # beside c, the timed speedups and the memory
    lines.append(f"resident memory after 32 tokens, fresh processes: plain {m['plain_rss_mb']:.0f} MB, speculative with "
                 f"prompt lookup (the same loop, no weights) {m['prompt_lookup_rss_mb']:.0f} MB, with the head "
                 f"{m['eagle_rss_mb']:.0f} MB: the head adds {m['added_mb']:.1f} MB ({m['added_over_plain_mb']:.1f} MB "
                 f"over plain decoding; its arrays: {m['head_arrays_mb']:.1f} MB)")
    return "\n".join(lines + ([busy] if busy else []))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="minispec bench eagle", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help=MODEL_HELP)
    p.add_argument("--eagle", help="EAGLE head directory (default: the shipped one)")
    p.add_argument("--sizes", type=sizes_arg, default="8192,16384,49152", help="reduced-head sizes (default 8192,16384,49152)")
    p.add_argument("--prompts-per-set", type=count, default=6)
    p.add_argument("--max-new-tokens", type=count, default=64)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--acceptance-only", action="store_true",
                   help="measure acceptance only: no c and no memory (which need a quiet machine); for a busy one")
    p.add_argument("--trees", type=tree_shapes, default=[], metavar="SHAPES",
                   help="also EAGLE-2's dynamic tree at these fixed shapes, TOPKxDEPTHxNODES comma-separated (e.g. "
                        "4x5x16,8x6x32): tokens per target pass, greedy and T = 1, with the first size's head")
    p.add_argument("--json", help="also write the figures to this JSON file")
    a = p.parse_args(argv)
    check_json_path(a.json)
    head_dir = given_or_shipped(p, a.eagle, shipped_eagle(), "no EAGLE head: pass --eagle DIR (the shipped one is weights/eagle-smollm2-135m)")
    target, tok = load_target(a.model)
    shipped = load_eagle(head_dir, target)  # checks the directory
    tensors = read_safetensors(Path(head_dir) / "eagle.safetensors")
    order_file = Path(head_dir) / "token_frequency_order.json"
    order = full_order(json.loads(order_file.read_text()), target.cfg.vocab_size) if order_file.is_file() \
        else list(shipped.tokens_r)
    sizes = [s for s in a.sizes if s <= len(order)]
    if not sizes:
        p.error(f"--sizes {','.join(map(str, a.sizes))}: none fits the head's {len(order)} tokens")
    sets = {s: load_prompts(s, tok, a.prompts_per_set) for s in ("code", "chat")}
    res = dict(head=str(head_dir), k=a.k, prompts_per_set=a.prompts_per_set, max_new_tokens=a.max_new_tokens, sizes={},
               load_before=others_load())
    timing_trees = bool(a.trees) and not a.acceptance_only
    runs_per_prompt = len(sizes) + len(a.trees) + (len(a.trees) + 4 if timing_trees else 0)  # timed: plain twice, chain,
    # auto
    bar = Progress(runs_per_prompt * 2 * sum(len(v) for v in sets.values()), "bench eagle")
    first = None  # the first size's head: the trees' drafter
    for size in sizes:
        head = Eagle(target, tensors, order[:size], name=f"eagle-{size}", lower_layers=shipped.lower_layers,
                     extra_intermediate=shipped.extra_intermediate)
        first = head if first is None else first
        res["sizes"][size] = size_row(target, head, sets, a.k, a.max_new_tokens, tok.eos_ids, bar,
                                      timing=not a.acceptance_only)
    res["trees"] = {}
    for shape in a.trees:
        row = res["trees"][f"{shape.top_k}x{shape.depth}x{shape.nodes}"] = {}
        for setting, temp in SETTINGS:
            for name, prompts in sets.items():
                row[f"{setting} {name}"] = tree_tokens_per_pass(target, first, prompts, shape, temp, a.max_new_tokens,
                                                                tok.eos_ids, bar)
    if timing_trees:
        res["timed_tokens_per_pass"] = {f"{setting} {name}": {} for setting, _ in SETTINGS for name in sets}
        res["timed"] = {f"{setting} {name}": timed_trees(target, first, prompts, a.trees, a.k, temp, a.max_new_tokens,
                                                         tok.eos_ids, bar, res["timed_tokens_per_pass"][f"{setting} {name}"])
                        for setting, temp in SETTINGS for name, prompts in sets.items()}
        ns = sorted({1, a.k + 1, *(shape.nodes + 1 for shape in a.trees), DynamicTree().nodes + 1})  # a tree's pass:
        # its nodes and the root (--tree auto's largest: the default shape's)
        t = forward_times(target, tuple(ns), context=256, repeats=10)
        res["timed_r"] = {n: t[n] / t[1] for n in ns}
    bar.close()
    res["memory"] = None if a.acceptance_only else memory_row(target.path, head_dir, shipped, target.kernel)
    res["load_after"] = others_load()
    print(report(res))
    if a.json:
        origin = provenance(argv, p.prog)  # date, commit, command, machine
        Path(a.json).write_text(json.dumps(dict(res, provenance=origin), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
