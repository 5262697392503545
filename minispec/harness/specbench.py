"""``minispec bench specbench QUESTIONS.jsonl``: minispec's drafters on Spec-Bench's questions, on this machine.

Spec-Bench (Xia et al. 2024, arXiv 2401.07851, hemingkx/Spec-Bench) has 480 questions in six tasks of 80. A line of
its ``question.jsonl`` is ``{"question_id", "category", "turns", ["reference"]}``; the task is the category, except
that MT-bench's 80 questions carry 8 sub-categories (``MT_BENCH``), which together are the MT-bench task. An unknown
category is a task of its own. The file is other people's data: it is read where the user keeps it and never copied.

Per question, greedy, with SmolLM2's chat template: plain decoding, then each method, then plain decoding again (the
two plain runs' mean time is the question's plain time), turn by turn; a second turn sees the model's own first
answer, each method its own, as Spec-Bench's ``eval.py`` does. Every method's tokens are compared with plain
decoding's (greedy identity as ../shared/design.md defines it): a difference is recorded with the target's top-2
logit margin where it happens.

Methods (``--methods``): ``prompt-lookup``, ``eagle`` (the shipped head, a chain), ``eagle-tree`` (its dynamic tree),
``draft`` (the shipped draft model), ``layer-skip``; each with ``k="auto"`` (trees: ``--tree auto``), its policy
built, and its cost model calibrated, outside the timed runs (``eagle-tree``: the automatic dynamic tree, as
``minispec generate --tree auto``). Peers (``--peers``, specbench_peers.py): transformers'
plain decoding, prompt lookup and assisted generation, and llama.cpp's plain decoding and prompt lookup (on a float32
GGUF of the same weights, ``--gguf``), timed in the same alternation, each reported against minispec's plain decoding
and against its own engine's plain mode. A peer that is not installed is skipped, and the report says so.

Each question's results are appended to ``--out`` (JSON lines; the first line holds the settings, with the questions
file's SHA-256) as soon as it is done, so an interrupted run started again with the same command runs only the
questions the file lacks.

Per method and task: the speedup (the task's tokens per second over plain decoding's, both summed over its
questions), the mean accepted tokens per target pass (tau, Spec-Bench's "mean accepted tokens"), tokens per second,
and the interquartile range of the per-question speedups (the printed table shows the speedup and tau, and plain
decoding's tokens per second; ``--json`` keeps every figure). A peer mode is also reported over its own engine's
plain mode ("transformers plain", "llama.cpp plain"). Each engine runs with its own thread settings (specbench_peers.py).
No method can beat plain decoding by more than its tokens per target pass (``measure.speedup_bound``): a task's
speedup above its tau is marked noise in the printed table, and each cell counts the questions whose own speedup was
above their own tokens per pass (``noise``; a peer's engine reports no passes, so its figures have no bound).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..generate import generate
from ..model.kernel import default_kernel
from ..recipes.fetch import shipped_draft, shipped_eagle
from ..sampling import is_integer
from .check import TIE_MARGIN, margin
from .command import (
    MODEL_HELP,
    check_json_path,
    load_target,
    markdown_table,
    noise_count,
    noise_marks,
    noise_note,
    print_and_store,
)
from .measure import busy_words, others_load, side_by_side, speedup_bound
from .progress import Progress
from .specbench_figures import cell, engine_and_mode, plot
from .specbench_peers import PEERS, llama_cpp_modes, peers_installed, transformers_modes, version

MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
METHODS = ("prompt-lookup", "eagle", "eagle-tree", "draft", "layer-skip")
DEFAULT_METHODS = "prompt-lookup,eagle,eagle-tree,draft"


@dataclass(frozen=True)
class Question:
    question_id: int
    category: str
    turns: tuple

    @property
    def task(self) -> str:
        return "mt_bench" if self.category in MT_BENCH else self.category  # "mt_bench" itself is one too


def read_questions(path) -> list[Question]:
    """Every question of a Spec-Bench-format file; a malformed line is refused with its number and what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file (Spec-Bench's question.jsonl; see docs/specbench.md)")
    out, seen = [], {}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}): a JSON lines file is expected") from None
    for n, line in enumerate(text.split("\n"), 1):  # (bug: splitlines() also cut at U+2028, which JSON strings may hold)
        if not line.strip():
            continue
        where = f"{path}, line {n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{where}: a JSON object is expected, got {type(row).__name__}")
        qid, category, turns = row.get("question_id"), row.get("category"), row.get("turns")
        if not is_integer(qid):
            raise ValueError(f"{where}: question_id must be an integer, got {qid!r}")
        if not isinstance(category, str) or not category:
            raise ValueError(f"{where}: category must be a non-empty string, got {category!r}")
        if not (isinstance(turns, list) and turns and all(isinstance(t, str) and t for t in turns)):
            raise ValueError(f"{where}: turns must be a non-empty list of non-empty strings")
        if qid in seen:
            raise ValueError(f"{where}: question_id {qid} again (first on line {seen[qid]})")
        seen[qid] = n
        out.append(Question(int(qid), category, tuple(turns)))
    if not out:
        raise ValueError(f"{path}: no questions")
    return out


