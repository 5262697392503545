"""The latency study behind ``minispec bench``: acceptance, speedup, verify cost and memory per K.

Everything is measured in ONE run, with the plain autoregressive baseline interleaved: for each
prompt, plain decoding runs before and after the speculative configurations, and each speedup is
the configuration's tokens per second over plain decoding's on that prompt (plain's tokens over the mean
time of the two bracketing runs): the ratio of their times where both make the same tokens, and still
fair where an end-of-sequence token at T = 1 makes them differ. Medians and quartiles are over prompts.
The Leviathan et al. model predicts the speedup from the measured acceptances, cost ratio c and
verify-cost ratio r(K+1), with the first guess accepted with probability a and each later one with b
given the one before (b = a in the paper; policy/acceptance.py's ``predicted_speedup``):

    speedup(K) = (1 + a (1 - b^K) / (1 - b)) / (K c + r(K+1))

No run can beat plain decoding by more than its tokens per target pass (``measure.speedup_bound``): a prompt's
speedup above that is noise (the machine's load changed between the timings), counted per configuration and prompt set
(``noise``), and a median above the median of its runs' tokens per pass (``speedup_bound``) is marked noise in the
report. The other processes' load is recorded as the study begins and ends; a busy machine is named in the report.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..drafters import as_drafter
from ..drafters.protocol import HasModel, ReportsMemory, has
from ..generate import generate
from ..model.weights import float_copy
from ..policy import forward_times, k_policy, shape_policy
from ..policy.acceptance import predicted_speedup
from ..policy.timing import guess_time
from ..speculative import speculative_generate, tree_speculative_generate
from .command import busy_line, median_bound, noise_count, noise_marks, noise_note
from .measure import SETTINGS, compact_json, kv_bytes_per_token, others_load, peak_rss_bytes, side_by_side, speedup_bound
from .progress import Progress
from .prompts import PROMPT_SETS, load_prompts
from .provenance import machine_info, provenance


def first_and_next(accepted: list, drafted: list) -> tuple[float, float | None]:
    """(a, b) from per-position counts: a = P(position 1 accepted); b = P(position j accepted | j-1 was),
    pooled over j >= 2 (rounds reaching j-1 accepted and drafting j: accepted[j-1] * drafted[j] / drafted[j-1])."""
    a = accepted[0] / drafted[0] if drafted and drafted[0] else 0.0
    tried = sum(accepted[j - 1] * drafted[j] / drafted[j - 1] for j in range(1, len(drafted)) if drafted[j - 1])
    return a, (sum(accepted[1:]) / tried if tried else None)


@dataclass
class Config:
    """One configuration of the study (a drafter, a K: an int, "auto" or "tree", a setting) and what its runs
    measured, over all prompts and per prompt set."""
    drafter: object
    k: int
    setting: str  # "greedy" or "T=1"
    speedups: list = field(default_factory=list)
    bounds: list = field(default_factory=list)  # each run's tokens per target pass: the most its speedup can be
    tok_s: list = field(default_factory=list)
    accepted: int = 0
    drafted: int = 0
    tokens: int = 0
    rounds: int = 0
    pos_acc: list = field(default_factory=list)
    pos_drafted: list = field(default_factory=list)
    prompt_sets: dict = field(default_factory=dict)  # set -> [accepted, drafted, speedups, tokens, rounds, bounds]

    def record(self, res, seconds: float, plain_rate: float, prompt_set: str) -> None:
        """Add one run of this configuration (its result, timed at ``seconds``) on a prompt of ``prompt_set``, next to
        plain decoding's ``plain_rate`` tokens/s on the same prompt."""
        s, rate = res.stats, len(res.tokens) / seconds
        bound = speedup_bound(len(res.tokens), s.rounds)
        self.speedups.append(rate / plain_rate)
        self.bounds.append(bound)
        self.tok_s.append(rate)
        self.accepted += s.accepted
        self.drafted += s.drafted
        self.tokens += len(res.tokens)
        self.rounds += s.rounds
        for j, (a_, d_) in enumerate(zip(s.position_accepted, s.position_drafted)):
            while len(self.pos_acc) <= j:
                self.pos_acc.append(0)
                self.pos_drafted.append(0)
            self.pos_acc[j] += a_
            self.pos_drafted[j] += d_
        ps = self.prompt_sets.setdefault(prompt_set, [0, 0, [], 0, 0, []])
        ps[0] += s.accepted
        ps[1] += s.drafted
        ps[2].append(rate / plain_rate)
        ps[3] += len(res.tokens)
        ps[4] += s.rounds
        ps[5].append(bound)


