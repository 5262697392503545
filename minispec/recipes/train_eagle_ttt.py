"""Train the EAGLE head on eagle_data.py's shards, with EAGLE-3's training-time test; resumable.

    python -m minispec.recipes.eagle_data --tokens 2500000                 # the data first (hours, resumable)
    python -m minispec.recipes.train_eagle_ttt --out ~/.cache/minispec/my-head --unroll 4 --epochs 2
    bash scripts/eagle_recipe.sh                                             # the shipped head, every setting given

Needs PyTorch and transformers (`pip install torch==2.13.0 -e ".[train,parity]"`); drafting stays NumPy, and the
head has train_eagle.py's shape (plus ``w_lower`` with ``--lower-layers``, and ``layers.{i}.`` with
``--extra-layers``), so ``minispec/drafters/eagle.py`` loads it.

The training-time test (Li et al. 2025, EAGLE-3, arXiv 2503.01840), paper -> code:

    step 0      f^_{j+1} = Head(e(x_{j+1}), f_j) for every position j, true features in: teacher forcing
    step i      f^_{j+1+i} = Head(e(x_{j+1+i}), f^_{j+i}): the input feature is the head's own output of step
                i - 1 at the same position j, as it is when the head drafts its (i+1)-th guess after the context
                x_0..x_{j+1}. Its query (RoPE position j + i) attends to the step-0 keys of positions 0..j (made
                from true features: the head's cache at drafting time) and to the keys of steps 1..i at position
                j (the guesses drafted before it in the same chain): ``attend``
    loss        sum_i 0.8^i (smooth-L1(f^, f) + w_ce CE(softmax(f W_r), softmax(f^ W_r))) / sum_i 0.8^i, over the
                positions whose target x_{j+1+i} exists; the tokens fed are the true ones (a guess is only
                looked at when the guesses before it were kept); w_ce = 0.1 is EAGLE-1's weight (``--ce-weight``;
                EAGLE-3 keeps the cross-entropy alone)

``--precision bfloat16`` runs the head's products (and the reduced head's) in bfloat16 under torch's autocast (EAGLE
trains in bfloat16 on GPUs); the weights, the optimizer's state, the softmaxes and the losses stay float32, and
evaluation is float32.

Departures from EAGLE-3: the head keeps FR-Spec's reduced head, and reads the target's top feature (EAGLE-1's input),
so that it stays a drop-in for eagle.py and fits the repository. ``--lower-layers`` adds EAGLE-3's lower layers
as a correction to the top feature, not in its place: g_j = f_j + [rms(l_j); rms(m_j)] W_lower, with l and m the
outputs of layers LOW and MID (the shards' ``low`` and ``mid``), rms an RMS norm without weights (the middle layers
carry outliers in the thousands), and W_lower [2D, D] starting at zero, so that ``--init`` from a head without it
starts exactly where that head is. g_j replaces f_j at step 0; steps 1.. read f^ as before (EAGLE-3 also feeds its
own output there), and the regression loss still aims f^ at the top feature. ``--extra-layers N`` adds N decoder
layers after the first (EAGLE's head has one; ``--extra-intermediate`` sets their MLP width), each with its own cache
in the unrolled steps; their output projections (o, down) start at zero, so that ``--init`` from a one-layer head
starts exactly where that head is. ``--answer-tokens N`` trains on each chat window's prompt and the first N tokens
of its answer only (the goals are measured on an answer's first 64-96 tokens: docs/eagle/scaling.md).
``--vocab-from DIR`` takes the reduced head's tokens from DIR's ``token_frequency_order.json`` (its ``--init``, say)
instead of this run's data, so that a fine-tune on a narrow folder keeps the vocabulary its init was trained with.

The run lives in ``--run-dir`` (default ``$MINISPEC_CACHE/eagle-train-<settings>``): ``checkpoint.pt`` (the head, the
optimizer, the step, the curve, written every ``--checkpoint-every`` steps and at the end); its log is ``--out``'s
``train_log.txt``, which each run adds to. Run the same command again after an interruption and it resumes at the
last checkpoint (a run of other settings is refused, not resumed into: other data or schedule, ``--lr``, ``--seed``,
``--noise``, ``--unroll``, ``--init``, ``--ce-weight``, the precision, the layers read, the reduced head's tokens).

Held out: every 20th greedy generation (code and chat), in the order the shards made them; every other chat window
whose prompt (its tokens up to the answer's ``<|im_start|>assistant``) is a held-out window's is left out of training
too (greedy, the same prompt gives the same answer; at T = 1, much of it). Reported per kind by depth d = 1..max(unroll,
4): greedy, the share of positions where the head's d-th guess equals the target's argmax among those where guesses
1..d-1 did (the acceptance of guess d in a chain), and at T = 1 the mean sum min(p, q) of step d. For chat, also
greedy over the chains that start in the answer (``answers``: the first guess is for the answer's second token or
later), as drafting sees them: the prompt's positions (the chat template's fixed system prompt among them) are
easier. The shards do not keep a code window's prompt length, so code is reported over all positions; its prompts
are standard-library lines (which the text shards also hold) or, with eagle_data.py's ``--asked-code``, function heads
the target wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from ..harness.provenance import provenance
from .train_eagle import build_head, frequency_order, frequent_tokens, head_tensors, write_head_dir

HELD_OUT = 20  # every 20th greedy generation is held out


EOS = [0, 2]  # <|endoftext|> and <|im_end|>: always proposable (first in every reduced head)


def data_folder(spec: str) -> tuple[Path, range | None]:
    """``--data``'s DIR, or DIR:N for the folder's shards 0 to N - 1 (a folder grown since a head was trained still
    gives that head's windows), or DIR:A-B for its shards A to B - 1 (the windows grown since: what a head trained
    from an earlier one adds) -> (the folder, the shards' numbers or None for every finished shard). A tail of digits
    and '-' that is neither is refused."""
    head, sep, tail = spec.rpartition(":")
    if not sep or not set(tail) <= set("0123456789-"):
        return Path(spec), None  # a folder whose name holds ':' (no shard numbers after it)
    first, dash, last = tail.partition("-")
    if tail.isdigit():
        if int(tail) < 1:
            raise ValueError(f"--data {spec}: the number of shards after ':' must be 1 or more")
        return Path(head), range(int(tail))
    if dash and first.isdigit() and last.isdigit():
        if int(last) <= int(first):
            raise ValueError(f"--data {spec}: shards A-B need B above A")
        return Path(head), range(int(first), int(last))
    raise ValueError(f"--data {spec}: a number of shards, N or A-B, must follow ':'")


def load_shards(folder: Path, log, marker: list[int] | None = None, with_lower: bool = False,
                shards: range | None = None) -> dict:
    """Every finished shard (its .json written), or the shards numbered in ``shards`` (each must be finished): tokens
    and top features per window, the shard each came from, its kind, and where its answer starts (``answer_starts``
    with ``marker``: -1 where not known); ``with_lower``: also the two lower layers' outputs side by side (``lm``: [len, 2D] float16 per window,
    the shards' low and mid); ``minutes``: the shards' generation and feature minutes."""
    toks, feats, shard, kinds, lms = [], [], [], [], []
    minutes = dict(generation=0.0, features=0.0)
    records = sorted(folder.glob("shard-*.json"))
    if not records:
        raise FileNotFoundError(f"{folder}: no finished shards; make them with python -m minispec.recipes.eagle_data")
    if shards is not None:
        by_number = {int(rec.stem.removeprefix("shard-")): rec for rec in records}
        missing = [i for i in shards if i not in by_number]
        if missing:
            raise FileNotFoundError(f"{folder}: shards {shards.start} to {shards.stop - 1} asked for, {len(missing)} "
                                    f"of them not finished (the first: {missing[0]})")
        records = [by_number[i] for i in shards]
    for rec in records:
        r = json.loads(rec.read_text())
        minutes["generation"] += r["generation_minutes"]  # as eagle_data.write_manifest sums them
        minutes["features"] += r["feature_minutes"]
        if not r["kept"]:
            continue
        if not r.get("features", True):
            raise ValueError(f"{rec}: its windows have no features (made with eagle_data --generate-only); build "
                             "them first: the same eagle_data command without --generate-only")
        with np.load(rec.with_suffix(".npz")) as z:
            t, f, s = z["tokens"], z["top"], z["starts"]
            lm = np.concatenate([z["low"], z["mid"]], 1) if with_lower else None  # [n, 2D]
        for a, b in zip(s[:-1], s[1:]):
            toks.append(t[a:b].astype(np.int64))
            feats.append(f[a:b])
            if with_lower:
                lms.append(lm[a:b])
            shard.append(r["shard"])
            kinds.append(r["kind"])
    log(f"data: {len(records)} shards, {len(toks)} windows, {sum(map(len, toks))} tokens from {folder}")
    return dict(tokens=toks, feats=feats, shard=np.array(shard), kind=kinds, answer_start=answer_starts(toks, marker),
                lm=lms if with_lower else None, minutes=minutes)


def rope(x, cos, sin, HD):  # [B, n, L, HD] with cos, sin [L, HD/2]
    import torch
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def attend(head, emb, feat, step: int, cache: dict, dims):  # [B, L, D] each -> [B, L, D]
    """One unrolled step of the head over every position at once (module docstring); ``cache`` keeps, for each of the
    head's layers, the step-0 keys and values, and the diagonal keys and values of the steps so far."""
    import torch
    x = head.fc(torch.cat([emb, feat], -1))  # [B, L, D]
    for i, p in enumerate(head.layers()):  # cache: {layer i: {k0, v0 [B, H, L, HD], diag: [(k, v) per step]}}
        x = attend_layer(head, p, x, step, cache.setdefault(i, {}), dims)
    return x


def attend_layer(head, p, x, step: int, cache: dict, dims):  # [B, L, D] -> [B, L, D]
    """``attend`` through one decoder layer ``p`` of the head (the head itself for the first, then ``head.extra``'s),
    with that layer's ``cache``."""
    import torch
    H, KVH, HD = dims
    B, L, _ = x.shape
    h = head.norm(x, p.attn_norm)
    cos, sin = head.cos[step: step + L], head.sin[step: step + L]  # RoPE position j + step
    q = rope(p.q(h).view(B, L, H, HD).transpose(1, 2), cos, sin, HD)  # [B, H, L, HD]
    k = rope(p.k(h).view(B, L, KVH, HD).transpose(1, 2), cos, sin, HD).repeat_interleave(H // KVH, 1)
    v = p.v(h).view(B, L, KVH, HD).transpose(1, 2).repeat_interleave(H // KVH, 1)
    if step == 0:
        cache.update(k0=k, v0=v, diag=[])
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        cache["diag"].append((k, v))
        scale = HD ** -0.5
        s0 = (q @ cache["k0"].transpose(-1, -2)) * scale  # [B, H, L, L]: the true context, keys 0..j
        s0 = s0.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
        sd = torch.stack([(q * kd).sum(-1) * scale for kd, _ in cache["diag"]], -1)  # [B, H, L, step]
        w = torch.softmax(torch.cat([s0, sd], -1), -1)
        a = w[..., :L] @ cache["v0"] + sum(w[..., L + m, None] * vd for m, (_, vd) in enumerate(cache["diag"]))
    x = x + p.o(a.transpose(1, 2).reshape(B, L, H * HD))
    h = head.norm(x, p.mlp_norm)
    return x + p.down(torch.nn.functional.silu(p.gate(h)) * p.up(h))


def shifted(a, i: int):  # [B, L, ...] -> [B, L-1, ...]: row j holds a[:, j+1+i], zeros past the end
    import torch
    return torch.nn.functional.pad(a[:, 1 + i:], [0, 0] * (a.dim() - 2) + [0, i])


def unrolled(head, E, toks, feats, lens, steps: int, dims, noise_scale: float = 0.0, lm=None):
    """-> per step i: (predicted f^ [B, L-1, D], true f [B, L-1, D], valid [B, L-1]); position j of step i predicts
    f_{j+1+i}. ``lm`` [B, L, 2D]: the lower layers' outputs l and m, for a head that reads them (step 0 reads
    g_j = ``head.g(f_j, [l_j; m_j])``; steps 1.. read f^ as before: there is no predicted l or m)."""
    import torch
    B, L = toks.shape
    f_in = feats[:, :-1] if lm is None else head.g(feats[:, :-1], lm[:, :-1])
    if noise_scale > 0:
        f_in = f_in + (torch.rand_like(f_in) - 0.5) * noise_scale
    cache, out, pos = {}, [], torch.arange(L - 1)[None, :]
    for i in range(steps):
        emb = E[shifted(toks, i)]  # e(x_{j+1+i}) [B, L-1, D]
        pred = attend(head, emb, f_in, i, cache, dims)
        out.append((pred, shifted(feats, i), (pos < lens[:, None] - 1 - i).float()))
        f_in = pred
    return out


def step_losses(outs, W_r, weight_decay_base: float = 0.8, ce_weight: float = 0.1):
    """The module docstring's loss over ``outs`` as ``unrolled`` returns them -> (loss, [(regression, CE) per step]);
    ``ce_weight`` is w_ce.

    The target's reduced distribution softmax(f W_r) is computed once, at step 0: in ``unrolled``'s output, step i's
    true features are step 0's moved i positions on (``shifted``), so its distribution at position j is step 0's at
    position j + i (the last i rows, past the window's end, are never valid and are left out)."""
    import torch
    total, wsum, parts = 0.0, 0.0, []
    with torch.no_grad():
        p_r0 = torch.softmax((outs[0][1] @ W_r.T).float(), -1)  # [B, L-1, V_r]: row j, the target's distribution at
        # f_{j+1}; .float(): softmax in float32 even where the product ran in bfloat16 (``--precision``)
    for i, (pred, true, valid) in enumerate(outs):
        n = valid.sum().clamp(min=1)
        reg = (torch.nn.functional.smooth_l1_loss(pred, true, reduction="none").mean(-1) * valid).sum() / n
        m = pred.shape[1] - i  # positions j whose f_{j+1+i} is in the window: p_r0's rows i..
        logq = torch.log_softmax((pred[:, :m] @ W_r.T).float(), -1)  # [B, m, V_r], float32 as p_r0
        ce = (-(p_r0[:, i:] * logq).sum(-1) * valid[:, :m]).sum() / n
        w = weight_decay_base ** i
        total, wsum = total + w * (reg + ce_weight * ce), wsum + w
        parts.append((float(reg.detach()), float(ce.detach())))
    return total / wsum, parts


def read_settings(folder: Path) -> dict:
    """A shard folder's settings.json (eagle_data.py), {} where it has none."""
    f = Path(folder) / "settings.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def answer_starts(tokens: list, marker: list[int] | None) -> np.ndarray:
    """Where each window's answer begins: just after its last ``marker`` (the tokens of ``<|im_start|>assistant\n``),
    -1 where it has none (code and text windows, or no marker: a target without a ChatML tokenizer)."""
    out = np.full(len(tokens), -1, np.int64)
    if not marker:
        return out
    m = np.asarray(marker)
    for w, t in enumerate(tokens):
        at = [i for i in np.flatnonzero(t[: len(t) - len(m) + 1] == m[0]) if np.array_equal(t[i: i + len(m)], m)]
        if at:
            out[w] = at[-1] + len(m)
    return out


def held_out_split(data) -> tuple[np.ndarray, list, np.ndarray]:
    """-> (held: every 20th greedy window, in order; same_prompt: the other windows whose prompt, the tokens before
    ``data["answer_start"]``, is a held-out window's; rows: the rest, for training)."""
    greedy = np.flatnonzero([k.endswith("greedy") for k in data["kind"]])
    held = greedy[HELD_OUT - 1:: HELD_OUT]  # every 20th greedy generation, in the order the shards made them
    start = data["answer_start"]
    prompt = lambda r: tuple(data["tokens"][r][: start[r]]) if start[r] >= 0 else None  # noqa: E731
    held_prompts = {prompt(r) for r in held} - {None}
    held_set = set(held.tolist())
    same_prompt = [r for r in range(len(data["tokens"])) if r not in held_set and prompt(r) in held_prompts]
    rows = np.setdiff1d(np.arange(len(data["tokens"])), np.concatenate([held, same_prompt]).astype(np.int64))
    return held, same_prompt, rows


def chat_marker(target_dir) -> list[int] | None:
    """The token ids of ``<|im_start|>assistant\n`` in the target's tokenizer, or None where it has no tokenizer or
    no ``<|im_start|>`` token (the tiny test targets)."""
    if not (Path(target_dir) / "tokenizer.json").exists():
        return None
    from ..model.tokenizer import load_tokenizer
    tok = load_tokenizer(target_dir)
    return tok.encode("<|im_start|>assistant\n") if tok.token_to_id("<|im_start|>") is not None else None


def rows_of(data, rows, seq, cut=None):
    """Right-padded: tokens [B, seq] int64, top features [B, seq, D] float32, lengths [B], and the lower layers'
    outputs l, m [B, seq, 2D] float32 (None where ``data`` has none). ``cut``: each window's length at most, by its
    index (``answer_cut``)."""
    D = data["feats"][0].shape[1]
    toks = np.zeros((len(rows), seq), np.int64)
    feats = np.zeros((len(rows), seq, D), np.float32)
    lens = np.zeros(len(rows), np.int64)
    lm = None if data.get("lm") is None else np.zeros((len(rows), seq, 2 * D), np.float32)
    for b, r in enumerate(rows):
        t = data["tokens"][r][: seq if cut is None else min(seq, cut[r])]
        toks[b, : len(t)], feats[b, : len(t)], lens[b] = t, data["feats"][r][: len(t)], len(t)
        if lm is not None:
            lm[b, : len(t)] = data["lm"][r][: len(t)]
    return toks, feats, lens, lm


def answer_cut(data, answer_tokens: int | None) -> np.ndarray | None:
    """``--answer-tokens``: each window's length at most, its prompt and the first ``answer_tokens`` of its answer
    where the answer's start is known (chat), else the whole window; None without it."""
    if not answer_tokens:
        return None
    return np.array([s + answer_tokens if s >= 0 else len(t) for s, t in zip(data["answer_start"], data["tokens"])])


def evaluate(head, E, ids, data, rows, seq, steps, dims, torch) -> dict:
    """Acceptance by depth on ``rows`` (module docstring): {greedy: [d=1..steps], t1: [...], positions, answers:
    greedy over the answers' positions alone (None at a depth with none), answer_positions}."""
    hit, alive, ans_hit, ans_alive, t1, n = (np.zeros(steps) for _ in range(6))
    with torch.no_grad():
        for a in range(0, len(rows), 4):
            toks, feats, lens, lm = (x if x is None else torch.from_numpy(x) for x in rows_of(data, rows[a: a + 4], seq))
            start = torch.from_numpy(data["answer_start"][rows[a: a + 4]])[:, None]  # [B, 1]; -1: not known
            j = torch.arange(toks.shape[1] - 1)[None, :]  # [1, L-1]
            outs = unrolled(head, E, toks, feats, lens, steps, dims, lm=lm)
            chain = None  # [B, L-1]: guesses 1..i of the chain started at position j all equal the target's
            for i, (pred, true, valid) in enumerate(outs):
                p = torch.softmax(true @ E.T, -1)  # [B, L-1, V]: the target's next-token law at f_{j+1+i}
                q_r = torch.softmax(pred @ E[ids].T, -1)  # [B, L-1, V_r]: the head's
                looked = (valid > 0) if chain is None else chain & (valid > 0)
                right = looked & (ids[q_r.argmax(-1)] == p.argmax(-1))
                answer = (start >= 0) & (j >= start - 1)  # chains whose first guess, x_{j+2}, is past the answer's first
                alive[i] += int(looked.sum())
                hit[i] += int(right.sum())
                ans_alive[i] += int((looked & answer).sum())
                ans_hit[i] += int((right & answer).sum())
                t1[i] += float((torch.minimum(p[..., ids], q_r).sum(-1) * valid).sum())
                n[i] += float(valid.sum())
                chain = right
    return dict(greedy=[float(h / max(a, 1)) for h, a in zip(hit, alive)], t1=[float(x / max(m, 1)) for x, m in zip(t1, n)],
                positions=[int(x) for x in n],
                answers=[float(h / a) if a else None for h, a in zip(ans_hit, ans_alive)],
                answer_positions=[int(x) for x in ans_alive])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m minispec.recipes.train_eagle_ttt", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory for the head")
    p.add_argument("--data", nargs="+", default=None, metavar="DIR",
                   help="the shard folders, read in this order, which decides the held-out windows (every 20th greedy "
                        "generation over all of them): keep the order to compare or resume; DIR:N reads the folder's "
                        "shards 0 to N - 1 only, DIR:A-B its shards A to B - 1 (default: $MINISPEC_CACHE/eagle-data-v2)")
    p.add_argument("--run-dir", default=None, help="checkpoints and log (default: $MINISPEC_CACHE/eagle-train-...)")
    p.add_argument("--target", default=None, help="target directory (default: the converted SmolLM2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--unroll", type=int, default=4, help="steps of the training-time test (1: EAGLE-1's loss)")
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--max-tokens", type=int, default=None,
                   help="train on the first training windows up to this many tokens (the held-out windows taken out "
                        "first; the window that crosses the limit included)")
    p.add_argument("--vocab", type=int, default=8192, help="reduced-head size trained (default 8192)")
    p.add_argument("--ship-vocab", type=int, default=6144, help="reduced-head size shipped (default 6144)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--ce-weight", type=float, default=0.1,
                   help="the cross-entropy's weight beside the feature regression, w_ce (default 0.1, EAGLE-1's)")
    p.add_argument("--noise", type=float, default=0.2, help="uniform input-feature noise, times the feature RMS")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", choices=("float32", "bfloat16"), default="float32",
                   help="the head's products in training: float32, or bfloat16 under torch's autocast (the weights, "
                        "optimizer, softmaxes and losses stay float32; faster only where the CPU multiplies bfloat16 "
                        "natively, AMX or AVX512-BF16)")
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--init", default=None, help="start from this head directory's eagle.safetensors")
    p.add_argument("--vocab-from", default=None, metavar="DIR",
                   help="take the reduced head's tokens from this head directory's token_frequency_order.json (for "
                        "example --init's) instead of this run's data: a fine-tune on a narrow folder then keeps the "
                        "vocabulary its init was trained with")
    p.add_argument("--lower-layers", action="store_true",
                   help="the head also reads the outputs of two lower layers of the target, EAGLE-3's fused features "
                        "(the shards' low and mid; eagle.py's module docstring): w_lower starts at zero, so that "
                        "--init from a head without it starts where that head is")
    p.add_argument("--extra-layers", type=int, default=0,
                   help="decoder layers after the head's first (default 0: EAGLE's one layer); their outputs start at "
                        "zero, so that --init from a head without them starts where that head is")
    p.add_argument("--extra-intermediate", type=int, default=None,
                   help="the MLP width of the extra layers (default: the target's)")
    p.add_argument("--answer-tokens", type=int, default=None,
                   help="train on each chat window's prompt and the first N tokens of its answer only (default: the "
                        "whole window); the held-out windows are evaluated whole, and the steps follow the tokens left, "
                        "so --epochs 1 draws fewer windows than a run over whole windows")
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.unroll < 1 or args.epochs <= 0 or args.batch < 1 or args.seq < 8 or args.checkpoint_every < 1:
        p.error("--unroll, --batch and --checkpoint-every must be at least 1, --epochs positive and --seq at least 8")
    if min(args.vocab, args.ship_vocab) < 1 or (args.max_tokens is not None and args.max_tokens < 1):
        p.error(f"--vocab, --ship-vocab and --max-tokens must be at least 1; got {args.vocab}, {args.ship_vocab} and "
                f"{args.max_tokens}")
    if not (0 <= args.ce_weight < float("inf")):
        p.error(f"--ce-weight must be a finite number >= 0, got {args.ce_weight}")
    if args.extra_layers < 0 or (args.extra_intermediate is not None and args.extra_intermediate < 1):
        p.error(f"--extra-layers must be 0 or more and --extra-intermediate at least 1, got {args.extra_layers} and "
                f"{args.extra_intermediate}")
    if args.answer_tokens is not None and args.answer_tokens < 1:
        p.error(f"--answer-tokens must be at least 1, got {args.answer_tokens}")
    if args.extra_intermediate is not None and not args.extra_layers:
        p.error("--extra-intermediate sets the width of --extra-layers: give both")
    from .training import RunState, begin
    started = begin(args, append_log=True)  # a resumed run adds to its log
    if started is None:
        return 2
    torch, out, log, target_dir, t_start = started
    from ..model.config import ModelConfig
    from ..model.safetensors_io import read_safetensors, write_safetensors
    from .fetch import cache_dir

    cfg = ModelConfig.from_dir(target_dir)
    if not cfg.tie_word_embeddings:
        log(f"error: {target_dir}: the head is trained against the embedding matrix as the LM head, so it needs a "
            "target with tied embeddings (SmolLM2's)")
        return 2
    try:
        specs = [data_folder(d) for d in args.data] if args.data else [(cache_dir() / "eagle-data-v2", None)]
    except ValueError as e:
        log(f"error: {e}")
        return 2
    folders = [folder for folder, _ in specs]
    named = [str(f) if n is None else f"{f}:{n.stop}" if n.start == 0 else f"{f}:{n.start}-{n.stop}"
             for f, n in specs]  # normalized (DIR:0-N is DIR:N): a resumed run must name the same
    extra_width = (args.extra_intermediate or cfg.intermediate_size) if args.extra_layers else None
    lower_layers = None  # the two layers whose outputs the shards' low and mid are (eagle_data.py's settings.json)
    if args.lower_layers:
        found = {(s.get("low"), s.get("mid")) for s in (read_settings(f) for f in folders)}
        if len(found) != 1 or None in next(iter(found)):
            log(f"error: --lower-layers needs shard folders that all name the same low and mid layers in their "
                f"settings.json; found {sorted(found, key=str)}")
            return 2
        top = cfg.num_layers - 2  # eagle_data.stored_layers: a layer past it is stored as this one
        lower_layers = [min(i, top) for i in next(iter(found))]
        if not lower_layers[0] < lower_layers[1]:
            log(f"error: --lower-layers: the shards' low and mid layers {list(next(iter(found)))} are layers "
                f"{lower_layers} of this {cfg.num_layers}-layer target: two distinct layers below the last are needed")
            return 2
    given_order = None  # --vocab-from's token order, complete: its unseen tail appended in id order
    if args.vocab_from:
        f = Path(args.vocab_from) / "token_frequency_order.json"
        try:
            given = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            log(f"error: --vocab-from {args.vocab_from}: cannot read {f.name} ({e})")
            return 2
        wrong = ("is not a list of token ids" if not isinstance(given, list) or not all(
                     isinstance(t, int) and not isinstance(t, bool) for t in given)
                 else f"holds ids outside the target's 0 to {cfg.vocab_size - 1}" if not all(
                     0 <= t < cfg.vocab_size for t in given)
                 else "lists an id twice" if len(set(given)) != len(given)
                 else f"lists {len(given)} ids, fewer than --vocab {args.vocab}" if len(given) < args.vocab else None)
        if wrong:
            log(f"error: --vocab-from {args.vocab_from}: its {f.name} {wrong}")
            return 2
        given = EOS + [t for t in given if t not in EOS]  # the end ids first, as frequency_order puts them
        seen = set(given)
        given_order = np.array(given + [t for t in range(cfg.vocab_size) if t not in seen], np.int64)
    if args.init:
        init_conf = Path(args.init) / "config.json"
        init_cfg = json.loads(init_conf.read_text()) if init_conf.is_file() else {}
        init_layers = init_cfg.get("lower_layers")
        if init_layers and init_layers != lower_layers:
            log(f"error: --init {args.init} reads layers {init_layers}; this run "
                + (f"trains on layers {lower_layers}" if lower_layers else "has no --lower-layers"))
            return 2
        init_extra = (init_cfg.get("extra_layers", 0), init_cfg.get("extra_intermediate_size"))
        if init_extra[0] > args.extra_layers or (init_extra[0] and init_extra[1] != extra_width):
            log(f"error: --init {args.init} has {init_extra[0]} extra layers of width {init_extra[1]}; this run has "
                + (f"--extra-layers {args.extra_layers} of width {extra_width}" if args.extra_layers else "none"))
            return 2
    try:
        marker = chat_marker(target_dir)
        parts = [load_shards(folder, log, marker, with_lower=args.lower_layers, shards=n) for folder, n in specs]
    except (FileNotFoundError, ValueError) as e:
        log(f"error: {e}")
        return 2
    minutes = {k: sum(d["minutes"][k] for d in parts) for k in ("generation", "features")}  # of the shards read
    data = dict(tokens=[t for d in parts for t in d["tokens"]], feats=[f for d in parts for f in d["feats"]],  # the
                kind=[k for d in parts for k in d["kind"]],  # folders' windows in the order given
                answer_start=np.concatenate([d["answer_start"] for d in parts]),
                lm=[x for d in parts for x in d["lm"]] if args.lower_layers else None)
    held, same_prompt, rows = held_out_split(data)
    greedy = np.flatnonzero([k.endswith("greedy") for k in data["kind"]])
    if same_prompt:
        log(f"{len(same_prompt)} windows left out of training: their prompt is a held-out window's")
    if args.answer_tokens and not (data["answer_start"] >= 0).any():
        log("error: --answer-tokens cuts chat windows after their answer's first tokens, but no window here has a known "
            "answer start (the target's tokenizer has no <|im_start|>assistant marker, or the data has no chat)")
        return 2
    cut = answer_cut(data, args.answer_tokens)  # training windows cut after their answer's first tokens, or None
    length = lambda r: len(data["tokens"][r]) if cut is None else min(len(data["tokens"][r]), int(cut[r]))  # noqa: E731
    if args.max_tokens:
        cum = np.cumsum([length(r) for r in rows])
        rows = rows[: int(np.searchsorted(cum, args.max_tokens)) + 1]
    V, D = cfg.vocab_size, cfg.hidden_size
    eos = EOS
    data_freq = frequent_tokens([data["tokens"][r] for r in rows], args.vocab, eos, V)
    freq = data_freq if given_order is None else np.sort(given_order[: args.vocab])
    embed = read_safetensors(Path(target_dir) / "model.safetensors")["model.embed_tokens.weight"]
    E = torch.from_numpy(np.asarray(embed, np.float32))  # [V, D]: the tied LM head
    W_r = E[torch.from_numpy(freq)]
    rms = float(np.sqrt(np.mean(np.concatenate([np.asarray(data["feats"][r], np.float32) for r in rows[:200]]) ** 2)))
    n_tokens = int(sum(length(r) for r in rows))
    steps = int(args.epochs * n_tokens / (args.batch * args.seq * 0.85))
    if steps < 1:
        log(f"error: {n_tokens} training tokens make no step of --batch {args.batch} x --seq {args.seq} at --epochs "
            f"{args.epochs:g}: more data, more epochs, or smaller batches")
        return 2
    dims = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
    depths = max(args.unroll, 4)  # steps trained, and depths evaluated (at least 4)
    head = build_head(D, *dims, cfg.intermediate_size, cfg.rope_theta, cfg.rms_norm_eps, max_len=args.seq + depths,
                      with_lower=args.lower_layers, extra_layers=args.extra_layers, extra_intermediate=extra_width)
    run_dir = Path(args.run_dir) if args.run_dir else cache_dir() / (
        f"eagle-train-s{args.seed}-u{args.unroll}-e{args.epochs:g}-t{n_tokens}-v{args.vocab}-b{args.batch}x{args.seq}"
        + ("-bf16" if args.precision == "bfloat16" else "") + ("-lower" if args.lower_layers else "")
        + (f"-ce{args.ce_weight:g}" if args.ce_weight != 0.1 else "")
        + (f"-x{args.extra_layers}w{extra_width}" if args.extra_layers else "")
        + (f"-a{args.answer_tokens}" if args.answer_tokens else "") + ("-vf" if args.vocab_from else "")
        + (f"-lr{args.lr:g}" if args.lr != 2e-3 else "") + (f"-n{args.noise:g}" if args.noise != 0.2 else "")
        + (f"-init-{Path(args.init).name}" if args.init else ""))
    run_dir.mkdir(parents=True, exist_ok=True)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: float(min(1.0, (s + 1) / 50) * 0.5 * (1 + np.cos(np.pi * min(s / steps, 1.0)))))  # a float:
    # the schedule's state then holds no NumPy scalar, and the checkpoint reads back as plain data
    ckpt = run_dir / "checkpoint.pt"
    state = dict(step=0, curve=[], seconds=0.0, steps=steps, data_tokens=n_tokens, folders=named,
                 precision=args.precision, lower_layers=args.lower_layers, ce_weight=args.ce_weight,
                 extra=[args.extra_layers, extra_width], answer_tokens=args.answer_tokens,
                 vocab=[int(t) for t in freq], lr=args.lr, seed=args.seed, noise=args.noise, unroll=args.unroll,
                 init=args.init)
    drawn = dict(lr=args.lr, seed=args.seed, noise=args.noise, unroll=args.unroll, init=args.init)  # the optimizer's
    # and the draws' settings: a resumed run with others would mix two runs (the saved optimizer keeps the old rate)
    if ckpt.exists():
        try:
            saved = RunState(torch, run_dir).load()  # plain data only, as the other recipes read theirs (bug: any
            # pickled object in the run folder ran on resume)
        except ValueError as e:
            log(f"error: {e}")
            return 2
        state = saved["state"]
        was = dict(steps=state.get("steps"), tokens=state.get("data_tokens"), folders=state.get("folders", named),
                   precision=state.get("precision", "float32"), lower=state.get("lower_layers", False),
                   ce=state.get("ce_weight", 0.1), extra=state.get("extra", [0, None]), cut=state.get("answer_tokens"),
                   vocab=state.get("vocab", [int(t) for t in data_freq]),  # (a run from before --vocab-from: its data's)
                   **{k: state.get(k, v) for k, v in drawn.items()})  # (a run from before these were kept: this one's)
        now = dict(steps=steps, tokens=n_tokens, folders=named, precision=args.precision, lower=args.lower_layers,
                   ce=args.ce_weight, extra=[args.extra_layers, extra_width], cut=args.answer_tokens,
                   vocab=[int(t) for t in freq], **drawn)
        if was != now:
            def settings(r):  # -> the run's settings in words
                return (f"{r['steps']} steps over {r['tokens']} tokens of {r['folders']} in {r['precision']}"
                        f"{' with --lower-layers' if r['lower'] else ''} at --ce-weight {r['ce']:g}"
                        + (f", {r['extra'][0]} extra layers of width {r['extra'][1]}" if r["extra"][0] else "")
                        + (f", chat answers cut after {r['cut']} tokens" if r["cut"] else "")
                        + ("" if r["vocab"] == now["vocab"] else ", another reduced head's tokens")
                        + f", --lr {r['lr']:g}, --seed {r['seed']}, --noise {r['noise']:g}, --unroll {r['unroll']}"
                        + (f", from --init {r['init']}" if r["init"] else ""))
            log(f"error: {ckpt} is a run of {settings(was)}, this one would be {settings(now)}: pass another --run-dir, "
                "or the same settings and data (folders in the same order) to resume")
            return 2
        state.update({k: v for k, v in drawn.items() if k not in state})  # a run from before they were kept: kept now
        head.load_state_dict(saved["head"])  # after the check: another run's head may not even have the same arrays
        opt.load_state_dict(saved["opt"])
        sched.load_state_dict(saved["sched"])
        log(f"resumed at step {state['step']} of {steps} from {ckpt}")
    elif args.init:
        log(f"--init {args.init}: starting from its head")
        load_into(head, read_safetensors(Path(args.init) / "eagle.safetensors"), torch)
    log(f"{n_tokens} training tokens in {len(rows)} windows, {len(held)} held-out windows; {steps} steps of "
        f"{args.batch} x {args.seq}, unroll {args.unroll}; feature RMS {rms:.3f}; run folder {run_dir}")

    def save():
        tmp = run_dir / "checkpoint.pt.tmp"
        torch.save(dict(head=head.state_dict(), opt=opt.state_dict(), sched=sched.state_dict(), state=state), tmp)
        tmp.replace(ckpt)

    t0 = time.perf_counter() - state["seconds"]
    while state["step"] < steps:
        s = state["step"]
        rng = np.random.default_rng((args.seed, s))  # keyed by the step: a resumed run draws the same batches
        batch = rows[rng.integers(0, len(rows), args.batch)]
        toks, feats, lens, lm = (x if x is None else torch.from_numpy(x) for x in rows_of(data, batch, args.seq, cut))
        torch.manual_seed(args.seed * 1_000_003 + s)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bfloat16"):
            outs = unrolled(head, E, toks, feats, lens, args.unroll, dims, args.noise * rms, lm)
            loss, parts = step_losses(outs, W_r, ce_weight=args.ce_weight)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        state["curve"].append(parts)
        state["step"] = s + 1
        state["seconds"] = time.perf_counter() - t0
        if state["step"] % args.checkpoint_every == 0 or state["step"] == steps:
            save()
        if s % 25 == 0 or state["step"] == steps:
            recent = np.mean([c for c in state["curve"][-25:]], axis=0)  # [unroll, 2]
            log(f"step {state['step']}/{steps} " + " ".join(f"d{i + 1} {r:.3f}/{c:.2f}" for i, (r, c) in enumerate(recent))
                + f" lr {sched.get_last_lr()[0]:.2e} {state['step'] * args.batch * args.seq / state['seconds']:.0f} tok/s")
    head.eval()
    ids = torch.from_numpy(freq)
    if not len(held):
        log(f"no held-out windows: they are every {HELD_OUT}th greedy generation, and the data has {len(greedy)}")
    held_out = {kind: evaluate(head, E, ids, data, rows_of_kind, args.seq, depths, dims, torch)
                for kind, rows_of_kind in (("code", held[[data["kind"][r].startswith("code") for r in held]]),
                                           ("chat", held[[data["kind"][r].startswith("chat") for r in held]]))}
    for kind, res in held_out.items():
        log(f"held out, {kind} ({res['positions'][0]} positions), by depth: greedy "
            + " ".join(f"{x:.3f}" for x in res["greedy"]) + "; T=1 " + " ".join(f"{x:.3f}" for x in res["t1"])
            + (f"; answers alone ({res['answer_positions'][0]} positions), greedy "
               + " ".join("-" if x is None else f"{x:.3f}" for x in res["answers"]) if res["answer_positions"][0] else ""))
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "eagle.safetensors", {k: v.contiguous().numpy() for k, v in head_tensors(head).items()},
                      "F32", metadata={"recipe": "minispec.recipes.train_eagle_ttt"})
    order = frequency_order([data["tokens"][r] for r in rows], eos, V) if given_order is None else given_order
    n_params = sum(x.numel() for x in head.parameters())
    summary = dict(recipe="minispec.recipes.train_eagle_ttt", parameters=n_params, trained_reduced_vocab=len(freq),
                   reduced_vocab=args.ship_vocab, loss=f"training-time test, {args.unroll} steps, weights 0.8^i",
                   generated_sequences=int(sum(k != "text" for k in data["kind"])), sequences=len(data["tokens"]),
                   training_tokens=n_tokens, steps=steps, unroll=args.unroll, lower_layers=lower_layers,
                   extra_layers=args.extra_layers, extra_intermediate_size=extra_width,
                   data_folders=named,
                   generation_minutes=minutes["generation"], feature_minutes=minutes["features"],
                   training_minutes=state["seconds"] / 60, total_minutes_this_run=(time.perf_counter() - t_start) / 60,
                   held_out={"by_depth": held_out, "held_out_windows": len(held), "left_out_same_prompt": len(same_prompt),
                             "trained_vocab": len(freq)},
                   loss_curve={st: [[float(x) for x in row] for row in np.mean(state["curve"][max(0, st - 25): st + 1], axis=0)]
                               for st in range(0, steps, 50)},
                   args=vars(args), torch=torch.__version__, provenance=provenance(argv, p.prog))
    write_head_dir(out, Path(target_dir).name, cfg, order, summary, readme=write_readme, lower_layers=lower_layers,
                   extra_layers=args.extra_layers, extra_intermediate=extra_width)
    log(f"done: {summary['total_minutes_this_run']:.1f} min this run, {state['seconds'] / 60:.1f} min of training")
    return 0


