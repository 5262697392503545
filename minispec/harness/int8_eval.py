"""The shipped drafts stored in int8 against the same drafts in bfloat16: what the storage changed in what they
propose. ``python -m minispec.harness.int8_eval --bf16 REV [--out DIR]`` (REV: a git revision whose ``weights/``
holds the bfloat16 files: any commit before the one that converted them; DIR: where int8.json and int8.md go,
bench-out/int8 unless named; the committed run is docs/weights).

For each draft: the same-tokenizer draft, run by the standard rule (drafters/draft_model.py), and the draft with
its own tokenizer, run by the drafter ``make_drafter`` chooses for it (TLI). No timing, and no speculative runs:
the drafts' first guesses, teacher-forced, measure what a run's first guesses are kept with, without a run's
sampling noise (both drafts see the same texts). Each prompt is followed
by the target's own continuation, greedy and at T = 1; at every position of the continuation the draft's
first-guess distribution q over the target's ids (the drafter's ``first_guess_rows``, as level 4's acceptance statistic reads it), from
the bfloat16 and from the int8 files, and the target's p:

* **acceptance**: greedy, on the greedy text, how often q's top token is p's (what the greedy rule keeps); at T = 1,
  on the T = 1 text, the mean of sum min(p, q) (the chance that the rule keeps a first guess);
* **total variation** TV(q_bf16, q_int8) between the two drafts' first guesses (mean and largest over positions),
  and each one's TV(p, q) to the target (T = 1 text). Where q sums to 1, sum min(p, q) = 1 - TV(p, q); TLI's q is
  zero where the text ends inside a character (it proposes nothing there).

Writes ``docs/weights/int8.json`` (with its provenance) and ``docs/weights/int8.md``, generated from it
(``format_report``; tests/test_weights.py checks that they agree).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..drafters import HasModel, has, make_drafter
from ..generate import generate
from ..recipes.fetch import DEFAULT_BPE_DRAFT, DEFAULT_DRAFT
from ..sampling import Warp, warp
from .command import load_target
from .measure import compact_json
from .progress import Progress
from .prompts import PROMPT_SETS, load_prompts
from .provenance import provenance

ROOT = Path(__file__).resolve().parents[2]
DRAFTS = (DEFAULT_DRAFT, DEFAULT_BPE_DRAFT)
JSON, REPORT = "docs/weights/int8.json", "docs/weights/int8.md"  # the committed run (--out docs/weights)


def git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout


def drafts_at(rev: str, out: Path) -> str:
    """Each draft's directory as it was at git revision ``rev``, written under ``out`` -> rev's commit."""
    commit = git("rev-parse", "--verify", rev + "^{commit}").decode().strip()
    for name in DRAFTS:
        (out / name).mkdir(parents=True)
        for f in git("ls-tree", "--name-only", commit, f"weights/{name}/").decode().split():
            (out / name / Path(f).name).write_bytes(git("show", f"{commit}:{f}"))
    return commit


def texts(target, tok, n_prompts: int, max_new_tokens: int, temperature: float) -> list[tuple[list[int], int]]:
    """(prompt + the target's own continuation, where the continuation starts) for the first prompts of each set."""
    out = []
    for name in PROMPT_SETS:
        for i, prompt in enumerate(load_prompts(name, tok, n_prompts)):
            out.append((list(prompt) + generate(target, prompt, max_new_tokens, temperature=temperature, seed=i,
                                                stop_ids=tok.eos_ids), len(prompt)))
    return out


def first_guess_rows(drafter, seq: list[int], start: int) -> np.ndarray:  # -> [len(seq) - start, V_target]
    """The drafter's own first-guess rows at T = 1 (``HasFirstGuessRows``: a draft model, TLI)."""
    return drafter.first_guess_rows(seq, start, Warp(1.0))


def own_model(drafter):
    """The model a draft runs: ``model`` (the standard rule) or ``draft_model`` (a draft with its own tokenizer)."""
    return drafter.model if has(drafter, HasModel) else drafter.draft_model


def tv(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # [n, V], [n, V] -> [n]
    return 0.5 * np.abs(a - b).sum(-1)


def first_guesses(target, drafters: dict, seqs, label: str) -> dict:
    """drafters {"BF16": d, "int8": d}, texts -> per position: TV between the two drafts' q, and each one's TV to p,
    sum min(p, q) and whether its top token is p's, each as a list over positions."""
    out = dict(between=[], **{k: dict(tv=[], kept=[], top=[]) for k in drafters})
    bar = Progress(len(seqs), label)
    for seq, start in seqs:
        p = warp(target.forward(seq[:-1], target.new_cache(len(seq) - 1))[start - 1:], 1.0)  # [n, V]
        q = {k: first_guess_rows(d, seq, start) for k, d in drafters.items()}
        out["between"] += list(tv(q["BF16"], q["int8"]))
        for k in drafters:
            out[k]["tv"] += list(tv(p, q[k]))
            out[k]["kept"] += list(np.minimum(p, q[k]).sum(-1))
            out[k]["top"] += list(q[k].argmax(-1) == p.argmax(-1))
        bar.update()
    bar.close()
    return out


def figures(greedy: dict, t1: dict) -> dict:
    """The report's figures from ``first_guesses`` on the greedy and on the T = 1 texts."""
    return dict(positions=dict(greedy=len(greedy["between"]), t1=len(t1["between"])),
                acceptance={k: dict(greedy=float(np.mean(greedy[k]["top"])), t1=float(np.mean(t1[k]["kept"])))
                            for k in ("BF16", "int8")},
                tv_bf16_int8=dict(mean=float(np.mean(t1["between"])), max=float(np.max(t1["between"]))),
                tv_to_target={k: float(np.mean(t1[k]["tv"])) for k in ("BF16", "int8")})


def file_facts(d: Path) -> dict:
    f = d / "model.safetensors"
    return dict(bytes=f.stat().st_size, sha256=hashlib.sha256(f.read_bytes()).hexdigest())


def check_bf16(d: Path) -> None:
    """ValueError unless every draft under ``d`` (``drafts_at``'s) stores its arrays in bfloat16 (bug: a revision
    after the drafts were stored as int8 compared the int8 files with themselves, and wrote a TV of 0)."""
    from ..model.safetensors_io import read_header

    for name in DRAFTS:
        dtypes = {v["dtype"] for v in read_header(d / name / "model.safetensors")[0].values()}
        if dtypes != {"BF16"}:
            raise ValueError(f"weights/{name} at that revision is not stored in bfloat16 alone "
                             f"({', '.join(sorted(dtypes))})")


def evaluate(n_prompts: int, max_new_tokens: int, rev: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        commit = drafts_at(rev, Path(tmp))  # checked before the target generates (bug: after it)
        check_bf16(Path(tmp))
        target, tok = load_target(None)
        seqs = {setting: texts(target, tok, n_prompts, max_new_tokens, temp)
                for setting, temp in (("greedy", 0.0), ("t1", 1.0))}
        res = dict(prompts_per_set=n_prompts, sets=list(PROMPT_SETS), max_new_tokens=max_new_tokens, drafts={},
                   bf16_commit=commit)
        for name in DRAFTS:
            dirs = {"BF16": Path(tmp) / name, "int8": ROOT / "weights" / name}
            drafters = {k: make_drafter(str(d), target) for k, d in dirs.items()}
            per = {s: first_guesses(target, drafters, seqs[s], f"{name}, {s} texts") for s in seqs}
            res["drafts"][name] = dict(drafter=drafters["int8"].name, files={k: file_facts(d) for k, d in dirs.items()},
                                       weight_bytes=own_model(drafters["int8"]).weight_bytes,
                                       **figures(per["greedy"], per["t1"]))
    return res


def format_report(res: dict) -> str:
    """docs/weights/int8.md from docs/weights/int8.json."""
    prov = res["provenance"]
    L = ["# The shipped drafts in int8", "",
         f"Generated from [`int8.json`](int8.json) (`{prov['command']}`, {prov['date']}, commit "
         f"{str(prov['commit'])[:7]}, {prov['machine'].get('cpus')} CPUs, NumPy {prov['machine'].get('numpy')}). The "
         "drafts' matrices are stored as int8 with a float32 scale per row and their norms in bfloat16 "
         "(`minispec/model/safetensors_io.py`; `python -m minispec.recipes.quantize_int8 SRC DST`), here against "
         f"the bfloat16 files they were made from (`weights/` at commit {res['bf16_commit'][:7]}). Every measurement "
         "committed before the conversion (`git log -- weights/smoldraft-3l-192/model.safetensors` names it) ran the "
         "bfloat16 drafts: a stored run's provenance names its commit.", "",
         f"Sample: the first {res['prompts_per_set']} prompts of each set ({', '.join(res['sets'])}), each followed by "
         f"the target's own continuation of up to {res['max_new_tokens']} tokens, greedy and at T = 1; every position "
         "of a continuation is a first guess, teacher-forced (`minispec/harness/int8_eval.py` says how). No timing.",
         "", "| draft | drafter | file, bfloat16 | file, int8 | float32 in memory |", "|---|---|---|---|---|"]
    for name, d in res["drafts"].items():
        L.append(f"| {name} | {d['drafter']} | {d['files']['BF16']['bytes'] / 1e6:.1f} MB | "
                 f"{d['files']['int8']['bytes'] / 1e6:.1f} MB | {d['weight_bytes'] / 1e6:.1f} MB |")
    L += ["", "First guesses kept by the rule (greedy: the draft's top token is the target's; T = 1: sum min(p, q), "
          "the chance of keeping it), the total variation between the two drafts' first guesses, and each one's to "
          "the target's (T = 1 texts; means over positions):", "",
          "| draft | positions, greedy / T = 1 | kept, greedy: bfloat16 / int8 | kept, T = 1: bfloat16 / int8 | "
          "TV(bfloat16, int8): mean / largest | TV to the target: bfloat16 / int8 |", "|---|---|---|---|---|---|"]
    for name, d in res["drafts"].items():
        a, t, g = d["acceptance"], d["tv_bf16_int8"], d["tv_to_target"]
        L.append(f"| {name} | {d['positions']['greedy']} / {d['positions']['t1']} | {a['BF16']['greedy']:.3f} / "
                 f"{a['int8']['greedy']:.3f} | {a['BF16']['t1']:.4f} / {a['int8']['t1']:.4f} | {t['mean']:.4f} / "
                 f"{t['max']:.4f} | {g['BF16']:.4f} / {g['int8']:.4f} |")
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minispec.harness.int8_eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bf16", help="a git revision whose weights/ holds the drafts in bfloat16")
    ap.add_argument("--report", action="store_true", help="only write int8.md again from int8.json in --out")
    ap.add_argument("--out", default="bench-out/int8", help="directory of int8.json and int8.md (default bench-out/int8; "
                                                           "the committed run: docs/weights)")
    ap.add_argument("--prompts-per-set", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    a = ap.parse_args(argv)
    if a.prompts_per_set < 1 or a.max_new_tokens < 1:
        ap.error("--prompts-per-set and --max-new-tokens must be at least 1")
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        ap.error(f"--out {out}: not a directory")
    if a.report and not (out / "int8.json").is_file():
        ap.error(f"--report: no {out / 'int8.json'} to write the page from")
    if not a.report:
        if not a.bf16:
            ap.error("--bf16 REV is needed (or --report)")
        origin = provenance()
        try:
            res = evaluate(a.prompts_per_set, a.max_new_tokens, a.bf16)
        except (ValueError, subprocess.CalledProcessError) as e:
            ap.error(f"--bf16 {a.bf16}: {e}")
        res["provenance"] = origin
        out.mkdir(parents=True, exist_ok=True)
        (out / "int8.json").write_text(compact_json(res))
    report = format_report(json.loads((out / "int8.json").read_text()))  # from the figures as stored
    (out / "int8.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
