"""Benchmarks. ``minispec bench``: the latency study (see ``study.py``); ``minispec bench SUBCOMMAND``: the
benchmarks listed in ``bench_commands.SUBCOMMANDS``, two of them here (``forward``, the cost of a target pass over
n tokens; ``decode``, plain decoding against transformers' generate), the others in their own modules.
``--device cuda`` runs ``forward``, ``decode`` and the study on CuPy (timings synchronise the device).
``--kernel numpy|numba`` chooses the CPU kernel of every model a subcommand loads (``model/kernel.py``); ``forward``
takes a list, ``--kernel numpy,numba``, and measures each side by side.

Every figure is a median over repeats, and ratios are taken inside one run. A figure measured while the machine was
busy says so beside it (``command.busy_line``): ``forward`` records the other processes' load as it begins and ends.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..drafters import DraftModel, make_drafter
from ..generate import generate
from ..model import backend, load_model
from ..model.kernel import KERNELS, blas_threads, check_kernel, default_kernel, use_kernel
from ..model.tiny import SMOLLM2_SHAPE, tiny_config, write_random_model
from ..policy import forward_times
from ..recipes.fetch import shipped_draft, shipped_eagle
from . import bench_commands, llama_cpp_times
from .command import MODEL_HELP, busy_line, check_json_path, check_out_dir, count, load_target, print_and_store
from .measure import STREAM_READERS, compact_json, others_load, stream_time, timed
from .provenance import provenance
from .study import run_study, transformers_peer, write_report


def bench_forward(argv) -> int:
    p = argparse.ArgumentParser(prog="minispec bench forward",
                                description="median ms of a target pass over n tokens, and r(n) = t(n)/t(1), for each "
                                            "kernel side by side in one run, and the time to read the weights once")
    p.add_argument("--model", action="append", help="model directory (default: random weights of SmolLM2-135M's "
                                                    "shape); repeat it to compare formats, e.g. the float32 and the "
                                                    "--q4_1 conversions of the same GGUF")
    p.add_argument("--ns", default="1,2,3,4,5,6,8,12,16", help="comma-separated token counts (default 1,2,3,4,5,6,8,12,16)")
    p.add_argument("--context", type=int, default=256, help="cached tokens before the pass (default 256)")
    p.add_argument("--repeats", type=count, default=20)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--kernel", default=None, help="kernels to compare, comma-separated: numpy,numba (default: "
                                                  "$MINISPEC_KERNEL, else numpy)")
    p.add_argument("--tiles", default=None, help="under the numba kernel, time each of these entries of its table of "
                                                 "tiles, comma-separated sums per tile: 8,16 (default: this process's "
                                                 "entry, numba_kernel.SUMS: chosen for the CPU, or MINISPEC_TILE_SUMS)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cpu (NumPy) or cuda (CuPy); default cpu")
    p.add_argument("--gguf", action="append", default=[],
                   help="also time llama.cpp (llama-cpp-python, 2 threads) on this GGUF in the same run, the same way; "
                        "repeat it, e.g. the fetched Q4_1 GGUF and its float32 copy (recipes/gguf_float32.py)")
    a = p.parse_args(argv)
    backend.use_device(a.device)
    for path in a.gguf:
        if not Path(path).is_file():
            raise FileNotFoundError(f"--gguf {path}: no such file")
    if a.gguf and not llama_cpp_times.installed():
        raise RuntimeError("--gguf needs llama-cpp-python (pip install llama-cpp-python: it builds from source; "
                           "docs/specbench.md says how long that took here)")
    if len({Path(g).resolve() for g in a.gguf}) != len(a.gguf):
        raise ValueError(f"--gguf: a file named twice ({', '.join(a.gguf)})")
    ggufs = {path: gguf_matrices(path) for path in a.gguf}  # read before any timing: a bad file is refused at once
    formats = [fmt for fmt, _ in ggufs.values()]
    if len(set(formats)) != len(formats):
        raise ValueError(f"--gguf: two files of one format ({', '.join(formats)}); compare one file per format")
    ns = tuple(int(x) for x in a.ns.split(","))
    if 1 not in ns or any(n < 1 for n in ns):
        raise ValueError(f"--ns must hold 1 (r(n) is t(n)/t(1)) and positive counts, got {a.ns}")
    kernels = [check_kernel(k) for k in (a.kernel.split(",") if a.kernel else [default_kernel()])]
    if len(set(kernels)) != len(kernels):
        raise ValueError(f"--kernel {a.kernel}: a kernel named twice")
    tiles = [None]  # None: this process's entry of numba_kernel.TILES (numba_kernel.SUMS), unnamed in the rows
    if a.tiles is not None:
        if "numba" not in kernels:
            raise ValueError(f"--tiles {a.tiles}: the tiles are the numba kernel's; add --kernel numba")
        from ..model import numba_kernel
        tiles = [int(x) if x.strip().isdigit() else x for x in a.tiles.split(",")]
        if any(x not in numba_kernel.TILES for x in tiles) or len(set(tiles)) != len(tiles):
            raise ValueError(f"--tiles {a.tiles}: name each of {sorted(numba_kernel.TILES)} (sums per tile) at most once")
    load_before = others_load()  # the other processes' load, before the first timing
    model_dirs = a.model
    if not model_dirs:
        model_dirs = [tempfile.mkdtemp()]
        write_random_model(model_dirs[0], tiny_config(**SMOLLM2_SHAPE))
    rows, name, nbytes = {}, None, None
    for model_dir in model_dirs:
        stored = stored_format(model_dir)
        for k in kernels:
            if stored != "float32" and k == "numpy":  # NumPy reads a quantized directory dequantized: the float32
                # model (bug: the format was read off the loaded model, always float32 under NumPy, so a Q4_1
                # directory beside a float32 one was refused as "a second float32 model")
                print(f"{model_dir}: skipped under numpy, which reads its {stored} blocks dequantized (the float32 row)",
                      file=sys.stderr)
                continue
            model = load_model(model_dir, name=None if a.model else "random SmolLM2-135M shape", kernel=k)
            fmt = weight_format(model)
            name, nbytes = name or model.name, nbytes or model.weight_bytes
            for sums in (tiles if k == "numba" else [None]):  # a Q4_1 model's float32 head runs in the tiles too
                key = (k if len(model_dirs) == 1 else f"{k} {fmt}") + ("" if sums is None else f" {sums} sums")
                if key in rows:  # before this one is timed (bug: after)
                    raise ValueError(f"--model {model_dir}: a second {fmt} model; compare one directory per format")
                with blas_threads(k), tile_sums(sums):  # each kernel with the BLAS threads it runs with, its floor too
                    t = forward_times(model, ns, a.context, a.repeats)
                    floor = stream_time(model.weight_bytes, kernel=k)  # with the kernel's own loads
                flop = 2 * matrix_weights(model)  # per row: a multiply and an add for every weight of every matrix
                rows[key] = {
                    "format": fmt, "weight_bytes": model.weight_bytes, "ms": {n: 1e3 * t[n] for n in ns},
                    "r": {n: t[n] / t[1] for n in ns}, "gflops": {n: flop * n / t[n] / 1e9 for n in ns},
                    "weight_stream_ms": 1e3 * floor, "weight_stream_by": STREAM_READERS[k],
                    "decode_over_stream": t[1] / floor}
                if k == "numba":  # the tiles this row's products ran in
                    from ..model import numba_kernel
                    rows[key]["tile_sums"] = numba_kernel.SUMS if sums is None else sums
            del model
    for path, (fmt, flop) in ggufs.items():
        got = llama_cpp_times.gguf_times(path, ns, a.context, a.repeats)
        rows[f"llama.cpp {fmt}"] = {"format": fmt, "gguf": Path(path).name, "llama_cpp_python": got["version"],
                                    "context": a.context, "ms": got["ms"], "r": {n: got["ms"][n] / got["ms"][1] for n in ns},
                                    "gflops": {n: flop * n / got["ms"][n] / 1e6 for n in ns}}
    if not rows:
        raise ValueError("nothing to measure: every --model is quantized and only --kernel numpy was asked for")
    res = {"model": name, "device": backend.device_name(), "weight_bytes": nbytes, "context": a.context,
           "repeats": a.repeats, "kernels": rows, "load_before": load_before, "load_after": others_load(),
           "provenance": provenance()}
    if a.json:
        print(compact_json(res), end="")
        busy = busy_line(res["load_before"], res["load_after"])
        if busy:  # stdout holds the JSON
            print(busy, file=sys.stderr)
        return 0
    print(forward_report(res, ns))
    return 0


def forward_report(res: dict, ns) -> str:
    """``bench forward``'s table: per n, each kernel's ms, r(n) and GFLOP/s; each kernel's weights and the time to read
    them once; and, when the machine was busy as the timings began or ended, a line that says so."""
    rows = res["kernels"]
    lines = [f"{res['model']}: context {res['context']}, median of {res['repeats']}, on {res['device']}",
             f"{'n':>4} " + " ".join(f"{k + ' ms':>18} {'r(n)':>6} {'GFLOP/s':>7}" for k in rows)]
    for n in ns:
        lines.append(f"{n:>4} " + " ".join(f"{r['ms'][n]:18.2f} {r['r'][n]:6.2f} {r['gflops'][n]:7.1f}"
                                           for r in rows.values()))
    for k, r in rows.items():
        if "gguf" in r:
            lines.append(f"{k}: llama-cpp-python {r['llama_cpp_python']} on {r['gguf']}, 2 threads, logits for every row")
            continue
        lines.append(f"{k}: {r['weight_bytes'] / 1e6:.0f} MB of weights in memory; reading them once "
                     f"({r['weight_stream_by']}) takes {r['weight_stream_ms']:.2f} ms; its 1-token pass is "
                     f"{r['decode_over_stream']:.2f}x that")
    busy = busy_line(res.get("load_before"), res.get("load_after"))
    return "\n".join(lines + ([busy] if busy else []))


@contextlib.contextmanager
def tile_sums(sums):
    """Within it, the numba kernel's products run in the tiles of ``sums`` running sums (``numba_kernel.TILES``); None
    leaves this process's entry (``numba_kernel.SUMS``)."""
    if sums is None:
        yield
        return
    from ..model import numba_kernel
    before, numba_kernel.SUMS = numba_kernel.SUMS, sums
    try:
        yield
    finally:
        numba_kernel.SUMS = before


