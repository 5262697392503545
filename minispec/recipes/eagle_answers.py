"""Acceptance by depth of EAGLE heads on the target's own greedy answers to ``minispec/data``'s prompts, teacher-forced.

    python -m minispec.recipes.eagle_answers weights/eagle-smollm2-135m ~/.cache/minispec/my-head [--json F]
        [--sets code,chat] [--prompts N] [--tokens 96] [--vocab N] [--windows DIR[:N]]

The target (transformers, float32) answers each prompt of the ``--sets`` greedily (the first ``--prompts`` of each;
chat and grounded prompts in the chat template), ``--tokens`` new tokens, and its top features are read from those
passes (an answer no pass read to its end gets a teacher-forced pass: ``read_answers``); then each head is unrolled
over the answers exactly as
train_eagle_ttt.py's held-out figures are (``unrolled``, ``evaluate``'s rule): depth d counts the positions where
guesses 1..d-1 equalled the target's greedy tokens, and reports the share where guess d does too. Only the chains
that start in the answer are counted (their first guess is for the answer's second token or later: the first is the
target's own, from the prompt's pass), as drafting sees them.

This is the held-out figure's twin on prompts written by other hands: the same rule, so the two compare directly.
Also reported: how often the target's greedy token is one the reduced head can propose at all (``in_reduced_vocab``,
at the chains' first guesses), and the first guesses by the head's confidence (``first_by_confidence``: its top
probability over the reduced head, in tenths, as eagle.py's ``context`` labels a round: how many first guesses fell
in each tenth, and the share equal to the target's greedy token), and by where in the answer they fall
(``first_by_position``: spans of the answer position of the guessed token, 2-8, 9-16, 17-32, ...). ``--vocab N`` re-cuts the reduced head to the N
most frequent tokens of the head's training data (its token_frequency_order.json) instead of the shipped list, to
see what a larger one would keep.

``--windows DIR`` adds the same figures on stored windows, the greedy chat windows of a shard folder of
``eagle_data.py`` (DIR:N its shards 0 to N - 1, DIR:A-B its shards A to B - 1), teacher-forced on the features the
folder stores, apart by where each window's request came from (``eagle_data.request_source``: a template, a
standard-library function, or the target's own, ``asked``). A folder no head here was trained on is held out for
them all: beside ``minispec/data``'s answers, it tells prompts unlike the training data's from answers that are hard
anywhere.

It is not the loop's acceptance (``minispec bench eagle --acceptance-only``), where a round starts only after a
rejection or a full chain, so its first guesses fall on other positions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ..drafters.eagle import TENTHS, head_shapes
from ..harness.provenance import provenance
from ..model.config import ModelFormatError, read_json
from ..model.safetensors_io import is_count, read_safetensors
from .eagle_data import LOW, MID
from .eval_overlap import MINISPEC_DATA

SETS = ("code", "chat", "grounded")
POSITION_EDGES = (2, 9, 17, 33, 65, 97, 129, 193, 257, None)  # first_by_position's spans: [2, 8], ..., [257, end]


def data_prompts(name: str, tok, limit: int | None) -> list[list[int]]:
    """The first ``limit`` prompts of ``minispec/data/{name}.jsonl`` as token ids, chat ones in the chat template (as
    harness/prompts.py reads them: the recipes do not import the harness)."""
    rows = [json.loads(line) for line in (MINISPEC_DATA / f"{name}.jsonl").read_text().splitlines() if line.strip()]
    return [tok.encode(tok.apply_chat_template([{"role": "user", "content": r["prompt"]}]) if r["kind"] == "chat"
                       else r["prompt"]) for r in rows[:limit]]


def answer_acceptance(head, E, ids, prompts, seqs, feats, depths: int, dims, torch, lm=None) -> dict:
    """{greedy: [d = 1..depths], positions: [...], in_reduced_vocab, first_by_confidence: [{tenth, positions, greedy}
    for each tenth of the head's confidence in its first guess], first_by_position: [{span: [first, last], positions,
    greedy} for each span of POSITION_EDGES that some answer reaches]} over the answers in ``seqs`` (prompt + answer)
    with their top features ``feats`` [len, D] (None: skipped); ``lm``: their lower layers' outputs l, m [len, 2D], for
    a head that reads them. An answer position is its token's place in the answer, 1 for the first; the chain after an
    answer's last token guesses the target's next token, one position past it, and is counted there too."""
    from .train_eagle_ttt import unrolled
    hit, alive, covered = np.zeros(depths), np.zeros(depths), 0
    last = max((len(s) - len(p) for p, s in zip(prompts, seqs)), default=0) + 1  # the furthest position guessed
    spans = [(a, b or last + 1) for a, b in zip(POSITION_EDGES, POSITION_EDGES[1:]) if a <= last]  # [lo, hi)
    span_kept, span_all = np.zeros(len(spans)), np.zeros(len(spans))  # first guesses by their answer position
    tenth_kept, tenth_all = np.zeros(TENTHS), np.zeros(TENTHS)  # first guesses by the head's confidence, in tenths
    tensor = lambda a: torch.from_numpy(np.asarray(a, np.float32))[None]  # noqa: E731  [1, len, ...]
    for w, (p, s, f) in enumerate(zip(prompts, seqs, feats)):
        if f is None:
            continue
        toks, lens = torch.tensor([s]), torch.tensor([len(s)])
        with torch.no_grad():
            outs = unrolled(head, E, toks, tensor(f), lens, depths, dims, lm=None if lm is None else tensor(lm[w]))
        j = torch.arange(len(s) - 1)[None, :]  # [1, L-1]
        chain = None
        for i, (pred, true, valid) in enumerate(outs):
            looked = (valid > 0) if chain is None else chain & (valid > 0)
            want = (true @ E.T).argmax(-1)  # [1, L-1]: the target's greedy token x_{j+2+i}
            logits = pred @ E[ids].T  # [1, L-1, V_r]
            right = looked & (ids[logits.argmax(-1)] == want)
            answer = j >= len(p) - 1  # chains whose first guess, x_{j+2}, is past the answer's first token
            hit[i] += int((right & answer).sum())
            alive[i] += int((looked & answer).sum())
            if i == 0:
                covered += int(torch.isin(want[looked & answer], ids).sum())
                k = j - len(p) + 3  # [1, L-1]: the answer position (1 = its first token) of the first guess x_{j+2}
                for b, (lo, hi) in enumerate(spans):
                    inside = looked & answer & (k >= lo) & (k < hi)
                    span_all[b] += int(inside.sum())
                    span_kept[b] += int((right & inside).sum())
                tenth = (TENTHS * torch.softmax(logits, -1).max(-1).values).long().clamp(max=TENTHS - 1)  # [1, L-1]: the label
                for t in range(TENTHS):
                    tenth_all[t] += int((looked & answer & (tenth == t)).sum())
                    tenth_kept[t] += int((right & answer & (tenth == t)).sum())
            chain = right
    return dict(greedy=[float(h / a) if a else None for h, a in zip(hit, alive)], positions=[int(a) for a in alive],
                in_reduced_vocab=float(covered / alive[0]) if alive[0] else None,
                first_by_confidence=[dict(tenth=t, positions=int(n), greedy=float(k / n) if n else None)
                                     for t, (k, n) in enumerate(zip(tenth_kept, tenth_all))],
                first_by_position=[dict(span=[lo, None if lo == POSITION_EDGES[-2] else hi - 1], positions=int(n),
                                        greedy=float(k / n) if n else None)
                                   for (lo, hi), k, n in zip(spans, span_kept, span_all)])


def stored_windows(data, tok) -> dict[str, list[int]]:
    """The greedy chat windows of ``load_shards``' ``data`` (those with an answer start), by where their request came
    from (``eagle_data.request_source``) -> {source: window numbers}, sources in a fixed order, empty ones left out."""
    from .eagle_data import request_source
    out = {"template": [], "stdlib": [], "asked": []}
    for w, (kind, start) in enumerate(zip(data["kind"], data["answer_start"])):
        if kind == "chat-greedy" and start > 0:
            text = tok.decode(data["tokens"][w][:start].tolist())  # the prompt in its chat template
            request = text.rsplit("<|im_start|>user\n", 1)[-1].rsplit("<|im_end|>", 1)[0].strip()
            out[request_source(request)].append(w)
    return {k: v for k, v in out.items() if v}


def read_answers(target, seqs, gen_features) -> list[dict]:
    """Each answer's {top, low, mid} features: the generation's own (``eagle_data.generate``), and a teacher-forced
    pass for an answer no pass read to its end (one that ended on the generation's last step: its entry is None; bug:
    it was left out of the counts, though counted among the prompts)."""
    from .eagle_data import features_of
    arrays = features_of(target, seqs, gen_features)  # {top, low, mid}: [sum len, D]
    ends = np.cumsum([len(s) for s in seqs])
    return [{k: v[e - len(s): e] for k, v in arrays.items()} for s, e in zip(seqs, ends)]


def head_config(head_dir) -> dict:
    """A head's config.json ({} where it has none); one that is not a JSON object raises ModelFormatError naming it."""
    f = Path(head_dir) / "config.json"
    return read_json(f) if f.is_file() else {}