def run_study(target, drafters, tok, *, ks=(1, 2, 3, 4, 5, 6, 7, 8), settings=("greedy", "T=1"), prompts_per_set=4,
              max_new_tokens=96, prompt_sets=PROMPT_SETS, slow_ks=None, progress=True, peer=None,
              forward_ns=tuple(range(1, 17)), auto=True, tree=True, log=print) -> dict:
    """The whole study; returns a JSON-able dict. ``drafters``: name -> drafter. ``slow_ks`` limits the K
    values run for the slow, instructive drafters ('self', the target drafting for itself, and layer skip).
    Its steps: the costs (``study_costs``; then the calibrations, ``calibrate_once``), the configurations
    (``configurations``), every prompt run side by side with plain decoding (``run_prompts``), then a row per
    configuration (``summary_row``), the best K per drafter (``best_rows``) and the memory (``memory_rows``)."""
    t_start, origin, load_before = time.perf_counter(), provenance(), others_load()
    drafters = {name: as_drafter(d, target) for name, d in drafters.items()}
    prompts = {s: load_prompts(s, tok, prompts_per_set) for s in prompt_sets}
    costs = study_costs(target, drafters, prompts[prompt_sets[0]][0], forward_ns)
    if auto or tree:  # calibrate once, outside the timed runs (the cost model caches it per model)
        calibrate_once(target, drafters, auto, tree)
    t, r, c = costs["t"], costs["r"], costs["c"]
    log(f"target step {1e3 * t[1]:.2f} ms; r(2) = {r[2]:.2f}, r(5) = {r.get(5, float('nan')):.2f}; c = "
        + ", ".join(f"{n} {v:.3f}" for n, v in c.items()))
    configs = configurations(target, drafters, settings, ks, slow_ks, auto, tree)
    bar = Progress(sum(len(v) for v in prompts.values()) * (len(configs) + 2 * len(settings)), "study", quiet=not progress)
    baseline = run_prompts(target, configs, prompts, settings, max_new_tokens, tok.eos_ids, bar)
    bar.close()
    rows = [summary_row(cfg, next(n for n, d in drafters.items() if d is cfg.drafter), c, r) for cfg in configs]
    used_ctx = int(np.mean([len(p) for v in prompts.values() for p in v])) + max_new_tokens
    result = dict(
        machine=machine_info(), target=target.name, kernel=target.kernel, context_for_costs=costs["context"],
        max_new_tokens=max_new_tokens, prompts_per_set=prompts_per_set, prompt_sets=list(prompt_sets), ks=list(ks),
        settings=list(settings), target_step_ms=1e3 * t[1], forward_ms={n: 1e3 * v for n, v in t.items()}, r=r,
        draft_step_ms={n: 1e3 * v for n, v in costs["step"].items()}, c=c,
        baseline_tok_s={s: float(np.median(v)) for s, v in baseline.items()},
        baseline_tok_s_iqr={s: [float(np.quantile(v, 0.25)), float(np.quantile(v, 0.75))] for s, v in baseline.items()},
        rows=rows, best=best_rows(rows, settings, drafters),
        memory=dict(models=memory_rows(target, drafters, used_ctx), used_context=used_ctx, peak_rss_bytes=peak_rss_bytes()),
    )
    if peer is not None:
        result["peer"] = peer(prompts, max_new_tokens)
    result["seconds"] = time.perf_counter() - t_start
    result["load_before"], result["load_after"] = load_before, others_load()  # the other processes' load average
    result["provenance"] = origin
    return result


