"""The power of level 4: how large a departure from the target's distribution would its statistics catch?

A p-value near 1 says nothing about what a test would have missed. This study plants departures of known
size in the rule, on tiny random models where every size is exact, and measures how often level 4's
statistics (check.py: the token chi-square and the acceptance statistic, each a paired permutation test,
Bonferroni over the two at ALPHA = 0.01) reject over repeated experiments of N paired runs.

The departures, each with a strength s (s = 0 is the exact rule):
  residual   with probability s, a rejection resamples from p instead of norm(max(0, p - q)) (the classic bug
             of ``equivalence.broken_residual``, mixed in);
  bias       the rule is told q_s = norm(q^(1 + s)) while the draft samples from q (a q reported with a known
             bias: too sharp).
Their size is exact. With K = 1, a round's first token has the law P(y) = sum_x q(x) a(x) [y = x] + (1 - sum_x
q(x) a(x)) r(y), a(x) = min(1, p(x) / q_told(x)), r = norm(max(0, p - q_told)) (mixed with p for residual); the
round's bonus token is drawn from the target's own row. So the mean per-token total-variation distance from
the target over a run is sum over its rounds of TV(P, p) at that round's context, over its tokens: computed
here at every round of every run (``round_tv``) and averaged.

``minispec bench power`` writes power.json (and a plot) to ``--out`` (the committed run: docs/power); the SmolLM2 point comes from the same TV
formula at the contexts of level 4's plain runs with the shipped draft (``smollm2_point``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from .. import rejection
from ..drafters import DraftModel
from ..generate import generate
from ..sampling import Warp, warp
from ..speculative import speculative_generate
from .check import ALPHA
from .command import check_out_dir
from .equivalence import broken_residual, mean_test, token_test, twin
from .progress import Progress
from .provenance import provenance

DEPARTURES = {"residual": (0.02, 0.05, 0.1, 0.2, 0.4, 1.0), "bias": (0.1, 0.25, 0.5, 1.0)}


def told_q(q: np.ndarray, kind: str, s: float) -> np.ndarray:  # [..., V] -> [..., V]
    if kind == "bias" and s:
        z = q ** (1 + s)
        return z / z.sum(-1, keepdims=True)
    return q


def planted_rule(kind: str, s: float):
    """accept_reject with the departure ``kind`` at strength ``s`` (module docstring): the rule's own code (a twin,
    equivalence.py), told q_s (bias), or with a residual that is ``broken_residual`` with probability s (residual)."""
    def residual(real, rng):
        if kind != "residual":
            return real
        return lambda p, q: broken_residual(p, q) if rng.random() < s else real(p, q)  # the bug, mixed in

    mixed = twin(rejection.accept_reject, "residual", residual, f"{kind}@{s:g}")

    def rule(target_probs, draft_probs, draft_tokens, rng):
        return mixed(target_probs, told_q(draft_probs, kind, s), draft_tokens, rng)
    rule.__name__ = mixed.__name__
    return rule


def round_tv(p: np.ndarray, q: np.ndarray, kind: str, s: float) -> np.ndarray:  # p, q [n, V] -> [n]
    """TV(law of a K = 1 round's first token, p) at n contexts, exactly (module docstring)."""
    t = told_q(q, kind, s)
    a = np.minimum(1.0, p / np.maximum(t, 1e-300))  # [n, V]
    kept = q * a  # [n, V]
    r = np.maximum(p - t, 0.0)
    total = r.sum(-1, keepdims=True)
    r = np.where(total > 1e-12, r / np.maximum(total, 1e-300), p)
    if kind == "residual":
        r = (1 - s) * r + s * p
    law = kept + (1 - kept.sum(-1, keepdims=True)) * r
    return 0.5 * np.abs(law - p).sum(-1)


def rows(model, seq, start: int) -> np.ndarray:  # -> [len(seq) - start, V]: the rows that predict seq[start:]
    return warp(model.forward(seq, model.new_cache(len(seq)))[start - 1: len(seq) - 1], 1.0)


def experiment(target, draft, prompts, n_max: int, run_tokens: int, seed: int, bar) -> dict:
    """One repeat: ``n_max`` plain runs, and ``n_max`` runs of each planted rule, each run with its own seed."""
    drafter = DraftModel(draft, target.cfg.vocab_size)
    plain = [generate(target, prompts[i % len(prompts)], run_tokens, temperature=1.0, seed=seed + i)
             for i in range(n_max)]
    bar.update()
    out = dict(plain=plain)
    for kind, strengths in DEPARTURES.items():
        for s in (0.0, *strengths) if kind == "residual" else strengths:
            rule, runs, tv, tokens = planted_rule(kind, s), [], 0.0, 0
            for i in range(n_max):
                prompt = prompts[i % len(prompts)]
                res = speculative_generate(target, drafter, prompt, run_tokens, k=1, temperature=1.0,
                                           seed=seed + 10**6 + i, rule=rule)
                seq = list(prompt) + res.tokens
                starts, at = [], len(prompt)  # the context of each drafting round: where its first token went
                for drafted, accepted in res.stats.rounds_log:
                    if drafted:  # a round without a guess emits from p itself
                        starts.append(at)
                    at += accepted + 1
                starts = [j for j in starts if j < len(seq)]
                p, q = rows(target, seq, len(prompt)), rows(draft, seq, len(prompt))
                idx = np.asarray(starts) - len(prompt)
                tv += float(round_tv(p[idx], q[idx], kind, s).sum())
                tokens += len(res.tokens)
                runs.append(res.tokens)
            out[rule.__name__] = dict(runs=runs, tv_per_token=tv / tokens)
            bar.update()
    return out


def acceptance_values(target, draft, prompts, runs) -> list[np.ndarray]:
    out = []
    for i, run in enumerate(runs):
        prompt = prompts[i % len(prompts)]
        seq = list(prompt) + list(run)
        p, q = rows(target, seq, len(prompt)), rows(draft, seq, len(prompt))
        idx = np.arange(len(run))
        out.append(np.minimum(1.0, q[idx, run] / p[idx, run]))
    return out


def rejects(plain, spec, plain_acc, spec_acc, n: int, seed: int) -> bool:
    """Level 4's verdict on the first ``n`` pairs: told apart at ALPHA (Bonferroni over its two tests)."""
    tokens = token_test(plain[:n], spec[:n], seed=seed)
    acc = mean_test(plain_acc[:n], spec_acc[:n], seed=seed)
    return min(1.0, 2 * min(tokens["p_value"], acc["p_value"])) <= ALPHA


def power_study(target, draft, prompts, sizes=(48, 192, 768), repeats: int = 20, run_tokens: int = 16,
                progress: bool = True) -> dict:
    n_rules = 1 + sum(len(v) for v in DEPARTURES.values())
    bar = Progress(repeats * (1 + n_rules), "power study", quiet=not progress)
    t0 = time.perf_counter()
    table: dict = {}
    for r in range(repeats):
        exp = experiment(target, draft, prompts, max(sizes), run_tokens, 10**7 * (r + 1), bar)
        plain_acc = acceptance_values(target, draft, prompts, exp["plain"])
        for name, e in exp.items():
            if name == "plain":
                continue
            spec_acc = acceptance_values(target, draft, prompts, e["runs"])
            row = table.setdefault(name, dict(tv_per_token=[], rejected={str(n): 0 for n in sizes}))
            row["tv_per_token"].append(e["tv_per_token"])
            for n in sizes:
                row["rejected"][str(n)] += rejects(exp["plain"], e["runs"], plain_acc, spec_acc, n, seed=r)
    bar.close()
    for row in table.values():
        row["tv_per_token"] = float(np.mean(row["tv_per_token"]))
        row["power"] = {n: k / repeats for n, k in row["rejected"].items()}
    return dict(repeats=repeats, run_tokens=run_tokens, k=1, sizes=list(sizes), alpha=ALPHA, departures=table,
                seconds=time.perf_counter() - t0)


def smollm2_point(target, draft, prompts, n_runs: int = 24, run_tokens: int = 48) -> dict:
    """The residual bug's exact per-round TV on SmolLM2 with the shipped draft, at the contexts of plain runs."""
    tv = []
    for i in range(n_runs):
        prompt = prompts[i % len(prompts)]
        seq = list(prompt) + generate(target, prompt, run_tokens, temperature=1.0, seed=i)
        p = rows(target, seq, len(prompt))
        q = draft.first_guess_rows(seq, len(prompt), Warp(1.0))  # [T, V]
        tv.extend(round_tv(p, q, "residual", 1.0))
    return dict(runs=n_runs, run_tokens=run_tokens, positions=len(tv), tv_per_round_start=float(np.mean(tv)))


def plot(res: dict, path) -> None:
    """One panel per departure family: the share of experiments rejected against the exact TV per token."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, len(DEPARTURES), figsize=(8.0, 3.4), sharey=True, sharex=True)
    for ax, kind in zip(axes, DEPARTURES):
        rows = [row for name, row in res["departures"].items() if name.startswith(kind + "@") and row["tv_per_token"] > 1e-9]
        for n, style in zip(res["sizes"], ("o:", "s--", "^-")):
            pts = sorted((row["tv_per_token"], row["power"][str(n)]) for row in rows)
            ax.plot([x for x, _ in pts], [y for _, y in pts], style, label=f"N = {n}")
        ax.axhline(0.8, color="grey", lw=0.6)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title({"residual": "residual bug, mixed in with probability s",
                      "bias": "q reported as norm(q^(1+s))"}.get(kind, kind), fontsize=9)
        ax.set_xlabel("exact mean per-token TV from the target")
    axes[0].set_ylabel(f"share rejected at alpha = {res['alpha']}")
    axes[0].legend(fontsize=8, title="paired runs", title_fontsize=8)
    fig.suptitle(f"Power of level 4's statistics: tiny models, {res['run_tokens']} tokens per run, K = {res['k']}, "
                 f"{res['repeats']} experiments per point", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def replot(json_path, png_path) -> None:
    plot(json.loads(Path(json_path).read_text()), png_path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="minispec bench power", description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20, help="experiments per departure and size (default 20)")
    ap.add_argument("--sizes", default="48,192,768", help="paired runs per experiment (default 48,192,768)")
    ap.add_argument("--run-tokens", type=int, default=16, help="tokens per run (default 16)")
    ap.add_argument("--smollm2", action="store_true", help="also the SmolLM2 point (loads the target)")
    ap.add_argument("--out", default="bench-out/power", help="directory for power.json and power.png (default bench-out/power, "
                                                             "git-ignored; the committed run is docs/power: name it to replace it)")
    a = ap.parse_args(argv)
    sizes = tuple(int(x) for x in a.sizes.split(","))
    if a.repeats < 1 or a.run_tokens < 2 or min(sizes) < 2:
        ap.error("--repeats >= 1, --run-tokens >= 2 and every size >= 2")
    check_out_dir(ap, a.out)  # (bug: these two were found out after the study, minutes of it)
    if a.smollm2:
        from ..recipes.fetch import shipped_draft

        if shipped_draft() is None:
            ap.error("--smollm2 measures the shipped draft, and there is none in weights/")
    import tempfile

    from ..model import load_model
    from ..model.tiny import tiny_config, write_random_model

    with tempfile.TemporaryDirectory() as tmp:  # the level-3 tests' small pair: vocabulary 6
        small = dict(vocab_size=6, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=1)
        target = load_model(write_random_model(Path(tmp) / "t", tiny_config(num_hidden_layers=2, **small), seed=10,
                                               scale=2.0))
        draft = load_model(write_random_model(Path(tmp) / "d", tiny_config(num_hidden_layers=1, **small), seed=20,
                                              scale=2.0))
        prompts = [[1, 2], [3], [0, 4, 5], [2, 2]]
        res = power_study(target, draft, prompts, sizes, a.repeats, a.run_tokens)
    if a.smollm2:
        from ..drafters import make_drafter
        from ..recipes.fetch import shipped_draft
        from .check import all_prompts
        from .command import load_target

        smol, tok = load_target(None)
        res["smollm2"] = smollm2_point(smol, make_drafter(shipped_draft(), smol), all_prompts(tok))
    res["provenance"] = provenance()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "power.json").write_text(json.dumps(res, indent=2) + "\n")
    try:
        plot(res, out / "power.png")
    except ImportError:
        print("(matplotlib absent: no plot)", file=sys.stderr)
    for name, row in res["departures"].items():
        print(f"{name:14s} TV/token {row['tv_per_token']:.4f}  " + "  ".join(f"N={n}: {p:.2f}" for n, p in row["power"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
