"""``minispec bench gpu-predict``: a GPU's costs, and the speedups they PREDICT from the CPU's acceptances.

The real target (542 MB) does not travel to a GPU machine, so this measures what does not depend on the
weights' values, on random weights of SmolLM2-135M's exact shape:

    t(n), r(n) = t(n)/t(1)   a target pass over n = 1..16 new tokens after 256 cached ones
    decode                   ms per token of plain decoding (the pass, the copy of the logits, sampling)
    c                        seconds per guess / t(1), for the shipped draft, layer skip, prompt lookup, self
    launch overhead          a 1-token step of a model of the same depth but tiny width (as many kernel
                             launches, no bytes to speak of) and of a 2-layer tiny model, against the
                             bandwidth floor: the weight bytes / the bandwidth of one big vector-matrix product

and then, for each drafter and K of the CPU study (docs/study/study.json: a_first, a_next, acceptance,
all measured with the real target), the speedup the Leviathan et al. model predicts with these GPU costs,
next to the CPU's measured and predicted speedups. Acceptance depends on the weights, costs do not: the
GPU figures are predictions, labelled so, until the real target runs there.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..drafters import DraftModel, LayerSkip, PromptLookup
from ..generate import generate
from ..model import backend, load_model
from ..model.config import ModelConfig
from ..model.tiny import SMOLLM2_SHAPE, tiny_config, write_random_model
from ..policy import forward_times
from ..policy.acceptance import predicted_speedup
from ..policy.timing import guess_time
from ..recipes.fetch import DEFAULT_DRAFT, default_model_dir, default_weights_dir, sha256
from .command import check_out_dir, count
from .measure import stream_time, timed
from .provenance import provenance
from .study import stored_bound

SMOKE_SHAPE = dict(SMOLLM2_SHAPE, hidden_size=64, intermediate_size=128, num_hidden_layers=5, num_attention_heads=4,
                   num_key_value_heads=2)  # --smoke: the vocabulary of SmolLM2 (the draft's), nothing else


def random_target(path, smoke: bool = False, tokenizer: bool = True) -> Path:
    """Random weights of SmolLM2-135M's shape (``--smoke``: a small model with its vocabulary); with ``tokenizer``,
    SmolLM2's tokenizer, from the converted target (``minispec fetch smollm2``; checked against the one the shipped
    draft names, ``tokenizer.sha256``), so that the study can run on it too (gpu-predict reads none). FileNotFoundError,
    before any weight is written, where that tokenizer is missing (bug: the draft's copy, which it no longer ships, was
    looked for and skipped in silence, and the study step failed later for want of a tokenizer)."""
    if not tokenizer:
        return write_random_model(path, tiny_config(**(SMOKE_SHAPE if smoke else SMOLLM2_SHAPE)))
    source = default_model_dir()
    if not (source / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{source / 'tokenizer.json'} (SmolLM2's tokenizer) is missing: run `minispec fetch "
                                "smollm2` first, or bring that file (3.5 MB, git-ignored) with the checkout")
    named = (default_weights_dir() / DEFAULT_DRAFT / "tokenizer.sha256").read_text().split()[0]
    if sha256(source / "tokenizer.json") != named:
        raise ValueError(f"{source / 'tokenizer.json'} is not SmolLM2's tokenizer (its sha256 is not {named})")
    path = write_random_model(path, tiny_config(**(SMOKE_SHAPE if smoke else SMOLLM2_SHAPE)))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (path / f).write_bytes((source / f).read_bytes())
    return path


def launch_probe(tmp: Path, layers: int, ctx: int) -> dict:
    """ms of a 1-token step of two models with next to no weights: 2 layers, and ``layers`` layers (as many
    kernel launches per step as the target). What they take is launch and host overhead, not bandwidth."""
    out = {}
    for name, n in (("tiny_2_layers", 2), (f"tiny_{layers}_layers", layers)):
        m = load_model(write_random_model(tmp / name, tiny_config(num_hidden_layers=n)), name=name)
        out[name] = 1e3 * forward_times(m, (1,), context=min(ctx, 128), repeats=20)[1]
    out["per_layer_ms"] = (out[f"tiny_{layers}_layers"] - out["tiny_2_layers"]) / (layers - 2)
    return out


def measure(target_dir, *, draft_dir=None, ns=tuple(range(1, 17)), context=256, repeats=20, decode_tokens=64,
            log=print) -> dict:
    """Every cost on the active device (``backend.use_device`` first)."""
    t_start = time.perf_counter()
    target = load_model(target_dir, name=f"random {Path(target_dir).name}")
    V, L = target.cfg.vocab_size, target.cfg.num_layers
    log(f"target: {target.cfg.num_layers} layers, {target.weight_bytes / 1e6:.0f} MB float32, on {backend.device_name()}")
    t = forward_times(target, ns, context=context, repeats=repeats)
    r = {n: t[n] / t[ns[0]] for n in ns}
    log("t(n) ms: " + ", ".join(f"{n}: {1e3 * v:.2f}" for n, v in t.items()))
    rng = np.random.default_rng(0)
    prompt = [int(x) for x in rng.integers(0, V, 32)]
    generate(target, prompt, 4)  # warm up
    decode = [timed(lambda: generate(target, prompt, decode_tokens))[1] for _ in range(3)]
    decode_ms = 1e3 * float(np.median(decode)) / decode_tokens
    floor = stream_time(target.weight_bytes)
    with tempfile.TemporaryDirectory() as tmp:
        launch = launch_probe(Path(tmp), L, context)
    ctx = [int(x) for x in np.resize(rng.integers(0, V, 40), context)]  # repeats: prompt lookup finds matches
    drafters = {"prompt-lookup:3": PromptLookup(vocab_size=V), "self": DraftModel(target, name="self")}
    layer_skip = LayerSkip(target)
    drafters[layer_skip.name] = layer_skip
    if draft_dir and (Path(draft_dir) / "model.safetensors").exists():
        draft = DraftModel(load_model(draft_dir), V)
        drafters[draft.name] = draft
    else:
        log(f"no draft model at {draft_dir}: c of the shipped draft not measured")
    step = {name: guess_time(d, ctx) for name, d in drafters.items()}
    c = {name: s / t[1] for name, s in step.items()}
    log("c: " + ", ".join(f"{n} {v:.3f}" for n, v in c.items()))
    return dict(
        device=backend.device_name(), target=target.name, weight_bytes=target.weight_bytes, context=context,
        forward_ms={n: 1e3 * v for n, v in t.items()}, r=r, decode_ms_per_token=decode_ms,
        decode_tok_s=1e3 / decode_ms, draft_step_ms={n: 1e3 * v for n, v in step.items()}, c=c,
        launch=dict(launch, target_step_ms=1e3 * t[1], weight_stream_ms=1e3 * floor,
                    bandwidth_gb_s=target.weight_bytes / floor / 1e9, step_over_stream=t[1] / floor,
                    launch_share=launch[f"tiny_{L}_layers"] / (1e3 * t[1])),
        seconds=time.perf_counter() - t_start)


def predict(study: dict, costs: dict) -> tuple[list, list]:
    """Per drafter, setting and K of the CPU study: its acceptances, the CPU's measured and predicted speedup,
    and the speedup PREDICTED with the GPU's c and r(K+1). -> (rows, best K per drafter and setting)."""
    r = {int(n): v for n, v in costs["r"].items()}
    rows = []
    for row in study["rows"]:
        k = row["k"]
        if not isinstance(k, int):
            continue
        c = costs["c"].get(row["drafter"])
        ok = c is not None and k + 1 in r
        rows.append(dict(drafter=row["drafter"], setting=row["setting"], k=k, a_first=row["a_first"],
                         a_next=row["a_next"], acceptance=row["acceptance"], cpu_measured=row["speedup"],
                         cpu_speedup_bound=stored_bound(row),  # the most the CPU's median could honestly be
                         cpu_predicted=row["predicted"], gpu_c=c, gpu_r_k1=r.get(k + 1),
                         gpu_predicted=predicted_speedup(row["a_first"], c, r[k + 1], k, row["a_next"]) if ok else None))
    best = []
    for key in dict.fromkeys((x["drafter"], x["setting"]) for x in rows):
        mine = [x for x in rows if (x["drafter"], x["setting"]) == key and x["gpu_predicted"] is not None]
        if mine:
            g = max(mine, key=lambda x: x["gpu_predicted"])
            m = max(mine, key=lambda x: x["cpu_measured"])
            best.append(dict(drafter=key[0], setting=key[1], gpu_best_k=g["k"], gpu_predicted=g["gpu_predicted"],
                             cpu_best_k=m["k"], cpu_measured=m["cpu_measured"], cpu_predicted=m["cpu_predicted"],
                             cpu_speedup_bound=m["cpu_speedup_bound"]))
    return rows, best


