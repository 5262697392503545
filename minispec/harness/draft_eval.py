"""How good is a draft? ``minispec bench draft``: acceptance at K = 1..8 on held-out prompts, the cost
ratio c, and the speedup at the best K, greedy and at temperature 1.

Acceptance at K is read off rounds run at K = 8: the first K guesses of a K = 8 round are drawn
exactly as the guesses of a K round from the same context would be, and a K round would accept
min(n, K) of them. So acceptance(K) = sum min(n, K) / sum min(drafted, K) over rounds. A direct run
at K = 1 and K = 4 is reported next to it as a check of that estimate. The best K is predicted from the
same rounds: a round at K emits 1 + mean min(n, K) tokens (``tokens_by_k``) for K guesses at c and a pass
of r(K + 1) (``best_k``); the speedup at that K is then measured side by side with plain decoding.

Acceptance by confidence (greedy): for every token of the greedy outputs, the draft's top probability
at that position and whether its top token is the target's. It says how much an early stop of
drafting on low confidence could gain: only as much as confident positions are common.

A prompt whose measured speedup is above its run's tokens per target pass (``measure.speedup_bound``) is noise,
counted beside the median, and a median above its prompts' median tokens per pass is reported as noise. The other
processes' load is recorded as the measuring begins and ends; a busy machine is named beside the figures.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from ..drafters import make_drafter
from ..drafters.protocol import HasModel, has
from ..generate import generate
from ..policy import forward_times
from ..policy.auto_k import best as choose_best
from ..policy.timing import guess_time
from ..recipes.fetch import shipped_draft
from ..sampling import Warp
from ..speculative import speculative_generate
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
)
from .measure import SETTINGS, others_load, side_by_side, speedup_bound
from .progress import Progress
from .prompts import load_prompts
from .provenance import provenance


def acceptance_by_k(rounds_log, k_max: int = 8) -> dict[int, float]:
    out = {}
    for k in range(1, k_max + 1):
        acc = sum(min(n, k) for d, n in rounds_log if d)
        drafted = sum(min(d, k) for d, n in rounds_log if d)
        out[k] = acc / drafted if drafted else float("nan")
    return out


def tokens_by_k(rounds_log, k_max: int = 8) -> dict[int, float]:
    """Tokens a round at K would emit, on average, read off rounds that drafted K or more guesses ((drafted, kept)
    pairs): the first K guesses keep min(kept, K) (a rule keeps a prefix), plus the target's own token."""
    out = {}
    for k in range(1, k_max + 1):
        kept = [min(n, k) for d, n in rounds_log if d >= k]
        out[k] = 1.0 + sum(kept) / len(kept) if kept else float("nan")
    return out


def best_k(tokens: dict, c: float, times: dict) -> tuple[int, float]:
    """The K whose predicted speedup, a round's tokens (``tokens_by_k``) over its cost in target steps (K guesses at
    c each and a pass of K + 1 tokens, r(K + 1) = t(K + 1) / t(1) of the one measurement ``times``, {n: seconds}), is
    highest -> (K, that speedup)."""
    r = {n: t / times[1] for n, t in times.items()}
    return choose_best(sorted(tokens), lambda k: tokens[k] / (k * c + r[k + 1]))


CONFIDENCE_BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0)


def confidence_rows(drafter, prompt, out) -> list[tuple[float, bool]]:
    """(draft's top probability, draft's top token == the token emitted) at each position of ``out``."""
    q = drafter.first_guess_rows(list(prompt) + list(out), len(prompt), Warp(1.0))  # [T, V]: predicts out
    return [(float(c), bool(a)) for c, a in zip(q.max(-1), q.argmax(-1) == np.asarray(out))]


def by_confidence(rows) -> list[dict]:
    conf, hit = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    out = []
    for lo, hi in zip(CONFIDENCE_BINS, CONFIDENCE_BINS[1:]):
        m = (conf >= lo) & ((conf < hi) | (hi == 1.0))
        out.append(dict(low=lo, high=hi, share=float(m.mean()), acceptance=float(hit[m].mean()) if m.any() else None))
    return out


def evaluate_draft(target, drafter, tok, sets=("code", "chat"), n_prompts=None, max_new_tokens=64, progress=True):
    res = {}
    for name in sets:
        prompts = load_prompts(name, tok, n_prompts)
        for setting, temp in SETTINGS.items():
            bar = Progress(len(prompts), f"{name} {setting}", quiet=not progress)
            log, direct, conf = [], {1: [0, 0], 4: [0, 0]}, []
            for i, p in enumerate(prompts):
                r = speculative_generate(target, drafter, p, max_new_tokens, k=8, temperature=temp, seed=i,
                                         stop_ids=tok.eos_ids)
                log += r.stats.rounds_log
                if temp == 0.0 and has(drafter, HasModel):
                    conf += confidence_rows(drafter, p, r.tokens)
                if i % 4 == 0:  # the direct check on a quarter of the prompts
                    for k in direct:
                        s = speculative_generate(target, drafter, p, max_new_tokens, k=k, temperature=temp, seed=i,
                                                 stop_ids=tok.eos_ids).stats
                        direct[k][0] += s.accepted
                        direct[k][1] += s.drafted
                bar.update()
            bar.close()
            res[f"{name} {setting}"] = dict(prompts=len(prompts), rounds=len(log), acceptance=acceptance_by_k(log),
                                            tokens=tokens_by_k(log), direct={k: a / d if d else None for k, (a, d) in direct.items()},
                                            by_confidence=by_confidence(conf) if conf else None)
    return res


