"""How many of a draft's tokens are spelled exactly like a target token: TLI's intersection T ∩ D (drafters/tli.py),
counted from the two tokenizer files, with their sha256 and the run's provenance. No timing, no model run.

    python scripts/shared_tokens.py [TARGET_DIR] [DRAFT_DIR] [OUT]

Defaults: SmolLM2-135M-Instruct (fetched on first use), the shipped weights/bpe8k-draft-4l-384, and
docs/crossvocab/shared_tokens.json, which docs/shipped-drafters.md quotes (harness/doc_figures.py) and tests/test_docs_tables.py
counts again where the target is present.
"""

import hashlib
import sys
from pathlib import Path

from minispec.drafters.crossvocab import CrossVocab
from minispec.harness.measure import compact_json
from minispec.harness.provenance import provenance
from minispec.model.config import ModelConfig
from minispec.recipes.fetch import resolve_model, shipped_bpe_draft


def shared_tokens(target_dir, draft_dir) -> dict:
    """-> {shared, draft_vocab, target_vocab, the tokenizers' sha256}: the count TLI's summary prints."""
    target_dir, draft_dir = Path(target_dir), Path(draft_dir)
    vt, vd = ModelConfig.from_dir(target_dir).vocab_size, ModelConfig.from_dir(draft_dir).vocab_size
    cross = CrossVocab(target_dir, draft_dir, vt, vd)
    digest = {role: hashlib.sha256((d / "tokenizer.json").read_bytes()).hexdigest()
              for role, d in (("target", target_dir), ("draft", draft_dir))}
    return dict(shared=len(cross.shared_draft), draft_vocab=vd, target_vocab=vt, draft=draft_dir.name,
                target=target_dir.name, tokenizer_sha256=digest)


def main(argv: list[str]) -> int:
    target_dir = argv[0] if len(argv) > 0 else resolve_model(None)
    draft_dir = argv[1] if len(argv) > 1 else shipped_bpe_draft()
    out = Path(argv[2] if len(argv) > 2 else "docs/crossvocab/shared_tokens.json")
    if draft_dir is None:
        raise SystemExit("no draft with its own tokenizer in weights/: pass DRAFT_DIR")
    res = dict(shared_tokens(target_dir, draft_dir), provenance=provenance(["python", "scripts/shared_tokens.py", *argv]))
    out.write_text(compact_json(res))
    print(f"{res['shared']:,} of the draft's {res['draft_vocab']:,} tokens are target tokens: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
