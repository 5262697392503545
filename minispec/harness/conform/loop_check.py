"""The loop check: a peer's whole generate loop, on the tiny random pair of models.py.

    sampling   for each setting of (temperature, top-k, top-p), N runs of m = 3 tokens from one prompt, seeds
               0..N-1: the counts of the first m tokens against the target's exact law of m tokens (the target's
               rows warped, the product over the 125 sequences: exact_law.joint_law), a chi-square test of stated
               power (stats.py), Bonferroni over the settings at ALPHA. The prompt repeats itself, so that prompt
               lookup has something to propose; top-k 2 meets the target's tied tokens (top-k keeps every token
               tied with the k-th, in minispec as in transformers). Which of two tied tokens top-p keeps at its
               boundary is a convention that implementations break differently (minispec the lower id,
               transformers the higher), so the top-p setting is one where no reachable context has a tie at the
               boundary: each result says so (``tie_free``: the law is the same with the vocabulary's order
               reversed). A logits processor can bring such a tie; then the counts are tested against the law of
               each convention (ties kept toward the lower id, or the higher: ``tie_convention``, the one that
               fits), and the setting fails only when neither fits (a peer that breaks the tie one way in one
               context and the other way in another fits neither).
    greedy     temperature 0 on a few prompts: the peer's tokens must equal the target's own greedy tokens
               (``generate``). Where they differ, each of the peer's tokens, after its own earlier tokens, must be
               the target's argmax there or have a logit within check.TIE_MARGIN (1e-4) of it: a near-tie taken
               the other way, and greedy decoding from there on, is forgiven. The first token that is not is shown,
               with how far its logit is below the argmax.

With logits processors (``processors``: the contract's settings), the law is plain masked decoding's (the target's
rows processed with their own prefixes, then warped: sampling.Warp), the greedy tokens are ``generate``'s with them,
and the peer is called with the settings as its ninth argument.

Every call is guarded (contract.py): a fault fails its setting with the call that caused it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from ...generate import generate
from ...model import load_model
from ...processors import build
from ...sampling import Warp, warp
from ..check import ALPHA, TIE_MARGIN
from ..exact_law import joint_law
from ..progress import Progress
from .contract import PeerFault, guarded, loop_outcome
from .models import V, reversed_ids, write_pair
from .stats import compare_counts

M = 3
PROMPT = [2, 3, 1, 2, 3]
SETTINGS = [dict(temperature=1.0, top_k=None, top_p=None), dict(temperature=0.8, top_k=2, top_p=None),
            dict(temperature=0.9, top_k=None, top_p=0.65)]
GREEDY_PROMPTS = [PROMPT, [1], [4, 4, 0, 2]]
GREEDY_TOKENS = 12
RUNS = {False: 1500, True: 6000}


def target_law(target, prompt, m: int, temperature, top_k, top_p, reverse: bool = False, processors=()) -> np.ndarray:
    """The target's exact law of its first m tokens after ``prompt`` [V^m]; ``reverse``: ties broken the other way
    (the warp applied to the vocabulary in reverse order, after the ``processors``, which read token ids)."""
    memo, processed = {}, Warp(temperature, top_k, top_p, tuple(processors), len(prompt))

    def p_of(prefix):
        if prefix not in memo:
            seq = list(prompt) + list(prefix)
            z = processed.process(target.forward(seq, target.new_cache(len(seq)))[-1], seq, strict=True)
            memo[prefix] = warp(z[::-1], temperature, top_k, top_p)[::-1] if reverse else warp(z, temperature, top_k, top_p)
        return memo[prefix]
    return joint_law(p_of, m, V)


def sampling_setting(loop, dirs, target, setting: dict, runs: int, alpha: float, limit_s, bar, prompt=PROMPT,
                     processors: dict | None = None) -> dict:
    counts = np.zeros(V ** M)
    for seed in range(runs):
        args = (str(dirs[0]), str(dirs[1]), list(prompt), M, setting["temperature"], setting["top_k"],
                setting["top_p"], seed) + ((dict(processors),) if processors else ())
        try:
            tokens = loop_outcome(guarded(loop, args, limit_s), M, V)
        except PeerFault as e:
            return dict(passed=False, fault=e.kind, detail=e.detail, call=call_text(args), runs_done=seed)
        counts[np.ravel_multi_index(tuple(tokens), (V,) * M)] += 1
        bar.update()
    procs = build(**processors) if processors else ()
    law = target_law(target, prompt, M, **setting, processors=procs)
    other = target_law(target, prompt, M, **setting, reverse=True, processors=procs)
    res = compare_counts(counts, law, alpha, seed=runs)
    if np.allclose(law, other, atol=1e-12):
        return dict(res, tie_free=True)
    # A tie at top-p's boundary: either convention is a correct peer's, so the counts are tested against both. Failing
    # means that neither fits; a correct peer fails with probability at most alpha still (bug: only the lower id's law
    # was tested, and a correct peer that keeps the higher id was called wrong for certain).
    fits = [dict(res, tie_convention="lower id"),
            dict(compare_counts(counts, other, alpha, seed=runs), tie_convention="higher id")]
    best = max(fits, key=lambda r: (r["passed"], r["p_value"], -r["chi2"]))
    return dict(best, tie_free=False, tie_convention=best["tie_convention"] if best["passed"] else None)


def call_text(args) -> str:
    names = ("target_dir", "draft_dir", "prompt_ids", "max_new_tokens", "temperature", "top_k", "top_p", "seed",
             "processors")
    return ", ".join(f"{n}={a!r}" for n, a in zip(names, args))


def greedy_check(loop, dirs, target, limit_s, bar, prompts=GREEDY_PROMPTS, processors: dict | None = None) -> dict:
    """Temperature 0 (module docstring). A prompt whose tokens differ from the target's greedy ones has ``position``
    and ``top2_logit_gap``, where they first differ, and passes only if each of the peer's tokens, after its own
    earlier ones, is within TIE_MARGIN of the target's largest logit there; else ``wrong_position`` and
    ``below_argmax`` name the first that is not (bug: the first difference alone was looked at, so a loop that took
    the other token of a near-tie and then emitted anything passed)."""
    rows, procs = [], build(**processors) if processors else ()
    for prompt in prompts:
        want = generate(target, prompt, GREEDY_TOKENS, processors=procs)
        args = (str(dirs[0]), str(dirs[1]), list(prompt), GREEDY_TOKENS, 0.0, None, None, 0) + \
            ((dict(processors),) if processors else ())
        try:
            got = loop_outcome(guarded(loop, args, limit_s), GREEDY_TOKENS, V)
        except PeerFault as e:
            rows.append(dict(prompt=prompt, passed=False, fault=e.kind, detail=e.detail, call=call_text(args)))
            bar.update()
            continue
        row = dict(prompt=prompt, want=want, got=got, passed=got == want)
        if got != want:
            j = next(j for j, (x, y) in enumerate(zip(got, want)) if x != y)
            top2 = np.sort(greedy_logits(target, prompt, got[:j], procs))[-2:]
            row.update(position=j, top2_logit_gap=float(top2[1] - top2[0]), passed=True)
            for i in range(j, len(got)):  # before j the peer's tokens are the target's greedy ones
                z = greedy_logits(target, prompt, got[:i], procs)
                if z.max() - z[got[i]] >= TIE_MARGIN:
                    row.update(passed=False, wrong_position=i, below_argmax=float(z.max() - z[got[i]]))
                    break
        rows.append(row)
        bar.update()
    return dict(passed=all(r["passed"] for r in rows), prompts=rows, tie_margin=TIE_MARGIN)


def greedy_logits(target, prompt, prefix, procs=()) -> np.ndarray:
    """[V] the target's logits after prompt + prefix, processed as greedy decoding processes them."""
    ctx = list(prompt) + list(prefix)
    z = target.forward(ctx, target.new_cache(len(ctx)))[-1]
    return Warp(0.0, processors=procs, prompt_len=len(prompt)).process(z, ctx)


