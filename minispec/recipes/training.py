"""What the training recipes here share: the checks of their arguments, the start of a run (torch or a clear error,
fixed seeds, a log file, the target's directory, a staging directory that the finished run's files move out of), and
a run folder whose checkpoints let a stopped run resume (``run_folder``, ``RunState``: train_draft, train_bpe_draft and
train_eagle; train_eagle_ttt keeps its own, older checkpoint, which names the settings it refuses to mix), and for the
two draft models the student Llama, its next-token loop and how it is saved."""

from __future__ import annotations

import hashlib
import json
import pickle
import sys
import tempfile
import time
from pathlib import Path

TORCH_NEEDED = "error: training needs torch and transformers: pip install torch==2.13.0 -e '.[train,parity]'"


def import_torch():
    """torch, or None after printing how to install it (the recipe then exits with 2)."""
    try:
        import torch
        import transformers  # noqa: F401  (the recipes load the target with it)
    except ImportError:
        print(TORCH_NEEDED, file=sys.stderr)
        return None
    return torch


def check_args(p, args, **least) -> None:
    """Refuse (``p.error``: the usage and exit status 2, before anything is loaded or made) an ``--out`` that is a
    file, an option under its least value (``least``: the argument's name -> that value) and an ``--lr`` that is not a
    positive number, naming the option and its value."""
    if Path(args.out).exists() and not Path(args.out).is_dir():
        p.error(f"--out {args.out}: exists and is not a directory")
    for name, low in least.items():
        if getattr(args, name) < low:
            p.error(f"--{name.replace('_', '-')} must be at least {low}, got {getattr(args, name)}")
    if not 0 < args.lr < float("inf"):
        p.error(f"--lr must be a positive number, got {args.lr}")


def target_config(p, target):
    """-> (the target's directory: ``target``, else the converted SmolLM2, fetched on first use; its ModelConfig), read
    before anything is loaded, so that arguments it bounds are refused first (``p.error`` if it cannot be read)."""
    from ..model.config import ModelConfig
    from .fetch import resolve_model

    try:
        d = resolve_model(target)
        return d, ModelConfig.from_dir(d)
    except (OSError, ValueError) as e:
        p.error(f"--target {target}: {e}")


def begin(args, append_log: bool = False):
    """What every recipe does first, once its arguments are checked: torch (None, after printing how to install it:
    the recipe then exits with 2), seeded with ``args.seed`` on ``args.threads`` threads (``start``), the arguments
    logged, and the target's directory resolved (``args.target``, else the converted SmolLM2).
    -> (torch, the directory to write to, log, target_dir, started: ``time.perf_counter()`` after the start, for the
    run's total time). Without ``append_log`` that directory is a new one beside ``args.out``, whose files
    ``publish`` moves into ``args.out`` at the end: ``args.out`` is not touched before (``start``)."""
    torch = import_torch()
    if torch is None:
        return None
    from .fetch import resolve_model

    out, log = start(torch, args.out, args.seed, args.threads, append_log)
    started = time.perf_counter()
    log(f"args {vars(args)}")
    if not append_log:
        log(f"writing to {out} until the run is done, then moving its files into {args.out} (a run that stops before "
            "leaves them there)")
    return torch, out, log, resolve_model(args.target), started


def start(torch, out, seed: int, threads: int, append: bool = False):
    """Seed torch, use ``threads`` threads -> (the directory to write to, log): log(msg) prints a time-stamped line to
    stderr and writes it to that directory's ``train_log.txt``. ``append`` (a recipe that resumes): the directory is
    ``out`` itself, created if need be, and its log is added to. Otherwise it is a new directory ``staging(out)``: a run
    that fails or is stopped leaves ``out`` as it was, its log included."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    out = Path(out)
    if append:
        out.mkdir(parents=True, exist_ok=True)
    else:  # (bug: the run wrote into out at once: "w" emptied the shipped train_log.txt, and a run that stopped left
        # the other files half old, half new)
        out = staging(out)
    logf = open(out / "train_log.txt", "a")

    def log(msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, file=sys.stderr, flush=True)
        logf.write(line + "\n")
        logf.flush()

    return out, log


def staging(out: Path) -> Path:
    """A new, empty directory ``.NAME.<random>.partial/NAME`` beside ``out`` (NAME: ``out``'s name, which a run's files
    may cite; beside it: on the same file system, so that ``publish`` moves each file by a rename)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)) / out.name
    d.mkdir()
    return d