def speed_at(target, drafter, tok, k: int, sets=("code", "chat"), n_prompts=10, max_new_tokens=64,
             temperature=0.0) -> dict:
    """The speedup at ``k`` over plain decoding, measured side by side (plain before and after) on each prompt ->
    {speedup: [median, first quartile, third quartile] over prompts, runs: the prompts, noise: how many were faster
    than their tokens per target pass allow, speedup_bound: the most the median can honestly be}."""
    ratios, bounds = [], []
    for name in sets:
        for i, p in enumerate(load_prompts(name, tok, n_prompts)):
            kw = dict(temperature=temperature, seed=i, stop_ids=tok.eos_ids)
            _, plain_rate, [(res, dt)] = side_by_side(lambda p=p, kw=kw: generate(target, p, max_new_tokens, **kw),
                                                      [lambda p=p, kw=kw: speculative_generate(target, drafter, p, max_new_tokens, k=k, **kw)])
            ratios.append((len(res.tokens) / dt) / plain_rate)
            bounds.append(speedup_bound(len(res.tokens), res.stats.rounds))
    return dict(speedup=[float(np.median(ratios)), float(np.quantile(ratios, 0.25)), float(np.quantile(ratios, 0.75))],
                runs=len(ratios), noise=noise_count(ratios, bounds), speedup_bound=median_bound(bounds))


def speed_line(setting: str, speed: dict) -> str:
    """The printed line of one setting's speed (``speed_at``, with the K it ran at): its median speedup, reported as
    noise where it is above the prompts' median tokens per target pass, and the prompts that were above theirs."""
    m, q1, q3 = speed["speedup"]
    bound = speed.get("speedup_bound")
    over = bound is not None and m > bound
    marks = noise_marks(m, bound, speed.get("noise", 0), speed.get("runs", 0))
    return (f"{setting}: predicted best K = {speed['k']}; measured {'' if over else 'speedup '}{m:.2f}x{marks} "
            f"(quartiles {q1:.2f}-{q3:.2f}) over plain decoding, code + chat prompts, side by side")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="minispec bench draft", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help=MODEL_HELP)
    p.add_argument("--draft", help="draft model directory (default: the shipped draft)")
    p.add_argument("--prompts", type=count, help="prompts per set (default: all, >= 50 for code and chat)")
    p.add_argument("--max-new-tokens", type=count, default=64)
    p.add_argument("--speed-prompts", type=count, default=10, help="prompts per set for the speedup (default 10)")
    p.add_argument("--json", help="also write the figures here, with their provenance")
    a = p.parse_args(argv)
    check_json_path(a.json)
    load_before = others_load()
    spec = given_or_shipped(p, a.draft, shipped_draft(), "no draft model: pass --draft DIR")
    target, tok = load_target(a.model)
    drafter = make_drafter(spec, target)
    t = forward_times(target, (1,), context=128, repeats=20)[1]
    ctx = load_prompts("code", tok, 1)[0] * 4
    c = guess_time(drafter, ctx) / t
    acc = evaluate_draft(target, drafter, tok, n_prompts=a.prompts, max_new_tokens=a.max_new_tokens)
    print(f"draft {drafter.name}: c = {c:.3f} (draft step / target step of {1e3 * t:.2f} ms)")
    print(f"{'':14}" + "".join(f"{'K=' + str(k):>7}" for k in range(1, 9)) + "   direct K=1, K=4")
    for name, r in acc.items():
        print(f"{name:14}" + "".join(f"{r['acceptance'][k]:7.3f}" for k in range(1, 9))
              + f"   {r['direct'][1]:.3f}, {r['direct'][4]:.3f}")
    for name, r in acc.items():
        if r["by_confidence"]:
            print(f"{name}: acceptance by the draft's top probability (share of positions / greedy acceptance): "
                  + "; ".join(f"[{b['low']:.1f}, {b['high']:.1f}) {b['share']:.2f} / "
                              + ("-" if b["acceptance"] is None else f"{b['acceptance']:.2f}") for b in r["by_confidence"]))
    speeds = {}
    for setting, temp in SETTINGS.items():
        # a round's tokens at each K (bug: the share of the first K guesses kept was passed as the first guess's rate
        # a, which undercounts every K > 1 and so favoured K = 1), and r(n) of one measurement (bug: over another's t(1))
        best, _ = best_k(acc[f"code {setting}"]["tokens"], c,
                         forward_times(target, tuple(range(1, 10)), context=128, repeats=5))
        speeds[setting] = dict(k=best, **speed_at(target, drafter, tok, best, n_prompts=a.speed_prompts,
                                                  max_new_tokens=a.max_new_tokens, temperature=temp))
        print(speed_line(setting, speeds[setting]))
    load_after = others_load()
    busy = busy_line(load_before, load_after)  # beside c and the speedups
    if busy:
        print(busy)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(c=c, target_step_ms=1e3 * t, acceptance=acc, speed=speeds, load_before=load_before,
                           load_after=load_after, provenance=provenance(argv, p.prog)), f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
