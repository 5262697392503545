"""Drafters: whatever proposes the K guesses (the core: nothing here imports the lab). One small protocol, one module
per kind (as vLLM's
``v1/spec_decode/``: one file per proposer):

    draft_model.py     a smaller model with the target's tokenizer; layer skip (the target's first layers)
    prompt_lookup.py   what followed the last n-gram earlier in the text
    eagle.py           a head that drafts from the target's own features
    crossvocab.py      a draft with its own tokenizer, following the target's text; slem.py and tli.py
                       add how it proposes
    factory.py         ``make_drafter`` (the CLI's spec), ``register_drafter`` (a new kind for it),
                       ``as_drafter`` and the tokenizer checks
    protocol.py        the protocol every drafter implements (``Drafter``) and the optional capabilities the
                       rest of minispec asks for with ``has``: ``ClaimsAcceptance``, ``Forgets``, ``HasRoom``, ``ProposesTrees``,
                       ``ReadsFeatures``, ``HasModel``, ``HasFirstGuessRows``, ``HasOwnTokenizer``,
                       ``DraftsText``, ``ReportsMemory``, and the cost hooks ``TimesItself`` and ``TimesItsTreeLevels``

A drafter implements ``propose(tokens, k, warp, draws, keep=None) -> (draft_tokens, draft_probs)``, where
``draft_probs`` [k', V] are exactly the distributions the k' <= k guesses were drawn from, and
``context(tokens)``; protocol.py says what each part means. Callers ask for a capability
(``has(drafter, ReadsFeatures)``), never for a class.
"""

from .crossvocab import CrossVocab, OtherTokenizerDraft
from .draft_model import DraftModel, LayerSkip
from .dynamic_tree import DynamicTree
from .eagle import Eagle, load_eagle
from .factory import as_drafter, make_drafter, other_algorithm, register_drafter, same_tokenizer, unregister_drafter
from .prompt_lookup import PromptLookup
from .protocol import (
    CAPABILITIES,
    ClaimsAcceptance,
    Drafter,
    DraftsText,
    Forgets,
    GrowsTrees,
    HasFirstGuessRows,
    HasModel,
    HasOwnTokenizer,
    HasRoom,
    ProposesTrees,
    ReadsFeatures,
    ReportsMemory,
    TimesItself,
    TimesItsTreeLevels,
    has,
)
from .slem import SLEM
from .tli import TLI

__all__ = ["CAPABILITIES", "ClaimsAcceptance", "CrossVocab", "DraftModel", "Drafter", "DraftsText", "DynamicTree", "Eagle",
           "Forgets", "GrowsTrees", "HasFirstGuessRows", "HasModel",
           "HasOwnTokenizer", "HasRoom", "LayerSkip", "OtherTokenizerDraft", "PromptLookup", "ProposesTrees",
           "ReadsFeatures", "ReportsMemory", "SLEM", "TLI", "TimesItsTreeLevels", "TimesItself", "as_drafter", "has",
           "load_eagle", "make_drafter", "other_algorithm", "register_drafter", "same_tokenizer", "unregister_drafter"]