def lower_layers(head_dir) -> list | None:
    """The lower layers a head reads (its config.json's ``lower_layers``), None for a head that reads the top alone."""
    return head_config(head_dir).get("lower_layers")


def token_ids(f: Path) -> list[int]:
    """A JSON file's list of distinct token ids (whole numbers from 0, at least one); else ModelFormatError naming it."""
    tokens = read_json(f, expect=None)
    if not (isinstance(tokens, list) and tokens and all(is_count(t) for t in tokens) and len(set(tokens)) == len(tokens)):
        raise ModelFormatError(f"{f}: expected a non-empty JSON list of distinct token ids (whole numbers from 0)")
    return tokens


def read_head(head_dir, vocab: int | None) -> dict:
    """A head directory's files, read and checked before the target loads (before its answers are generated: minutes)
    -> {config, frequent: the ids the reduced head keeps, tensors: eagle.safetensors' arrays, ids: each token file's
    list by its name}. frequent_tokens.json and token_frequency_order.json (read where ``vocab`` is given: its
    ``vocab`` first ids, sorted, are ``frequent``; it must list that many) are lists of distinct token ids;
    config.json's extra_layers is a whole number and extra_intermediate_size absent or a positive one;
    eagle.safetensors is a valid file of finite numbers. Anything else raises ModelFormatError naming the file and the
    problem. Its arrays' names and shapes, and the ids' range, need the target's config: ``check_head``."""
    d = Path(head_dir)
    conf = head_config(d)
    extra, width = conf.get("extra_layers", 0), conf.get("extra_intermediate_size")
    if not is_count(extra) or not (width is None or (is_count(width) and width >= 1)):
        raise ModelFormatError(f"{d / 'config.json'}: extra_layers must be a whole number and extra_intermediate_size "
                               f"absent or a positive whole number, got {extra!r} and {width!r}")
    ids = {"frequent_tokens.json": token_ids(d / "frequent_tokens.json")}
    frequent = ids["frequent_tokens.json"]
    if vocab is not None:
        order = ids["token_frequency_order.json"] = token_ids(d / "token_frequency_order.json")
        if len(order) < vocab:
            raise ModelFormatError(f"{d / 'token_frequency_order.json'}: lists {len(order)} tokens, fewer than the "
                                   f"--vocab {vocab} most frequent asked for")
        frequent = sorted(order[:vocab])
    tensors = read_safetensors(d / "eagle.safetensors")
    for name, a in tensors.items():
        if not np.isfinite(a).all():
            raise ModelFormatError(f"{d / 'eagle.safetensors'}: tensor {name!r} holds NaN or infinite values")
    return dict(config=conf, frequent=frequent, tensors=tensors, ids=ids)


