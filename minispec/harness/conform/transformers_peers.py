"""transformers behind the kit's two contracts (contract.py): the peers that docs/peers.md reports.

Rule:
    speculative_sampling     ``transformers.generation.utils._speculative_sampling``: candidate logits and target
                             logits (here log q and log p, which it softmaxes back), the candidates, their count. It
                             draws with torch's global generator (``torch.rand_like``, ``torch.multinomial``), so the
                             adapter seeds torch from the Generator it is given (``rng.integers``): the kit then checks it
                             by Monte Carlo. ``ensemble(w)``: the same with ``assistant_ensemble_weight=w`` (DIVERSE's
                             static ensemble verification, lossy by design).
Loops (``model.generate`` on the two directories, loaded once each, float32 on the CPU; ``torch.manual_seed(seed)``):
    assisted                 ``assistant_model=`` the draft: do_sample=True with temperature, top-k, top-p
                             (top_k=0 and top_p=1.0 when the contract's are None); temperature 0: do_sample=False
    prompt_lookup            ``prompt_lookup_num_tokens=3`` (the draft directory is not used)
    ensemble_loop(w)         ``assistant_model=`` with ``assistant_ensemble_weight=w``
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


def _torch():
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)  # tiny tensors: a second thread only spins against the kit on a shared CPU
    return torch


def speculative_sampling(target_probs, draft_probs, draft_tokens, rng, assistant_ensemble_weight=None):
    """transformers' rule behind the rule contract (module docstring)."""
    torch = _torch()
    from transformers.generation.utils import _speculative_sampling

    torch.manual_seed(int(rng.integers(2**62)))
    K = len(draft_tokens)
    with np.errstate(divide="ignore"):
        new_logits = torch.from_numpy(np.log(target_probs)).float()[None]  # [1, K+1, V]
        candidate_logits = torch.from_numpy(np.log(draft_probs)).float()[None]  # [1, K, V]
    candidate_ids = torch.tensor([list(draft_tokens)], dtype=torch.long)  # [1, K]
    valid, n = _speculative_sampling(candidate_ids, candidate_logits, K, new_logits,
                                     assistant_ensemble_weight=assistant_ensemble_weight)
    return int(n), int(valid[0, -1])


def ensemble(weight: float):
    """``speculative_sampling`` with static ensemble verification at ``weight``."""
    def rule(target_probs, draft_probs, draft_tokens, rng):
        return speculative_sampling(target_probs, draft_probs, draft_tokens, rng, assistant_ensemble_weight=weight)
    rule.__name__ = rule.__qualname__ = f"speculative_sampling(assistant_ensemble_weight={weight:g})"
    return rule


@lru_cache(maxsize=8)
def hf_model(path: str):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=_torch().float32).eval()


def hf_generate(target_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, **extra) -> list[int]:
    torch = _torch()
    model = hf_model(str(target_dir))
    ids = torch.tensor([list(prompt_ids)], dtype=torch.long)
    kw = dict(max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, attention_mask=torch.ones_like(ids),
              pad_token_id=0)
    if temperature > 0:
        kw.update(do_sample=True, temperature=float(temperature), top_k=top_k or 0,
                  top_p=1.0 if top_p is None else float(top_p))
    else:
        kw.update(do_sample=False)
    torch.manual_seed(int(seed))
    with torch.no_grad():
        out = model.generate(ids, **kw, **extra)
    return out[0, ids.shape[1]:].tolist()


def assisted(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed):
    return hf_generate(target_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                       assistant_model=hf_model(str(draft_dir)))


def prompt_lookup(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed):
    return hf_generate(target_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                       prompt_lookup_num_tokens=3)


def ensemble_loop(weight: float):
    def loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed):
        return hf_generate(target_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                           assistant_model=hf_model(str(draft_dir)), assistant_ensemble_weight=weight)
    loop.__name__ = loop.__qualname__ = f"assisted(assistant_ensemble_weight={weight:g})"
    return loop
