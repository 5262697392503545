"""Spec-Bench's tables and plot, from ``minispec bench specbench --json`` (docs/specbench/), for ``docs_tables``.

Spec-Bench's leaderboard layout: a row per method, a column per task and the overall, each cell the speedup over
plain decoding with tau (mean accepted tokens per target pass) beside it. This machine's figures and the published
GPU figures (docs/specbench/published.json, with its source) are two tables, never one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .command import noise_marks
from .doc_figures import load, run_line
from .study import small_png

FIRST_LOOK, RUN, PUBLISHED = "docs/specbench/first_look.json", "docs/specbench/run.json", "docs/specbench/published.json"
NAMES = dict(mt_bench="MT-bench", translation="translation", summarization="summarization", qa="QA",
             math_reasoning="math", rag="RAG", overall="overall")


def table_head(first: str, tasks) -> list[str]:
    """A table's first two lines: ``first``, then a column per task (named as Spec-Bench's leaderboard names it)."""
    return ["| " + " | ".join([first, *(NAMES.get(t, t) for t in tasks)]) + " |", "|---" * (len(tasks) + 1) + "|"]


def marked(c: dict) -> str:
    """A task's speedup, with " noise" where it is above its tau: a task's figures are its totals, tokens over seconds
    against plain decoding's, and no run can beat plain decoding by more than its tokens per target pass (issue 45)."""
    return f"{c['speedup']:.2f}x" + noise_marks(c["speedup"], c.get("tau"))


def cell(c: dict) -> str:
    return marked(c) + (f" ({c['tau']:.2f})" if c.get("tau") else "")


def leaderboard(res: dict) -> str:
    """This machine's table: plain decoding's tokens/s, then each minispec method and each peer mode as speedups over
    minispec's plain decoding in the same run (a peer's over its own plain mode in brackets)."""
    s = res["summary"]
    tasks = list(s["plain"]["tasks"])
    rates = " | ".join(f"{c['tokens_per_s']:.1f}" for c in s["plain"]["tasks"].values())
    lines = table_head("method", tasks) + [f"| plain decoding (tokens/s) | {rates} |"]
    for m, v in s["methods"].items():
        lines.append(f"| {m} | " + " | ".join(cell(v["tasks"][t]) for t in tasks) + " |")
    for m, v in s["peers"].items():
        own = v.get("own") or {}
        mark = " (over its own plain)" if own and not m.endswith(" plain") else ""
        lines.append(f"| {m}{mark} | " + " | ".join(
            cell(v["tasks"][t]) + (f" ({own[t]['speedup']:.2f}x)" if mark and t in own else "") for t in tasks) + " |")
    for p, why in res.get("skipped", {}).items():  # a peer that did not run keeps its row, with the reason (issue 48)
        lines.append(f"| {p}: skipped, {why} | " + " | ".join("-" for _ in tasks) + " |")
    q = res["settings"]
    chosen = f"{q['per_task']} per task" if q.get("per_task") else "every question of the file"
    return "\n".join(lines) + (
        f"\n\n*{run_line(res)}; {res['questions']} questions ({chosen}), greedy, "
        f"{q['max_new_tokens']} new tokens per turn; speedup over minispec's plain decoding in the same run, tau in "
        f"brackets (for a peer's mode, its speedup over its own plain mode); \"noise\": a speedup above its tau, which "
        f"no run can beat (the load changed between the timings).*")


def spreads(res: dict) -> str:
    """Each minispec method's speedup per task (its tokens over its seconds, against plain decoding's, over the whole
    task) with the interquartile range of its per-question speedups."""
    s = res["summary"]
    tasks = list(s["plain"]["tasks"])
    lines = table_head("method", tasks)
    for m, v in s["methods"].items():
        lines.append(f"| {m} | " + " | ".join(
            f"{marked(v['tasks'][t])} ({v['tasks'][t]['iqr'][0]:.2f}-{v['tasks'][t]['iqr'][1]:.2f})" for t in tasks) + " |")
    return "\n".join(lines)


def engine_and_mode(peer_row: str) -> tuple[str, str]:
    """A peer's row of the summary, "<engine> <mode>" (harness/specbench.py names them so) -> (engine, mode)."""
    engine, mode = peer_row.rsplit(" ", 1)
    return engine, mode


