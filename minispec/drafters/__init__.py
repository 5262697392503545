"""Drafters: whatever proposes the K guesses. One small protocol, one module per kind (as vLLM's
``v1/spec_decode/``: one file per proposer):

    draft_model.py     a smaller model with the target's tokenizer; layer skip (the target's first layers)
    prompt_lookup.py   what followed the last n-gram earlier in the text
    eagle.py           a head that drafts from the target's own features
    crossvocab.py      a draft with its own tokenizer, following the target's text; slem.py and tli.py
                       add how it proposes
    factory.py         ``make_drafter`` (the CLI's spec), ``as_drafter`` and the tokenizer checks

The protocol. A drafter implements ``propose(tokens, k, warp, rng, keep=None) -> (draft_tokens,
draft_probs)``: ``tokens`` is the whole sequence so far (prompt + generated), ``warp`` turns logits into
the probabilities to sample from (the same warp the target gets), and ``draft_probs`` [k', V] must be
exactly the distributions the ``k' <= k`` guesses were drawn from (one-hot for a deterministic
drafter). ``keep(j, reach) -> bool``, if given, may stop drafting before guess j: ``reach`` is the
drafter's own probability that guesses 1..j would all be right (policy/auto_k.py: the early stop); a
drafter without such a belief ignores it. ``forwards`` counts the drafter's model passes.
``context(tokens) -> int`` labels the next round cheaply, before any drafting (0: nothing to say; a
higher label: more reason to expect its guesses accepted); the cost model keeps one acceptance
estimate per label (policy/acceptance.py).

Optional, each used only when present: ``room(tokens) -> int``, how many draft tokens still fit in the
drafter's context (at 0 the run goes on with plain rounds); ``propose_tree(tokens, width, depth, warp,
rng) -> Tree`` for tree rounds (tree.py); ``see_features(tokens, features)``, for a drafter that reads
the target's features (eagle.py): the loop then asks the target pass for them.
"""

from .crossvocab import CrossVocab, OtherTokenizerDraft
from .draft_model import DraftModel, LayerSkip
from .eagle import Eagle, load_eagle
from .factory import as_drafter, make_drafter, same_tokenizer
from .prompt_lookup import PromptLookup
from .slem import SLEM
from .tli import TLI

__all__ = ["CrossVocab", "DraftModel", "Eagle", "LayerSkip", "OtherTokenizerDraft", "PromptLookup", "SLEM", "TLI",
           "as_drafter", "load_eagle", "make_drafter", "same_tokenizer"]
