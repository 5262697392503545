"""t(n) of SmolLM2's forward pass under the numba kernel of another commit beside this one's, alternated in one
process (7 rounds, the minimum of each), at 256 cached tokens.

    python scripts/kernel_versions.py REV        # e.g. adc455c~1, the kernel before batch-invariant rows

The other commit's ``minispec/model/numba_kernel.py`` (from ``git show``) supplies the products; its attention is
NumPy's where that commit had none of its own. Prints t(1) and r(n) = t(n) / t(1) for each, and t(n) in ms.
"""

import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


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
        path = Path(d) / "numba_kernel_other.py"
        path.write_text(src.stdout.replace("cache=True", "cache=False"))
        spec = importlib.util.spec_from_file_location("numba_kernel_other", path)
        other = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(other)
    m = load_model(root / "weights" / "smollm2-135m-instruct", kernel="numba")
    mats = [w for layer in m.layers for w in (layer.w_qkv, layer.w_o, layer.w_gate_up, layer.w_down)] + [m.lm_head]
    mine = {"matmul": mats[0]._matmul, "attend": m.attend}
    ids = [int(t) for t in np.random.default_rng(0).integers(0, m.cfg.vocab_size, 300)]
    times: dict = {}
    for _ in range(7):
        for which in (argv[0], "this"):
            for w in mats:
                w._matmul = mine["matmul"] if which == "this" else other.matmul
            m.attend = mine["attend"] if which == "this" else getattr(other, "attention", None)
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