def f(x, spec=".2f", unit=""):
    return "-" if x is None else format(x, spec) + unit


def measured(x: dict) -> str:
    """The CPU study's measured speedup, " noise" beside it where it is above what its runs' tokens per target pass
    allow (a study that recorded it)."""
    bound = x.get("cpu_speedup_bound")
    return f(x["cpu_measured"], unit="x") + (" noise" if bound is not None and x["cpu_measured"] > bound else "")


def markdown(res: dict) -> str:
    m, lines = res["measured"], []
    dry = "" if res["device_kind"] == "cuda" else " (DRY RUN on the CPU: not a GPU measurement)"
    lines += [f"# minispec on a GPU: measured costs and PREDICTED speedups{dry}", "",
              f"Device: {m['device']}. Target: {m['target']} ({m['weight_bytes'] / 1e6:.0f} MB float32, random "
              f"weights of SmolLM2-135M's shape); context {m['context']}. Acceptances: {res['study_path']} (CPU, real "
              "target). **The GPU speedups below are predicted from those acceptances and the GPU's costs, not "
              "measured.**", "",
              "## Verify cost t(n) and r(n) = t(n)/t(1)", "", "| n | ms | r(n) |", "|---:|---:|---:|"]
    lines += [f"| {n} | {m['forward_ms'][n]:.3f} | {m['r'][n]:.2f} |" for n in m["r"]]
    la = m["launch"]
    lines += ["", "## Decode step and launch overhead", "",
              f"- plain decoding: {m['decode_ms_per_token']:.3f} ms/token ({m['decode_tok_s']:.0f} tok/s); one "
              f"1-token target pass: {la['target_step_ms']:.3f} ms",
              f"- bandwidth floor: streaming the weights once takes {la['weight_stream_ms']:.3f} ms "
              f"({la['bandwidth_gb_s']:.0f} GB/s); step / floor = {la['step_over_stream']:.1f}",
              "- launch-bound steps (next to no weights): " + ", ".join(
                  f"{k} {v:.3f} ms" for k, v in la.items() if k.startswith("tiny_")) +
              f"; {la['per_layer_ms']:.3f} ms per layer; the same-depth tiny model takes "
              f"{100 * la['launch_share']:.0f}% of the target's step",
              "", "## Cost ratio c (seconds per guess / t(1))", "", "| drafter | ms per guess | c |", "|---|---:|---:|"]
    lines += [f"| {n} | {m['draft_step_ms'][n]:.3f} | {m['c'][n]:.3f} |" for n in m["c"]]
    if res.get("best"):
        lines += ["", "## Best K per drafter (GPU: predicted; CPU: measured and predicted)", "",
                  "| drafter | setting | GPU best K | GPU predicted | CPU best K | CPU measured | CPU predicted |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {b['drafter']} | {b['setting']} | {b['gpu_best_k']} | {f(b['gpu_predicted'], unit='x')} | {b['cpu_best_k']} | "
                  f"{measured(b)} | {f(b['cpu_predicted'], unit='x')} |" for b in res["best"]]
        lines += ["", "## Every drafter and K", "",
                  "| drafter | setting | K | a_first | a_next | GPU c | GPU r(K+1) | GPU predicted | CPU measured | CPU predicted |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {x['drafter']} | {x['setting']} | {x['k']} | {f(x['a_first'])} | {f(x['a_next'])} | {f(x['gpu_c'], '.3f')} | "
                  f"{f(x['gpu_r_k1'])} | {f(x['gpu_predicted'], unit='x')} | {measured(x)} | {f(x['cpu_predicted'], unit='x')} |"
                  for x in res["rows"]]
    for label, text in res.get("attached", {}).items():
        lines += ["", f"## {label}", "", "```text", text.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="minispec bench gpu-predict", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda", help="default cuda; cpu for a dry run")
    p.add_argument("--target", help="a model directory to time (default: write random weights of SmolLM2-135M's shape)")
    p.add_argument("--draft", default=str(default_weights_dir() / DEFAULT_DRAFT), help="the draft (default: the shipped one)")
    p.add_argument("--study", default="docs/study/study.json", help="the CPU study's JSON (acceptances)")
    p.add_argument("--out", default="gpu-out", help="output directory (default gpu-out)")
    p.add_argument("--name", default="gpu_predict", help="report file names: NAME.json and NAME.md")
    p.add_argument("--ns", type=count, default=16, help="t(n) for n = 1..NS (default 16)")
    p.add_argument("--repeats", type=count, default=20)
    p.add_argument("--smoke", action="store_true", help="a small target of SmolLM2's vocabulary, few repeats: checks "
                                                        "the code path (a dry run on a CPU), measures nothing useful")
    p.add_argument("--attach", action="append", default=[], metavar="LABEL=FILE",
                   help="add a text file (a test log, another benchmark's output) to the report")
    a = p.parse_args(argv)
    # checked before the measurement, which takes minutes on a GPU (bug: each was found out after it)
    check_out_dir(p, a.out)
    if not a.name or "/" in a.name:
        p.error(f"--name {a.name!r}: a file name, without '/'")
    study = Path(a.study)
    try:
        s = json.loads(study.read_text()) if study.exists() else None
    except (OSError, ValueError) as e:
        p.error(f"--study {study}: not a study's JSON ({e})")
    if s is not None and not (isinstance(s, dict) and isinstance(s.get("rows"), list)):
        p.error(f"--study {study}: not a study's JSON (no rows)")
    if a.target:
        try:
            layers = ModelConfig.from_dir(a.target).num_layers
        except (OSError, ValueError, KeyError) as e:
            p.error(f"--target {a.target}: {e}")
        if layers < 3:
            p.error(f"--target {a.target}: {layers} layers; the launch probe compares 2 layers with the target's depth")
    backend.use_device(a.device)
    log = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(a.target) if a.target else random_target(Path(tmp) / "smollm2-shape", a.smoke, tokenizer=False)
        costs = measure(target, draft_dir=a.draft, ns=tuple(range(1, a.ns + 1)), repeats=3 if a.smoke else a.repeats,
                        context=64 if a.smoke else 256, decode_tokens=16 if a.smoke else 64, log=log)
    res = dict(label="GPU speedups are PREDICTED from CPU-measured acceptances and GPU-measured costs",
               device_kind=a.device, smoke=a.smoke, study_path=a.study, measured=costs, rows=[], best=[])
    if s is not None:
        res["rows"], res["best"] = predict(s, costs)
        res["cpu"] = dict(machine=s.get("machine"), target_step_ms=s.get("target_step_ms"), r=s.get("r"), c=s.get("c"))
    else:
        log(f"{study}: not found, no predictions")
    for item in a.attach:
        label, _, path = item.partition("=")
        res.setdefault("attached", {})[label] = Path(path).read_text() if Path(path).exists() else f"({path}: missing)"
    res["provenance"] = provenance(argv, p.prog)  # date, commit, command, machine
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{a.name}.json").write_text(json.dumps(res, indent=1, default=str))
    (out / f"{a.name}.md").write_text(markdown(res))
    print(markdown({k: v for k, v in res.items() if k != "attached"}))
    log(f"wrote {out / (a.name + '.json')} and {out / (a.name + '.md')}")
    return 0
