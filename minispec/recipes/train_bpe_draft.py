"""Train a draft with its OWN tokenizer for SmolLM2-135M-Instruct: a small byte-level BPE vocabulary
made here, and a Llama trained on it. It drafts across vocabularies (slem.py, tli.py).

    python -m minispec.recipes.train_bpe_draft --out weights/bpe8k-draft-4l-384 --threads 2
    python -m minispec.recipes.quantize_int8 weights/bpe8k-draft-4l-384 weights/bpe8k-draft-4l-384

The recipe writes the weights in bfloat16; the second command stores the matrices as int8 with a scale per row, as
shipped (quantize_int8.py; transformers then needs its ``--to-float`` copy). A run writes beside ``--out`` and moves
its files into it at the end: one that stops leaves ``--out`` as it was, and its own log where it wrote (training.staging).
The same command run again resumes a stopped run: the target's data is cached (train_eagle's folders), and the
training's checkpoints are kept in ``--run-dir`` (default ``$MINISPEC_CACHE/train_bpe_draft-run-<hash of the
settings>``; training.run_folder, RunState).

Needs PyTorch and transformers (`pip install torch==2.13.0 -e ".[train,parity]"`); drafting stays NumPy.

Recipe (every count fixed, so a seed gives the same draft on the same software):
1. Data: the same kind the shipped draft saw, and nothing of the evaluation prompts in ``minispec/data/``:
   the target's own generations for prompts built here (code cut from the standard library, chat
   instructions from templates x topics; greedy and T=1). They are the EAGLE recipe's (train_eagle.py),
   cached under ``$MINISPEC_CACHE/eagle-data-*``: a machine without that cache makes it first (about 45
   minutes). Every 20th generation is held out. Plus CPython standard-library source (test suites excluded).
2. Tokenizer: byte-level BPE (``tokenizers``), ``--vocab`` tokens, trained on the training generations
   and a share of the standard library; ``<|endoftext|>``, ``<|im_start|>`` and ``<|im_end|>`` are its
   ids 0, 1, 2, as in the target, and digits are split one by one, as in the target. Byte-level: every
   text has a tokenization, so the draft can read whatever the target writes.
3. Student: Llama, ``--layers`` x ``--width`` (heads of 64, 2 kv heads), tied embeddings. A token's
   embedding starts as the mean of the target's embeddings of the same string (re-tokenised with the
   target's tokenizer), projected on their top principal directions.
4. Loss: next-token cross-entropy on a 50/50 mix of generated sequences and standard-library chunks;
   AdamW, cosine schedule. Held-out loss and the bytes per token are logged at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from ..harness.provenance import provenance

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def eagle_data_args(seed: int, target=None):
    """The EAGLE recipe's data settings: the first EAGLE head's (its training.json at commit 049dc18, in
    ``weights/eagle-smollm2-135m`` then), for ``target`` (None: the converted SmolLM2). (bug: the target was always
    None, so --target's draft learnt from another target's data and embedding)"""
    return argparse.Namespace(seed=seed, gen_batches=32, gen_batch=48, gen_tokens=128, stdlib_tokens=160_000,
                              seq=256, data_dir=None, target=target)


def train_tokenizer(texts, vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def write_tokenizer_files(out: Path, tok, target_dir: Path) -> None:
    tok.save(str(out / "tokenizer.json"), pretty=False)  # (bug: indented, unlike the shipped file: never its checksum)
    tcfg = json.loads((Path(target_dir) / "tokenizer_config.json").read_text())
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "add_prefix_space": False,
           "clean_up_tokenization_spaces": False, "model_max_length": 8192, "bos_token": "<|im_start|>",
           "eos_token": "<|im_end|>", "pad_token": "<|im_end|>", "unk_token": "<|endoftext|>",
           "added_tokens_decoder": {str(i): {"content": s, "special": True, "normalized": False, "lstrip": False,
                                             "rstrip": False, "single_word": False} for i, s in enumerate(SPECIALS)},
           "chat_template": tcfg.get("chat_template")}
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}, indent=2))


def student_config(args, vocab: int) -> dict:
    return dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=vocab, hidden_size=args.width,
                intermediate_size=args.mlp, num_hidden_layers=args.layers, num_attention_heads=args.width // 64,
                num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-5, rope_theta=100000.0,
                max_position_embeddings=8192, tie_word_embeddings=True, hidden_act="silu", attention_bias=False,
                mlp_bias=False, rope_scaling=None, bos_token_id=1, eos_token_id=2, pad_token_id=2,
                torch_dtype="bfloat16")


def initial_embedding(tok, target_tok, E: np.ndarray, width: int) -> np.ndarray:
    """[V_draft, width]: each draft token's string in the target's tokens, their mean embedding, projected on
    the top ``width`` principal directions of those means and scaled to std 0.05."""
    rows = np.zeros((tok.get_vocab_size(), E.shape[1]), np.float32)
    for i in range(tok.get_vocab_size()):
        ids = target_tok.encode(tok.decode([i], skip_special_tokens=False)) or [0]
        rows[i] = E[ids].mean(0)
    _, _, vt = np.linalg.svd(rows - rows.mean(0), full_matrices=False)
    proj = rows @ vt[:width].T
    return (proj / proj.std() * 0.05).astype(np.float32)


def parser() -> argparse.ArgumentParser:
    """The recipe's arguments (the weights' README gives the command that made them: tests/test_weights.py)."""
    p = argparse.ArgumentParser(prog="python -m minispec.recipes.train_bpe_draft", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=None, help="target directory (default: the converted SmolLM2)")
    p.add_argument("--out", required=True, help="output directory for the draft")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab", type=int, default=8192, help="BPE vocabulary size (default 8192)")
    p.add_argument("--tokenizer-chars", type=int, default=6_000_000,
                   help="standard-library characters the tokenizer is trained on, besides the generations")
    p.add_argument("--steps", type=int, default=1100, help="optimizer steps (default 1100)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument("--seq", type=int, default=256, help="sequence length")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--mlp", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--run-dir", default=None, help="the training's checkpoints, where the same command resumes (default: "
                   "$MINISPEC_CACHE/train_bpe_draft-run-<hash of the settings>)")
    return p


def texts(data, target_tok, files, order, tokenizer_chars: int, log) -> tuple[list[str], list[str], list[str]]:
    """-> (the generated texts trained on, the held-out ones: every 20th, as in the EAGLE recipe, and the
    standard-library files the tokenizer learns from: the first of ``order`` up to ``tokenizer_chars`` characters)."""
    n_gen = data["generated"]
    held = set(range(0, n_gen, 20))
    gen_text = [target_tok.decode(data["tokens"][i]) for i in range(n_gen) if i not in held]
    held_text = [target_tok.decode(data["tokens"][i]) for i in sorted(held)]
    lib_text, chars = [], 0
    for i in order:
        lib_text.append(files[i].read_text(errors="ignore"))
        chars += len(lib_text[-1])
        if chars >= tokenizer_chars:
            break
    log(f"data: {len(gen_text)} generated texts ({sum(map(len, gen_text))} chars), {len(held_text)} held out; "
        f"{len(lib_text)} standard-library files ({chars} chars) for the tokenizer")
    return gen_text, held_text, lib_text


def make_tokenizer(out: Path, target_dir, target_tok, gen_text, lib_text, vocab: int, log) -> tuple:
    """The draft's tokenizer, trained on the generated texts and the standard-library files, its files written to
    ``out`` -> (the tokenizer, its encode function, seconds taken, ``bytes_per_token``)."""
    t0 = time.perf_counter()
    tok = train_tokenizer(gen_text + lib_text, vocab)
    write_tokenizer_files(out, tok, target_dir)
    seconds = time.perf_counter() - t0
    enc = lambda text: tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    bytes_per = bytes_per_token(enc, target_tok, gen_text, lib_text)
    log(f"tokenizer: {tok.get_vocab_size()} tokens in {seconds:.0f} s; bytes per token (draft, target): "
        + ", ".join(f"{k} {v['draft']:.2f}, {v['target']:.2f}" for k, v in bytes_per.items()))
    return tok, enc, seconds, bytes_per


def bytes_per_token(encode, target_tok, gen_text, lib_text) -> dict:
    """Bytes of text per token, for the draft's tokenizer (``encode``) and the target's, on some generated texts
    and some standard-library files."""
    out = {}
    for name, sample in (("generated", gen_text[:200]), ("stdlib", lib_text[:20])):
        n_bytes = sum(len(t.encode()) for t in sample)
        out[name] = dict(draft=n_bytes / sum(len(encode(t)) for t in sample),
                         target=n_bytes / sum(len(target_tok.encode(t)) for t in sample))
    return out


def held_out_loss(torch, student, tok, encode, held_text, seq: int) -> dict:
    """The student's next-token loss on the held-out texts, per token and in bits per byte (comparable across
    tokenizers)."""
    student.eval()
    with torch.no_grad():
        total, n_tok, n_bytes = 0.0, 0, 0
        for text in held_text:
            ids = encode(text)[:seq]
            x = torch.tensor([ids])
            total += student(input_ids=x, labels=x).loss.item() * (len(ids) - 1)
            n_tok += len(ids) - 1
            n_bytes += len(tok.decode(ids[1:], skip_special_tokens=False).encode())
    return dict(loss_per_token=total / n_tok, bits_per_byte=total / n_bytes / np.log(2), sequences=len(held_text))


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    from .train_eagle import check_data_dir, data_dir, load_or_make_data
    from .training import RunState, begin, check_args, new_student, publish, run_folder, save_student, target_config, train_next_token, write_sums

    if not 256 + len(SPECIALS) <= args.vocab <= 65536:
        p.error(f"--vocab must be in {256 + len(SPECIALS)}..65536 (the 256 bytes and the special tokens), "
                f"got {args.vocab}")
    # (bug: --seq 1, --steps 0, --batch 1 (half a batch is generated data) or --lr 0 were found out after the data, or
    # never: --steps -1 saved an untrained model)
    check_args(p, args, seq=2, steps=1, batch=2, layers=1, mlp=1, threads=1)
    if args.width % 128 or args.width <= 0:  # (bug: a multiple of 64 was let through, an odd count of heads failing later)
        p.error(f"--width must be a positive multiple of 128 (heads of 64, an even count: 2 key/value heads), got {args.width}")
    target_dir, target_cfg = target_config(p, args.target)
    if args.width > min(args.vocab, target_cfg.hidden_size):  # (bug: found out after the data and the tokenizer)
        p.error(f"--width {args.width} is more than min(--vocab {args.vocab}, the target's hidden size "
                f"{target_cfg.hidden_size}): the embedding starts as the tokens' mean target embeddings projected on "
                "their top --width principal directions, of which there are no more than that")
    data_args = eagle_data_args(args.seed, args.target)
    try:
        check_data_dir(*data_dir(data_args))
        folder = run_folder("train_bpe_draft", args)
    except (OSError, ValueError) as e:
        p.error(str(e))

    started = begin(args)
    if started is None:
        return 2
    torch, out, log, target_dir, t_start = started
    import transformers
    log(f"run folder {folder}: the training's checkpoints (the same command resumes there)")

    from ..model.tokenizer import load_tokenizer
    from .train_draft import stdlib_chunks, stdlib_files

    target_tok = load_tokenizer(target_dir)
    data = load_or_make_data(data_args, log)
    rng = np.random.default_rng(args.seed)
    files = stdlib_files()
    order = rng.permutation(len(files))
    gen_text, held_text, lib_text = texts(data, target_tok, files, order, args.tokenizer_chars, log)

    tok, enc, tok_s, bytes_per = make_tokenizer(out, target_dir, target_tok, gen_text, lib_text, args.vocab, log)
    if tok.get_vocab_size() < args.width:
        log(f"error: the tokenizer learnt {tok.get_vocab_size()} tokens, fewer than --width {args.width}: give a smaller "
            "--width or more --tokenizer-chars")
        return 2
    gen_ids = [np.array(enc(t)[: args.seq], np.int64) for t in gen_text]
    # the other end of the same permutation: mostly files the tokenizer did not see
    code = stdlib_chunks(files, enc, args.steps * (args.batch - args.batch // 2) * args.seq, args.seq, order[::-1])
    log(f"training data: {sum(len(g) for g in gen_ids)} generated tokens, {code.size} standard-library tokens")

    cfg = student_config(args, tok.get_vocab_size())
    student, n_params = new_student(transformers, cfg, log)
    with torch.no_grad():
        E = np.asarray(data["embed"], np.float32)  # the target's [V, D] embedding
        student.model.embed_tokens.weight.copy_(torch.from_numpy(initial_embedding(tok, target_tok, E, args.width)))

    curve, train_s = train_next_token(torch, student, gen_ids, code, steps=args.steps, batch=args.batch, seq=args.seq,
                                      lr=args.lr, rng=rng, log=log, checkpoint=RunState(torch, folder))
    held_out = held_out_loss(torch, student, tok, enc, held_text, args.seq)
    log(f"held out: loss {held_out['loss_per_token']:.3f} per token, {held_out['bits_per_byte']:.3f} bits per byte")

    save_student(out, student, cfg, "minispec.recipes.train_bpe_draft")
    summary = dict(parameters=n_params, vocab=tok.get_vocab_size(), generated_sequences=len(gen_ids),
                   generated_tokens=int(sum(len(g) for g in gen_ids)), stdlib_tokens=int(code.size),
                   bytes_per_token=bytes_per, steps=args.steps, tokens_seen=args.steps * args.batch * args.seq,
                   generation_minutes=data.get("generation_minutes"), tokenizer_seconds=tok_s,
                   training_minutes=train_s / 60, total_minutes_this_run=(time.perf_counter() - t_start) / 60,
                   final_loss=float(np.mean(curve[-25:])), held_out=held_out,
                   loss_curve={s: float(np.mean(curve[max(0, s - 25): s + 1])) for s in range(0, args.steps, 50)},
                   args=vars(args), torch=torch.__version__, transformers=transformers.__version__,
                   provenance=provenance(argv, p.prog))
    (out / "training.json").write_text(json.dumps(summary, indent=2))
    write_sums(out, ("config.json", "model.safetensors", "tokenizer.json"))
    log(f"done: {summary['total_minutes_this_run']:.1f} min, final loss {summary['final_loss']:.3f}; files moved into "
        f"{args.out}")
    publish(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
