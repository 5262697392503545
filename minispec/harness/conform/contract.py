"""The two entry points a peer implements, how the kit finds them, and how it calls them without trusting them.

    rule   f(target_probs [K+1, V], draft_probs [K, V], draft_tokens [K], rng: numpy.random.Generator)
               -> (n_accepted, next_token)                       (``rejection.accept_reject``'s contract)
    loop   generate(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed) -> list[int]
               (two Hugging Face-format model directories; temperature 0 is greedy; top_k, top_p None for none)
           and, checked with logits processors only, a ninth argument ``processors``: a dict of settings,
               repetition_penalty, frequency_penalty, presence_penalty, no_repeat_ngram (as processors.py means
               them), choices (token id sequences) and stop_ids: a loop written for the eight still checks unchanged

``load("MODULE:FUNCTION", kind)`` imports the function and checks that it can take the contract's arguments; a
missing module, a missing name, a non-callable or a wrong signature is a ``UsageError`` that names the problem.
``guarded(fn, args, limit_s)`` runs one call of the peer: whatever it raises, and a call past its time limit, comes back
as a ``PeerFault`` (the kit never crashes with the peer); a time limit the timer cannot take is the caller's error, a
ValueError before any call. ``rule_outcome`` and ``loop_outcome`` check what came back.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from ...sampling import is_integer
from ..exact_law import RecordedDraw

ARGUMENTS = {"rule": ("target_probs", "draft_probs", "draft_tokens", "rng"),
             "loop": ("target_dir", "draft_dir", "prompt_ids", "max_new_tokens", "temperature", "top_k", "top_p", "seed")}


class UsageError(ValueError):
    """The function named on the command line cannot be checked: the CLI exits 2 with this message."""


class PeerFault(Exception):
    """One call of the peer went wrong: ``kind`` is "raised", "timeout", "type", "shape" or "vocabulary"."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


class Alarm(BaseException):
    """The time limit ringing inside the peer's call (``time_limit``). A BaseException, as KeyboardInterrupt is, so
    that a peer's ``except Exception`` does not swallow it (bug: the alarm raised a PeerFault, an Exception: a rule
    that caught Exception ran on past its limit, and was not blamed)."""


def load(spec: str, kind: str, processors: bool = False):
    """"MODULE:FUNCTION" (MODULE importable, or a path to a .py file) -> the function, checked against ``kind``'s
    contract ("rule" or "loop"; ``processors``: a loop that takes the ninth argument)."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise UsageError(f"{spec!r}: expected MODULE:FUNCTION, for example minispec.rejection:accept_reject")
    module_name, name = spec.split(":")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise UsageError(f"{spec}: no file {module_name}")
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:  # a module beside the caller, as python -m finds it
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise UsageError(f"{spec}: no module named {e.name!r} (is it on PYTHONPATH?)") from None
    except UsageError:
        raise
    except Exception as e:  # the peer's module itself failed to import
        raise UsageError(f"{spec}: importing {module_name} raised {type(e).__name__}: {e}") from None
    if not hasattr(module, name):
        raise UsageError(f"{spec}: module {module_name} has no attribute {name!r}")
    fn = getattr(module, name)
    if not callable(fn):
        raise UsageError(f"{spec}: {name} is a {type(fn).__name__}, not a function")
    check_signature(fn, kind, spec, processors)
    return fn


def check_signature(fn, kind: str, spec: str = "", processors: bool = False) -> None:
    """The function must accept the contract's arguments, positionally, in its order (and ``processors``)."""
    names = ARGUMENTS[kind] + (("processors",) if processors else ())
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin without a signature: the first call tells
    try:
        sig.bind(*names)
    except TypeError as e:
        given = ", ".join(sig.parameters)
        raise UsageError(f"{spec or getattr(fn, '__name__', fn)}: a {kind} must take ({', '.join(names)}), "
                         f"this one takes ({given}): {e}") from None