def gguf_matrices(path) -> tuple[str, int]:
    """A GGUF's matrices: (their format, the most common 2-D tensor type, "q4_1" or "float32"; FLOPs per row, 2 for
    every weight of every matrix, the head included, the embedding looked up, so a tied head counts the embedding
    once). Refused: a file gguf-py cannot read, or one without matrices."""
    try:
        import gguf
    except ImportError as e:
        raise RuntimeError("--gguf needs the gguf package: pip install 'minispec[gguf]'") from e
    try:
        tensors = [t for t in gguf.GGUFReader(str(path)).tensors if len(t.shape) == 2]
    except Exception as e:
        raise ValueError(f"--gguf {path}: not a readable GGUF file ({e})") from None
    kinds = [t.tensor_type.name.lower().replace("f32", "float32") for t in tensors if t.name != "token_embd.weight"]
    if not kinds:
        raise ValueError(f"--gguf {path}: no matrix besides the embedding: not a model to time")
    weights = sum(int(np.prod(t.shape)) for t in tensors if t.name != "token_embd.weight")
    if not any(t.name == "output.weight" for t in tensors):
        weights += sum(int(np.prod(t.shape)) for t in tensors if t.name == "token_embd.weight")  # a tied head
    return max(set(kinds), key=kinds.count), 2 * weights


