"""Where a measurement comes from: the machine, the code's commit, the date and the command. Every committed
figure names its run with these (docs generated from the JSON quote them): the harness's results and the recipes'
training records alike, so it stands here, below both. The machine is the model's: its device, kernel and BLAS."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ..model import backend
from ..model.cpu import cpu_fields, widest_simd
from ..model.kernel import KernelUnavailable, default_kernel


def machine_info() -> dict:
    info = dict(python=platform.python_version(), numpy=np.__version__, cpus=os.cpu_count(),
                processor=platform.processor() or platform.machine(), device=backend.device_name())
    fields = cpu_fields()
    if "model name" in fields:
        info["cpu"] = fields["model name"]
        info["cpu_generation"] = f"family {fields.get('cpu family')} model {fields.get('model')}"  # model/cpu.py: why
        info["simd"] = widest_simd(fields)
    if "numba" in sys.modules:  # the numba kernel ran: its compiler and the vector setting it compiled with
        info["numba"] = sys.modules["numba"].__version__
        info["numba_cpu_features"] = ("the host's, without -prefer-256-bit"
                                      if os.environ.get("NUMBA_CPU_FEATURES", "").endswith(",-prefer-256-bit")
                                      else os.environ.get("NUMBA_CPU_FEATURES", "the host's"))
        kernel = sys.modules.get("minispec.model.numba_kernel")
        if kernel is not None:  # this process's entry of its table of tiles (a bench forward --tiles row names its own)
            info["numba_tile_sums"] = kernel.SUMS
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = [f"{x.get('internal_api')} {x.get('version')} {x.get('architecture')}" for x in threadpool_info()]
    except ImportError:
        pass
    return info


def commit(root: Path | None = None) -> str | None:
    """The commit of minispec's checkout (``root``: this file's), with "+changes" when the tracked files differ from
    it; None outside a checkout of its own (bug: a minispec installed inside another repository, under its .venv,
    recorded that repository's commit)."""
    root = Path(root or Path(__file__).parents[2]).resolve()
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True,
                             check=True)
        if Path(top.stdout.strip()).resolve() != root or not (root / "minispec" / "__init__.py").is_file():
            return None
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def provenance(argv=None, prog: str | None = None) -> dict:
    """-> {date (UTC), commit, command, kernel, machine} of the run now in progress. The command is ``argv`` (None:
    this process's command line), after ``prog`` when given: a ``main(argv)`` called in-process passes its parser's
    prog (``minispec bench draft``, ``python -m minispec.recipes.train_draft``) and the arguments it was given; it
    names the CPU kernel in use (``kernel``) where its arguments do not."""
    typed = None if argv is None else [*(prog.split() if prog else []), *argv]
    try:
        kernel = default_kernel()
    except (ValueError, KernelUnavailable):  # a run that never loaded a model may hold any MINISPEC_KERNEL: recorded
        kernel = os.environ.get("MINISPEC_KERNEL", "").strip()  # as it is, so that its provenance is still written
    line = command(typed)
    given = any(a == "--kernel" or a.startswith("--kernel=") for a in (sys.argv if typed is None else typed))
    if kernel not in ("numpy", "") and not given:  # `minispec bench` takes --kernel out before a subcommand parses
        line = f"MINISPEC_KERNEL={kernel} {line}"  # its arguments: the command names the kernel its runs used
    return dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit=commit(), command=line,
                kernel=kernel, machine=machine_info())


def command(argv=None) -> str:
    """The command line as a reader would type it again: ``minispec ...`` or ``python -m minispec.x.y ...``, each
    argument quoted where a shell needs it (bug: "--prompt 'a b; c'" was written unquoted)."""
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return ""
    head = Path(argv[0])
    if head.name in ("minispec", "__main__.py"):
        return shlex.join(["minispec", *argv[1:]])
    if head.suffix == ".py" and "minispec" in head.parts:
        at = len(head.parts) - 1 - head.parts[::-1].index("minispec")  # the package, however its checkout is named
        module = ".".join(head.with_suffix("").parts[at:])
        return shlex.join(["python", "-m", module, *argv[1:]])
    return shlex.join(argv)