@contextmanager
def time_limit(seconds: float | None):
    """Raises Alarm in the main thread after ``seconds`` (SIGALRM), and again every ``seconds`` until closed, so that a
    peer that catches even BaseException is interrupted again; what it yields says whether it ever rang (``fired``:
    a peer that swallowed every alarm and then answered is still past its limit). Elsewhere, or without a limit
    (None), nothing is enforced. A limit that is not a finite number > 0, or that the platform's timer cannot take,
    is a ValueError before anything is armed."""
    if seconds is not None and not 0 < seconds < math.inf:
        raise ValueError(f"a time limit must be a finite number of seconds > 0, got {seconds!r}")
    state = SimpleNamespace(fired=False)
    usable = seconds and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield state
        return

    def alarm(signum, frame):
        state.fired = True
        raise Alarm()

    old = signal.signal(signal.SIGALRM, alarm)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds, seconds)  # then every ``seconds``, until closed
        except OverflowError:
            raise ValueError(f"a time limit of {seconds:g} s is more than this platform's timer takes") from None
        yield state
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def guarded(fn, args: tuple, limit_s: float | None, passthrough=()):
    """``fn(*args)``, with anything it raises (but the exception types in ``passthrough``) as PeerFault("raised"), and
    a call past ``limit_s`` as PeerFault("timeout"), even one that caught the alarm and answered. The timer is armed
    outside the part that blames the peer: a limit it cannot take raises the ValueError of ``time_limit`` (bug: with
    --timeout inf the timer raised OverflowError there, and every call of a correct rule was reported as its fault)."""
    try:
        with time_limit(limit_s) as timer:
            try:
                out = fn(*args)
            except (Alarm, KeyboardInterrupt, *passthrough):
                raise
            except BaseException as e:  # SystemExit too: a peer may call sys.exit
                tb = e.__traceback__
                while tb is not None and tb.tb_next is not None:
                    tb = tb.tb_next
                where = f" at {Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}" if tb is not None else ""
                raise PeerFault("raised", f"{type(e).__name__}: {e}{where}") from None
    except Alarm:
        raise PeerFault("timeout", f"no answer within {limit_s:g} s") from None
    if timer.fired:
        raise PeerFault("timeout", f"no answer within {limit_s:g} s (it caught the alarm and ran on)")
    return out


def rule_outcome(out, K: int, V: int, allow_recorded: bool = False) -> tuple[int, int | RecordedDraw]:
    """A rule's answer checked: a pair (n_accepted in 0..K, next_token in 0..V-1), integers (Python, NumPy or a
    0-d tensor). ``allow_recorded``: next_token may also be the exact walk's recorded draw, a RecordedDraw
    (exact_law.record_sample), given back as it is; no integer stands for it (bug: it was read as -1 and any -1
    accepted, so a rule that returned -1, vLLM's placeholder id, as its bonus token passed exactly)."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise PeerFault("shape", f"returned {type(out).__name__} {short(out)}, not a pair (n_accepted, next_token)")
    recorded = allow_recorded and isinstance(out[1], RecordedDraw)  # the exact walk's draw: its law, not a value
    n, t = as_int(out[0]), out[1] if recorded else as_int(out[1])
    if n is None or t is None:
        raise PeerFault("type", f"returned ({short(out[0])}, {short(out[1])}): both must be integers")
    if not 0 <= n <= K:
        raise PeerFault("shape", f"n_accepted = {n} outside 0..K = 0..{K}")
    if not recorded and not 0 <= t < V:
        raise PeerFault("vocabulary", f"next_token = {t} outside the vocabulary 0..{V - 1}")
    return n, t


def loop_outcome(out, m: int, V: int) -> list[int]:
    """A loop's answer checked: a sequence of at least ``m`` token ids in 0..V-1; its first ``m``."""
    try:
        seq = list(out)
    except TypeError:
        raise PeerFault("type", f"returned {type(out).__name__} {short(out)}, not a list of token ids") from None
    if len(seq) < m:
        raise PeerFault("shape", f"returned {len(seq)} tokens, {m} asked for")
    ids = [as_int(x) for x in seq[:m]]
    if any(i is None for i in ids):
        raise PeerFault("type", f"returned {short(seq[:m])}: not integer token ids")
    bad = [i for i in ids if not 0 <= i < V]
    if bad:
        raise PeerFault("vocabulary", f"token {bad[0]} outside the vocabulary 0..{V - 1}")
    return ids


def as_int(x):
    if is_integer(x):
        return int(x)
    if "torch" in sys.modules and isinstance(x, sys.modules["torch"].Tensor) and x.numel() == 1 \
            and not x.is_floating_point() and x.dtype != sys.modules["torch"].bool:
        return int(x.item())
    shape = getattr(x, "shape", None)
    if shape == () and is_integer(getattr(x, "item", lambda: None)()):
        return int(x.item())
    return None


def short(x, width: int = 60) -> str:
    s = repr(x)
    return s if len(s) <= width else s[:width - 3] + "..."
