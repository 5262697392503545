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
    plain                    no draft at all (with processors: the control for the two above)
    with logits processors   all three take the contract's ninth argument (``hf_processors``): ``repetition_penalty=``,
                             ``no_repeat_ngram_size=`` and, for a choice list, ``prefix_allowed_tokens_fn=``; transformers
                             has no frequency or presence penalty, so those are refused (a fault the report shows)
    ensemble_loop(w)         ``assistant_model=`` with ``assistant_ensemble_weight=w``
    universal                universal assisted decoding: ``assistant_model=`` a draft of its own vocabulary, with
                             ``tokenizer=`` and ``assistant_tokenizer=`` (check it with ``--own-vocabulary``). At
                             do_sample=True transformers translates the draft's logits to the target's vocabulary
                             (UniversalSpeculativeDecodingGenerator) and *prunes the assistant model in place*; its
                             translator is cached by the two tokenizers alone (AssistantVocabTranslatorCache), so the
                             adapter keeps one assistant object per mode: a fresh assistant with the same tokenizers
                             fails (IndexError in get_target_ids), and the pruned one fails greedy decoding (a shape
                             error in o_proj)
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


def hf_processors(settings: dict | None, prompt_len: int, vocab: int) -> dict:
    """The contract's processor settings as ``generate``'s keyword arguments (module docstring)."""
    settings = dict(settings or {})
    unsupported = sorted(k for k in settings if k in ("frequency_penalty", "presence_penalty"))
    if unsupported:
        raise NotImplementedError(f"transformers' generate has no {' or '.join(unsupported)}")
    kw = {}
    if settings.get("repetition_penalty") is not None:
        kw["repetition_penalty"] = float(settings["repetition_penalty"])
    if settings.get("no_repeat_ngram") is not None:
        kw["no_repeat_ngram_size"] = int(settings["no_repeat_ngram"])
    if settings.get("choices") is not None:
        from ...processors import Choices

        mask = Choices(settings["choices"], settings["stop_ids"])

        def allowed(batch_id, input_ids):  # off the choices (a forbidden guess's later rows): every token
            tokens = mask.allowed(input_ids[prompt_len:].tolist())
            return list(range(vocab)) if tokens is None else tokens
        kw["prefix_allowed_tokens_fn"] = allowed
    return kw


def plain(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, processors=None):
    """``model.generate`` with no draft: the control that tells a speculation bug from a sampling one."""
    return hf_generate(target_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                       **hf_processors(processors, len(prompt_ids), vocab(target_dir)))


def assisted(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, processors=None):
    return hf_generate(target_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                       assistant_model=hf_model(str(draft_dir)), **hf_processors(processors, len(prompt_ids), vocab(target_dir)))


def prompt_lookup(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, processors=None):
    return hf_generate(target_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                       prompt_lookup_num_tokens=3, **hf_processors(processors, len(prompt_ids), vocab(target_dir)))


def vocab(target_dir) -> int:
    return int(hf_model(str(target_dir)).config.vocab_size)


def ensemble_loop(weight: float):
    def loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed):
        return hf_generate(target_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                           assistant_model=hf_model(str(draft_dir)), assistant_ensemble_weight=weight)
    loop.__name__ = loop.__qualname__ = f"assisted(assistant_ensemble_weight={weight:g})"
    return loop


@lru_cache(maxsize=8)
def hf_tokenizer(path: str, tag: str = ""):
    """A tokenizer object per (directory, tag): transformers caches its vocabulary translator by tokenizer object."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


@lru_cache(maxsize=8)
def uad_assistant(path: str, sampling: bool, tag: str = ""):
    """One assistant object per mode (module docstring: transformers prunes it in place for sampling)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=_torch().float32).eval()


def universal(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed):
    return hf_generate(target_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                       assistant_model=uad_assistant(str(draft_dir), temperature > 0),
                       tokenizer=hf_tokenizer(str(target_dir)), assistant_tokenizer=hf_tokenizer(str(draft_dir)))



def universal_in_order(order: str):
    """``universal`` with the draft's pruned head in a fixed order (docs/peers.md): "sorted" by assistant id, the order
    in which ``get_target_logits`` places its logits (the one-line fix), or "reversed" (a hash order that is not
    sorted, fixed for a test). transformers builds the pruned head in the order of ``tokenizer.get_vocab()``
    (candidate_generator.py, ``assistant_overlap_token_ids``), a dict in hash order that changes between processes."""
    def loop(target_dir, draft_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed):
        from transformers.generation.candidate_generator import AssistantToTargetTranslator

        real = AssistantToTargetTranslator._get_assistant_to_target_input_ids

        def ordered(self):
            to_target, to_assistant = real(self)
            items = sorted(to_assistant.items(), key=lambda kv: kv[1], reverse=order == "reversed")
            return to_target, dict(items)

        AssistantToTargetTranslator._get_assistant_to_target_input_ids = ordered
        try:
            return hf_generate(target_dir, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed,
                               assistant_model=uad_assistant(str(draft_dir), temperature > 0, order),
                               tokenizer=hf_tokenizer(str(target_dir), order),
                               assistant_tokenizer=hf_tokenizer(str(draft_dir), order))
        finally:
            AssistantToTargetTranslator._get_assistant_to_target_input_ids = real
    loop.__name__ = loop.__qualname__ = f"universal_{order}"
    return loop


universal_sorted = universal_in_order("sorted")