def select(questions: list[Question], per_task: int | None) -> list[Question]:
    """The first ``per_task`` questions of each task by question_id (all of them for None); MT-bench's spread over
    its sub-categories in turn, so that 8 questions are one of each. Tasks in Spec-Bench's order, then any other."""
    by_task: dict[str, list[Question]] = {}
    for q in sorted(questions, key=lambda q: q.question_id):
        by_task.setdefault(q.task, []).append(q)
    out = []
    for task in [t for t in TASKS if t in by_task] + sorted(t for t in by_task if t not in TASKS):
        qs = by_task[task]
        if task == "mt_bench" and per_task is not None:
            categories = [c for c in MT_BENCH if any(q.category == c for q in qs)] + \
                sorted({q.category for q in qs} - set(MT_BENCH))  # "mt_bench" itself, if a file says so
            groups = [[q for q in qs if q.category == c] for c in categories]
            qs = [g[i] for i in range(max(map(len, groups), default=0)) for g in groups if i < len(g)]
        out += qs[:per_task] if per_task is not None else qs
    return out


def make_method(name: str, target):
    """-> (drafter, tree): the method's drafter and whether it drafts a tree."""
    from ..drafters import make_drafter

    spec = {"eagle": shipped_eagle(), "eagle-tree": shipped_eagle(), "draft": shipped_draft()}.get(name, name)
    if spec is None:
        raise ValueError(f"--drafters {name}: its weights are not in weights/ (a clean clone has them)")
    return make_drafter(spec, target), name == "eagle-tree"


