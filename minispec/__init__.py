"""minispec: speculative decoding in NumPy, small enough to read, tested for losslessness.

Read in this order: ``rejection.py`` (the rule), ``speculative.py`` (the loop), ``drafters.py``
(who guesses), ``model/transformer.py`` (the target). The parts:

    the rule       sampling.py, rejection.py, tree.py (the tree rule)     pure functions
    the loops      generate.py (plain), speculative.py (chain and tree), rounds.py (their bookkeeping)
    drafters       drafters.py; eagle.py (a head that drafts from the target's own features); slem.py and
                   tli.py (a draft with its own tokenizer, over crossvocab.py)
    the policy     policy/: choosing K or a tree per round, the early stop, the cost model
    the model      model/: transformer, KV cache, config, weights, formats, backend
    the harness    harness/: check, study, bench, statistics of losslessness
    the CLI        cli.py (nothing imports it)
"""

from .drafters import DraftModel, LayerSkip, PromptLookup, make_drafter
from .eagle import Eagle, load_eagle
from .generate import generate
from .model import KVCache, Model, ModelConfig, ModelFormatError, Tokenizer, load_model, load_tokenizer
from .model.fetch import resolve_model, shipped_bpe_draft, shipped_draft, shipped_eagle
from .slem import SLEM
from .speculative import speculative_generate, tree_speculative_generate
from .tli import TLI

__all__ = ["DraftModel", "Eagle", "KVCache", "LayerSkip", "Model", "ModelConfig", "ModelFormatError", "PromptLookup", "SLEM",
           "TLI", "Tokenizer", "generate", "load_eagle", "load_model", "load_tokenizer", "make_drafter", "resolve_model",
           "shipped_bpe_draft", "shipped_draft", "shipped_eagle", "speculative_generate", "tree_speculative_generate"]
__version__ = "0.1.0"
