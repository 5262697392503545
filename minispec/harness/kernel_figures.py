"""The figures of the two kernels (model/kernel.py), from committed measurements; ``docs_tables`` writes them in.

  docs/kernel/forward.json        ``minispec bench forward --kernel numpy,numba --json``: t(n), r(n), the read floors
  docs/kernel/study_numpy.json    ``minispec bench --kernel numpy ...``: the study's drafters under each kernel, each
  docs/kernel/study_numba.json    ``minispec bench --kernel numba ...``  against plain decoding with its own kernel
  docs/kernel/forward_q4_1.json   ``minispec bench forward --model F32 --model Q4_1 --kernel numpy,numba --json``: the
                                  float32 and the Q4_1 target side by side, with each pass's GFLOP/s
  docs/kernel/forward_tiles.json  ``minispec bench forward --kernel numpy,numba --tiles 8,16 --json``: each entry of
                                  the numba kernel's table of tiles on one machine (AVX2), side by side
  docs/kernel/forward_tiles_avx512.json   the same on a CPU with AVX-512
  docs/kernel/study_numba_float32.json, study_numba_q4_1.json   ``minispec bench --kernel numba --model DIR ...``:
                                  the study with the float32 and with the Q4_1 target, on one machine
  docs/kernel/forward_llama_cpp.json   the same with ``--kernel numba --gguf Q4_1.gguf --gguf F32.gguf``: llama.cpp on
                                  the same weights, in the same run
  docs/kernel/forward_zen4.json   all of it in one run on an AMD EPYC Zen 4 (AVX-512): ``--model F32 --model Q4_1
                                  --kernel numpy,numba --tiles 8,16 --gguf Q4_1.gguf --gguf F32.gguf``
"""

from __future__ import annotations

from pathlib import Path

from ..policy.acceptance import expected_tokens
from .doc_figures import DRAFT, EAGLE, NAMES, PL, best_fixed, load, row, run_line, speed, tokens_per_second

FORWARD = "docs/kernel/forward.json"
FORWARD_Q4 = "docs/kernel/forward_q4_1.json"
FORWARD_LLAMA = "docs/kernel/forward_llama_cpp.json"
FORWARD_TILES = "docs/kernel/forward_tiles.json"
FORWARD_ZEN4 = "docs/kernel/forward_zen4.json"
FORWARD_TILES_AVX512 = "docs/kernel/forward_tiles_avx512.json"
STUDIES = {"numpy": "docs/kernel/study_numpy.json", "numba": "docs/kernel/study_numba.json"}
FORMAT_STUDIES = {"float32": "docs/kernel/study_numba_float32.json", "Q4_1": "docs/kernel/study_numba_q4_1.json"}
ROWS = [(EAGLE, "code"), (DRAFT, None), (PL, "grounded"), (PL, None)]


def forward_table(root: Path) -> str:
    f = load(root, FORWARD)
    kernels = list(f["kernels"])
    ns = list(f["kernels"][kernels[0]]["ms"])
    floors = ", ".join(f"{v['weight_stream_ms']:.1f} ms with {k}'s loads ({v['weight_stream_by']})" for k, v in f["kernels"].items())
    lines = [f"From [`{FORWARD}`]({FORWARD}) ({run_line(f)}): {f['model']}, {f['weight_bytes'] / 1e6:.0f} MB of "
             f"float32 weights, {f['context']} cached tokens, median of {f['repeats']}, each kernel with the BLAS threads "
             f"it runs with. Reading the weights once takes {floors}.", "",
             "| n | " + " | ".join(f"{k}: t(n) | {k}: r(n)" for k in kernels) + " |",
             "|---|" + "---|---|" * len(kernels)]
    for n in ns:
        lines.append(f"| {n} | " + " | ".join(f"{f['kernels'][k]['ms'][n]:.1f} ms | {f['kernels'][k]['r'][n]:.2f}"
                                             for k in kernels) + " |")
    lines.append("| t(1) / its read | " + " | ".join(f"{f['kernels'][k]['decode_over_stream']:.2f}x | -"
                                                       for k in kernels) + " |")
    return "\n".join(lines)