class Runner:
    """One question at a time: plain decoding, each method and each peer mode side by side, turn by turn (module
    docstring). ``peers``: {name: ids -> new ids} (specbench_peers.py)."""

    def __init__(self, target, tok, methods: dict, max_new_tokens: int, peers: dict | None = None):
        self.target, self.tok, self.methods, self.max_new_tokens = target, tok, methods, max_new_tokens
        self.peers = peers or {}

    def ids(self, q: Question, answers: list[str]) -> list[int]:
        messages = []
        for turn, answer in zip(q.turns, answers + [None]):
            messages.append({"role": "user", "content": turn})
            if answer is not None:
                messages.append({"role": "assistant", "content": answer})
        return self.tok.encode(self.tok.apply_chat_template(messages))

    def speculative(self, name: str, ids: list[int]):
        from ..policy import k_policy, shape_policy
        from ..speculative import speculative_generate, tree_speculative_generate

        drafter, tree = self.methods[name]
        if tree:
            policy = shape_policy("auto", self.target, drafter, True)  # calibrated here, outside the timed run
            return lambda: tree_speculative_generate(self.target, drafter, ids, self.max_new_tokens, shape=policy,
                                                     stop_ids=self.tok.eos_ids)
        policy = k_policy("auto", self.target, drafter, learn=True)
        return lambda: speculative_generate(self.target, drafter, ids, self.max_new_tokens, k=policy,
                                            stop_ids=self.tok.eos_ids)

    @staticmethod
    def peer(name: str, fn, ids: list[int]):
        def run():
            try:
                return Peer(fn(ids))
            except Exception as e:  # another engine's failure, named with the peer and the prompt's length
                raise RuntimeError(f"peer {name} failed on a prompt of {len(ids)} tokens: {e}") from e
        return run

    def question(self, q: Question, done=lambda: None) -> dict:
        plain = dict(tokens=0, seconds=0.0)
        rows = {m: dict(tokens=0, seconds=0.0, target_passes=0, identical=True, differences=[])
                for m in [*self.methods, *self.peers]}
        answers = {m: [] for m in ["plain", *self.methods, *self.peers]}
        for turn in range(len(q.turns)):
            runs = {m: self.speculative(m, self.ids(q, answers[m])) for m in self.methods}
            runs.update({m: self.peer(m, fn, self.ids(q, answers[m])) for m, fn in self.peers.items()})
            plain_ids = self.ids(q, answers["plain"])
            tokens, rate, results = side_by_side(
                lambda ids=plain_ids: generate(self.target, ids, self.max_new_tokens, stop_ids=self.tok.eos_ids),
                list(runs.values()), done)
            plain["tokens"] += len(tokens)
            plain["seconds"] += len(tokens) / rate
            answers["plain"].append(self.tok.decode(tokens, skip_special_tokens=True))
            for m, (res, seconds) in zip(runs, results):
                r = rows[m]
                r["tokens"] += len(res.tokens)
                r["seconds"] += seconds
                r["target_passes"] += res.stats.rounds if res.stats is not None else 0
                answers[m].append(self.tok.decode(res.tokens, skip_special_tokens=True))
                same_prompt = answers[m][:-1] == answers["plain"][:-1]  # its earlier turns' answers were plain's
                if res.tokens != tokens and same_prompt:
                    j = next(i for i, (a, b) in enumerate(zip(res.tokens + [-1], tokens + [-2])) if a != b)
                    r["identical"] = False
                    r["differences"].append(dict(turn=turn, position=j, margin=margin(self.target, plain_ids + tokens[:j])))
                elif res.tokens != tokens:
                    r["identical"] = False  # its own earlier answer differed: this turn's prompt is another
        return dict(question_id=q.question_id, category=q.category, task=q.task, plain=plain,
                    methods={m: rows[m] for m in self.methods}, peers={m: rows[m] for m in self.peers})


@dataclass
class Peer:
    """A peer's tokens, shaped like a run's result (no statistics: its engine does not report them)."""

    tokens: list
    stats: object = None


def resume(out: Path, settings: dict) -> dict[int, dict]:
    """The questions ``out`` already holds, by question_id; a file made with other settings, or not made by this
    command, is refused. A last line cut short by an interruption is dropped (its question runs again), and the file
    is rewritten whole, one result a line, before anything is appended."""
    if out.exists() and not out.is_file():
        raise ValueError(f"--out {out}: not a file")
    if not out.exists() or not out.read_text().strip():
        return {}
    lines = [x for x in out.read_text().splitlines() if x.strip()]
    try:
        head = json.loads(lines[0])
    except json.JSONDecodeError:
        head = None
    if not isinstance(head, dict) or "settings" not in head:
        raise ValueError(f"--out {out}: its first line is not this command's settings: not a file it wrote")
    if head["settings"] != settings:
        raise ValueError(f"--out {out} holds a run with other settings ({head['settings']}); give another --out, "
                         "or the same settings to resume it")
    rows = {}
    for n, line in enumerate(lines[1:], 2):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if n < len(lines):
                raise ValueError(f"--out {out}: result {n - 1} is not JSON, and not the last: the file is damaged") from None
            lines = lines[:-1]  # an interrupted write: that question runs again
            break
        if not (isinstance(row, dict) and all(k in row for k in ("question_id", "task", "plain", "methods", "peers"))):
            raise ValueError(f"--out {out}: result {n - 1} lacks a question's fields (question_id, task, plain, methods, "
                             "peers): not a file this command wrote")  # (bug: only question_id was asked for, and a
            # row without the rest crashed the summary)
        rows[row["question_id"]] = row
    out.write_text("\n".join(lines) + "\n")
    return rows