def fastest(res: dict) -> str:
    """Per task, each engine's fastest mode in tokens/s (minispec: plain decoding or any of its methods; a peer: any
    of its modes), and whether minispec's is at least as fast as every peer's (issue 48's first goal). The best of
    minispec's five modes is taken against the best of a peer's two or three, each a noisy figure, which leans the
    verdict toward minispec."""
    s = res["summary"]
    tasks = list(s["plain"]["tasks"])
    engines: dict[str, dict] = {"minispec": {"plain": s["plain"]["tasks"], **{m: v["tasks"] for m, v in s["methods"].items()}}}
    for row, v in s["peers"].items():
        engine, mode = engine_and_mode(row)
        engines.setdefault(engine, {})[mode] = v["tasks"]
    names = list(engines)
    lines = ["| task | " + " | ".join(f"{e}: fastest" for e in names) + " | minispec at least as fast |",
             "|---" * (len(names) + 2) + "|"]
    for t in tasks:
        best = {e: max(((c[t]["tokens_per_s"], m) for m, c in modes.items() if t in c), default=(None, None))
                for e, modes in engines.items()}
        mine, peers = best["minispec"][0], [b[0] for e, b in best.items() if e != "minispec" and b[0] is not None]
        cells = [f"{b[1]} {b[0]:.1f} tokens/s" if b[0] is not None else "-" for b in best.values()]
        verdict = "-" if mine is None or not peers else "yes" if mine >= max(peers) else "no"
        lines.append(f"| {NAMES.get(t, t)} | " + " | ".join(cells) + f" | {verdict} |")
    return "\n".join(lines)


def first_look(root: Path) -> str:
    return leaderboard(load(root, FIRST_LOOK))


def committed_run(root: Path) -> str:
    """The committed run: the leaderboard, each method's spread over questions, and each engine's fastest mode."""
    res = load(root, RUN)
    return "\n\n".join([leaderboard(res), "Each method's speedup over the task, with the interquartile range of its "
                        "per-question speedups:", spreads(res), "Each engine's fastest mode per task, in tokens/s:",
                        fastest(res)])


def published(root: Path) -> str:
    """The published GPU figures, as their source gives them."""
    d = load(root, PUBLISHED)
    tasks = d["tasks"]
    lines = table_head("method", [*tasks, "tau"])
    for m, r in d["rows"].items():
        lines.append(f"| {m} | " + " | ".join(f"{r[t]:.2f}x" for t in tasks) + f" | {r['tau']:.2f} |")
    return "\n".join(lines) + f"\n\n*{d['setting']}; {d['source']}.*"


SECTIONS = {"specbench_first_look": first_look, "specbench_run": committed_run, "specbench_published": published}


def check_summary(res) -> None:
    """KeyError, TypeError or ValueError where ``res`` lacks a figure ``plot`` reads (bug: only the plain tasks were
    checked; a summary without its settings, its question count or a method's task failed inside the plot)."""
    s = res["summary"]
    tasks = list(s["plain"]["tasks"])
    for group in ("methods", "peers"):
        for cells in s[group].values():
            for t in tasks:
                float(cells["tasks"][t]["speedup"])
    int(res["questions"])
    int(res["settings"]["max_new_tokens"])


def plot(res: dict, png: Path) -> Path | None:
    """Speedup by task, a bar per method (minispec's and the peers'), 1x marked; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    s = res["summary"]
    tasks = list(s["plain"]["tasks"])
    bars = {**{m: v["tasks"] for m, v in s["methods"].items()}, **{m: v["tasks"] for m, v in s["peers"].items()}}
    fig, ax = plt.subplots(figsize=(11, 4))
    width = 0.8 / max(len(bars), 1)
    for i, (m, cells) in enumerate(bars.items()):
        ax.bar([j + (i - (len(bars) - 1) / 2) * width for j in range(len(tasks))],
               [cells[t]["speedup"] for t in tasks], width, label=m)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks(range(len(tasks)), [NAMES.get(t, t) for t in tasks])
    q = res["settings"]
    ax.set(ylabel="speedup over minispec's plain decoding",
           title=f"Spec-Bench on {((res.get('provenance') or {}).get('machine') or {}).get('cpu', 'this CPU')}: "
                 f"{res['questions']} questions, "
                 f"greedy, {q['max_new_tokens']} new tokens")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    small_png(png)
    return png


def main(argv=None) -> int:
    """``python -m minispec.harness.specbench_figures SUMMARY.json [PLOT.png]``: the plot of a ``--json`` summary
    (default: beside it, .png)."""
    argv = sys.argv[1:] if argv is None else argv
    if not 1 <= len(argv) <= 2:
        print("usage: python -m minispec.harness.specbench_figures SUMMARY.json [PLOT.png]", file=sys.stderr)
        return 2
    src = Path(argv[0])
    try:
        res = json.loads(src.read_text())
        check_summary(res)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: {src}: not a `minispec bench specbench --json` summary ({e})", file=sys.stderr)
        return 2
    png = Path(argv[1]) if len(argv) == 2 else src.with_suffix(".png")
    if plot(res, png) is None:
        print("error: the plot needs matplotlib (the plot extra)", file=sys.stderr)
        return 2
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