def calibrate_once(target, drafters: dict, auto: bool, tree: bool) -> None:
    """Every calibration the automatic policies of the timed runs read (the target's t(n), each drafter's guesses and
    tree levels), measured before those runs by building the policies as the runs build them (``k_policy``,
    ``shape_policy``): the cost model keeps each calibration in memory, so the runs find them there.
    (bug: it calibrated t(n) up to the study's largest K, where K = auto reads n up to its own k_max + 1, and never
    the tree levels: both were measured inside the first timed run of each)"""
    for d in drafters.values():
        if auto:
            k_policy("auto", target, d)
        if tree:
            shape_policy("auto", target, d)


def study_costs(target, drafters: dict, prompt, forward_ns) -> dict:
    """The verify-cost curve and the draft step costs at a fixed context (``prompt`` repeated): t(n) in seconds,
    r(n) = t(n) / t(1), each drafter's seconds per guess (step) and c = step / t(1), and the context."""
    context = min(256, target.cfg.max_position_embeddings // 2)
    t = forward_times(target, forward_ns, context=context, repeats=10)
    fixed_ctx = list(np.resize(np.asarray(prompt), context))
    step = {name: guess_time(d, fixed_ctx) for name, d in drafters.items()}
    return dict(t=t, r={n: t[n] / t[1] for n in forward_ns}, step=step, c={name: s / t[1] for name, s in step.items()},
                context=context)


def runs_the_target(drafter, target) -> bool:
    """Whether the drafter's model is the target's own weights (the target itself, or layer skip's first layers):
    a slow drafter (each guess a large part of a target step) that adds no weights to memory."""
    return has(drafter, HasModel) and drafter.model.embed is target.embed


def configurations(target, drafters: dict, settings, ks, slow_ks, auto: bool, tree: bool) -> list[Config]:
    """Per setting and drafter: each K (``slow_ks``, when given, for a drafter that ``runs_the_target``: 'self' and
    layer skip), then K = auto and a tree."""
    configs = []
    for setting in settings:
        for d in drafters.values():
            slow = runs_the_target(d, target)
            for k in (slow_ks if slow and slow_ks is not None else ks):
                configs.append(Config(d, k, setting))
            if auto:
                configs.append(Config(d, "auto", setting))
            if tree:
                configs.append(Config(d, "tree", setting))
    return configs


def run_prompts(target, configs: list[Config], prompts: dict, settings, max_new_tokens: int, stop, bar) -> dict:
    """Every prompt, per setting: plain decoding before and after every configuration of the setting
    (``side_by_side``), each configuration's run recorded in it -> {setting: plain decoding's tokens/s per prompt}."""
    baseline = {s: [] for s in settings}
    for setting in settings:
        w = dict(temperature=SETTINGS[setting])
        todo = [cfg for cfg in configs if cfg.setting == setting]
        for pset, plist in prompts.items():
            for i, p in enumerate(plist):
                seed = 1000 * i + 7

                def run(cfg, p=p, seed=seed, w=w):
                    if cfg.k == "tree":
                        return tree_speculative_generate(target, cfg.drafter, p, max_new_tokens, shape="auto", seed=seed,
                                                         stop_ids=stop, **w)
                    return speculative_generate(target, cfg.drafter, p, max_new_tokens, k=cfg.k, seed=seed, stop_ids=stop, **w)

                _, plain_rate, results = side_by_side(
                    lambda p=p, seed=seed, w=w: generate(target, p, max_new_tokens, seed=seed, stop_ids=stop, **w),
                    [lambda cfg=cfg: run(cfg) for cfg in todo], done=bar.update)
                baseline[setting].append(plain_rate)
                for cfg, (res, dt) in zip(todo, results):
                    cfg.record(res, dt, plain_rate, pset)
    return baseline


def summary_row(cfg: Config, name: str, c: dict, r: dict) -> dict:
    """A configuration's row of the result: acceptance (overall, first guess a, later guesses b, per position),
    tokens per pass, speedup with its quartiles, the cost model's prediction (fixed K), and the same per prompt set;
    beside each speedup, how many of its runs were faster than their tokens per pass allow (``noise``, of ``runs``)
    and the most its median can honestly be (``speedup_bound``)."""
    a = cfg.accepted / cfg.drafted if cfg.drafted else 0.0
    a1, b = first_and_next(cfg.pos_acc, cfg.pos_drafted)
    sp = np.array(cfg.speedups)
    return dict(
        drafter=name, k=cfg.k, setting=cfg.setting, acceptance=a, a_first=a1, a_next=b,
        per_position=[x / y if y else None for x, y in zip(cfg.pos_acc, cfg.pos_drafted)],
        tokens_per_pass=cfg.tokens / cfg.rounds, tok_s=float(np.median(cfg.tok_s)),
        speedup=float(np.median(sp)), speedup_q1=float(np.quantile(sp, 0.25)),
        speedup_q3=float(np.quantile(sp, 0.75)),
        runs=len(cfg.speedups), noise=noise_count(cfg.speedups, cfg.bounds), speedup_bound=median_bound(cfg.bounds),
        predicted=(predicted_speedup(a1, c[name], r.get(cfg.k + 1, float("nan")), cfg.k, b)
                   if isinstance(cfg.k, int) else None),
        r_k1=r.get(cfg.k + 1) if isinstance(cfg.k, int) else None, c=c[name],
        by_prompt_set={ps: dict(acceptance=v[0] / v[1] if v[1] else None, speedup=float(np.median(v[2])),
                                speedup_q1=float(np.quantile(v[2], 0.25)), speedup_q3=float(np.quantile(v[2], 0.75)),
                                tokens_per_pass=v[3] / v[4], runs=len(v[2]), noise=noise_count(v[2], v[5]),
                                speedup_bound=median_bound(v[5])) for ps, v in cfg.prompt_sets.items()},
    )


def best_rows(rows: list[dict], settings, drafters) -> list[dict]:
    """Per setting and drafter: the fixed K measured fastest, the K predicted fastest, and K = auto and the tree."""
    best = []
    for setting in settings:
        for name in drafters:
            mine = [x for x in rows if x["drafter"] == name and x["setting"] == setting and isinstance(x["k"], int)]
            if not mine:
                continue
            m = max(mine, key=lambda x: x["speedup"])
            pk = max(mine, key=lambda x: x["predicted"])
            au = next((x for x in rows if x["drafter"] == name and x["setting"] == setting and x["k"] == "auto"), None)
            tr = next((x for x in rows if x["drafter"] == name and x["setting"] == setting and x["k"] == "tree"), None)
            best.append(dict(drafter=name, setting=setting, best_k=m["k"], acceptance=m["acceptance"],
                             speedup=m["speedup"], predicted=m["predicted"], predicted_best_k=pk["k"],
                             r_k1=m["r_k1"], c=m["c"], tokens_per_pass=m["tokens_per_pass"],
                             auto_speedup=au["speedup"] if au else None, auto_acceptance=au["acceptance"] if au else None,
                             auto_tokens_per_pass=au["tokens_per_pass"] if au else None,
                             tree_speedup=tr["speedup"] if tr else None,
                             tree_tokens_per_pass=tr["tokens_per_pass"] if tr else None))
    return best


def memory_rows(target, drafters: dict, used_ctx: int) -> list[dict]:
    """Weights and KV cache per model (the target and each drafter with a model of its own) at the used context;
    a feature head (eagle.py): its weights, its layers' caches and the features it keeps."""
    models = {"target": (target, target.weight_bytes)}
    models.update({n: (d.model, 0 if runs_the_target(d, target) else d.model.weight_bytes) for n, d in drafters.items()
                   if has(d, HasModel) and d.model is not target})
    memory = [dict(model=n, weight_bytes=weights,
                   kv_bytes_per_token=kv_bytes_per_token(m), kv_bytes_at_context=kv_bytes_per_token(m) * used_ctx)
              for n, (m, weights) in models.items()]
    for n, d in drafters.items():
        if has(d, ReportsMemory):
            memory.append(dict(model=n, weight_bytes=d.weight_bytes, kv_bytes_per_token=d.kv_bytes_per_token,
                               kv_bytes_at_context=d.kv_bytes_per_token * used_ctx))
    return memory


def transformers_peer(target_dir, draft_dir, ks=(4,)):
    """transformers' generate on the same target: plain, prompt lookup and assisted generation (greedy)."""
    try:
        import torch
        import transformers
    except ImportError:
        return None

    def run(prompts, max_new_tokens):
        torch.set_num_threads(2)
        target = transformers.AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
        with tempfile.TemporaryDirectory() as tmp:  # transformers reads int8 matrices as their integers: a float copy
            draft = (transformers.AutoModelForCausalLM.from_pretrained(str(float_copy(draft_dir, Path(tmp) / "draft")),
                                                                       dtype=torch.float32).eval() if draft_dir else None)
        modes = [("plain", {})]
        for k in ks:
            modes.append((f"prompt-lookup k={k}", dict(prompt_lookup_num_tokens=k)))
            if draft is not None:
                draft.generation_config.num_assistant_tokens = k
                draft.generation_config.num_assistant_tokens_schedule = "constant"
                draft.generation_config.assistant_confidence_threshold = 0.0
                modes.append((f"assistant k={k}", dict(assistant_model=draft)))
        times = {m: [] for m, _ in modes}
        counts = {m: 0 for m, _ in modes}
        speed = {m: [] for m, _ in modes}
        for plist in prompts.values():
            for p in plist:
                ids = torch.tensor([p])
                per = {}
                for m, kw in modes:
                    t0 = time.perf_counter()
                    with torch.no_grad():
                        out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                              do_sample=False, pad_token_id=0, **kw)
                    dt = time.perf_counter() - t0
                    n = out.shape[1] - len(p)
                    times[m].append(dt)
                    counts[m] += n
                    per[m] = n / dt
                for m in per:
                    speed[m].append(per[m] / per["plain"])
        return {m: dict(tok_s=counts[m] / sum(times[m]), speedup=float(np.median(speed[m]))) for m in times} | dict(
            transformers=transformers.__version__, torch=torch.__version__)

    return run