def rate(entries: list[dict]) -> float:
    return sum(e["tokens"] for e in entries) / sum(e["seconds"] for e in entries)


def cells(rows: list[dict], get, base) -> dict:
    """{task (and "overall"): figures} of the entries ``get(row)`` against the baselines ``base(row)``; ``noise``: the
    questions whose speedup was above their tokens per target pass (none where the passes are not known)."""
    tasks = [t for t in TASKS if any(r["task"] == t for r in rows)] + sorted({r["task"] for r in rows} - set(TASKS))
    out = {}
    for task in [*tasks, "overall"]:
        rs = [r for r in rows if task in ("overall", r["task"])]
        mine, ref = [get(r) for r in rs], [base(r) for r in rs]  # every run emits a token: no rate divides by 0
        passes = sum(e.get("target_passes", 0) for e in mine)
        per_q = [rate([e]) / rate([b]) for e, b in zip(mine, ref)]
        bounds = [speedup_bound(e["tokens"], e.get("target_passes", 0)) for e in mine]
        out[task] = dict(speedup=rate(mine) / rate(ref), tau=sum(e["tokens"] for e in mine) / passes if passes else None,
                         tokens_per_s=rate(mine), questions=len(rs),
                         iqr=[float(np.percentile(per_q, 25)), float(np.percentile(per_q, 75))],
                         noise=noise_count(per_q, bounds))
    return out


def identity(rows: list[dict], side: str, name: str) -> dict:
    """Greedy identity with plain decoding: the questions identical, each first difference with its margin, and (for
    minispec's methods) the ``failures``: differences at a margin of TIE_MARGIN or more, not near-ties."""
    differing = [dict(question_id=r["question_id"], **d) for r in rows for d in r[side][name]["differences"]]
    return dict(identical=sum(r[side][name]["identical"] for r in rows), questions=len(rows), differences=differing,
                failures=[d for d in differing if d["margin"] >= TIE_MARGIN])


def summarise(rows: list[dict], methods: list[str], peers: list[str]) -> dict:
    """Per method: {tasks: {task: speedup over plain decoding, tau, tokens/s, IQR}} and greedy identity; per peer
    mode the same against minispec's plain decoding, and (``own``) against its own engine's plain mode."""
    out = dict(plain=dict(tasks=cells(rows, lambda r: r["plain"], lambda r: r["plain"])), methods={}, peers={})
    for m in methods:
        out["methods"][m] = dict(tasks=cells(rows, lambda r, m=m: r["methods"][m], lambda r: r["plain"]),
                                 **identity(rows, "methods", m))
    for m in peers:
        own = engine_and_mode(m)[0] + " plain"  # "llama.cpp prompt-lookup" -> "llama.cpp plain"
        out["peers"][m] = dict(tasks=cells(rows, lambda r, m=m: r["peers"][m], lambda r: r["plain"]),
                               own=cells(rows, lambda r, m=m, own=own: r["peers"][m], lambda r, own=own: r["peers"][own])
                               if own in peers else None, **identity(rows, "peers", m))
    return out


def honest_cell(c: dict) -> str:
    """A method's cell, the speedup and tau (``specbench_figures.cell``), with " noise" where the speedup is above tau
    (the task's tokens over its target passes: the most it can be) and the questions whose own speedup was above theirs:
    "1.05x noise (1 of 8) (1.00)"."""
    marks = noise_marks(c["speedup"], c.get("tau"), c.get("noise", 0), c["questions"])
    return f"{c['speedup']:.2f}x{marks}" + (f" ({c['tau']:.2f})" if c.get("tau") else "") if marks else cell(c)