def stored_format(model_dir) -> str:
    """"q4_1" when the directory stores a layer's matrix in Q4_1 blocks, else "float32": what a kernel that multiplies
    the blocks as stored runs (the numba kernel; NumPy reads them dequantized). Reads the file headers only. As
    ``weight_format``, it looks at the layers' matrices, not the embedding."""
    from ..model.config import ModelConfig
    from ..model.weights import load_weights

    ckpt = load_weights(model_dir, ModelConfig.from_dir(model_dir))
    return "q4_1" if any(ckpt.is_q4_1(name) for name in ckpt if name.startswith("model.layers.")) else "float32"


def weight_format(model) -> str:
    """"q4_1" when the model multiplies Q4_1 blocks (``kernel.Q4Matrix``), else "float32"."""
    from ..model.kernel import Q4Matrix

    return "q4_1" if any(isinstance(w, Q4Matrix) for layer in model.layers for w in vars(layer).values()) else "float32"


def matrix_weights(model) -> int:
    """How many weights a pass multiplies per row: every layer's matrices and the head (the embedding is looked up)."""
    mats = [w for layer in model.layers for w in vars(layer).values() if w is not None and len(w.shape) == 2]
    return int(sum(w.shape[0] * w.shape[1] for w in mats + [model.lm_head]))


DRAFTERS = ("draft", "eagle", "prompt-lookup", "layer-skip", "self")  # what ``minispec bench --drafters`` chooses from


def study_drafters(a, target) -> tuple[dict, str | None]:
    """The drafters ``--drafters`` names that are available, by name, and the draft model's directory (for the
    transformers peer), from ``minispec bench``'s arguments ``a``."""
    want, drafters, draft_dir = a.drafters.split(","), {}, None
    spec = a.draft or shipped_draft()
    if spec and "draft" in want:
        d = make_drafter(spec, target)
        drafters[d.name] = d
        draft_dir = spec
    eagle = a.eagle or shipped_eagle()
    if eagle and "eagle" in want:
        d = make_drafter(eagle, target)
        drafters[d.name] = d
    for s in ("prompt-lookup", "layer-skip"):
        if s in want:
            d = make_drafter(s, target, a.layers if s == "layer-skip" else None)
            drafters[d.name] = d
    if "self" in want:
        drafters["self"] = DraftModel(target, name="self")
    return drafters, draft_dir