def write_report(result: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.json").write_text(compact_json(result))
    plots = make_plots(result, out)
    md = format_report(result, plots)
    (out / "report.md").write_text(md)
    return out / "report.md"


def by_set_table(rows: list[dict]) -> list[str]:
    """Per setting, drafter and prompt set: the best fixed K, K = auto and the tree, as speedups over plain
    decoding with their interquartile range over the prompts; auto is also given relative to that best fixed K."""
    L = ["## Fixed K, K = auto and trees per prompt set", "",
         "Speedup over plain decoding (median over the set's prompts, interquartile range in brackets); auto / best: "
         "K = auto over the best fixed K of the same set.", "",
         "| setting | drafter | prompt set | best fixed K | K = auto | auto / best | tree |", "|---|---|---|---|---|---|---|"]
    keys = list(dict.fromkeys((r["setting"], r["drafter"]) for r in rows))
    for setting, drafter in keys:
        mine = [r for r in rows if r["setting"] == setting and r["drafter"] == drafter]
        sets = list(mine[0]["by_prompt_set"]) + ["all"]
        for ps in sets:
            def part(r, ps=ps):
                return r if ps == "all" else r["by_prompt_set"].get(ps, {})
            fixed = [r for r in mine if isinstance(r["k"], int) and part(r).get("speedup") is not None]
            auto = next((part(r) for r in mine if r["k"] == "auto"), {})
            tree = next((part(r) for r in mine if r["k"] == "tree"), {})
            best = max(fixed, key=lambda r: part(r)["speedup"]) if fixed else None
            ratio = auto["speedup"] / part(best)["speedup"] if auto.get("speedup") and best else None
            L.append(f"| {setting} | {drafter} | {ps} | " + (f"{honest(part(best))} (K={best['k']})" if best else "-")
                     + f" | {honest(auto)} | {fmt(ratio)} | {honest(tree)} |")
    return L


def spread(v: dict) -> str:
    """A speedup and its interquartile range over prompts, when recorded: 1.65x (1.62-2.25)."""
    if v.get("speedup") is None:
        return "-"
    q = f" ({fmt(v['speedup_q1'])}-{fmt(v['speedup_q3'])})" if v.get("speedup_q1") is not None else ""
    return fmtx(v["speedup"]) + q


def stored_bound(v: dict) -> float | None:
    """The most a stored row's (or prompt set's) median speedup can honestly be: its ``speedup_bound``. A study stored
    before the runs were counted has none; where its runs made one target pass a token in all (``tokens_per_pass`` 1:
    then every run did, none can make fewer), the bound is 1 all the same; else None, unknown."""
    return v.get("speedup_bound", 1.0 if v.get("tokens_per_pass") == 1.0 else None)


def noise(v: dict) -> str:
    """What follows a measured speedup of the study (a row, or a row's prompt set): " noise" where its median is above
    what its runs' tokens per target pass allow (``stored_bound``), and how many runs were (``command.noise_marks``)."""
    if v.get("speedup") is None:
        return ""
    return noise_marks(v["speedup"], stored_bound(v), v.get("noise", 0), v.get("runs", 0))


def honest(v: dict) -> str:
    """``spread`` with its ``noise``: 1.65x (1.62-2.25) (2 of 9 noise)."""
    return spread(v) + noise(v)


def fmt(x, p=2, unit=""):
    """A number for the report, or "-" (no unit) when there is none."""
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{p}f}{unit}"