def lower_text(summary: dict) -> str:
    low = summary.get("lower_layers")
    return (f", corrected by the outputs l, m of its layers {low[0]} and {low[1]} (g_j = f_j + [rms(l_j); rms(m_j)] W_lower,"
            " rms an RMS norm without weights)" if low else "")


def cut_text(summary: dict) -> str:
    n = summary["args"].get("answer_tokens")
    return f", each chat window cut after the first {n} tokens of its answer (--answer-tokens)" if n else ""


def layers_text(summary: dict) -> str:
    n, width = summary.get("extra_layers", 0), summary.get("extra_intermediate_size")
    return "one Llama decoder layer of the target's widths" + (
        f", then {n} more of MLP width {width}, whose outputs started at zero" if n else "")


def write_readme(out: Path, summary: dict, freq) -> None:
    a, d = summary["args"], summary["held_out"]["by_depth"]
    g = "g_j" if summary.get("lower_layers") else "f_j"  # the feature the head reads
    (out / "README.md").write_text(f"""# {out.name}: an EAGLE feature head for SmolLM2-135M-Instruct

Drafts for the target from the target's own top-layer features (``minispec/drafters/eagle.py``){lower_text(summary)}:
fc([e(x_{{j+1}}); {g}]) then {layers_text(summary)}, {summary['parameters'] / 1e6:.2f}M
parameters (float32), and a reduced LM head: the target's own head restricted to the {len(freq)} most frequent
tokens of the training data (``frequent_tokens.json``; trained with a cross-entropy over the top
{summary['trained_reduced_vocab']}).

Use: `minispec generate --draft weights/{out.name} --chat --prompt "..."` (the target is loaded as usual).

## Provenance

Made on this machine by `{summary['provenance']['command']}` (as run; every setting it does not give at its
default), with torch {summary['torch']}, on the shards of
`python -m minispec.recipes.eagle_data` (their manifests: docs/eagle/data_manifest*.json):
- data: {summary['sequences']} windows in the folders, {summary['generated_sequences']} of them generated by the target itself
  (greedy and T=1) for prompts built here or written by the target itself, the rest standard-library source; training
  read the first {summary['training_tokens']} tokens of them{cut_text(summary)}. Windows that share a run of 8 words
  with any evaluation prompt were dropped;
- training: {summary['steps']} AdamW steps of {a['batch']} windows of up to {a['seq']} tokens, with EAGLE-3's training-time
  test unrolled {a['unroll']} steps, its products in {a.get('precision', 'float32')} ({summary['training_minutes']:.1f} min on
  {a['threads']} CPU threads);
- held out (every 20th greedy generation; {summary['held_out'].get('left_out_same_prompt', 0)} chat windows with a held-out
  window's prompt were kept out of training), by depth d = 1, 2, ...: the d-th guess equals the target's greedy
  token, given the guesses before it did: code {", ".join(f"{x:.3f}" for x in d['code']['greedy'])}; chat
  {", ".join(f"{x:.3f}" for x in d['chat']['greedy'])} (over the answers alone:
  {", ".join("-" if x is None else f"{x:.3f}" for x in d['chat'].get('answers', []))}); T=1 acceptance sum min(p, q): code
  {", ".join(f"{x:.3f}" for x in d['code']['t1'])}; chat {", ".join(f"{x:.3f}" for x in d['chat']['t1'])}. Full log:
  `train_log.txt`, figures: `training.json`.

`token_frequency_order.json` lists the token ids most frequent first, without the tail of unseen ids (in
increasing order). `SHA256SUMS` lists the checksums of the four files.
""")


