"""``minispec bench vocab``: a draft with its own tokenizer (SLEM and TLI) next to the shipped draft that
shares the target's, on the evaluation prompts, side by side with plain decoding in one run.

Per drafter, K, setting (greedy, T = 1) and prompt set: accepted target tokens per target pass (what
the comparison is made on: a round accepts that many guesses), the same in characters of text (comparable across
tokenizers), the acceptance rate (accepted / drafted), and the speedup over plain decoding (median over
prompts). The cost ratio c is seconds per guess (a target token; SLEM's includes its extra draft token and
the re-tokenising) over seconds per target step. Then transformers' universal assisted generation with
the same pair (greedy: string-level exact match; sampling: its TLI), over its own plain generate. A prompt whose speedup
is above its run's target tokens per target pass (``measure.speedup_bound``) is noise, counted per row
(``noise``), and a median above its prompts' median tokens per pass is marked noise. The other processes' load is
recorded as the runs begin and end; a busy machine is named beside the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..drafters import make_drafter
from ..generate import generate
from ..model.weights import float_copy
from ..policy import forward_times
from ..policy.timing import guess_time
from ..recipes.fetch import shipped_bpe_draft, shipped_draft
from ..speculative import speculative_generate
from .command import (
    MODEL_HELP,
    busy_line,
    check_out_dir,
    given_or_shipped,
    load_target,
    median_bound,
    noise_count,
    noise_marks,
    noise_note,
)
from .measure import SETTINGS, others_load, side_by_side, speedup_bound
from .progress import Progress
from .prompts import PROMPT_SETS, load_prompts
from .provenance import provenance


def accepted_chars(tokens: list[int], rounds_log, token_bytes) -> int:
    """Characters (bytes) of the accepted guesses: round by round, a round's first ``accepted`` tokens."""
    at, total = 0, 0
    for _, accepted in rounds_log:
        total += sum(len(token_bytes[t]) for t in tokens[at: at + accepted])
        at += accepted + 1
    return total


def run(target, drafters: dict, tok, token_bytes, ks, settings, prompts_per_set: int, max_new_tokens: int,
        log=print) -> dict:
    load_before = others_load()
    prompts = {s: load_prompts(s, tok, prompts_per_set) for s in PROMPT_SETS}
    stop = tok.eos_ids
    ctx = list(np.resize(np.asarray(prompts["code"][0]), 256))
    t1 = forward_times(target, (1,), context=256, repeats=10)[1]
    c = {name: guess_time(d, ctx) / t1 for name, d in drafters.items()}
    log(f"target step {1e3 * t1:.2f} ms; c = " + ", ".join(f"{n} {v:.3f}" for n, v in c.items()))
    cells = {}  # (drafter, k, setting, set) -> [accepted, drafted, rounds, chars, speedups, draft seconds, bounds]
    n_runs = sum(len(v) for v in prompts.values()) * len(settings) * (len(drafters) * len(ks) + 2)
    bar = Progress(n_runs, "bench vocab")
    for setting in settings:
        w = dict(temperature=SETTINGS[setting])
        for pset, plist in prompts.items():
            for i, p in enumerate(plist):
                seed = 1000 * i + 7
                todo = [(name, k) for name in drafters for k in ks]
                _, plain_rate, results = side_by_side(
                    lambda p=p, seed=seed, w=w: generate(target, p, max_new_tokens, seed=seed, stop_ids=stop, **w),
                    [lambda name=name, k=k, p=p, seed=seed, w=w: speculative_generate(
                        target, drafters[name], p, max_new_tokens, k=k, seed=seed, stop_ids=stop, **w)
                     for name, k in todo], done=bar.update)
                for (name, k), (res, dt) in zip(todo, results):
                    s = res.stats
                    cell = cells.setdefault((name, k, setting, pset), [0, 0, 0, 0, [], 0.0, []])
                    cell[0] += s.accepted
                    cell[1] += s.drafted
                    cell[2] += s.rounds
                    cell[3] += accepted_chars(res.tokens, s.rounds_log, token_bytes)
                    cell[4].append(len(res.tokens) / dt / plain_rate)
                    cell[5] += s.time_draft
                    cell[6].append(speedup_bound(len(res.tokens), s.rounds))
    bar.close()
    rows = []
    c_runs = {}  # drafting time in the runs (catching up included) per guess, over the target step
    for (name, k, setting, pset), (acc, drafted, rounds, chars, sp, t_draft, bounds) in cells.items():
        rows.append(dict(drafter=name, k=k, setting=setting, prompt_set=pset, accepted_per_pass=acc / rounds,
                         chars_per_pass=chars / rounds, acceptance=acc / drafted if drafted else None,
                         speedup=float(np.median(sp)), c=c[name], runs=len(sp), noise=noise_count(sp, bounds),
                         speedup_bound=median_bound(bounds)))
        tot = c_runs.setdefault(name, [0.0, 0])
        tot[0] += t_draft
        tot[1] += drafted
    return dict(target_step_ms=1e3 * t1, c=c, c_in_runs={n: v[0] / v[1] / t1 for n, v in c_runs.items() if v[1]},
                rows=rows, ks=list(ks), settings=list(settings), prompts_per_set=prompts_per_set,
                max_new_tokens=max_new_tokens, load_before=load_before, load_after=others_load())