def fmtx(x):
    return fmt(x, unit="x")


def format_report(res: dict, plots: list[str]) -> str:
    """report.md of a study's result: the run, the best K per drafter, the verify cost, every configuration, per
    prompt set, the memory, the transformers peer and the plots."""
    L = report_head(res) + headline_table(res) + verify_cost_section(res) + configurations_table(res)
    L += [""] + by_set_table(res["rows"])
    L += memory_section(res)
    if res.get("peer"):
        p = res["peer"]
        L += ["", f"## transformers {p.get('transformers')} (torch {p.get('torch')}), same target, same prompts, greedy",
              "", "| mode | tok/s | speedup |", "|---|---|---|"]
        for k, v in p.items():
            if isinstance(v, dict):
                L.append(f"| {k} | {v['tok_s']:.1f} | {v['speedup']:.2f}x |")
    if any(b["drafter"].startswith("eagle") for b in res["best"]):
        L += ["", "transformers has no peer for the EAGLE head: its assisted generation takes a draft model (or prompt "
              "lookup), not a feature head that reads the target's hidden states."]
    if plots:
        L += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    L += ["", f"Study time: {res['seconds'] / 60:.1f} min."]
    L += noise_note(sum(r.get("noise", 0) for r in res["rows"]), sum(r.get("runs", 0) for r in res["rows"]))
    return "\n".join(L) + "\n"


