"""minispec: speculative decoding in NumPy, small enough to read, tested for losslessness.

Read in this order: ``rejection.py`` (the rule), ``textbook.py`` (one round: ``speculative_sampling``),
``model/transformer.py`` (``Model.forward``); then ``speculative.py`` (the same round, plus what a real run
needs) and ``drafters/`` (who guesses). The parts:

The core, what a learner reads (it never imports the lab: tests/test_layout.py):

    the rule       sampling.py, rejection.py (pure functions), keyed.py (keyed noise, for the coupled rule),
                   tree.py (the tree rule, and verify_tree: one target pass over a tree)
    the loops      textbook.py (the textbook round), generate.py (plain), speculative.py (the engine's loop:
                   chain and tree), rounds.py (the run it drives), stats.py (a record per round)
    drafters       drafters/: one module per kind (draft model and layer skip, prompt lookup, EAGLE, a draft
                   with its own tokenizer: SLEM and TLI) and the factory
    the policy     policy/: choosing K or a tree per round, the early stop, the cost model
    the model      model/: transformer, KV cache, config, weights, formats, backend

The lab, what measures the core and makes its weights:

    the harness    harness/: check, study, bench, statistics of losslessness, the calibration store, progress
                   bars, and the record of where a measurement comes from (provenance.py)
    the recipes    recipes/: the weights: fetching and converting the target (fetch.py, convert.py), training the
                   shipped drafters (PyTorch)
    the trace      trace/: a picture of a run, round by round
    the CLI        cli.py (nothing imports it)
"""

from __future__ import annotations

import importlib
import sys
import types

# The public API, each name loaded from its module on first use (PEP 562), so that ``import minispec.rejection``
# loads the rule and what it needs, not the library: a learner stepping into the rule meets only the rule.
_API = {
    "DraftModel": "drafters", "Eagle": "drafters", "LayerSkip": "drafters", "PromptLookup": "drafters",
    "SLEM": "drafters", "TLI": "drafters", "load_eagle": "drafters", "make_drafter": "drafters",
    "generate": "generate",
    "KVCache": "model", "Model": "model", "ModelConfig": "model", "ModelFormatError": "model", "Tokenizer": "model",
    "load_model": "model", "load_tokenizer": "model",
    "resolve_model": "recipes.fetch", "shipped_bpe_draft": "recipes.fetch", "shipped_draft": "recipes.fetch",
    "shipped_eagle": "recipes.fetch",
    "speculative_generate": "speculative", "tree_speculative_generate": "speculative",
    "speculative_sampling": "textbook",
}
__all__ = sorted(_API)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _API:
        value = getattr(importlib.import_module(f".{_API[name]}", __name__), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    try:  # a submodule, as ``import minispec; minispec.model`` found it when this file imported everything
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_API))


class _Package(types.ModuleType):
    """Importing the submodule ``minispec.generate`` sets the package's attribute ``generate`` to that module; the
    public name is its function, as ``from .generate import generate`` made it when this file imported everything."""

    def __setattr__(self, name, value):
        if name in _API and isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.{_API[name]}":
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