def check_head(head_dir, head: dict, cfg) -> None:
    """``read_head``'s ``head`` against the target's config ``cfg``, before its answers are generated: its token ids
    below the target's vocabulary size, and eagle.safetensors' arrays those ``train_eagle_ttt.load_into`` copies
    into the head built for this target, named and shaped as ``eagle.head_shapes`` says: the layers after the first
    numbered 1, 2, ... without a gap and at most its config's extra_layers, ``w_lower`` only where its config has
    lower_layers, no other array. Else ModelFormatError naming the file and the problem."""
    d = Path(head_dir)
    for name, ids in head["ids"].items():
        if max(ids) >= cfg.vocab_size:
            raise ModelFormatError(f"{d / name}: token id {max(ids)} is not below the target's vocabulary size, "
                                   f"{cfg.vocab_size}")
    f, tensors, conf = d / "eagle.safetensors", head["tensors"], head["config"]
    layers = {k.split(".")[1] for k in tensors if k.startswith("layers.")}
    if layers != {str(i) for i in range(1, len(layers) + 1)} or len(layers) > conf.get("extra_layers", 0):
        raise ModelFormatError(f"{f}: the layers after the first must be numbered layers.1.., layers.2.., ... without a "
                               f"gap, at most config.json's extra_layers ({conf.get('extra_layers', 0)}); got "
                               f"{sorted(layers)}")
    D = cfg.hidden_size
    want = head_shapes(cfg, len(layers), conf.get("extra_intermediate_size")) | \
        ({"w_lower": (2 * D, D)} if conf.get("lower_layers") is not None else {})
    unknown = sorted(set(tensors) - set(want))
    if unknown:
        raise ModelFormatError(f"{f}: unexpected tensors {unknown}" + ("; w_lower needs config.json's lower_layers"
                                                                       if "w_lower" in unknown else ""))
    for name, shape in want.items():
        if name not in tensors and name != "w_lower":  # a head without w_lower reads the lower layers as zero
            raise ModelFormatError(f"{f}: missing tensor {name!r}")
        if name in tensors and tuple(tensors[name].shape) != shape:
            raise ModelFormatError(f"{f}: tensor {name!r} has shape {tuple(tensors[name].shape)}; the target's widths "
                                   f"need {shape}")


