"""The shipped EAGLE head in BF16 against the same head in F32, the file its training run wrote (``--out`` of
``python -m minispec.recipes.train_eagle_ttt``, before ``recipes/store_bf16.py``): per position of 12 prompts' T=1
continuations, the total-variation distance between the two heads' first guesses, and each one's acceptance
sum min(p, q) and greedy agreement with the target.

    python scripts/eagle_bf16.py F32_DIR docs/eagle/bf16.json
"""

import json
import sys
from pathlib import Path

import numpy as np

from minispec.drafters.eagle import load_eagle
from minispec.drafters.protocol import feature_tap
from minispec.generate import generate
from minispec.harness.prompts import load_prompts
from minispec.harness.provenance import provenance
from minispec.model import load_model, load_tokenizer
from minispec.recipes.fetch import resolve_model
from minispec.sampling import Warp, warp

SHIPPED = "weights/eagle-smollm2-135m"


def main(f32_dir: str, out: str) -> None:
    if not (Path(f32_dir) / "eagle.safetensors").is_file():  # checked before minutes of scoring
        sys.exit(f"error: {f32_dir}: no eagle.safetensors (give the float32 head's directory)")
    if not Path(out).parent.is_dir() or Path(out).is_dir():
        sys.exit(f"error: {out}: the output file's folder does not exist, or it is a folder")
    d = resolve_model(None)
    target, tok = load_model(d), load_tokenizer(d)
    heads = {"BF16": load_eagle(SHIPPED, target), "F32": load_eagle(f32_dir, target)}
    if heads["BF16"].lower_layers != heads["F32"].lower_layers or \
            (Path(f32_dir) / "frequent_tokens.json").read_bytes() != Path(SHIPPED, "frequent_tokens.json").read_bytes():
        sys.exit(f"error: {f32_dir} is not the shipped head in float32 (its lower layers {heads['F32'].lower_layers} "
                 f"or its frequent tokens differ)")
    tv, acc, greedy = [], {k: [] for k in heads}, {k: [] for k in heads}
    for name in ("code", "chat"):
        for prompt in load_prompts(name, tok, 6):
            seq = list(prompt) + generate(target, prompt, 48, temperature=1.0, seed=len(prompt))
            feats = []  # the features the heads read (both read the same layers): [len(seq), D (1 + lower layers)]
            tap = feature_tap(heads["BF16"], feats.append)
            p = warp(target.forward(seq, target.new_cache(len(seq)), on_features=tap)[len(prompt) - 1:-1], 1.0)
            q = {k: h.first_guess_rows(seq, len(prompt), Warp(1.0), feats[0]) for k, h in heads.items()}
            tv += list(0.5 * np.abs(q["BF16"] - q["F32"]).sum(1))
            for k in heads:
                acc[k] += list(np.minimum(p, q[k]).sum(1))
                greedy[k] += list(q[k].argmax(1) == p.argmax(1))
    res = dict(positions=len(tv), tv_mean=float(np.mean(tv)), tv_max=float(np.max(tv)),
               acceptance={k: float(np.mean(v)) for k, v in acc.items()},
               greedy_agreement={k: float(np.mean(v)) for k, v in greedy.items()},
               command="python scripts/eagle_bf16.py F32_DIR docs/eagle/bf16.json", provenance=provenance())
    Path(out).write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:3])
