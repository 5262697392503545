"""The engine's loop: the textbook round (textbook.py), plus what a real run needs.

Leviathan, Kalman & Matias 2022 (arXiv 2211.17192), Algorithm 1, one round per iteration. Read
``speculative_sampling`` in textbook.py first: this is the same round, and the same tokens for the same K and seed
(tests/test_textbook.py). Line by line:

    textbook.py                                       here
    K = min(k, tokens still wanted - 1)               run.draft(): the same cap, and the draft's room (rounds.py)
    x_i ~ q_i, one after another (draft.forward)      run.draft() -> DraftModel.propose (drafters/draft_model.py)
    ONE target pass, warp                             the same two lines (``run.warp.chain``: the warp, row by row)
    accept_reject(...)                                run.verify(...): accept_reject, or the rule asked for
    target_cache.crop(len(tokens) + n)                the same line
    draft_cache.crop(...)                             inside the drafter, at its next proposal: DraftModel.feed
                                                      keeps the prefix its cache shares with the sequence
    tokens += x_1..x_n, t                             run.emit(...): and records the round

Each addition has a name and lives elsewhere:

    drafters            any kind (drafters/): a draft model, prompt lookup, layer skip, an EAGLE head, a draft
                        with its own tokenizer; ``run.draft()`` lets it catch up and propose
    stop tokens         ``run.emit`` never appends past one (rounds.py)
    the record          ``run.emit`` records each round (stats.RoundRecord); ``run.result()`` reads the
                        statistics from the records (stats.py)
    choosing K          ``k="auto"`` or a policy: K each round from the cost model (policy/), and a plain round
                        (K = 0) may measure one unverified guess, a probe (rounds.py; when: policy/auto_k.py)
    features            a drafter that reads the target's features gets them from the same pass
                        (``on_features``; ``run.emit`` hands on the rows the cache kept)
    the rule            ``rule="block"``: block verification instead of the token-wise rule (rejection.py);
                        ``rule="coupled"``: the keyed rule, whose tokens are the same for any drafter (keyed.py)
    trees               ``tree_speculative_generate`` verifies a token tree per round (tree.py)
    a trace             ``trace=Trace()`` watches every round and the rule's decisions (trace/): an observer
                        (stats.Observer), attached by ``start_run``; the loop does not see it
    processors          ``processors=``: penalties or a choice mask (processors.py), applied by ``run.warp`` to
                        every q_i and p_i with that row's own prefix (``Warp.chain``; the textbook's warp has none)

With K = 0 a round is one plain autoregressive step.
"""

from __future__ import annotations

from typing import Callable

from .model import Model
from .rejection import verification_rule
from .rounds import SpecResult, start_run
from .tree import kept_rows, tree_rule, verify_tree


def speculative_generate(target: Model, drafter, prompt_ids, max_new_tokens: int, *, k=4,
                         temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                         seed: int | None = None, stop_ids=None, on_token: Callable[[int], None] | None = None,
                         rule="token", trace=None, processors=()) -> SpecResult:
    """Generate like ``generate(target, ...)`` (the same distribution; greedy: the same tokens), faster
    when the drafter guesses well and cheaply. ``drafter``: a drafter (drafters/) or a draft Model.
    ``k``: guesses per round, or "auto" (chosen per round by the cost model, policy/auto_k.py).
    Stops after a token in ``stop_ids`` (included). ``rule``: "token" (``accept_reject``), "block"
    (``block_verify``), "coupled" (``coupled_verify``: for a seed, the same tokens with any drafter; rejection.py),
    or a function of their signature: the losslessness checks pass a deliberately broken twin to show that they
    can fail. ``trace``: a ``trace.Trace`` that records every round
    (the rule's decisions, what was emitted, the time it took); the output is the same with or without it.
    ``processors``: logits processors (processors.py: penalties, a choice mask), applied to every q_i and p_i with
    that row's own prefix; the output then has the law of plain decoding with them (``generate(processors=...)``)."""
    run = start_run(target, drafter, prompt_ids, max_new_tokens, k=k, temperature=temperature, top_k=top_k,
                    top_p=top_p, seed=seed, stop_ids=stop_ids, on_token=on_token, trace=trace,
                    rule=verification_rule(rule), processors=processors)  # accept_reject (the textbook's), block_verify or coupled_verify
    while not run.done:
        draft_tokens, draft_probs = run.draft()  # x_1..x_K and q_1..q_K: [K], [K, V]
        K = len(draft_tokens)
        # ONE target pass over the tokens its cache lacks (run.unread: the last one; round 1 the prompt too)
        target_logits = target.forward(run.unread + draft_tokens, run.cache, last=K + 1, on_features=run.on_features)
        target_probs = run.warp.chain(target_logits, run.tokens, draft_tokens)  # p_1..p_{K+1}: [K+1, V], warped
        # like q: row i after the sequence and x_1..x_{i-1}
        n, next_token = run.verify(target_probs, draft_probs, draft_tokens, run.rng)  # the rule: rejection.py
        run.cache.crop(len(run.tokens) + n)  # keep the tokens and x_1..x_n: every token but the new last one
        run.emit(draft_tokens[:n] + [next_token], n, target_probs)
    return run.result()


def tree_speculative_generate(target: Model, drafter, prompt_ids, max_new_tokens: int, *, shape=(2, 4),
                              temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                              seed: int | None = None, stop_ids=None,
                              on_token: Callable[[int], None] | None = None, rule="token", trace=None,
                              processors=()) -> SpecResult:
    """Like ``speculative_generate``, but each round verifies a token tree in one target pass (tree.py).
    ``shape``: (width, depth), "auto" (chosen per round by the cost model: policy/tree_policy.py, or
    dynamic_tree_policy.py for a drafter that grows EAGLE-2's tree), or a tree policy (``ChoosesTrees``).
    ``rule``: "token", the multi-candidate rule (``accept_tree``), or "coupled", the keyed rule
    (``accept_tree_coupled``), or a function of ``accept_tree``'s signature (the checks pass a broken twin); block
    verification decides one chain (for trees see Traversal Verification, arXiv 2505.12398). A ``trace`` records
    each round's accepted path. ``processors``: as ``speculative_generate``'s, each node's rows with the path to it."""
    accept = tree_rule(rule)  # accept_tree, or accept_tree_coupled: tree.py
    run = start_run(target, drafter, prompt_ids, max_new_tokens, shape=shape, temperature=temperature, top_k=top_k,
                    top_p=top_p, seed=seed, stop_ids=stop_ids, on_token=on_token, trace=trace,
                    rule=verification_rule(rule), processors=processors)
    while not run.done:
        tree = run.draft_tree()  # N nodes, each drawn from its q
        head = run.unread  # the root (the last token) and, in round 1, the prompt before it
        target_logits = verify_tree(target, run.cache, head, tree, on_features=run.on_features)  # [N+1, V]: one pass
        target_probs = run.warp.tree(target_logits, run.tokens, tree)  # [N+1, V]: node n's row after its path
        path, next_token = accept(target_probs, tree, run.rng)  # the accepted nodes, root to deepest
        run.cache.keep(len(run.tokens) - 1, [0] + path)  # the root and the accepted nodes, compacted
        run.emit([tree.tokens[node] for node in path] + [next_token], len(path), target_probs, kept_rows(len(head), path))
    return run.result()