def study_table(root: Path, files: dict[str, str] = STUDIES, what: str = "kernel") -> str:
    """The drafters under each of ``files`` (a label -> a study's JSON), each against plain decoding in its own study."""
    studies = {k: load(root, rel) for k, rel in files.items()}
    lines = []
    for k, s in studies.items():
        lines.append(f"- {k}: [`{files[k]}`]({files[k]}) ({run_line(s)}): {s['prompts_per_set']} prompts per set, "
                     f"{s['max_new_tokens']} new tokens, K in {', '.join(map(str, s['ks']))}; plain decoding "
                     f"{tokens_per_second(s)} greedy, r(2) = {s['r']['2']:.2f}, r(5) = {s['r']['5']:.2f};")
    lines += ["", f"Greedy; each cell the median speedup over plain decoding with the same {what}, timed side by side, "
                  "and the interquartile range over the prompts.", "",
              "| drafter | prompts | " + " | ".join(f"{k}: c | {k}: best fixed K | {k}: K = auto | {k}: tree"
                                                     for k in studies) + " |",
              "|---|---|" + "---|---|---|---|" * len(studies)]
    for drafter, pset in ROWS:
        cells = []
        for s in studies.values():
            b = best_fixed(s, drafter, pset=pset)
            cells.append(f"{s['c'][drafter]:.3f} | {speed(b, pset)}, K = {b['k']} | {speed(row(s, drafter, 'auto'), pset)} "
                         f"| {speed(row(s, drafter, 'tree'), pset)}")
        lines.append(f"| {NAMES[drafter]} | {pset or 'all'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_study_table(root: Path) -> str:
    """The float32 and the Q4_1 target under the numba kernel, on one machine: the drafters' speedups, and the
    acceptance a drafter needs at K = 1 under each (a > c + r(2) - 1, docs/speed.md's model)."""
    lines = [study_table(root, FORMAT_STUDIES, "target format"), "",
             "At K = 1 a drafter pays when its first guess is kept more often than c + r(2) - 1:", ""]
    studies = {k: load(root, rel) for k, rel in FORMAT_STUDIES.items()}
    for d in (EAGLE, DRAFT):
        cells = [f"{k}: needs {s['c'][d] + s['r']['2'] - 1:.2f} (c = {s['c'][d]:.3f}, r(2) = {s['r']['2']:.2f}), "
                 f"keeps {row(s, d, 1)['a_first']:.2f}" for k, s in studies.items()]
        lines.append(f"- {NAMES[d]}: " + "; ".join(cells) + ".")
    return "\n".join(lines)


def speed_model(root: Path) -> str:
    """docs/speed.md's worked example under each kernel: the shipped draft at K = 1, predicted and measured."""
    lines = []
    for k, rel in STUDIES.items():
        s = load(root, rel)
        c, one = s["c"][DRAFT], row(s, DRAFT, 1)
        a, r2 = one["a_first"], s["r"]["2"]
        e1 = expected_tokens(a, 1)
        lines.append(f"- {k} kernel, K = 1: E = {e1:.2f} tokens (a = {a:.2f}) for c + r(2) = {c:.3f} + {r2:.2f} = "
                     f"{c + r2:.2f} steps: **{e1 / (c + r2):.2f}x** predicted, {speed(one)} measured; it pays when "
                     f"a > {c + r2 - 1:.2f}.")
    return "\n".join(lines)


def forward_q4_table(root: Path) -> str:
    return side_by_side_table(root, FORWARD_Q4)


def forward_llama_cpp_table(root: Path) -> str:
    return side_by_side_table(root, FORWARD_LLAMA)


def forward_zen4_table(root: Path) -> str:
    return side_by_side_table(root, FORWARD_ZEN4)


def forward_tiles_table(root: Path) -> str:
    return side_by_side_table(root, FORWARD_TILES)


def forward_tiles_avx512_table(root: Path) -> str:
    return side_by_side_table(root, FORWARD_TILES_AVX512)


def side_by_side_table(root: Path, name: str) -> str:
    """t(n), r(n) and GFLOP/s of every row of a ``bench forward`` record: minispec's kernels and formats, and llama.cpp's
    GGUFs (``--gguf``)."""
    f = load(root, name)
    rows = f["kernels"]
    ns = list(next(iter(rows.values()))["ms"])
    held = ", ".join(f"{k} {v['weight_bytes'] / 1e6:.0f} MB (read once in {v['weight_stream_ms']:.1f} ms)"
                     for k, v in rows.items() if "gguf" not in v)
    peers = "; ".join(f"{k}: llama-cpp-python {v['llama_cpp_python']} on {v['gguf']}, 2 threads, logits for every row"
                      for k, v in rows.items() if "gguf" in v)
    lines = [f"From [`{name}`]({name}) ({run_line(f)}): {f['model']}, {f['context']} cached tokens, median of "
             f"{f['repeats']}. Weights in memory: {held}." + (f" {peers}." if peers else "") +
             " GFLOP/s counts 2 operations per weight per row.", "",
             "| n | " + " | ".join(f"{k}: t(n) | r(n) | GFLOP/s" for k in rows) + " |",
             "|---|" + "---|---|---|" * len(rows)]
    for n in ns:
        lines.append(f"| {n} | " + " | ".join(f"{v['ms'][n]:.1f} ms | {v['r'][n]:.2f} | {v['gflops'][n]:.0f}"
                                             for v in rows.values()) + " |")
    return "\n".join(lines)


def figure_key(prefix: str, row: str) -> str:
    """A ``bench forward`` row's name as a figure's key: "llama.cpp q4_1" -> PREFIX.llama_cpp.q4_1."""
    return f"{prefix}." + row.replace("llama.cpp", "llama_cpp").replace(" ", ".")


def values(root: Path) -> dict[str, str]:
    f = load(root, FORWARD)["kernels"]
    out = {"kernel.weight_mb": f"{load(root, FORWARD)['weight_bytes'] / 1e6:.0f} MB"}
    for k, v in f.items():
        out[f"kernel.{k}.r2"] = f"{v['r']['2']:.2f}"
        out[f"kernel.{k}.r4"] = f"{v['r']['4']:.2f}"
        out[f"kernel.{k}.r8"] = f"{v['r']['8']:.2f}"
        out[f"kernel.{k}.t1"] = f"{v['ms']['1']:.1f} ms"
    for k, v in load(root, FORWARD_Q4)["kernels"].items():
        key = k.replace(" ", ".")
        out[f"kernel.{key}.t1"] = f"{v['ms']['1']:.1f} ms"
        for n in ("2", "4", "8"):
            out[f"kernel.{key}.r{n}"] = f"{v['r'][n]:.2f}"
        out[f"kernel.{key}.mb"] = f"{v['weight_bytes'] / 1e6:.0f} MB"
    for k, v in load(root, FORWARD_LLAMA)["kernels"].items():  # each engine and format beside the other, one run
        key = figure_key("kernel.beside", k)
        for n in ("1", "5", "8", "16"):
            out[f"{key}.t{n}"] = f"{v['ms'][n]:.1f} ms"
        for n in ("4", "8"):
            out[f"{key}.r{n}"] = f"{v['r'][n]:.2f}"
    zen4 = load(root, FORWARD_ZEN4)
    out["kernel.zen4.load"] = f"{zen4['load_before']:.2f} before, {zen4['load_after']:.2f} after"
    rows = zen4["kernels"]
    out["kernel.zen4.q4_1.llama_cpp_lead"] = f"{rows['numba q4_1 16 sums']['ms']['1'] / rows['llama.cpp q4_1']['ms']['1']:.1f}"
    for k, v in rows.items():  # every kernel, format and engine on the Zen 4, one run
        key = figure_key("kernel.zen4", k)
        for n in ("1", "4", "8", "16"):
            out[f"{key}.t{n}"] = f"{v['ms'][n]:.1f} ms"
        for n in ("2", "4", "8"):
            out[f"{key}.r{n}"] = f"{v['r'][n]:.2f}"
        if "decode_over_stream" in v:
            out[f"{key}.over_read"] = f"{v['decode_over_stream']:.2f}x"
            out[f"{key}.read"] = f"{v['weight_stream_ms']:.1f} ms"
    for k, v in load(root, "docs/kernel/batch_invariance.json")["kernels"].items():  # python -m ...batch_invariance
        out[f"kernel.{k}.bi_max"] = f"{max(x['max_abs_diff'] for x in v.values() if isinstance(x, dict)):.1e}"
    for k, rel in FORMAT_STUDIES.items():  # the study with each target format, on one machine
        b = best_fixed(load(root, rel), PL, pset="grounded")
        out[f"kernel.study.{k.lower()}.pl.grounded"] = f"{b['by_prompt_set']['grounded']['speedup']:.2f}x"
    for k, rel in STUDIES.items():
        s = load(root, rel)
        b = best_fixed(s, EAGLE, pset="code")
        out[f"kernel.{k}.eagle.code"] = f"{speed(b, 'code')} at K = {b['k']}"
        b = best_fixed(s, PL, pset="grounded")
        out[f"kernel.{k}.pl.grounded"] = f"{speed(b, 'grounded')} at K = {b['k']}"
        out[f"kernel.{k}.pl.grounded.tree"] = speed(row(s, PL, "tree"), "grounded")
        b = best_fixed(s, DRAFT)
        out[f"kernel.{k}.draft"] = f"{speed(b)} at K = {b['k']}"
        one = row(s, EAGLE, 1)
        out[f"kernel.{k}.eagle.code.a"] = f"{one['by_prompt_set']['code']['acceptance']:.2f}"
        out[f"kernel.{k}.eagle.needs"] = f"{s['c'][EAGLE] + s['r']['2'] - 1:.2f}"
        out[f"kernel.{k}.draft.needs"] = f"{s['c'][DRAFT] + s['r']['2'] - 1:.2f}"
        out[f"kernel.{k}.draft.a"] = f"{row(s, DRAFT, 1)['a_first']:.2f}"
        out[f"kernel.{k}.study_r2"] = f"{s['r']['2']:.2f}"
        paying = [NAMES[d] for d in (EAGLE, DRAFT) if best_fixed(s, d)["speedup"] > 1.0]  # over all prompts
        out[f"kernel.{k}.models_paying"] = (f"{len(paying)} of its 2 model drafters pay{'s' if len(paying) == 1 else ''} "
                                            "over all prompts at their best fixed K")
    return out


SECTIONS = {"kernel_forward": forward_table, "kernel_study": study_table, "kernel_speed_model": speed_model,
            "kernel_forward_q4_1": forward_q4_table, "kernel_forward_llama_cpp": forward_llama_cpp_table,
            "kernel_forward_tiles": forward_tiles_table, "kernel_forward_zen4": forward_zen4_table,
            "kernel_forward_tiles_avx512": forward_tiles_avx512_table, "kernel_study_formats": format_study_table}