def transformers_uag(target_dir, draft_dir, prompts: dict, max_new_tokens: int, k: int) -> dict | None:
    """transformers' generate with an assistant of another tokenizer (greedy: universal assisted generation;
    do_sample: its TLI), each over transformers' own plain generate, median per prompt."""
    try:
        import torch
        import transformers
    except ImportError:
        return None
    torch.set_num_threads(2)
    load = transformers.AutoModelForCausalLM.from_pretrained
    target = load(str(target_dir), dtype=torch.float32).eval()
    with tempfile.TemporaryDirectory() as tmp:  # transformers reads int8 matrices as their integers: a float copy
        draft = load(str(float_copy(draft_dir, Path(tmp) / "draft")), dtype=torch.float32).eval()
    tt = transformers.AutoTokenizer.from_pretrained(str(target_dir))
    dt = transformers.AutoTokenizer.from_pretrained(str(draft_dir))
    draft.generation_config.num_assistant_tokens = k
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0
    out = dict(transformers=transformers.__version__, k=k)
    for setting, sample in (("greedy", False), ("T=1", True)):
        speed, errors, nll = [], [], ([], [])
        for plist in prompts.values():
            for i, p in enumerate(plist):
                ids = torch.tensor([p])
                rates = []
                for kw in ({}, dict(assistant_model=draft, tokenizer=tt, assistant_tokenizer=dt)):
                    torch.manual_seed(i)
                    t0 = time.perf_counter()
                    try:
                        with torch.no_grad():
                            o = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                                do_sample=sample, temperature=1.0 if sample else None,
                                                top_k=0 if sample else None, top_p=1.0 if sample else None,
                                                pad_token_id=0, **kw)
                    except Exception as e:  # noqa: BLE001  (a peer that cannot run is reported, not fatal)
                        errors.append(f"{type(e).__name__}: {e}"[:300])
                        break
                    rates.append((o.shape[1] - len(p)) / (time.perf_counter() - t0))
                    with torch.no_grad():  # the target's own log-probability of what was generated
                        logp = torch.log_softmax(target(o).logits[0, len(p) - 1: -1].float(), -1)
                    nll[len(rates) - 1].append(-logp.gather(1, o[0, len(p):, None]).mean().item())
                if len(rates) == 2:
                    speed.append(rates[1] / rates[0])
        out[setting] = dict(speedup=float(np.median(speed)) if speed else None, prompts=len(speed),
                            error=errors[0] if errors else None,
                            target_nll=dict(plain=float(np.mean(nll[0])) if nll[0] else None,
                                            assisted=float(np.mean(nll[1])) if nll[1] else None))
    return out


