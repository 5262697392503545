"""minispec's own rules and loop behind the kit's two contracts (contract.py): what a peer is measured against,
and what must pass.

    accept_reject, block_verify   rejection.py's rules as they are (they already have the contract)
    greedy                        rejection.accept_greedy: valid only where the target is greedy (one-hot rows), so
                                  it is checked on those cases (``minispec conform rule --greedy``)
    loop                          speculative_generate with the draft model and K = 2 (two guesses, so that the
                                  check's 3 tokens reach a bonus token); ``processors``, the contract's settings,
                                  built by processors.build
"""

from __future__ import annotations

from functools import lru_cache

from ...drafters import DraftModel
from ...model import load_model
from ...processors import build
from ...rejection import accept_greedy, accept_reject, block_verify  # noqa: F401  (re-exported for MODULE:FUNCTION)
from ...speculative import speculative_generate

K = 2


def greedy(target_probs, draft_probs, draft_tokens, rng):
    """The greedy rule behind the rule contract (its draft rows and generator are not needed)."""
    return accept_greedy(target_probs, draft_tokens)


@lru_cache(maxsize=8)
def model(path: str):
    return load_model(path)


def loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, processors=None,
         rule="token", drafter_class=DraftModel, make_processors=build):
    """``rule``, ``drafter_class`` and ``make_processors`` (settings -> processors): what twins.py changes."""
    target = model(str(target_dir))
    drafter = drafter_class(model(str(draft_dir)), target.cfg.vocab_size)
    return speculative_generate(target, drafter, prompt_ids, max_new_tokens, k=K, temperature=temperature, top_k=top_k,
                                top_p=top_p, seed=seed, rule=rule,
                                processors=make_processors(**processors) if processors else ()).tokens