def publish(staged: Path, out) -> None:
    """Move a finished run's files from ``staged`` (``staging``'s) into ``out``, each by a rename (the files of
    ``out`` the run did not write are left as they are), then remove the emptied staging directories."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted(staged.iterdir()):
        f.replace(out / f.name)
    staged.rmdir()
    staged.parent.rmdir()


def discard(staged: Path) -> None:
    """Remove a run's staging directories (``staging``'s: ``.NAME.<random>.partial/NAME``) and what is in them, for a run
    that writes nothing to ``--out``; anything else is refused, so that no other folder is ever removed."""
    import shutil

    if not (staged.parent.name.startswith(f".{staged.name}.") and staged.parent.name.endswith(".partial")):
        raise ValueError(f"{staged} is not a staging directory of training.staging: not removed")
    shutil.rmtree(staged.parent)


def run_folder(recipe: str, args) -> Path:
    """The folder where a run keeps what lets it resume (its data, its checkpoints): ``args.run_dir``, else
    ``$MINISPEC_CACHE/<recipe>-run-<hash>``, named by the settings that shape the run, so that the same command finds
    its own folder again. Created with those settings in ``settings.json``; a folder of other settings is refused
    (``ValueError``, naming them), not resumed into."""
    from .fetch import cache_dir

    settings = json.loads(json.dumps({k: v for k, v in sorted(vars(args).items())
                                      if k not in ("out", "run_dir", "threads")}))  # what shapes the data and weights
    digest = hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:12]
    folder = Path(args.run_dir) if getattr(args, "run_dir", None) else cache_dir() / f"{recipe}-run-{digest}"
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--run-dir {folder}: exists and is not a directory")
    kept = folder / "settings.json"
    if kept.exists():
        was = json.loads(kept.read_text())
        if was != settings:
            differ = sorted(k for k in set(was) | set(settings) if was.get(k) != settings.get(k))
            raise ValueError(f"{folder} is the folder of a run with other settings ("
                             + "; ".join(f"--{k.replace('_', '-')} {was.get(k)!r} there, {settings.get(k)!r} here"
                                         for k in differ) + "): pass another --run-dir, or the same settings to resume")
    else:
        folder.mkdir(parents=True, exist_ok=True)
        kept.write_text(json.dumps(settings, indent=1) + "\n")
    if (folder / "checkpoint.pt").exists():  # one this recipe cannot read is refused now, before any data is made
        torch = import_torch()
        if torch is not None:
            RunState(torch, folder).load()
    return folder


FINISHED = (": a finished run, whose model is written out again, not trained again (another --run-dir, or this one "
            "removed, trains anew)")


class RunState:
    """A training loop's state in ``folder/checkpoint.pt`` (a ``run_folder``), written every ``every`` steps and at
    the last, through a temporary file: the state of ``parts`` (name -> anything with ``state_dict``: the model, its
    optimizer, its schedule), the step, the loss curve, the seconds spent, and the random states (the loop's NumPy
    Generator's and torch's). A run stopped at any point and started again resumes at its last checkpoint and ends
    where an uninterrupted run ends."""

    def __init__(self, torch, folder: Path, every: int = 50):
        self.torch, self.path, self.every = torch, Path(folder) / "checkpoint.pt", every

    def resume(self, parts: dict, rng) -> tuple[int, list, float]:
        """Load the checkpoint into ``parts`` and ``rng`` -> (its step, its curve, its seconds); (0, [], 0.0) if
        there is none."""
        if not self.path.exists():
            return 0, [], 0.0
        saved = self.load()
        for name, part in parts.items():
            part.load_state_dict(saved[name])
        rng.bit_generator.state = saved["numpy_rng"]
        self.torch.set_rng_state(saved["torch_rng"])
        return saved["step"], saved["curve"], saved["seconds"]

    def load(self) -> dict:
        """The checkpoint as saved; ValueError where it is not one this recipe reads (written by other code)."""
        try:
            return self.torch.load(self.path, weights_only=True)  # tensors, numbers and strings only: a file is data,
            # never code it would run
        except (pickle.UnpicklingError, RuntimeError, EOFError) as e:
            raise ValueError(f"{self.path} is not a checkpoint this recipe reads ({str(e).splitlines()[0][:100]}): "
                             "remove it, or pass another --run-dir") from None

    def due(self, step: int, steps: int) -> bool:
        """Whether the loop saves after ``step`` steps of ``steps``."""
        return step % self.every == 0 or step == steps

    def save(self, parts: dict, rng, step: int, curve: list, seconds: float) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".pt.tmp")
        self.torch.save(dict({name: part.state_dict() for name, part in parts.items()}, step=step, curve=curve,
                             seconds=seconds, numpy_rng=rng.bit_generator.state, torch_rng=self.torch.get_rng_state()),
                        tmp)
        tmp.replace(self.path)


def rewrite_weights(d: Path, file: str, write, stored: dict) -> None:
    """Rewrite ``d/file`` in another storage: ``write(tmp)`` writes the new file, which then replaces the old one
    (nothing is lost if the write fails half-way); ``training.json``, where there is one, records ``stored``; and
    SHA256SUMS follows the file."""
    tmp = d / (file + ".tmp")
    write(tmp)
    tmp.replace(d / file)
    info = d / "training.json"
    if info.is_file():
        record = json.loads(info.read_text())
        record.update(stored)
        info.write_text(json.dumps(record, indent=2) + "\n")
    replace_sum(d, file)


def run_command(convert) -> int:
    """A storage recipe's ``main``: ``convert()`` -> the line to print on success; an OSError or ValueError is
    printed as ``error: ...`` with exit status 2."""
    try:
        line = convert()
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(line)
    return 0


def sum_line(out: Path, file: str) -> str:
    """``file``'s line of a SHA256SUMS file (``sha256sum -c`` reads it)."""
    import hashlib

    return f"{hashlib.sha256((out / file).read_bytes()).hexdigest()}  {file}"