def report(res: dict) -> str:
    s = res["summary"]
    tasks = list(s["plain"]["tasks"])
    rows = [["plain decoding (tokens/s)", *(f"{c['tokens_per_s']:.1f}" for c in s["plain"]["tasks"].values())]]
    rows += [[m, *(honest_cell(c) for c in v["tasks"].values())] for m, v in s["methods"].items()]
    for m, v in s["peers"].items():  # a peer: over minispec's plain, and (in brackets) over its own engine's plain
        own = v["own"] or {}
        mine = m == engine_and_mode(m)[0] + " plain"  # its own plain mode: no bracket (bug: "(1.00x)" in every cell)
        rows.append([m if mine else f"{m} (x over its own plain)",
                     *(cell(c) + (f" ({own[t]['speedup']:.2f}x)" if t in own and not mine else "") for t, c in v["tasks"].items())])
    rows += [[f"{p}: skipped, {why}", *("-" for _ in tasks)] for p, why in res.get("skipped", {}).items()]  # its row
    # kept, with the reason (issue 48)
    lines = markdown_table(f"Spec-Bench on this machine: speedup over minispec's plain decoding (tau: mean accepted "
                           f"tokens per target pass), greedy, {res['settings']['max_new_tokens']} new tokens per turn, "
                           f"{res['questions']} questions", ["method", *tasks], rows)
    lines.append("")
    for side in ("methods", "peers"):
        for m, v in s[side].items():
            diffs = "; ".join(f"question {d['question_id']} turn {d['turn'] + 1} at token {d['position']} (top-2 margin "
                              f"{d['margin']:.3g})" for d in v["differences"][:5])
            lines.append(f"- {m}: greedy output identical to minispec's plain decoding on {v['identical']} of "
                         f"{v['questions']} questions" + (f"; first differences: {diffs}" if diffs else "")
                         + (f"; FAILED: {len(v['failures'])} differ at a top-2 margin of {TIE_MARGIN} or more (not a "
                            "near-tie)" if side == "methods" and v["failures"] else ""))
    lines.append(f"- peers: {res['peers_note']}")
    overall = [v["tasks"]["overall"] for v in s["methods"].values() if "overall" in v["tasks"]]  # each question once
    noise = noise_note(sum(c.get("noise", 0) for c in overall), sum(c["questions"] for c in overall),
                       "runs (a method on a question)")
    return "\n".join(lines + noise)


VERSIONS = {"transformers": ("transformers", "torch"), "llama.cpp": ("llama-cpp-python",)}  # distributions, not module names


def peers_to_run(asked: list[str], model, gguf) -> tuple[list[str], dict]:
    """-> (the asked peers that will run, {peer: why it is skipped}). llama.cpp needs a GGUF: ``gguf``, or for the
    default model the float32 GGUF written from the fetched one."""
    installed = peers_installed(asked)
    skipped = {p: "not installed (" + ("pip install 'minispec[parity]'" if p == "transformers" else
                                        "pip install llama-cpp-python: it builds from source, docs/specbench.md says "
                                        "how long that took here") + ")" for p in asked if p not in installed}
    if "llama.cpp" in installed and model is not None and gguf is None:
        skipped["llama.cpp"] = "no GGUF of --model given (--gguf)"
    return [p for p in asked if p not in skipped], skipped


def drafter_weights(methods: list[str]) -> dict:
    """{method: the first 16 hex digits of the SHA-256 of its shipped weights' checksum file} for the methods that read
    weights in weights/."""
    dirs = {"eagle": shipped_eagle, "eagle-tree": shipped_eagle, "draft": shipped_draft}
    return {m: hashlib.sha256((Path(dirs[m]()) / "SHA256SUMS").read_bytes()).hexdigest()[:16] for m in methods
            if m in dirs and dirs[m]() is not None and (Path(dirs[m]()) / "SHA256SUMS").is_file()}


def import_peer(name: str, make) -> dict:
    """A peer's modes, ``make()``; a peer whose packages are found but do not import is refused by name (bug: its modes
    were {}, and the report listed it among the peers that ran)."""
    try:
        return make()
    except ImportError as e:
        raise RuntimeError(f"peer {name}: its packages are installed but do not import ({e}); mend them, or leave it "
                           "out (--peers)") from None


