"""Train an EAGLE feature head for SmolLM2-135M-Instruct on data made on this machine (see eagle.py).

    python -m minispec.recipes.train_eagle --out ~/.cache/minispec/first-head --gen-batches 32 --stdlib-tokens 160000 --epochs 3 --threads 1

gives the first head's arguments (those its training.json records at commit 049dc18, where it was
weights/eagle-smollm2-135m; every other one at its default). The run writes beside --out and moves its files into it at
the end: a run that stops leaves --out as it was (training.staging). The same command run again resumes a stopped
run: its data is cached (below), and its training's checkpoints are kept in --run-dir (default
``$MINISPEC_CACHE/train_eagle-run-<hash of the settings>``; training.run_folder, RunState).

Needs PyTorch and transformers (`pip install torch==2.13.0 -e ".[train,parity]"`); drafting stays NumPy.

Recipe (every count fixed, so a seed gives the same head on the same software):
1. Data (cached under ``$MINISPEC_CACHE/eagle-data-*``, so a second run or a second variant skips it; a folder
   records the settings it was made with, the target among them, and one of other settings is refused):
   the target's own generations (greedy and T=1) for prompts built here, code cut from the Python
   standard library and chat instructions from templates x topics (``train_draft.py``, seed 1, so not
   the shipped draft's prompts either), plus standard-library source chunks. The evaluation prompts in
   ``minispec/data/`` are hand-written and never used. For every sequence the target's top-layer
   features f_0..f_{n-1} (after its final norm: what its LM head reads) come from one forward pass.
2. The frequent-token list (FR-Spec): the ``--vocab`` most frequent ids of the target's generations and
   the standard-library tokens, the end-of-sequence tokens always included.
3. Head: fc([e(x_{j+1}); f_j]) -> one Llama decoder layer (the target's widths) -> f^_{j+1}; trained
   with teacher forcing on true features plus uniform noise (EAGLE's augmentation), loss
   smooth-L1(f^_{j+1}, f_{j+1}) + 0.1 CE(softmax(f_{j+1} W_r), softmax(f^_{j+1} W_r)) over the reduced
   head W_r (``--loss ce``: the second term alone); AdamW, cosine schedule.
4. Evaluation on held-out generated sequences (every 20th): how often the head's top token equals the
   target's greedy token (first-guess greedy acceptance) and the mean sum(min(p, q)) at T = 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from ..harness.provenance import provenance
from .training import FINISHED, write_sums


def target_features(target, seqs, batch_tokens: int, log, what: str):
    """[sum len, D] float16 post-norm top-layer features of each sequence (one causal pass each batch)."""
    import torch
    out, done, t0 = [None] * len(seqs), 0, time.perf_counter()
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    i = 0
    while i < len(order):
        L = len(seqs[order[i]])
        n = max(1, batch_tokens // max(L, 1))
        group = order[i: i + n]
        width = max(len(seqs[j]) for j in group)
        ids = torch.tensor([seqs[j] + [0] * (width - len(seqs[j])) for j in group])  # right padding: causal
        with torch.no_grad():
            h = target.model(input_ids=ids).last_hidden_state.float().numpy()  # [B, width, D], after final norm
        for row, j in enumerate(group):
            out[j] = h[row, : len(seqs[j])].astype(np.float16)
        done += sum(len(seqs[j]) for j in group)
        i += n
        if (i // n) % 10 == 0 or i >= len(order):
            log(f"features ({what}): {done} tokens, {done / (time.perf_counter() - t0):.0f} tok/s")
    return out


def make_data(args, log) -> dict:
    import torch
    import transformers

    from ..model.tokenizer import load_tokenizer
    from .fetch import resolve_model
    from .train_draft import generate_data, stdlib_chunks, stdlib_files

    target_dir = resolve_model(args.target)
    tok = load_tokenizer(target_dir)
    target = transformers.AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    files = stdlib_files()
    gen, gen_s = generate_data(target, tok, files, args.gen_batches, args.gen_batch, args.gen_tokens, args.seed + 1, log)
    gen = [s[: args.seq] for s in gen]
    rng = np.random.default_rng(args.seed + 1)
    code = stdlib_chunks(files, tok.encode, args.stdlib_tokens, args.seq, rng.permutation(len(files))).tolist()
    t1 = time.perf_counter()
    feats = target_features(target, gen + code, 8192, log, "all")
    data = dict(tokens=[np.array(s, np.int32) for s in gen + code], feats=feats, generated=len(gen),
                eos=[int(t) for t in tok.eos_ids], embed=target.model.embed_tokens.weight.detach().numpy().copy(),
                generation_minutes=gen_s / 60,
                feature_minutes=(time.perf_counter() - t1) / 60)
    return data


def data_dir(args) -> tuple[Path, dict]:
    """-> (where the data of ``args``'s settings is: ``--data-dir``, else a folder of the cache named by them; the
    settings, which ``settings.json`` there records: the target's directory (None: the converted SmolLM2) and the
    counts that shape the data)."""
    from .fetch import cache_dir

    target = str(Path(args.target).resolve()) if args.target is not None else None
    settings = dict(target=target, seed=args.seed, gen_batches=args.gen_batches, gen_batch=args.gen_batch,
                    gen_tokens=args.gen_tokens, stdlib_tokens=args.stdlib_tokens, seq=args.seq)
    key = f"eagle-data-s{args.seed}-g{args.gen_batches}x{args.gen_batch}x{args.gen_tokens}-t{args.stdlib_tokens}-q{args.seq}"
    if target is not None:  # (bug: the key left the target out: another target's data was reused)
        key += f"-{Path(target).name}-{hashlib.sha256(target.encode()).hexdigest()[:8]}"
    return (Path(args.data_dir) if args.data_dir else cache_dir() / key), settings


def check_data_dir(d: Path, settings: dict) -> None:
    """Refuse (ValueError) finished data in ``d`` that was made with other ``settings`` than these, or that does not
    say (a folder made before ``settings.json`` was written): it would be reused as if it were of these. (bug:
    --data-dir reused any folder with a ``done`` file)"""
    if not (d / "done").exists():
        return
    f = d / "settings.json"
    if not f.is_file():
        raise ValueError(f"{d}: its data records no settings (made before settings.json was written), so whether it was "
                         f"made with these is unknown: {json.dumps(settings)}; if it was, write them to {f}, else give "
                         "another --data-dir")
    from ..model.config import read_json

    made = read_json(f)  # a JSON object, or an error that names the file
    other = [f"{k} {made.get(k)!r} (this run: {v!r})" for k, v in settings.items() if made.get(k) != v]
    if other:
        raise ValueError(f"{d}: its data was made with other settings: " + ", ".join(other) + "; give another --data-dir")


def load_or_make_data(args, log) -> dict:
    d, settings = data_dir(args)
    check_data_dir(d, settings)
    if (d / "done").exists():
        log(f"data: reusing {d}")
        meta = json.loads((d / "meta.json").read_text())
        toks, feats = np.load(d / "tokens.npy"), np.load(d / "feats.npy", mmap_mode="r")
        starts = np.load(d / "starts.npy")
        return dict(meta, tokens=[toks[a:b] for a, b in zip(starts[:-1], starts[1:])],
                    feats=[feats[a:b] for a, b in zip(starts[:-1], starts[1:])], embed=np.load(d / "embed.npy"))
    data = make_data(args, log)
    d.mkdir(parents=True, exist_ok=True)
    starts = np.cumsum([0] + [len(t) for t in data["tokens"]])
    np.save(d / "tokens.npy", np.concatenate(data["tokens"]))
    np.save(d / "feats.npy", np.concatenate(data["feats"]))
    np.save(d / "starts.npy", starts)
    np.save(d / "embed.npy", data["embed"])
    (d / "meta.json").write_text(json.dumps({k: v for k, v in data.items() if k not in ("tokens", "feats", "embed")}))
    (d / "settings.json").write_text(json.dumps(settings, indent=2))
    (d / "done").write_text("ok\n")
    log(f"data saved to {d}")
    return data


def frequency_order(tokens, eos, V: int) -> np.ndarray:
    """Every token id, most frequent first (the end-of-sequence ids first of all: always proposable)."""
    counts = np.bincount(np.concatenate(tokens), minlength=V).astype(np.float64)
    counts[list(eos)] = np.inf
    return np.argsort(-counts, kind="stable").astype(np.int64)


def trimmed_order(order) -> list[int]:
    """``order`` without its tail of ids in increasing order (the tokens the data never showed, in id order):
    ``minispec bench eagle`` appends the missing ids in increasing order again, so nothing is lost."""
    order = [int(t) for t in order]
    cut = len(order)
    while cut > 1 and order[cut - 2] < order[cut - 1]:
        cut -= 1
    return order[:cut]


def frequent_tokens(tokens, vocab: int, eos, V: int) -> np.ndarray:
    return np.sort(frequency_order(tokens, eos, V)[:vocab])


def build_head(D, H, KVH, HD, F, theta, eps, max_len: int = 4096, with_lower: bool = False, extra_layers: int = 0,
               extra_intermediate: int | None = None):
    """The head; ``with_lower``: it also reads the outputs l, m of two lower layers of the target (``w_lower``, zero at
    first: at the start it is the head without them; eagle.py's module docstring). ``extra_layers``: decoder layers
    after the first (``head.extra``), of MLP width ``extra_intermediate`` (default F); each adds to the residual stream
    through its ``o`` and ``down``, which start at zero, so at the start it is the head without them (a zero-initialised
    residual branch: its other weights get gradients once ``o`` and ``down`` have moved off zero)."""
    import torch
    from torch import nn

    def layer_params(m, width):  # one decoder layer's parameters, set on the module m
        m.attn_norm = nn.Parameter(torch.ones(D))
        m.q, m.k = nn.Linear(D, H * HD, bias=False), nn.Linear(D, KVH * HD, bias=False)
        m.v, m.o = nn.Linear(D, KVH * HD, bias=False), nn.Linear(H * HD, D, bias=False)
        m.mlp_norm = nn.Parameter(torch.ones(D))
        m.gate, m.up = nn.Linear(D, width, bias=False), nn.Linear(D, width, bias=False)
        m.down = nn.Linear(width, D, bias=False)

    class Extra(nn.Module):
        """A decoder layer after the first: its outputs start at zero."""

        def __init__(self):
            super().__init__()
            layer_params(self, extra_intermediate or F)
            nn.init.zeros_(self.o.weight)
            nn.init.zeros_(self.down.weight)

    class Head(nn.Module):
        """The same computation as eagle.py's NumPy head (tests/test_eagle.py and test_eagle_layers.py check the two
        agree). Its first layer's parameters are its own (the files of one-layer heads name them so); ``extra`` holds
        the layers after it: the file's ``layers.{i}.`` is ``extra[i - 1]``."""

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2 * D, D, bias=True)
            layer_params(self, F)
            self.extra = nn.ModuleList(Extra() for _ in range(extra_layers))
            if with_lower:
                self.w_lower = nn.Linear(2 * D, D, bias=False)  # [rms(l); rms(m)] -> D
                nn.init.zeros_(self.w_lower.weight)
            inv = 1.0 / theta ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD)
            ang = torch.outer(torch.arange(max_len, dtype=torch.float64), inv)
            self.register_buffer("cos", ang.cos().float(), persistent=False)
            self.register_buffer("sin", ang.sin().float(), persistent=False)

        def norm(self, x, w):
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w

        def g(self, f, lm):  # [.., D], [.., 2D] (l and m side by side) -> g = f + [rms(l); rms(m)] W_lower [.., D]
            low, mid = lm[..., :D], lm[..., D:]
            return f + self.w_lower(torch.cat([self.norm(low, 1.0), self.norm(mid, 1.0)], -1))

        def rope(self, x, L):  # [B, n, L, HD]
            c, s = self.cos[:L], self.sin[:L]
            x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
            return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)

        def layers(self):  # the decoder layers in order: this module (the first), then the extra ones (a method
            # here; eagle.py's Eagle.layers is a list of their arrays)
            return [self, *self.extra]

        def forward(self, emb, feat):  # [B, L, D] each -> [B, L, D]
            B, L, _ = emb.shape
            x = self.fc(torch.cat([emb, feat], -1))
            for p in self.layers():
                h = self.norm(x, p.attn_norm)
                q = self.rope(p.q(h).view(B, L, H, HD).transpose(1, 2), L)
                k = self.rope(p.k(h).view(B, L, KVH, HD).transpose(1, 2), L)
                v = p.v(h).view(B, L, KVH, HD).transpose(1, 2)
                k, v = k.repeat_interleave(H // KVH, 1), v.repeat_interleave(H // KVH, 1)
                a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + p.o(a.transpose(1, 2).reshape(B, L, H * HD))
                h = self.norm(x, p.mlp_norm)
                x = x + p.down(torch.nn.functional.silu(p.gate(h)) * p.up(h))
            return x

    return Head()


def head_tensors(head) -> dict:
    """The head's arrays as eagle.py stores them (``eagle.head_shapes``): [in, out], Q/K/V and gate/up fused; an extra
    layer's under ``layers.{i}.`` (i = 1, 2, ...)."""
    import torch
    s = {k: v.detach().float() for k, v in head.state_dict().items()}

    def layer(p):  # the state dict's prefix of one decoder layer -> its arrays
        return {"attn_norm": s[p + "attn_norm"],
                "w_qkv": torch.cat([s[p + "q.weight"], s[p + "k.weight"], s[p + "v.weight"]]).T, "w_o": s[p + "o.weight"].T,
                "mlp_norm": s[p + "mlp_norm"], "w_gate_up": torch.cat([s[p + "gate.weight"], s[p + "up.weight"]]).T,
                "w_down": s[p + "down.weight"].T}
    extra = {f"layers.{i}.{k}": v for i in range(1, 1 + len(head.extra)) for k, v in layer(f"extra.{i - 1}.").items()}
    return {"w_fc": s["fc.weight"].T, "b_fc": s["fc.bias"]} | layer("") | extra \
        | ({"w_lower": s["w_lower.weight"].T} if "w_lower.weight" in s else {})


def batches(data, rows, batch, seq, rng):
    """Right-padded rows: tokens [B, seq], features [B, seq, D] float32, lengths [B]."""
    return _rows(data, rows[rng.integers(0, len(rows), batch)], seq)


def losses(head, E, W_r, toks, feats, lens, noise, rms, loss_kind, torch, train=True):
    """-> (the loss to minimise, regression loss, CE loss, mask of valid positions [B, L-1]); position j predicts
    f_{j+1} from e(x_{j+1}) and f_j."""
    toks, feats = torch.from_numpy(toks), torch.from_numpy(feats)
    L = feats.shape[1]
    valid = (torch.arange(L - 1)[None, :] < torch.from_numpy(lens)[:, None] - 1).float()  # [B, L-1]
    f_in = feats[:, :-1]
    if train and noise > 0:
        f_in = f_in + (torch.rand_like(f_in) - 0.5) * (noise * rms)
    pred = head(E[toks[:, 1:]], f_in)  # [B, L-1, D]
    true = feats[:, 1:]
    reg = (torch.nn.functional.smooth_l1_loss(pred, true, reduction="none").mean(-1) * valid).sum() / valid.sum()
    logq = torch.log_softmax(pred @ W_r.T, -1)
    with torch.no_grad():
        p_r = torch.softmax(true @ W_r.T, -1)
    ce = (-(p_r * logq).sum(-1) * valid).sum() / valid.sum()
    loss = ce if loss_kind == "ce" else reg + 0.1 * ce
    return loss, reg, ce, valid


def evaluate(head, E, token_sets: dict, data, rows, seq, torch) -> dict:
    """On held-out rows, per reduced head (name -> its token ids): first-guess greedy acceptance (the head's top
    token == the target's argmax over all V) and T = 1 acceptance (mean sum min(p, q), p over all V, q over the
    reduced head); and, for the first set, a proxy of the second guess: the head's top token when every input
    feature is its own first-pass prediction (at drafting, only the newest entry is predicted)."""
    out = {name: dict(first_greedy=0.0, first_t1=0.0) for name in token_sets}
    first = next(iter(token_sets))
    second = n = n2 = 0
    with torch.no_grad():
        for i in range(0, len(rows), 4):
            toks, feats, lens = _rows(data, rows[i: i + 4], seq)
            tt, ff = torch.from_numpy(toks), torch.from_numpy(feats)
            pred = head(E[tt[:, 1:]], ff[:, :-1])  # [B, L-1, D]: f^_{j+1}
            valid = (torch.arange(seq - 1)[None, :] < torch.from_numpy(lens)[:, None] - 1)
            p = torch.softmax(ff[:, 1:] @ E.T, -1)  # [B, L-1, V] the target's p
            top = p.argmax(-1)
            for name, ids in token_sets.items():
                q_r = torch.softmax(pred @ E[ids].T, -1)
                out[name]["first_greedy"] += int(((ids[q_r.argmax(-1)] == top) & valid).sum())
                out[name]["first_t1"] += float((torch.minimum(p[..., ids], q_r).sum(-1) * valid).sum())
            pred2 = head(E[tt[:, 2:]], pred[:, :-1])  # [B, L-2, D]: f^_{j+2} from the predicted f^_{j+1}
            ids = token_sets[first]
            hit2 = ids[(pred2 @ E[ids].T).argmax(-1)] == top[:, 1:]
            second += int((hit2 & valid[:, 1:]).sum())
            n += int(valid.sum())
            n2 += int(valid[:, 1:].sum())
    for v in out.values():
        v["first_greedy"] /= n
        v["first_t1"] /= n
    out[first]["second_greedy_proxy"] = second / n2
    return out


def _rows(data, rows, seq):
    """``rows`` of the data, right-padded: tokens [B, seq], features [B, seq, D] float32, lengths [B]."""
    D = data["feats"][0].shape[1]
    toks = np.zeros((len(rows), seq), np.int64)
    feats = np.zeros((len(rows), seq, D), np.float32)
    lens = np.zeros(len(rows), np.int64)
    for b, r in enumerate(rows):
        t = data["tokens"][r][:seq]
        toks[b, : len(t)], feats[b, : len(t)], lens[b] = t, data["feats"][r][: len(t)], len(t)
    return toks, feats, lens


def write_head_dir(out: Path, target_name: str, cfg, order, summary: dict, readme=None, lower_layers=None,
                   extra_layers: int = 0, extra_intermediate: int | None = None) -> None:
    """Everything but the weights: the shipped frequent tokens (the top ``--ship-vocab`` of ``order``), the order
    (``minispec bench eagle`` tries other sizes from it; ``trimmed_order``), config.json (with ``lower_layers``, the
    layers a head with ``w_lower`` reads, and ``extra_layers`` and ``extra_intermediate_size`` for a head with layers
    after the first), training.json, SHA256SUMS, README."""
    ship = sorted(int(t) for t in order[: summary["reduced_vocab"]])
    (out / "frequent_tokens.json").write_text(json.dumps(ship))
    (out / "token_frequency_order.json").write_text(json.dumps([int(t) for t in trimmed_order(order)]))
    econf = dict(minispec_drafter="eagle", target=target_name, hidden_size=cfg.hidden_size,
                 num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
                 intermediate_size=cfg.intermediate_size, rms_norm_eps=cfg.rms_norm_eps, rope_theta=cfg.rope_theta,
                 target_vocab_size=cfg.vocab_size, reduced_vocab_size=len(ship))
    if lower_layers:
        econf["lower_layers"] = [int(i) for i in lower_layers]
    if extra_layers:
        econf["extra_layers"] = int(extra_layers)
        econf["extra_intermediate_size"] = int(extra_intermediate or cfg.intermediate_size)
    (out / "config.json").write_text(json.dumps(econf, indent=2))
    (out / "training.json").write_text(json.dumps(summary, indent=2))
    write_sums(out, ("config.json", "eagle.safetensors", "frequent_tokens.json", "token_frequency_order.json"))
    (readme or write_readme)(out, summary, ship)


def command(a: dict) -> str:
    """The command of the recorded arguments ``a``: ``--out``, the arguments the README names (``--seed``, ``--loss``,
    ``--vocab``, ``--ship-vocab``, ``--epochs``, ``--threads``) and every other one whose value is not its default.
    (bug: the README said "every other setting at its default" of a run that had set others)"""
    import shlex

    defaults = vars(parser().parse_args(["--out", str(a["out"])]))
    named = ("seed", "loss", "vocab", "ship_vocab", "epochs", "threads")
    flags = [f"--{k.replace('_', '-')}" + ("" if v is True else f" {shlex.quote(str(v))}")
             for k, v in a.items() if k != "out" and (k in named or v != defaults.get(k))]
    return " ".join(["python -m minispec.recipes.train_eagle --out", shlex.quote(str(a["out"])), *flags])


def write_readme(out: Path, summary: dict, freq) -> None:
    a = summary["args"]
    first = next(iter(summary["held_out"].values()))
    (out / "README.md").write_text(f"""# {out.name}: an EAGLE feature head for SmolLM2-135M-Instruct

Drafts for the target from the target's own top-layer features (``minispec/drafters/eagle.py``):
fc([e(x_{{j+1}}); f_j]) then one Llama decoder layer of the target's widths, {summary['parameters'] / 1e6:.2f}M
parameters (float32), and a reduced LM head: the target's own head restricted to the {len(freq)} most frequent
tokens of the training data (``frequent_tokens.json``; trained with a cross-entropy over the top
{summary['trained_reduced_vocab']}, shipped with the top {len(freq)}: `minispec bench eagle` measured the same greedy
acceptance with less memory: docs/eagle.md).

Use: `minispec generate --draft weights/{out.name} --chat --prompt "..."` (the target is loaded as usual).

## Provenance

Made on this machine by `{command(a)}` (every other setting at its default), with torch {summary['torch']}:
- data: {summary['generated_sequences']} sequences generated by the target itself (greedy and T=1) for prompts built
  from the Python standard library's code and from chat templates x topics, and standard-library source chunks:
  {summary['sequences']} sequences, {summary['training_tokens']} training tokens. The target's features for every
  token come from one forward pass. The evaluation prompts in `minispec/data/` were never used;
- training: {summary['steps']} AdamW steps of {a['batch']} sequences x {a['seq']} tokens, loss {a['loss']}
  ({summary['training_minutes']:.1f} min on {a['threads']} CPU threads; data {summary['generation_minutes'] or 0:.1f} min
  of generation and {summary['feature_minutes'] or 0:.1f} min of features, cached between runs);
- held out (every 20th generated sequence): first guess equals the target's greedy token
  {first['first_greedy']:.3f}; T=1 acceptance sum min(p, q) {first['first_t1']:.3f}. Full log: `train_log.txt`,
  figures: `training.json`. Measured speedups: `docs/eagle.md`.

`token_frequency_order.json` lists the token ids most frequent first, without the tail of unseen ids (in
increasing order): `minispec bench eagle` loads the head with other reduced-head sizes from it. `SHA256SUMS` lists the checksums of the four files.
""")


def parser() -> argparse.ArgumentParser:
    """The recipe's arguments (the weights' README gives the command that made them: tests/test_weights.py)."""
    p = argparse.ArgumentParser(prog="python -m minispec.recipes.train_eagle", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=None, help="target directory (default: the converted SmolLM2)")
    p.add_argument("--out", required=True, help="output directory for the head")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gen-batches", type=int, default=40, help="batches of target generations (default 40)")
    p.add_argument("--gen-batch", type=int, default=48)
    p.add_argument("--gen-tokens", type=int, default=128, help="new tokens per generated sequence")
    p.add_argument("--stdlib-tokens", type=int, default=400_000, help="standard-library tokens (default 400k)")
    p.add_argument("--data-dir", default=None, help="where the data is cached (default: $MINISPEC_CACHE/eagle-data-...)")
    p.add_argument("--data-only", action="store_true", help="make (or check) the data and stop (--out is not written)")
    p.add_argument("--vocab", type=int, default=8192, help="reduced-head size: frequent tokens (default 8192)")
    p.add_argument("--ship-vocab", type=int, default=6144,
                   help="reduced-head size written to frequent_tokens.json: the top tokens of the same order (default 6144)")
    p.add_argument("--loss", choices=("reg+ce", "ce"), default="reg+ce")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--noise", type=float, default=0.2, help="uniform input-feature noise, times the feature RMS")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--run-dir", default=None, help="the training's checkpoints, where the same command resumes (default: "
                   "$MINISPEC_CACHE/train_eagle-run-<hash of the settings>)")
    return p


