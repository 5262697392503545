"""Train a small draft model for SmolLM2-135M-Instruct on data made on this machine, then save it
as a Hugging Face-format directory that minispec and transformers both load.

    python -m minispec.recipes.train_draft --out weights/smoldraft-3l-192 [--gen-batches 80 --steps 700]
    python -m minispec.recipes.quantize_int8 weights/smoldraft-3l-192 weights/smoldraft-3l-192

The recipe writes the weights in bfloat16; the second command stores the matrices as int8 with a scale per row, as
shipped (quantize_int8.py; transformers then needs its ``--to-float`` copy). A run writes beside ``--out`` and moves
its files into it at the end: one that stops leaves ``--out`` as it was, and its own log where it wrote (training.staging).
The same command run again resumes a stopped run: its generated batches and its training's checkpoints are kept in
``--run-dir`` (default ``$MINISPEC_CACHE/train_draft-run-<hash of the settings>``; training.run_folder, RunState).

Needs PyTorch and transformers (`pip install torch==2.13.0 -e ".[train,parity]"`); inference stays NumPy.

Recipe (every count fixed, so a seed gives the same model on the same software):
1. Data that exists on any machine: the CPython standard library source (skipping test suites), and
   text the *target itself* writes (on-policy data) from prompts built here: code prompts cut from
   the standard library, chat instructions from templates x topics. Greedy and T=1 continuations.
   The evaluation prompts in ``minispec/data/`` are hand-written and never used here.
2. Student: Llama, 3 layers, width 192, 3 heads of 64 with 1 kv head, MLP 512, tied embeddings,
   SmolLM2's 49,152-token vocabulary. Its embedding starts as the target's embedding projected
   on its top 192 principal directions.
3. Loss: next-token cross-entropy on a 50/50 mix of target-generated sequences and standard-library
   chunks (256 tokens); AdamW, cosine schedule.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

from ..harness.provenance import provenance

TOPICS = ["photosynthesis", "binary search", "the French revolution", "compound interest", "black holes", "recursion",
          "the water cycle", "hash tables", "vaccines", "supply and demand", "git branches", "plate tectonics",
          "HTTP caching", "the immune system", "sorting algorithms", "climate change", "prime numbers",
          "object-oriented programming", "the Roman empire", "neural networks", "gravity", "unit testing",
          "regular expressions", "the stock market", "volcanoes", "linked lists", "renewable energy", "DNA",
          "databases and indexes", "the printing press", "electric circuits", "time zones", "memory leaks",
          "the moon landing", "public key cryptography", "bread baking", "chess openings", "sleep", "bees",
          "JSON parsing", "the speed of light", "inflation", "rainbows", "operating systems", "coffee"]
TEMPLATES = ["Explain {t} to a ten-year-old.", "Write a short paragraph about {t}.", "What are three facts about {t}?",
             "Give me a simple example that illustrates {t}.", "Summarize the key ideas of {t} in a few sentences.",
             "What is a common misconception about {t}?", "Write a haiku about {t}.",
             "Write a Python function related to {t}, with a docstring.", "List the pros and cons of {t}.",
             "How would you teach {t} in one lesson?", "Write a short dialogue between two friends about {t}.",
             "What questions should a beginner ask about {t}?"]


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = ("site-packages", "/test/", "/tests/", "/idle_test/", "lib2to3/tests")
    return sorted(p for p in root.rglob("*.py") if not any(s in str(p) for s in skip))


def code_prompts(files, tok, n, rng) -> list[list[int]]:
    """Cut n prompts from standard-library functions: a few lines starting at a `def`."""
    out = []
    while len(out) < n:
        lines = files[rng.integers(len(files))].read_text(errors="ignore").splitlines()
        starts = [i for i, line in enumerate(lines) if line.lstrip().startswith("def ")]
        if not starts:
            continue
        i = starts[rng.integers(len(starts))]
        ids = tok.encode("\n".join(lines[i: i + int(rng.integers(3, 15))]) + "\n")
        if 8 <= len(ids) <= 160:
            out.append(ids)
    return out


def chat_prompts(tok, n, rng) -> list[list[int]]:
    out = []
    for _ in range(n):
        q = TEMPLATES[rng.integers(len(TEMPLATES))].format(t=TOPICS[rng.integers(len(TOPICS))])
        out.append(tok.encode(tok.apply_chat_template([{"role": "user", "content": q}])))
    return out


def generate_data(target, tok, files, batches: int, batch: int, new_tokens: int, seed: int, log,
                  cache: Path | None = None) -> tuple[list[list[int]], float]:
    """``batches`` batches of ``batch`` prompts (code and chat in turn) and the target's continuations (greedy and
    T = 1 in turn), each prompt + continuation a sequence -> (the sequences, the seconds their generation took). With
    ``cache`` each batch's sequences are kept there (``generated-00000.npz``: ids, their lengths, torch's random state
    after the batch and its seconds), so that a run stopped midway generates only the batches it lacks (the prompts
    are drawn again from the same seed, and a kept batch whose prompts differ is refused)."""
    import torch

    rng = np.random.default_rng(seed)
    seqs, t0, seconds = [], time.perf_counter(), 0.0
    for b in range(batches):
        prompts = code_prompts(files, tok, batch, rng) if b % 2 == 0 else chat_prompts(tok, batch, rng)
        kept = cache / f"generated-{b:05d}.npz" if cache else None
        if kept and kept.exists():
            with np.load(kept) as z:
                lacks = sorted({"ids", "lengths", "torch_rng", "seconds"} - set(z.files))
                if lacks:
                    raise ValueError(f"{kept} is not a batch this recipe reads (it lacks {', '.join(lacks)}): remove "
                                     "it, or pass another --run-dir")
                rows = np.split(z["ids"], np.cumsum(z["lengths"])[:-1])
                torch.set_rng_state(torch.from_numpy(z["torch_rng"]))  # as generating it left it: the student's
                # initial weights, drawn after the data, are then an uninterrupted run's (bug: they were not)
                seconds += float(z["seconds"])
            if len(rows) != len(prompts) or any(r[: len(q)].tolist() != q for r, q in zip(rows, prompts)):
                raise ValueError(f"{kept} holds other prompts than this run's batch {b}: a folder of another run "
                                 "(pass another --run-dir)")
            seqs += [r.tolist() for r in rows]
            continue
        t_batch = time.perf_counter()
        greedy = (b // 2) % 2 == 0
        width = max(map(len, prompts))
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])  # left padding with <|endoftext|>
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        torch.manual_seed(seed * 100_000 + b)
        with torch.no_grad():
            out = target.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=not greedy,
                                  temperature=1.0 if not greedy else None, top_k=0 if not greedy else None,
                                  top_p=1.0 if not greedy else None, pad_token_id=0, eos_token_id=tok.eos_ids)
        for p, row in zip(prompts, out[:, width:].tolist()):
            cont = row[: row.index(tok.eos_ids[0]) + 1] if tok.eos_ids[0] in row else row
            seqs.append(p + cont)
        seconds += time.perf_counter() - t_batch
        if kept:
            made = seqs[-len(prompts):]
            tmp = kept.with_name(kept.stem + ".tmp.npz")
            np.savez(tmp, ids=np.concatenate(made).astype(np.int32), lengths=np.array([len(r) for r in made]),
                     torch_rng=torch.get_rng_state().numpy(), seconds=time.perf_counter() - t_batch)
            tmp.replace(kept)
        n_tok = sum(len(s) for s in seqs)
        log(f"generate {b + 1}/{batches}: {n_tok} tokens, {n_tok / (time.perf_counter() - t0):.0f} tok/s")
    return seqs, seconds


def stdlib_chunks(files, encode, n_tokens: int, length: int, order) -> np.ndarray:  # -> [n, length]
    """Standard-library source in chunks of ``length`` ids: the files in ``order`` (indices into ``files``), each
    encoded by ``encode`` and ended by id 0, until at least ``n_tokens`` ids; the last partial chunk dropped."""
    ids: list[int] = []
    for i in order:
        ids += encode(files[i].read_text(errors="ignore")) + [0]
        if len(ids) >= n_tokens:
            break
    n = len(ids) // length
    return np.array(ids[: n * length], dtype=np.int64).reshape(n, length)


def student_config(args) -> dict:
    return dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=49152, hidden_size=args.width,
                intermediate_size=args.mlp, num_hidden_layers=args.layers, num_attention_heads=args.width // 64,
                num_key_value_heads=1, head_dim=64, rms_norm_eps=1e-5, rope_theta=100000.0,
                max_position_embeddings=8192, tie_word_embeddings=True, hidden_act="silu", attention_bias=False,
                mlp_bias=False, rope_scaling=None, bos_token_id=1, eos_token_id=2, pad_token_id=2,
                torch_dtype="bfloat16")


def parser() -> argparse.ArgumentParser:
    """The recipe's arguments (the weights' README gives the command that made them: tests/test_weights.py)."""
    p = argparse.ArgumentParser(prog="python -m minispec.recipes.train_draft", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=None, help="target directory (default: the converted SmolLM2)")
    p.add_argument("--out", required=True, help="output directory for the draft")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gen-batches", type=int, default=80, help="batches of target-generated data (default 80)")
    p.add_argument("--gen-batch", type=int, default=32)
    p.add_argument("--gen-tokens", type=int, default=128, help="new tokens per generated sequence")
    p.add_argument("--steps", type=int, default=700, help="optimizer steps (default 700)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument("--seq", type=int, default=256, help="sequence length")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--width", type=int, default=192)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--mlp", type=int, default=512)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--run-dir", default=None, help="the generated batches and the training's checkpoints, where the "
                   "same command resumes (default: $MINISPEC_CACHE/train_draft-run-<hash of the settings>)")
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    from .training import RunState, begin, check_args, new_student, publish, run_folder, save_student, target_config, train_next_token, write_sums

    # (bug: --seq 1, --steps 0, --batch 1 (half a batch is generated data) or --lr 0 were found out after the
    # generation, or never: --steps -1 saved an untrained model)
    check_args(p, args, seq=2, steps=1, batch=2, gen_batches=1, gen_batch=1, gen_tokens=1, layers=1, mlp=1, threads=1)
    if args.width % 64 or args.width <= 0:
        p.error(f"--width must be a positive multiple of 64 (heads of 64), got {args.width}")
    target_dir, target_cfg = target_config(p, args.target)
    if args.width > target_cfg.hidden_size:  # (bug: found out after the generation, at the embedding's copy)
        p.error(f"--width {args.width} is wider than the target's hidden size {target_cfg.hidden_size} ({target_dir}): "
                "the student's embedding starts as the target's, projected on its top --width principal directions")
    if target_cfg.vocab_size != student_config(args)["vocab_size"]:
        p.error(f"--target {target_dir}: its vocabulary has {target_cfg.vocab_size} tokens; the student's is "
                f"SmolLM2's {student_config(args)['vocab_size']}, whose embedding starts as the target's")

    try:
        folder = run_folder("train_draft", args)
    except (OSError, ValueError) as e:
        p.error(str(e))
    started = begin(args)
    if started is None:
        return 2
    torch, out, log, target_dir, t_start = started
    import transformers

    from ..model.tokenizer import load_tokenizer

    tok = load_tokenizer(target_dir)
    target = transformers.AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    files = stdlib_files()
    rng = np.random.default_rng(args.seed)
    log(f"{len(files)} standard-library files")

    log(f"run folder {folder}: the generated batches and the training's checkpoints (the same command resumes there)")
    try:
        generated, gen_s = generate_data(target, tok, files, args.gen_batches, args.gen_batch, args.gen_tokens,
                                         args.seed, log, cache=folder)  # gen_s: every batch's, a stopped run's included
    except ValueError as e:  # a kept batch of another run, or not of this recipe
        log(f"error: {e}")
        return 2
    gen_tokens = sum(len(s) for s in generated)
    code = stdlib_chunks(files, tok.encode, args.steps * args.batch * args.seq // 2, args.seq, rng.permutation(len(files)))
    log(f"data: {len(generated)} generated sequences ({gen_tokens} tokens, {gen_s / 60:.1f} min), "
        f"{code.size} standard-library tokens")

    cfg = student_config(args)
    student, n_params = new_student(transformers, cfg, log)
    with torch.no_grad():  # embedding: the target's, projected on its top principal directions
        E = target.model.embed_tokens.weight.detach()
        _, _, vt = torch.linalg.svd(E - E.mean(0), full_matrices=False)
        proj = E @ vt[: args.width].T
        student.model.embed_tokens.weight.copy_(proj / proj.std() * 0.05)
    del target

    gen_arr = [np.array(s[: args.seq], dtype=np.int64) for s in generated]
    curve, train_s = train_next_token(torch, student, gen_arr, code, steps=args.steps, batch=args.batch, seq=args.seq,
                                      lr=args.lr, rng=rng, log=log, checkpoint=RunState(torch, folder))

    save_student(out, student, cfg, "minispec.recipes.train_draft")
    for f in ("tokenizer_config.json", "generation_config.json"):
        shutil.copy(Path(target_dir) / f, out / f)
    tokenizer = hashlib.sha256((Path(target_dir) / "tokenizer.json").read_bytes()).hexdigest()
    (out / "tokenizer.sha256").write_text(tokenizer + "\n")  # the target's tokenizer, named, not copied
    summary = dict(parameters=n_params, generated_sequences=len(generated), generated_tokens=gen_tokens,
                   stdlib_tokens=int(code.size), steps=args.steps, tokens_seen=args.steps * args.batch * args.seq,
                   generation_minutes=gen_s / 60, training_minutes=train_s / 60,
                   total_minutes=(time.perf_counter() - t_start) / 60, final_loss=float(np.mean(curve[-25:])),
                   loss_curve={s: float(np.mean(curve[max(0, s - 25): s + 1])) for s in range(0, args.steps, 50)},
                   args=vars(args), torch=torch.__version__, transformers=transformers.__version__,
                   provenance=provenance(argv, p.prog))
    (out / "training.json").write_text(json.dumps(summary, indent=2))
    write_sums(out, ("config.json", "model.safetensors", "tokenizer.sha256"))
    log(f"done: {summary['total_minutes']:.1f} min, final loss {summary['final_loss']:.3f}; files moved into {args.out}")
    publish(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