def report_head(res: dict) -> list[str]:
    """The title, the machine, the prompts and how speedups are measured, and the run's provenance."""
    m = res["machine"]
    L = [f"# minispec latency study: {res['target']}", "",
         f"Machine: {m.get('cpu', m.get('processor'))}, {m.get('cpus')} CPUs, Python {m['python']}, NumPy {m['numpy']}"
         + (f", BLAS {'; '.join(m['blas'])}" if m.get("blas") else "") + ".",
         f"Prompts: {res['prompts_per_set']} per set from {', '.join(res['prompt_sets'])}; {res['max_new_tokens']} new "
         f"tokens; speedups are medians over prompts of speculative/plain tokens-per-second ratios measured side by side, "
         "with their interquartile range in brackets. These are example numbers from one machine, not promises."]
    if res.get("provenance"):
        p = res["provenance"]
        L.append(f"Run: `{p['command']}`, {p['date']}, commit {p['commit']}.")
    busy = busy_line(res.get("load_before"), res.get("load_after"))
    if busy:
        L.append(busy)
    return L


def headline_table(res: dict) -> list[str]:
    """The best fixed K per setting and drafter, measured and predicted, next to K = auto and the tree."""
    L = ["", "## Headline: best K per drafter", "",
         "| setting | drafter | best K | acceptance | tokens/pass | measured speedup | predicted | predicted best K "
         "| r(K+1) | c | K=auto speedup | tree speedup, tokens/pass |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def at(b, k):
        return next((r for r in res["rows"] if r["drafter"] == b["drafter"] and r["setting"] == b["setting"]
                     and r["k"] == k), {})

    for b in res["best"]:
        L.append(f"| {b['setting']} | {b['drafter']} | {b['best_k']} | {fmt(b['acceptance'])} | "
                 f"{fmt(b['tokens_per_pass'])} | {honest(at(b, b['best_k']))} | {fmtx(b['predicted'])} | "
                 f"{b['predicted_best_k']} | {fmt(b['r_k1'])} | {fmt(b['c'], 3)} | {honest(at(b, 'auto'))} | "
                 f"{honest(at(b, 'tree'))}, {fmt(b.get('tree_tokens_per_pass'))} tokens/pass |")
    return L


def verify_cost_section(res: dict) -> list[str]:
    """Plain decoding's rate, t(n) and r(n), and each drafter's cost per guess."""
    return ["", f"Plain decoding: {', '.join(f'{s} {v:.1f} tok/s' for s, v in res['baseline_tok_s'].items())} "
            f"(median over prompts).", "", "## Verify cost", "",
            f"Target forward over n new tokens after {res['context_for_costs']} cached ones "
            f"(1 token = {res['target_step_ms']:.2f} ms):", "", "| n | " + " | ".join(str(n) for n in res["r"]) + " |",
            "|---" * (len(res["r"]) + 1) + "|",
            "| ms | " + " | ".join(f"{v:.1f}" for v in res["forward_ms"].values()) + " |",
            "| r(n) | " + " | ".join(f"{v:.2f}" for v in res["r"].values()) + " |", "",
            "Draft cost per drafted token: " + ", ".join(f"{n} {v:.2f} ms (c = {res['c'][n]:.3f})"
                                                          for n, v in res["draft_step_ms"].items()) + "."]


def configurations_table(res: dict) -> list[str]:
    """Every configuration's row: acceptance, a and b, per position, tokens per pass, speed, prediction, per set."""
    L = ["", "## Every configuration", "",
         "a: first guess accepted; b: a later guess accepted given the one before (fixed K only: with K varying "
         "the pooled estimate is biased); predicted from a, b, c, r(K+1).", "",
         "| setting | drafter | K | acceptance | a, b | per position | tokens/pass | tok/s | speedup (q1-q3) | predicted "
         "| by prompt set (acceptance / tokens per pass / speedup) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        per = " ".join(fmt(x) for x in r["per_position"])
        bys = "; ".join(f"{k} {fmt(v['acceptance'])} / {fmt(v.get('tokens_per_pass'))} / {fmtx(v['speedup'])}{noise(v)}"
                        for k, v in r["by_prompt_set"].items())
        L.append(f"| {r['setting']} | {r['drafter']} | {r['k']} | {fmt(r['acceptance'])} | "
                 + (f"{fmt(r.get('a_first'))}, {fmt(r.get('a_next'))}" if isinstance(r["k"], int) else "-") + f" | {per} | "
                 f"{fmt(r['tokens_per_pass'])} | {fmt(r['tok_s'], 1)} | {honest(r)} | {fmtx(r['predicted'])} | {bys} |")
    return L


def memory_section(res: dict) -> list[str]:
    """Weights and KV cache per model, and the process's peak resident memory."""
    mem = res["memory"]
    L = ["", "## Memory", "", f"KV cache at the used context of {mem['used_context']} tokens.", "",
         "| model | weights (MB) | KV bytes/token | KV at context (MB) |", "|---|---|---|---|"]
    for x in mem["models"]:
        L.append(f"| {x['model']} | {x['weight_bytes'] / 1e6:.1f} | {x['kv_bytes_per_token']} | "
                 f"{x['kv_bytes_at_context'] / 1e6:.2f} |")
    return L + ["", f"Peak resident memory of the process: {mem['peak_rss_bytes'] / 1e6:.0f} MB "
                "(includes transformers and torch when the peer ran)."]


def make_plots(res: dict, out: Path) -> list[str]:
    """The PNGs of report.md in ``out`` (none without matplotlib): acceptance and speedup against K per setting
    (``plot_setting``), and the verify cost with the memory (``plot_verify_cost_memory``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    files = [plot_setting(plt, res, setting, out) for setting in res["settings"]]
    files.append(plot_verify_cost_memory(plt, res, out))
    for f in files:
        small_png(out / f)
    return files


def plot_setting(plt, res: dict, setting: str, out: Path) -> str:
    """Acceptance and speedup (measured and predicted) against K for one setting; K = auto and trees as points
    right of the K axis. -> the file's name."""
    all_ks = sorted({r["k"] for r in res["rows"] if isinstance(r["k"], int)})
    at = {"auto": max(all_ks) + 1.5, "tree": max(all_ks) + 2.5}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name in dict.fromkeys(r["drafter"] for r in res["rows"]):
        mine = [r for r in res["rows"] if r["drafter"] == name and r["setting"] == setting]
        rows = [r for r in mine if isinstance(r["k"], int)]
        ks = [r["k"] for r in rows]
        ax1.plot(ks, [r["acceptance"] for r in rows], "o-", label=name)
        line = ax2.plot(ks, [r["speedup"] for r in rows], "o-", label=f"{name} measured")[0]
        ax2.plot(ks, [r["predicted"] for r in rows], "x--", color=line.get_color(), label=f"{name} predicted")
        for r in mine:
            if r["k"] in at:
                ax2.plot([at[r["k"]]], [r["speedup"]], "*" if r["k"] == "auto" else "s", color=line.get_color(), ms=9)
    ax1.set(xlabel="K", ylabel="acceptance rate", title=f"acceptance vs K ({setting})", ylim=(0, 1.05))
    ax1.set_xticks(all_ks)
    ax2.axhline(1.0, color="gray", lw=0.8)
    ax2.set_xticks(all_ks + [at["auto"], at["tree"]], [str(k) for k in all_ks] + ["auto", "tree"])
    ax2.axvline(max(all_ks) + 0.75, color="gray", lw=0.5, ls=":")
    ax2.set(xlabel="K (and the adaptive policies: auto K, a tree per round)", ylabel="speedup over plain decoding",
            title=f"speedup vs K ({setting})")
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=6)
    fig.tight_layout()
    f = f"speedup_{setting.replace('=', '').lower()}.png"
    fig.savefig(out / f, dpi=110)
    plt.close(fig)
    return f


def plot_verify_cost_memory(plt, res: dict, out: Path) -> str:
    """r(n) against the two bounds (n: no batching benefit, 1: free batching), and weights and KV cache per
    model. -> the file's name."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ns = [int(n) for n in res["r"]]
    ax1.plot(ns, list(res["r"].values()), "o-", label="measured r(n)")
    ax1.plot(ns, ns, ":", color="gray", label="n (no batching benefit)")
    ax1.plot(ns, [1] * len(ns), "--", color="gray", label="1 (free batching)")
    ax1.set_xticks([n for n in ns if n == 1 or n % 2 == 0])
    ax1.set(xlabel="tokens in the pass n", ylabel="r(n) = t(n) / t(1)", title="verify cost", ylim=(0, max(ns) + 1))
    ax1.legend(fontsize=7)
    mem = res["memory"]["models"]
    ax2.bar([m["model"] for m in mem], [m["weight_bytes"] / 1e6 for m in mem], label="weights")
    ax2.bar([m["model"] for m in mem], [m["kv_bytes_at_context"] / 1e6 for m in mem],
            bottom=[m["weight_bytes"] / 1e6 for m in mem], label="KV cache at context")
    ax2.set(ylabel="MB", title="memory")
    ax2.legend(fontsize=7)
    ax2.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(out / "verify_cost_memory.png", dpi=110)
    plt.close(fig)
    return "verify_cost_memory.png"


def small_png(path: Path, colours: int = 64) -> None:
    """Rewrite a plot with a palette of ``colours``: a third of the size, and the committed tree stays small."""
    from PIL import Image

    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colours)
    small.save(path, optimize=True)