def format_report(res: dict) -> str:
    lines = ["# A draft with its own tokenizer: SLEM and TLI against the shipped same-tokenizer draft", "",
             f"Target step {res['target_step_ms']:.2f} ms. {res['prompts_per_set']} prompts per set, "
             f"{res['max_new_tokens']} new tokens, plain decoding timed before and after each prompt's runs.", "",
             "c: seconds per guess over seconds per target step, timed apart (greedy, K = 4, a fixed code context), "
             "and in the runs (drafting and catching up, all runs).", "",
             *([busy, ""] if (busy := busy_line(res.get("load_before"), res.get("load_after"))) else []),
             "| drafter | c | c in the runs |", "|---|---|---|"]
    in_runs = res.get("c_in_runs", {})  # (not recorded by the first version of this benchmark)
    lines += [f"| {n} | {v:.3f} | " + (f"{in_runs[n]:.3f} |" if n in in_runs else "- |") for n, v in res["c"].items()]
    for setting in res["settings"]:
        lines += ["", f"## {setting}", "",
                  "accepted target tokens per pass / characters per pass / acceptance / speedup, by prompt set", "",
                  "| drafter | K | " + " | ".join(PROMPT_SETS) + " |", "|---|---|" + "---|" * len(PROMPT_SETS)]
        names = list(res["c"])
        for name in names:
            for k in res["ks"]:
                cells = []
                for pset in PROMPT_SETS:
                    r = next(x for x in res["rows"] if (x["drafter"], x["k"], x["setting"], x["prompt_set"]) ==
                             (name, k, setting, pset))
                    acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
                    cells.append(f"{r['accepted_per_pass']:.2f} / {r['chars_per_pass']:.1f} / {acc} / "
                                 f"{r['speedup']:.2f}x" + noise_marks(r["speedup"], r.get("speedup_bound"),
                                                                      r.get("noise", 0), r.get("runs", 0)))
                lines.append(f"| {name} | {k} | " + " | ".join(cells) + " |")
    lines += noise_note(sum(r.get("noise", 0) for r in res["rows"]), sum(r.get("runs", 0) for r in res["rows"]),
                        "prompts")
    peer = res.get("peer")
    lines += ["", "## transformers, the same pair", ""]
    if not peer:
        lines.append(f"not run ({res.get('peer_skipped', 'torch or transformers is not installed')})")
    else:
        lines.append(f"transformers {peer['transformers']}, {peer['k']} assistant tokens per round, speedup over "
                     "its own plain generate (median per prompt):")
        lines.append("")
        for setting in ("greedy", "T=1"):
            v = peer[setting]
            what = "universal assisted generation" if setting == "greedy" else "sampling (its TLI)"
            nll = v.get("target_nll")
            lines.append(f"- {setting}, {what}: " + (
                f"{v['speedup']:.2f}x over {v['prompts']} prompts" + (
                    f"; the target's mean negative log-likelihood of the generated tokens: {nll['assisted']:.3f} nats "
                    f"against {nll['plain']:.3f} for its plain generate" if nll else "")
                if v["speedup"] is not None else f"did not run: {v['error']}"))
        if peer["T=1"].get("target_nll"):
            lines += ["", "At T=1 a lossless method's output has the target's own distribution, so the target's mean "
                      "log-likelihood of it matches that of plain sampling, up to sampling noise; a clearly higher "
                      "negative log-likelihood means the output is not the target's."]
    return "\n".join(lines) + "\n"


def main(argv) -> int:
    p = argparse.ArgumentParser(prog="minispec bench vocab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help=MODEL_HELP)
    p.add_argument("--draft", help="draft with its own tokenizer (default: the shipped one)")
    p.add_argument("--same", help="draft with the target's tokenizer to compare with (default: the shipped draft)")
    p.add_argument("--ks", default="1,2,3,4", help="comma-separated K values (default 1,2,3,4)")
    p.add_argument("--prompts-per-set", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--no-peer", dest="peer", action="store_false", help="skip transformers")
    p.add_argument("--out", default="bench-out/vocab", help="output directory for report.md and vocab.json "
                                                            "(default bench-out/vocab)")
    a = p.parse_args(argv)
    try:
        ks = tuple(int(x) for x in a.ks.split(","))
    except ValueError:
        p.error(f"--ks must be comma-separated integers, got {a.ks!r}")
    if not ks or min(ks) < 1 or a.prompts_per_set < 1 or a.max_new_tokens < 1:
        p.error("--ks values, --prompts-per-set and --max-new-tokens must be at least 1")
    check_out_dir(p, a.out)  # (bug: found out after every run and the transformers peer)
    draft_dir = given_or_shipped(p, a.draft, shipped_bpe_draft(), "no draft with its own tokenizer: pass --draft")
    target, tok = load_target(a.model)
    drafters = {}
    for spec in (f"slem:{draft_dir}", f"tli:{draft_dir}", a.same or shipped_draft()):
        if spec:
            d = make_drafter(spec, target)
            drafters[d.name] = d
    from ..drafters.crossvocab import token_bytes
    res = run(target, drafters, tok, token_bytes(target.path), ks, ("greedy", "T=1"), a.prompts_per_set,
              a.max_new_tokens, log=lambda m: print(m, file=sys.stderr))
    if a.peer:
        prompts = {s: load_prompts(s, tok, a.prompts_per_set) for s in PROMPT_SETS}
        res["peer"] = transformers_uag(target.path, draft_dir, prompts, a.max_new_tokens, k=max(ks))
    else:
        res["peer_skipped"] = "--no-peer"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res["provenance"] = provenance(argv, p.prog)
    (out / "vocab.json").write_text(json.dumps(res, indent=2))
    report = format_report(res)
    (out / "report.md").write_text(report)
    print(report)
    return 0