def train_head(torch, head, E, W_r, data, rows, steps: int, rms: float, args, log, checkpoint=None) -> tuple[list, float]:
    """``steps`` AdamW steps (betas 0.9/0.95, weight decay 0.01, 50 warm-up steps, cosine decay, gradients clipped
    at 1) on batches of ``rows`` -> (the (regression, CE) losses per step, seconds). With a ``checkpoint``
    (training.RunState) the loop resumes from it and saves to it."""
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: float(min(1.0, (s + 1) / 50) * 0.5 * (1 + np.cos(np.pi * min(s / steps, 1.0)))))  # a float:
    # the schedule's state holds no NumPy scalar (training.RunState reads it as plain data)
    rng = np.random.default_rng(args.seed)
    parts = dict(head=head, opt=opt, sched=sched)
    first, curve, spent = checkpoint.resume(parts, rng) if checkpoint else (0, [], 0.0)
    if first:
        log(f"resumed at step {first} of {steps} from {checkpoint.path}" + (FINISHED if first == steps else ""))
    t0 = time.perf_counter() - spent
    for step in range(first, steps):
        toks, feats, lens = batches(data, rows, args.batch, args.seq, rng)
        loss, reg, ce, _ = losses(head, E, W_r, toks, feats, lens, args.noise, rms, args.loss, torch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        curve.append((reg.item(), ce.item()))
        if checkpoint and checkpoint.due(step + 1, steps):
            checkpoint.save(parts, rng, step + 1, curve, time.perf_counter() - t0)
        if step % 25 == 0 or step == steps - 1:
            el = time.perf_counter() - t0
            r_, c_ = np.mean(curve[-25:], axis=0)
            log(f"step {step}/{steps} reg {r_:.4f} ce {c_:.3f} lr {sched.get_last_lr()[0]:.2e} "
                f"{(step + 1 - first) * args.batch * args.seq / (el - spent):.0f} tok/s")
    return curve, time.perf_counter() - t0


def reduced_heads(torch, freq, data, rows, V: int) -> dict:
    """The token sets the held-out evaluation compares, by name: the trained reduced head, 8192 and 16384 frequent
    tokens, and the whole vocabulary."""
    sets = {f"{len(freq)}": torch.from_numpy(freq)}
    for size in (8192, 16384):
        if size != len(freq):
            sets[f"{size}"] = torch.from_numpy(frequent_tokens([data["tokens"][r] for r in rows], size, data["eos"], V))
    sets["all"] = torch.arange(V)
    return sets


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not (0 < args.vocab <= 49152 and 0 < args.ship_vocab <= 49152):
        p.error(f"--vocab and --ship-vocab must be in 1..49152, got {args.vocab} and {args.ship_vocab}")
    from .training import RunState, begin, check_args, discard, publish, run_folder, target_config

    # (bug: --batch 0, --epochs 0 or --lr 0 were found out after the data, or never)
    check_args(p, args, batch=1, seq=2, gen_batches=1, gen_batch=1, gen_tokens=1, threads=1)
    if not 0 < args.epochs < float("inf"):
        p.error(f"--epochs must be a positive number, got {args.epochs}")
    target_dir, cfg = target_config(p, args.target)
    if not cfg.tie_word_embeddings:
        p.error(f"--target {target_dir}: the recipe trains against the embedding matrix as the LM head, so it needs a "
                "target with tied embeddings (SmolLM2's)")
    try:
        check_data_dir(*data_dir(args))
        folder = None if args.data_only else run_folder("train_eagle", args)
    except (OSError, ValueError) as e:
        p.error(str(e))
    started = begin(args)
    if started is None:
        return 2
    torch, out, log, target_dir, t_start = started
    from ..model.safetensors_io import write_safetensors

    data = load_or_make_data(args, log)
    if args.data_only:  # nothing of --out is written: its files stay as they were
        discard(out)  # this run's own staging directory (training.staging), its log printed
        return 0
    D, V = cfg.hidden_size, cfg.vocab_size
    n_gen = data["generated"]
    held = np.arange(0, n_gen, 20)  # every 20th generation (code and chat, greedy and T=1): held out
    rows = np.setdiff1d(np.arange(len(data["tokens"])), held)
    freq = frequent_tokens([data["tokens"][r] for r in rows], args.vocab, data["eos"], V)
    E = torch.from_numpy(np.asarray(data["embed"], np.float32))
    W_r = E[torch.from_numpy(freq)]
    sample_feats = np.concatenate([np.asarray(data["feats"][r], np.float32) for r in rows[:200]])
    rms = float(np.sqrt((sample_feats ** 2).mean()))
    n_tokens = sum(len(data["tokens"][r]) for r in rows)
    steps = int(args.epochs * n_tokens / (args.batch * args.seq * 0.85))
    if steps < 1:
        log(f"error: --epochs {args.epochs} of {n_tokens} tokens in batches of --batch {args.batch} x --seq {args.seq} "
            "make no step")
        return 2
    log(f"data: {n_gen} generated + {len(data['tokens']) - n_gen} standard-library sequences, {n_tokens} training "
        f"tokens, {len(held)} held-out sequences; feature RMS {rms:.3f}; {steps} steps")

    head = build_head(D, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size, cfg.rope_theta,
                      cfg.rms_norm_eps, max_len=args.seq)
    n_params = sum(p.numel() for p in head.parameters())
    log(f"head: {n_params / 1e6:.2f}M parameters, reduced head {len(freq)} tokens")
    log(f"run folder {folder}: the training's checkpoints (the same command resumes there)")
    curve, train_s = train_head(torch, head, E, W_r, data, rows, steps, rms, args, log, RunState(torch, folder))
    head.eval()
    held_out = evaluate(head, E, reduced_heads(torch, freq, data, rows, V), data, held, args.seq, torch)
    for name, v in held_out.items():
        log(f"held out, reduced head {name}: " + ", ".join(f"{k} {x:.3f}" for k, x in v.items()))
    write_safetensors(out / "eagle.safetensors", {k: v.contiguous().numpy() for k, v in head_tensors(head).items()}, "F32",
                      metadata={"recipe": "minispec.recipes.train_eagle"})
    order = frequency_order([data["tokens"][r] for r in rows], data["eos"], V)
    summary = dict(parameters=n_params, trained_reduced_vocab=len(freq), reduced_vocab=args.ship_vocab, loss=args.loss,
                   generated_sequences=n_gen, sequences=len(data["tokens"]), training_tokens=n_tokens, steps=steps,
                   generation_minutes=data.get("generation_minutes"), feature_minutes=data.get("feature_minutes"),
                   training_minutes=train_s / 60, total_minutes_this_run=(time.perf_counter() - t_start) / 60,
                   held_out=held_out,
                   loss_curve={st: [float(v) for v in np.mean(curve[max(0, st - 25): st + 1], axis=0)]
                               for st in range(0, steps, 50)},
                   args=vars(args), torch=torch.__version__, provenance=provenance(argv, p.prog))
    write_head_dir(out, Path(target_dir).name, cfg, order, summary)
    log(f"done: {summary['total_minutes_this_run']:.1f} min; files moved into {args.out}")
    publish(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
