"""t(n) of SmolLM2's forward pass under the numba kernel of another commit beside this one's, alternated in one
process (7 rounds, the minimum of each), at 256 cached tokens.

    python scripts/kernel_versions.py REV        # e.g. adc455c~1, the kernel before batch-invariant rows

The other commit's ``minispec/model/numba_kernel.py`` (from ``git show``) supplies the products, and its
``numba_layers.py`` the norms, RoPE and attention; a commit before that file had its attention in ``numba_kernel.py``
(and NumPy's norms and RoPE), or none (NumPy's). Prints t(1) and r(n) = t(n) / t(1) for each, and t(n) in ms.
Not every commit can be loaded: from adc455c up to adba7fa the kernel's attention took the cache cut to S positions,
which today's forward does not pass, and it refuses the whole cache.
"""

import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def load_source(name: str, text: str, folder: Path):
    """A module from source text, registered under ``name`` (so that another module of the same commit imports it)."""
    path = folder / f"{name}.py"
    path.write_text(text.replace("cache=True", "cache=False"))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def other_ops(root: Path, rev: str, kernel, folder: Path):
    """The norms, RoPE and attention that the numba kernel of ``rev`` ran (module docstring)."""
    from minispec.model import transformer

    src = subprocess.run(["git", "-C", str(root), "show", f"{rev}:minispec/model/numba_layers.py"],
                         capture_output=True, text=True)
    if src.returncode:
        if "does not exist" not in src.stderr and "exists on disk, but not in" not in src.stderr:
            raise SystemExit(f"error: {rev}: {src.stderr.strip()}")
        # before numba_layers.py: NumPy's norms and RoPE, and the kernel's attention if it had one
        return transformer.Ops(transformer.rms_norm, transformer.rope, getattr(kernel, "attention", transformer.attention))
    layers = load_source("numba_layers_other", src.stdout.replace("from .numba_kernel import", "from numba_kernel_other import"),
                         folder)
    return transformer.Ops(layers.rms_norm, layers.rope, layers.attention)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(__file__).resolve().parents[1]
    src = subprocess.run(["git", "-C", str(root), "show", f"{argv[0]}:minispec/model/numba_kernel.py"],
                         capture_output=True, text=True)
    if src.returncode:
        print(f"error: {argv[0]}: {src.stderr.strip()}", file=sys.stderr)
        return 2
    from minispec.model import load_model

    with tempfile.TemporaryDirectory() as d:
        other = load_source("numba_kernel_other", src.stdout, Path(d))
        ops = other_ops(root, argv[0], other, Path(d))
    m = load_model(root / "weights" / "smollm2-135m-instruct", kernel="numba")
    mats = [w for layer in m.layers for w in (layer.w_qkv, layer.w_o, layer.w_gate_up, layer.w_down)] + [m.lm_head]
    mine = {"matmul": mats[0]._matmul, "ops": m.ops}
    ids = [int(t) for t in np.random.default_rng(0).integers(0, m.cfg.vocab_size, 300)]
    times: dict = {}
    for _ in range(7):
        for which in (argv[0], "this"):
            for w in mats:
                w._matmul = mine["matmul"] if which == "this" else other.matmul
            m.ops = mine["ops"] if which == "this" else ops
            for n in (1, 2, 4, 8):
                cache = m.new_cache(300)
                m.forward(ids[:256], cache, last=1)
                t = time.perf_counter()
                for _ in range(3):
                    cache.length = 256
                    m.forward(ids[256: 256 + n], cache)
                times.setdefault((which, n), []).append((time.perf_counter() - t) / 3 * 1000)
    for which in (argv[0], "this"):
        t = {n: min(times[(which, n)]) for n in (1, 2, 4, 8)}
        print(f"{which}: " + ", ".join(f"t({n}) {t[n]:.1f} ms" for n in t) + "; "
              + ", ".join(f"r({n}) {t[n] / t[1]:.2f}" for n in (2, 4, 8)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