def bench_study(argv) -> int:
    p = argparse.ArgumentParser(
        prog="minispec bench",
        description="The latency study: acceptance, speedup (measured and predicted), verify cost r(n), cost ratio c "
                    "and memory, per drafter and K, greedy and T=1, with plain decoding interleaved; transformers side "
                    "by side when installed. Writes report.md, study.json and PNG plots to --out. "
                    f"Subcommands, each with --help: {bench_commands.summary()}.")
    p.add_argument("--model", help=MODEL_HELP)
    p.add_argument("--draft", help="draft model directory (default: the shipped draft, when present)")
    p.add_argument("--eagle", help="EAGLE head directory (default: the shipped head, when present)")
    p.add_argument("--drafters", default=",".join(DRAFTERS),
                   help=f"which drafters to study, comma-separated (default: all of {','.join(DRAFTERS)})")
    p.add_argument("--out", default="bench-out", help="output directory (default bench-out)")
    p.add_argument("--quick", action="store_true", help="a small study: 1 prompt per set, 32 tokens, K in 1, 2, 4")
    p.add_argument("--ks", help="comma-separated K values (default 1..8; quick 1,2,4)")
    p.add_argument("--slow-ks", help="K values for the slow drafters layer-skip and self (default 1,4,8; quick 4)")
    p.add_argument("--prompts-per-set", type=count, help="prompts from each of code, chat, grounded (default 3; quick 1)")
    p.add_argument("--max-new-tokens", type=count, help="tokens per run (default 64; quick 32)")
    p.add_argument("--layers", type=int, help="layers of the layer-skip drafter (default 4/5 of the target's: 24 of 30)")
    p.add_argument("--no-peer", dest="peer", action="store_false", help="skip transformers even when installed")
    add_device(p)
    a = p.parse_args(argv)
    use_device_and_kernel(a)
    q = a.quick
    ks = tuple(int(x) for x in (a.ks or ("1,2,4" if q else "1,2,3,4,5,6,7,8")).split(","))
    slow = tuple(int(x) for x in (a.slow_ks or ("4" if q else "1,4,8")).split(","))
    unknown = set(a.drafters.split(",")) - set(DRAFTERS)
    if unknown:  # refused before the target is loaded
        p.error(f"--drafters: unknown {', '.join(sorted(unknown))}; choose from {','.join(DRAFTERS)}")
    check_out_dir(p, a.out)  # (bug: found out when the report was written, after the whole study)
    target, tok = load_target(a.model)
    drafters, draft_dir = study_drafters(a, target)
    if not drafters:
        p.error("no drafter to study: --drafters names none that is available")
    peer = transformers_peer(target.path, draft_dir) if a.peer and not q and a.device == "cpu" else None
    if peer is None:
        why = ("--quick" if q else "--no-peer" if not a.peer else "transformers runs on the CPU: no peer for --device cuda"
               if a.device != "cpu" else "torch or transformers is not installed")
        print(f"transformers peer: skipped ({why})", file=sys.stderr)
    res = run_study(target, drafters, tok, ks=ks, slow_ks=slow, prompts_per_set=a.prompts_per_set or (1 if q else 3),
                    max_new_tokens=a.max_new_tokens or (32 if q else 64), peer=peer,
                    forward_ns=tuple(range(1, 9 if q else 17)), log=lambda m: print(m, file=sys.stderr))
    report = write_report(res, Path(a.out))
    print(report.read_text())
    print(f"wrote {report}, {Path(a.out) / 'study.json'} and plots", file=sys.stderr)
    return 0