def replace_sum(out: Path, file: str) -> None:
    """Bring ``file``'s line of ``out/SHA256SUMS`` (if there is one) up to date with the file."""
    sums = out / "SHA256SUMS"
    if sums.is_file():
        lines = [sum_line(out, file) if line.split()[-1] == file else line for line in sums.read_text().splitlines()]
        sums.write_text("\n".join(lines) + "\n")


def write_sums(out: Path, files) -> None:
    """``out/SHA256SUMS`` for ``files`` (``sha256sum -c SHA256SUMS`` checks them)."""
    (out / "SHA256SUMS").write_text("".join(sum_line(out, f) + "\n" for f in files))


def train_next_token(torch, student, generated, chunks, *, steps: int, batch: int, seq: int, lr: float, rng, log,
                     checkpoint: RunState | None = None):
    """Next-token cross-entropy on batches half of ``generated`` sequences (arrays of at most ``seq`` ids, padded
    and masked) and half of ``chunks`` ([n, seq] ids); AdamW (betas 0.9/0.95, weight decay 0.01), 30 warm-up
    steps, cosine decay, gradients clipped at 1. -> (loss per step, seconds). With a ``checkpoint`` the loop resumes
    from it and saves to it."""
    import numpy as np

    opt = torch.optim.AdamW(student.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: float(min(1.0, (s + 1) / 30) * 0.5 * (1 + np.cos(np.pi * min(s / steps, 1.0)))))  # a float:
    # the schedule's state then holds no NumPy scalar, and RunState reads it back as plain data
    parts = dict(model=student, opt=opt, sched=sched)
    first, curve, spent = checkpoint.resume(parts, rng) if checkpoint else (0, [], 0.0)
    if first:
        log(f"resumed at step {first} of {steps} from {checkpoint.path}" + (FINISHED if first == steps else ""))
    t0 = time.perf_counter() - spent
    student.train()
    half = batch // 2
    for step in range(first, steps):
        ids = np.zeros((batch, seq), dtype=np.int64)
        labels = np.full((batch, seq), -100, dtype=np.int64)  # -100: padding, no loss
        for j, r in enumerate([generated[i] for i in rng.integers(0, len(generated), half)]):
            ids[j, : len(r)] = labels[j, : len(r)] = r
        ids[half:] = labels[half:] = chunks[rng.integers(0, len(chunks), batch - half)]
        loss = student(input_ids=torch.from_numpy(ids), labels=torch.from_numpy(labels)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        curve.append(loss.item())
        if checkpoint and checkpoint.due(step + 1, steps):
            checkpoint.save(parts, rng, step + 1, curve, time.perf_counter() - t0)
        if step % 25 == 0 or step == steps - 1:
            el = time.perf_counter() - t0
            log(f"step {step}/{steps} loss {np.mean(curve[-25:]):.3f} lr {sched.get_last_lr()[0]:.2e} "
                f"{(step + 1 - first) * batch * seq / (el - spent):.0f} tok/s")
    return curve, time.perf_counter() - t0


def new_student(transformers, cfg: dict, log) -> tuple:
    """A Llama of the Hugging Face config ``cfg`` (config.json's fields), randomly initialised by torch's seed, and
    its parameter count (logged)."""
    student = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{k: v for k, v in cfg.items()
                                                                        if k not in ("architectures", "model_type")}))
    n_params = sum(q.numel() for q in student.parameters())
    log(f"student: {n_params / 1e6:.2f}M parameters")
    return student, n_params


def save_student(out: Path, student, cfg: dict, recipe: str) -> None:
    """``out/model.safetensors`` (bfloat16; the tied LM head left out: it is the embedding) and ``out/config.json``."""
    from ..model.safetensors_io import write_safetensors

    state = {k: v.detach().float().numpy() for k, v in student.state_dict().items() if k != "lm_head.weight"}
    write_safetensors(out / "model.safetensors", state, "BF16", metadata={"recipe": recipe})
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