def parser() -> argparse.ArgumentParser:
    """The command line's options, with this module's docstring as the description."""
    p = argparse.ArgumentParser(prog="python -m minispec.recipes.eagle_answers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("heads", nargs="+", help="EAGLE head directories (eagle.safetensors, frequent_tokens.json)")
    p.add_argument("--target", default=None, help="target directory (default: the converted SmolLM2)")
    p.add_argument("--sets", default="code,chat", help="prompt sets of minispec/data, comma-separated (default "
                                                        "%(default)s; also grounded)")
    p.add_argument("--prompts", type=int, default=None, help="the first N prompts of each set (default: all)")
    p.add_argument("--tokens", type=int, default=96, help="new tokens per answer (default 96)")
    p.add_argument("--vocab", type=int, default=None,
                   help="re-cut each reduced head to the N most frequent tokens of its training data")
    p.add_argument("--depths", type=int, default=4, help="guesses in a chain (default 4)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--windows", default=None, metavar="DIR[:N]",
                   help="also the greedy chat windows of this shard folder (eagle_data.py), on their stored features, "
                        "apart by where each request came from; DIR:N its shards 0 to N - 1, DIR:A-B shards A to B - 1 "
                        "(held out only where no head here was trained on them)")
    p.add_argument("--json", default=None, help="also write the figures, with their provenance, to this file")
    return p


def refuse_bad_arguments(p, args) -> tuple[list[str], tuple | None]:
    """Refuse (``p.error``: the usage and exit status 2) bad arguments before anything heavy is read or loaded, in
    this order: the numbers, ``--sets``, each head directory (``refuse_head_folder``), ``--windows``' folder and
    ``--json``'s file -> (the sets asked for, ``--windows``' (folder, shards) as ``train_eagle_ttt.data_folder``
    gives them, None without it)."""
    if args.tokens < 2 or args.depths < 1 or (args.prompts is not None and args.prompts < 1) or \
            (args.vocab is not None and args.vocab < 1) or args.threads < 1:
        p.error("--tokens must be at least 2, and --depths, --prompts, --vocab and --threads at least 1")
    sets = [x.strip() for x in args.sets.split(",")]
    if not sets or any(x not in SETS for x in sets):
        p.error(f"--sets {args.sets}: choose among {', '.join(SETS)}")
    for h in args.heads:
        refuse_head_folder(p, h, args.vocab)
    windows = None
    if args.windows:
        from .train_eagle_ttt import data_folder
        try:
            folder, shards = data_folder(args.windows)
        except ValueError as e:
            p.error(str(e).replace("--data", "--windows"))
        if not folder.is_dir():
            p.error(f"--windows {args.windows}: {folder} is not a folder of shards")
        windows = folder, shards
    if args.json and (Path(args.json).is_dir() or not Path(args.json).resolve().parent.is_dir()):
        p.error(f"--json {args.json}: " + ("a directory, not a file" if Path(args.json).is_dir() else
                                           f"directory {Path(args.json).resolve().parent} does not exist"))
    return sets, windows


def refuse_head_folder(p, h, vocab: int | None) -> None:
    """Refuse (``p.error``) a head directory ``h`` without its eagle.safetensors and frequent_tokens.json (or its
    token_frequency_order.json, where ``vocab`` is given), or one whose config.json cannot be read or asks for lower
    layers other than those the target's passes here give (eagle_data.py's LOW and MID)."""
    if not (Path(h) / "eagle.safetensors").is_file() or not (Path(h) / "frequent_tokens.json").is_file():
        p.error(f"{h}: not an EAGLE head directory (it needs eagle.safetensors and frequent_tokens.json)")
    if vocab and not (Path(h) / "token_frequency_order.json").is_file():
        p.error(f"{h}: --vocab needs its token_frequency_order.json")
    try:
        layers = lower_layers(h)
    except ModelFormatError as e:
        p.error(str(e))
    if layers not in (None, [LOW, MID]):
        p.error(f"{h}: reads layers {layers}; the target's passes here give layers {LOW} and {MID} "
                "(eagle_data.py's LOW and MID)")


def read_heads(p, head_dirs, vocab: int | None) -> dict:
    """Each head's files (``read_head``) by its directory, read before the target generates its answers (minutes): a
    bad one is refused (``p.error``) and loses nothing."""
    heads = {}
    for h in head_dirs:
        try:
            heads[h] = read_head(h, vocab)
        except ModelFormatError as e:
            p.error(str(e))
    return heads


def read_target(p, target_dir, heads: dict) -> tuple:
    """The target's config and tokenizer -> (cfg, tok), and each of ``heads`` checked against that config
    (``check_head``: its shapes against the target's widths), still before any generation; a file that is not right
    is refused (``p.error``)."""
    from ..model.config import ModelConfig
    from ..model.tokenizer import load_tokenizer
    try:
        cfg, tok = ModelConfig.from_dir(target_dir), load_tokenizer(target_dir)
        for h, head in heads.items():
            check_head(h, head, cfg)
    except ModelFormatError as e:
        p.error(str(e))
    return cfg, tok


def read_windows(p, spec: str, windows: tuple, target_dir, tok, reads_lower: bool) -> tuple:
    """``--windows spec``'s shards (``windows``: its folder and shards), read before the target loads: a folder that
    cannot be read, or holds no greedy chat window with a known answer start, is refused at once (``p.error``) ->
    (``load_shards``' data, with the lower layers' outputs where ``reads_lower``; ``stored_windows``' groups)."""
    from .train_eagle_ttt import chat_marker, load_shards
    folder, shards = windows
    try:
        data = load_shards(folder, lambda m: print(m, file=sys.stderr), chat_marker(target_dir),
                           with_lower=reads_lower, shards=shards)
    except (OSError, KeyError, ValueError) as e:
        p.error(f"--windows {spec}: cannot read its shards ({e})")
    groups = stored_windows(data, tok)
    if not groups:
        p.error(f"--windows {spec}: no greedy chat window with a known answer start")
    return data, groups


def load_target(target_dir, torch) -> tuple:
    """The target (transformers, float32, in eval mode) and its embedding E [V, D], the tied LM head -> (target, E)."""
    import transformers
    target = transformers.AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    tensors = read_safetensors(Path(target_dir) / "model.safetensors")
    E = torch.from_numpy(np.asarray(tensors["model.embed_tokens.weight"], np.float32))  # [V, D]: the tied LM head
    return target, E


def answer_sets(target, tok, sets, prompts: int | None, tokens: int, stored: tuple | None, reads_lower: bool) -> tuple:
    """The answers each head is measured on -> ({set name: (prompts, seqs, top features)}, {set name: each answer's
    lower layers' outputs l, m [len, 2D], or None}): the target's greedy answers of ``tokens`` new tokens to the first
    ``prompts`` prompts of each of ``sets`` (generated, in that order), then ``stored``'s windows (``read_windows``'
    data and groups) as ``windows:{source}``, on their stored features."""
    from .eagle_data import generate
    answers, lms = {}, {}
    for name in sets:
        asked = data_prompts(name, tok, prompts)
        seqs, feats = generate(target, tok, asked, tokens, True, 0, with_features=True)
        feats = read_answers(target, seqs, feats)
        answers[name] = (asked, seqs, [f["top"] for f in feats])
        lms[name] = [np.concatenate([f["low"], f["mid"]], 1) for f in feats]  # [len, 2D]: layers LOW, MID
        print(f"{name}: {len(asked)} answers of up to {tokens} tokens", file=sys.stderr)
    if stored is not None:
        data, groups = stored
        for source, rows in groups.items():
            name = f"windows:{source}"
            answers[name] = ([data["tokens"][w][: data["answer_start"][w]].tolist() for w in rows],
                             [data["tokens"][w].tolist() for w in rows], [data["feats"][w] for w in rows])
            lms[name] = [data["lm"][w] for w in rows] if reads_lower else [None] * len(rows)
    return answers, lms


def record(args, answers: dict, argv, prog: str) -> dict:
    """The JSON's record of the run, its ``heads`` still empty: the rule, the arguments that shape the figures, the
    number of answers of each set, and the provenance of ``argv`` run as ``prog``."""
    return dict(rule="teacher-forced on the target's greedy answers; depth d among the positions where guesses "
                     "1..d-1 were the target's (train_eagle_ttt.py's held-out rule), answer tokens after the first",
                tokens=args.tokens, prompts={name: len(a[0]) for name, a in answers.items()}, vocab=args.vocab,
                windows=args.windows, heads={},
                provenance=provenance(argv, prog))


def head_figures(head_files: dict, cfg, E, answers: dict, lms: dict, depths: int, torch) -> dict:
    """One head, built for the target's ``cfg`` from ``read_head``'s ``head_files`` (reading the lower layers only
    where its config has lower_layers), measured on each answer set -> {set name: ``answer_acceptance``'s figures}."""
    from .train_eagle import build_head
    from .train_eagle_ttt import load_into
    dims = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
    ids = torch.tensor(head_files["frequent"], dtype=torch.long)
    hconf = head_files["config"]
    head_lower = hconf.get("lower_layers") is not None  # this head's (main's reads_lower: any of them)
    head = build_head(cfg.hidden_size, *dims, cfg.intermediate_size, cfg.rope_theta, cfg.rms_norm_eps,
                      max_len=max(len(s) for _, seqs, _ in answers.values() for s in seqs) + depths,
                      with_lower=head_lower, extra_layers=hconf.get("extra_layers", 0),
                      extra_intermediate=hconf.get("extra_intermediate_size"))
    load_into(head, head_files["tensors"], torch)
    head.eval()
    return {name: answer_acceptance(head, E, ids, *answers[name], depths, dims, torch,
                                    lm=lms[name] if head_lower else None) for name in answers}


def figures_line(h, name: str, r: dict) -> str:
    """The line printed for head ``h`` on answer set ``name`` from its figures ``r``: the share kept by depth, the
    chains counted and how often the target's token is in the reduced head ("-" where nothing was counted), then the
    first guesses by confidence and by answer position (those with some positions)."""
    return (f"{h}, {name}, by depth: " + " / ".join("-" if x is None else f"{x:.3f}" for x in r["greedy"])
            + f" ({r['positions'][0]} chains; the target's token in the reduced head at "
            + ("-" if r["in_reduced_vocab"] is None else f"{r['in_reduced_vocab']:.3f}") + "); by confidence "
            + " ".join(f"[{b['tenth'] / TENTHS:.1f}, {(b['tenth'] + 1) / TENTHS:.1f}) {b['greedy']:.2f} of "
                       f"{b['positions']}" for b in r["first_by_confidence"] if b["positions"])
            + "; by answer position " + " ".join(f"{b['span'][0]}-{b['span'][1] or ''} "
                                                 f"{b['greedy']:.2f} of {b['positions']}"
                                                 for b in r["first_by_position"] if b["positions"]))


def main(argv=None) -> int:
    """The recipe, as the module's docstring says -> 0; 2 without torch (bad arguments exit with 2: ``p.error``)."""
    p = parser()
    args = p.parse_args(argv)
    sets, windows = refuse_bad_arguments(p, args)
    heads = read_heads(p, args.heads, args.vocab)
    reads_lower = any(lower_layers(h) is not None for h in args.heads)
    from .training import import_torch
    torch = import_torch()
    if torch is None:
        return 2
    from .fetch import resolve_model

    torch.set_num_threads(args.threads)
    target_dir = resolve_model(args.target)
    cfg, tok = read_target(p, target_dir, heads)
    stored = read_windows(p, args.windows, windows, target_dir, tok, reads_lower) if windows else None
    target, E = load_target(target_dir, torch)
    answers, lms = answer_sets(target, tok, sets, args.prompts, args.tokens, stored, reads_lower)
    out = record(args, answers, argv, p.prog)
    for h in args.heads:
        out["heads"][h] = head_figures(heads[h], cfg, E, answers, lms, args.depths, torch)
        for name, r in out["heads"][h].items():
            print(figures_line(h, name, r))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