def bench_decode(argv) -> int:
    """minispec's plain decoding vs transformers' generate on the same target, side by side."""
    import resource
    import subprocess

    p = argparse.ArgumentParser(prog="minispec bench decode",
                                description="decode tokens/s of minispec and of transformers' generate (greedy), "
                                            "interleaved, median of repeats; and peak memory of `minispec generate`")
    p.add_argument("--model", help=MODEL_HELP)
    p.add_argument("--max-new-tokens", type=count, default=128)
    p.add_argument("--repeats", type=count, default=3)
    p.add_argument("--prompt", default="Write a short story about a robot who learns to paint.")
    p.add_argument("--json", help="also write the figures here, with their provenance and the load")
    add_device(p)
    a = p.parse_args(argv)
    use_device_and_kernel(a)
    try:
        check_json_path(a.json)
    except ValueError as e:
        p.error(str(e))
    load_before = others_load()
    model, tok = load_target(a.model)
    d = model.path
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": a.prompt}]))
    try:
        if a.device != "cpu":
            raise ImportError("transformers runs on the CPU here: no side-by-side for --device cuda")
        import torch
        import transformers

        torch.set_num_threads(2)
        hf = transformers.AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()
    except ImportError:
        hf = None
    ours, theirs, same = [], [], None
    for _ in range(a.repeats):
        out, dt = timed(lambda: generate(model, ids, a.max_new_tokens))
        ours.append(len(out) / dt)
        if hf is not None:
            x = torch.tensor([ids])
            t0 = time.perf_counter()
            with torch.no_grad():
                y = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=a.max_new_tokens,
                                min_new_tokens=a.max_new_tokens, do_sample=False, pad_token_id=0)
            theirs.append((y.shape[1] - len(ids)) / (time.perf_counter() - t0))
            same = y[0, len(ids):].tolist() == out
    lines = [f"{a.max_new_tokens} new tokens, greedy, median of {a.repeats}, side by side, on {backend.device_name()}:",
             f"  minispec      {np.median(ours):6.1f} tok/s  ({1e3 / np.median(ours):.1f} ms/token)"]
    if theirs:
        lines += [f"  transformers  {np.median(theirs):6.1f} tok/s  ({1e3 / np.median(theirs):.1f} ms/token), "
                  f"torch {torch.__version__}; same tokens: {same}",
                  f"  ratio minispec / transformers: {np.median(ours) / np.median(theirs):.2f}"]
    cmd = [sys.executable, "-m", "minispec", "generate", "--model", str(d), "--draft", "none", "--chat",
           "--prompt", a.prompt, "--max-new-tokens", str(a.max_new_tokens), "--device", a.device]
    kernel = model.kernel  # the child loads with the kernel measured here (bug: with $MINISPEC_KERNEL, else numpy)
    subprocess.run(cmd, capture_output=True, check=True, env=dict(os.environ, MINISPEC_KERNEL=kernel))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    size = sum(f.stat().st_size for f in Path(d).iterdir() if f.is_file())
    lines.append(f"peak resident memory (host) of `minispec generate --device {a.device}` (plain, {a.max_new_tokens} "
                 f"tokens, kernel {kernel}): {peak / 1e6:.0f} MB; model directory on disk: {size / 1e6:.0f} MB")
    res = dict(max_new_tokens=a.max_new_tokens, repeats=a.repeats, device=a.device, kernel=kernel,
               minispec_tok_s=[float(x) for x in ours], transformers_tok_s=[float(x) for x in theirs],
               same_tokens=same, peak_rss_bytes=int(peak), model_bytes=int(size), load_before=load_before,
               load_after=others_load())  # (bug: no --json, so the committed figure had no date, commit or machine)
    print_and_store("\n".join(lines), res, a.json, p.prog, argv)
    return 0


def add_device(p) -> None:
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cpu (NumPy) or cuda (CuPy); default cpu")
    p.add_argument("--kernel", choices=KERNELS, help="the CPU kernel of every model loaded: numpy (the reference) or "
                                                     "numba (pip install -e \".[fast]\"); default $MINISPEC_KERNEL, else numpy")


def use_device_and_kernel(a) -> None:
    backend.use_device(a.device)
    if a.kernel:
        use_kernel(a.kernel)


def kernel_from(argv: list[str]) -> list[str]:
    """``--kernel NAME`` (or ``--kernel=NAME``) taken out of a subcommand's arguments and applied (``use_kernel``):
    every bench subcommand runs its models with it, whether or not its own parser knows the option."""
    rest, i = [], 0
    while i < len(argv):
        if argv[i] == "--kernel" and i + 1 < len(argv):
            use_kernel(argv[i + 1])
            i += 2
            continue
        if argv[i].startswith("--kernel="):
            use_kernel(argv[i].split("=", 1)[1])
        else:
            rest.append(argv[i])
        i += 1
    return rest


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else [a for i, a in enumerate(argv) if not (i == 0 and a == "--")]
    if argv and argv[0] in bench_commands.SUBCOMMANDS:
        name, rest = argv[0], argv[1:]
        return bench_commands.run(name, rest if name in bench_commands.OWN_KERNEL_OPTION else kernel_from(rest))
    return bench_study(argv)


if __name__ == "__main__":
    sys.exit(main())