def check_loop(loop, thorough: bool = False, limit_s: float | None = 60.0, progress: bool = True,
               runs: int | None = None, settings: list[dict] | None = None, directory=None,
               own_vocabulary: bool = False, reverse_vocabulary: bool = False, processors: dict | None = None) -> dict:
    """The loop check's report (report.py formats it). ``own_vocabulary``: the draft has a vocabulary of its own
    (models.py), for a loop that drafts across tokenizers. ``reverse_vocabulary``: the same models and prompts with
    the vocabulary in reverse order, so that every tie the peer breaks by token id breaks the other way (what
    another CPU's rounding might do), on this machine. ``processors``: the contract's processor settings (module
    docstring); not with ``reverse_vocabulary``, whose ids they would not follow."""
    if processors and reverse_vocabulary:
        raise ValueError("processor settings name token ids: check them without reverse_vocabulary")
    if processors:
        build(**processors)  # refused by name before any call
    t0 = time.perf_counter()
    name = getattr(loop, "__qualname__", getattr(loop, "__name__", repr(loop)))
    runs = runs or RUNS[thorough]
    settings = settings or SETTINGS
    with tempfile.TemporaryDirectory() if directory is None else _kept(directory) as tmp:
        dirs = write_pair(tmp, own_vocabulary, reverse_vocabulary)
        flip = reversed_ids if reverse_vocabulary else list
        prompt = flip(PROMPT)
        target = load_model(dirs[0])
        bar = Progress(runs * len(settings) + len(GREEDY_PROMPTS), f"conform loop {name}", quiet=not progress)
        alpha = ALPHA / len(settings)
        results = []
        for setting in settings:
            s0 = time.perf_counter()
            res = sampling_setting(loop, dirs, target, setting, runs, alpha, limit_s, bar, prompt, processors)
            results.append(dict(setting=setting, prompt=prompt, tokens=M, **res, seconds=time.perf_counter() - s0))
        g0 = time.perf_counter()
        greedy = dict(greedy_check(loop, dirs, target, limit_s, bar, [flip(p) for p in GREEDY_PROMPTS], processors),
                      seconds=time.perf_counter() - g0)
        bar.close()
    failing = [r for r in results if not r["passed"]]
    tvs = [r["tv"] for r in results if "tv" in r]
    return dict(level="loop", function=name, mode="monte carlo", runs_per_setting=runs, tokens=M, vocabulary=V,
                processors=dict(processors) if processors else None,
                draft_vocabulary=V + own_vocabulary,
                alpha=ALPHA, passed=not failing and greedy["passed"], sampling_passed=not failing,
                max_tv=max(tvs) if tvs else None, tv_80_max=max((r.get("tv_80", 0) for r in results), default=None),
                smallest_failing=failing[0] if failing else None, seconds=time.perf_counter() - t0,
                results=results, greedy=greedy)


class _kept:
    """A directory the caller keeps (the models are written there and left)."""

    def __init__(self, path):
        self.path = Path(path)

    def __enter__(self):
        self.path.mkdir(parents=True, exist_ok=True)
        return self.path

    def __exit__(self, *a):
        return False
