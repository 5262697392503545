"""minispec: speculative decoding in NumPy, small enough to read, tested for losslessness.

Read in this order: ``rejection.py`` (the rule), ``textbook.py`` (one round: ``speculative_sampling``),
``model/transformer.py`` (``Model.forward``); then ``speculative.py`` (the same round, plus what a real run
needs) and ``drafters/`` (who guesses). The parts:

    the rule       sampling.py, rejection.py (pure functions), tree.py (the tree rule, and verify_tree: one target
                   pass over a tree)
    the loops      textbook.py (the textbook round), generate.py (plain), speculative.py (the engine's loop:
                   chain and tree), rounds.py (its bookkeeping)
    drafters       drafters/: one module per kind (draft model and layer skip, prompt lookup, EAGLE, a draft
                   with its own tokenizer: SLEM and TLI) and the factory
    the policy     policy/: choosing K or a tree per round, the early stop, the cost model
    the model      model/: transformer, KV cache, config, weights, formats, backend
    the harness    harness/: check, study, bench, statistics of losslessness
    the recipes    recipes/: training the shipped drafters (PyTorch)
    the CLI        cli.py (nothing imports it)
"""

from .drafters import SLEM, TLI, DraftModel, Eagle, LayerSkip, PromptLookup, load_eagle, make_drafter
from .generate import generate
from .model import KVCache, Model, ModelConfig, ModelFormatError, Tokenizer, load_model, load_tokenizer
from .model.fetch import resolve_model, shipped_bpe_draft, shipped_draft, shipped_eagle
from .speculative import speculative_generate, tree_speculative_generate
from .textbook import speculative_sampling

__all__ = ["DraftModel", "Eagle", "KVCache", "LayerSkip", "Model", "ModelConfig", "ModelFormatError", "PromptLookup", "SLEM",
           "TLI", "Tokenizer", "generate", "load_eagle", "load_model", "load_tokenizer", "make_drafter", "resolve_model",
           "shipped_bpe_draft", "shipped_draft", "shipped_eagle", "speculative_generate", "speculative_sampling",
           "tree_speculative_generate"]
__version__ = "0.1.0"
