"""The EAGLE head's greedy acceptance by depth on the target's own answers to minispec/data's prompts, teacher-forced
the way train_eagle_ttt.py's held-out evaluation is, and how many of the target's tokens its reduced head can propose.

    python scripts/eagle_answer_acceptance.py HEAD_DIR [--set chat] [--prompts 16] [--tokens 64] [--vocab N]

Per prompt (rows of kind chat in the chat template): the target (transformers) decodes ``--tokens`` greedily; one pass gives
its top features; the head is unrolled 4 steps over them (``train_eagle_ttt.unrolled``). Counted: chains started at
answer positions only, guess d kept when guesses 1..d-1 were (as a chain keeps them). ``--vocab N``: the reduced head
re-cut to the N most frequent tokens of its training data (token_frequency_order.json) instead of the shipped list.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("head")
    ap.add_argument("--set", default="chat", choices=("chat", "code", "grounded"))
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=None)
    a = ap.parse_args(argv)
    import torch
    import transformers

    from minispec.model.config import ModelConfig
    from minispec.model.safetensors_io import read_safetensors
    from minispec.model.tokenizer import load_tokenizer
    from minispec.recipes import train_eagle_ttt as T
    from minispec.recipes.fetch import resolve_model
    from minispec.recipes.train_eagle import build_head

    torch.set_num_threads(2)
    head_dir, td = Path(a.head), resolve_model(None)
    cfg, tok = ModelConfig.from_dir(td), load_tokenizer(td)
    target = transformers.AutoModelForCausalLM.from_pretrained(str(td), dtype=torch.float32).eval()
    dims = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
    head = build_head(cfg.hidden_size, *dims, cfg.intermediate_size, cfg.rope_theta, cfg.rms_norm_eps,
                      max_len=1024)
    T.load_into(head, read_safetensors(head_dir / "eagle.safetensors"), torch)
    head.eval()
    if a.vocab:
        freq = sorted(json.loads((head_dir / "token_frequency_order.json").read_text())[: a.vocab])
    else:
        freq = json.loads((head_dir / "frequent_tokens.json").read_text())
    ids = torch.tensor(np.asarray(freq, np.int64))
    E = torch.from_numpy(np.asarray(read_safetensors(td / "model.safetensors")["model.embed_tokens.weight"], np.float32))
    rows = [json.loads(line) for line in (Path(__file__).resolve().parents[1] / "minispec" / "data" / f"{a.set}.jsonl").open()]
    hit, alive, covered, total = np.zeros(4), np.zeros(4), 0, 0
    for r in rows[: a.prompts]:
        p = (tok.encode(tok.apply_chat_template([{"role": "user", "content": r["prompt"]}])) if r.get("kind") == "chat"
             else tok.encode(r["prompt"]))  # chat rows (chat, grounded) in the chat template, as harness/prompts.py
        with torch.no_grad():
            s = target.generate(torch.tensor([p]), max_new_tokens=a.tokens, do_sample=False, pad_token_id=0)[0].tolist()
            f = target.model(input_ids=torch.tensor([s]), output_hidden_states=True).hidden_states[-1].float()
            outs = T.unrolled(head, E, torch.tensor([s]), f, torch.tensor([len(s)]), 4, dims)
        chain = None
        for i, (pred, true, valid) in enumerate(outs):
            want = (true @ E.T).argmax(-1)  # [1, L-1]: the target's argmax for the token x_{j+2+i}
            got = ids[(pred @ E[ids].T).argmax(-1)]
            answer = torch.arange(pred.shape[1])[None] >= len(p) - 1  # chains that start inside the answer
            looked = (valid > 0) & answer if chain is None else chain & (valid > 0) & answer
            chain = looked & (got == want)
            alive[i] += int(looked.sum())
            hit[i] += int(chain.sum())
            if i == 0:
                covered += int(torch.isin(want[looked], ids).sum())
                total += int(looked.sum())
    out = dict(head=str(head_dir), set=a.set, prompts=min(a.prompts, len(rows)), tokens=a.tokens,
               reduced_vocab=len(freq), by_depth=[round(float(h / max(n, 1)), 3) for h, n in zip(hit, alive)],
               chains=[int(n) for n in alive], argmax_in_reduced_vocab=round(covered / max(total, 1), 3))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