def load_into(head, tensors: dict, torch) -> None:
    """The inverse of train_eagle.head_tensors: eagle.safetensors' arrays into the torch head. A head that reads the
    lower layers keeps its ``w_lower`` at zero where the file has none (it starts as the file's head); extra layers
    the file lacks stay as built (their outputs zero). A file that has either needs such a head."""
    D = head.fc.weight.shape[0]
    t = lambda name: torch.from_numpy(np.asarray(tensors[name], np.float32))  # noqa: E731
    names = {k.split(".")[1] for k in tensors if k.startswith("layers.")}
    if names != {str(i) for i in range(1, len(names) + 1)}:
        raise ValueError(f"the head file's layers after the first must be numbered layers.1.., layers.2.., ... without "
                         f"a gap; got {sorted(names)}")
    if len(names) > len(head.extra):
        raise ValueError(f"the head file has layers up to layers.{len(names)}: build the head with that many extra_layers")

    def layer(p, prefix):  # one decoder layer's arrays into the module p
        qkv, gu = t(prefix + "w_qkv").T, t(prefix + "w_gate_up").T
        nq, nk, F = p.q.weight.shape[0], p.k.weight.shape[0], p.gate.weight.shape[0]
        if tuple(gu.shape) != (2 * F, D):
            raise ValueError(f"{prefix}w_gate_up has MLP width {gu.shape[0] // 2}; the head was built with {F}")
        p.attn_norm.copy_(t(prefix + "attn_norm"))
        p.q.weight.copy_(qkv[:nq])
        p.k.weight.copy_(qkv[nq: nq + nk])
        p.v.weight.copy_(qkv[nq + nk:])
        p.o.weight.copy_(t(prefix + "w_o").T)
        p.mlp_norm.copy_(t(prefix + "mlp_norm"))
        p.gate.weight.copy_(gu[:F])
        p.up.weight.copy_(gu[F:])
        p.down.weight.copy_(t(prefix + "w_down").T)

    with torch.no_grad():
        head.fc.weight.copy_(t("w_fc").T)
        head.fc.bias.copy_(t("b_fc"))
        layer(head, "")
        for i in range(1, len(names) + 1):
            layer(head.extra[i - 1], f"layers.{i}.")  # the file's layers.i is the torch head's extra[i - 1]: its first
            # layer's parameters are the Head's own
        if "w_lower" in tensors:
            if not hasattr(head, "w_lower"):
                raise ValueError("the head file reads the target's lower layers (w_lower): build the head with_lower")
            head.w_lower.weight.copy_(t("w_lower").T)
    assert head.fc.weight.shape == (D, 2 * D)


if __name__ == "__main__":
    sys.exit(main())