def longest_context(questions: list[Question], tok, max_new_tokens: int) -> int:
    """The most positions a turn of these questions can take: its prompt, with every earlier answer at its longest
    (``max_new_tokens`` each, and a few tokens of template), and its own answer. A peer's context is sized by it."""
    runner = Runner(None, tok, {}, max_new_tokens)
    return max(len(runner.ids(q, [""] * (len(q.turns) - 1))) + len(q.turns) * (max_new_tokens + 8) for q in questions)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="minispec bench specbench", description=__doc__.splitlines()[0])
    ap.add_argument("questions", help="Spec-Bench's question.jsonl (for example ../shared/external_prompts/"
                                      "spec_bench_question.jsonl); read in place, never copied")
    ap.add_argument("--per-task", type=int, help="the first N questions of each task (default: every question of "
                                                 "the file; Spec-Bench has 480)")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="new tokens per turn (default 128)")
    ap.add_argument("--drafters", "--methods", dest="methods", default=DEFAULT_METHODS, help=f"comma-separated, of {', '.join(METHODS)} "
                                                              f"(default {DEFAULT_METHODS})")
    ap.add_argument("--model", help=MODEL_HELP + "; minispec's CPU kernel: --kernel numpy|numba, as for every bench "
                                                  "subcommand")
    ap.add_argument("--out", default="specbench_results.jsonl",
                    help="the per-question results, appended as each question ends (default specbench_results.jsonl); "
                         "the same command again resumes it")
    ap.add_argument("--peers", default=",".join(PEERS),
                    help=f"other engines in the same run, comma-separated, of {', '.join(PEERS)} (default: both; each "
                         "skipped, and said, when not installed), or none")
    ap.add_argument("--gguf", help="the GGUF llama.cpp runs (default, for the default model: SmolLM2's GGUF written in "
                                   "float32 once, under the cache; another --model needs its own)")
    ap.add_argument("--json", help="also write the summary to this JSON file")
    a = ap.parse_args(argv)
    if a.per_task is not None and a.per_task < 1:
        ap.error(f"--per-task {a.per_task}: at least 1")
    if a.max_new_tokens < 1:
        ap.error(f"--max-new-tokens {a.max_new_tokens}: at least 1")
    names = [m.strip() for m in a.methods.split(",") if m.strip()]
    bad = [m for m in names if m not in METHODS]
    if bad or not names or len(set(names)) != len(names):
        ap.error(f"--drafters {a.methods}: give distinct names of {', '.join(METHODS)}")
    asked = [] if a.peers.strip() == "none" else [p.strip() for p in a.peers.split(",") if p.strip()]
    if not asked and a.peers.strip() != "none" or any(p not in PEERS for p in asked) or len(set(asked)) != len(asked):
        ap.error(f"--peers {a.peers}: give distinct names of {', '.join(PEERS)}, or none")
    if a.gguf is not None and not Path(a.gguf).is_file():
        raise FileNotFoundError(f"--gguf {a.gguf}: no such file (expected a .gguf file llama.cpp can read)")
    check_json_path(a.json)
    out = Path(a.out)
    if not out.resolve().parent.is_dir():
        raise ValueError(f"--out {out}: directory {out.resolve().parent} does not exist")
    paths = {Path(a.questions).resolve(): "the questions file", out.resolve(): "--out"}
    if a.json and Path(a.json).resolve() in paths or out.resolve() == Path(a.questions).resolve():
        raise ValueError(f"--json and --out must be files of their own, not {' or '.join(paths.values())}")
    if a.json and Path(a.json).resolve().with_suffix(".png") in paths:  # (bug: the plot beside --json overwrote it)
        raise ValueError(f"--json {a.json}: its plot, {Path(a.json).with_suffix('.png')}, would overwrite "
                         f"{paths[Path(a.json).resolve().with_suffix('.png')]}")
    questions = select(read_questions(a.questions), a.per_task)  # refused before the model loads
    missing = [m for m in names if m in ("eagle", "eagle-tree") and shipped_eagle() is None
               or m == "draft" and shipped_draft() is None]
    if missing:
        raise ValueError(f"--drafters: {', '.join(missing)}: its weights are not in weights/ (a clean clone has them)")
    running, skipped = peers_to_run(asked, a.model, a.gguf)
    if a.gguf is not None and "llama.cpp" not in running:
        raise ValueError(f"--gguf {a.gguf}: llama.cpp is not among the peers that run "
                         f"({skipped.get('llama.cpp', 'not asked for in --peers')})")
    settings = dict(questions=Path(a.questions).name, sha256=hashlib.sha256(Path(a.questions).read_bytes()).hexdigest(),
                    per_task=a.per_task, max_new_tokens=a.max_new_tokens, methods=names, model=a.model,
                    kernel=default_kernel(),  # set by --kernel, which every bench subcommand takes (bench.kernel_from)
                    peers=",".join(running) or "none",
                    gguf=None if a.gguf is None else dict(name=Path(a.gguf).name, bytes=Path(a.gguf).stat().st_size),
                    weights=drafter_weights(names),  # (bug: a resume after a new head or a peer's upgrade mixed two
                    peer_versions={k: v for k, v in version().items() if any(k in VERSIONS[p] for p in running)})  # setups)
    done = resume(out, settings)
    target, tok = load_target(a.model)
    peers = {}
    if "transformers" in running:
        peers.update(import_peer("transformers", lambda: transformers_modes(target.path, shipped_draft(), a.max_new_tokens,
                                                                            tok.eos_ids)))
    if "llama.cpp" in running:
        from ..recipes.gguf_float32 import smollm2_float32_gguf

        gguf = a.gguf or smollm2_float32_gguf(log=lambda m: print(m, file=sys.stderr))
        n_ctx = -(-(longest_context(questions, tok, a.max_new_tokens) + 64) // 256) * 256  # checked before the run
        peers.update(import_peer("llama.cpp", lambda: llama_cpp_modes(gguf, a.max_new_tokens, tok.eos_ids, n_ctx=n_ctx)))
    versions = version()
    note = "; ".join([*(f"{p}: {', '.join(f'{k} {v}' for k, v in versions.items() if k in VERSIONS[p])}" for p in running),
                      *(f"{p}: skipped, {why}" for p, why in skipped.items())]) or "none asked for (--peers none)"
    runner = Runner(target, tok, {m: make_method(m, target) for m in names}, a.max_new_tokens, peers)
    todo = [q for q in questions if q.question_id not in done]
    if done:
        print(f"[resuming {out}: {len(done)} of {len(questions)} questions done]", file=sys.stderr)
    load = dict(start=others_load())  # the other processes' load, as the run begins and as it ends (design.md: quiet)
    bar = Progress(sum(len(q.turns) for q in todo) * (len(names) + len(peers) + 2), "bench specbench")
    if not out.exists() or not done:
        out.write_text(json.dumps(dict(settings=settings)) + "\n")
    for q in todo:
        row = runner.question(q, bar.update)
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        done[q.question_id] = row
    bar.close()
    rows = [done[q.question_id] for q in questions]
    load["end"] = others_load()
    res = dict(settings=settings, questions=len(rows), summary=summarise(rows, names, list(peers)), peers_note=note,
               skipped=skipped,
               load=load, busy=busy_words(*load.values()).strip("; ") or None)  # (bug: the last minute's
    # load alone, and no figure)
    print_and_store(report(res), res, a.json, "minispec bench specbench", argv)
    failed = {m: v["failures"] for m, v in res["summary"]["methods"].items() if v["failures"]}
    if a.json:  # the plot of speedup by task beside it, from the stored summary (its provenance names the machine)
        png = plot(json.loads(Path(a.json).read_text()), Path(a.json).with_suffix(".png"))
        print(f"[plot: {png}]" if png else "[no plot: matplotlib is not installed (the plot extra)]", file=sys.stderr)
    if failed:  # design.md's greedy identity: a difference at a margin of TIE_MARGIN or more is a failure
        print(f"[greedy identity FAILED: {', '.join(f'{m} on {len(d)} turns' for m, d in failed.items())}, each first "
              f"different at a top-2 logit margin of {TIE_MARGIN} or more]", file=sys.stderr)
        return 1
    return 0
