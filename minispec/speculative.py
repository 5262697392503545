"""The speculative loop: draft K tokens, verify them in ONE target pass, keep what the rule accepts.

Leviathan, Kalman & Matias 2022 (arXiv 2211.17192), Algorithm 1, one round per iteration:

    x_1..x_K ~ q, one after another          run.draft()            (drafters.py; K from the policy)
    p_1..p_{K+1} in ONE target pass          target.forward(...)    over the last token and x_1..x_K
    n accepted, then one more token t        accept_reject(...)     (rejection.py)
    forget the rejected guesses              cache.rollback(...)    (model/kvcache.py: an integer)
    emit x_1..x_n, t                         run.emit(...)

The target pass also returns its top-layer features; ``run.emit`` hands those of the tokens the cache
keeps to a drafter that drafts from them (eagle.py) and ignores them otherwise.

With K = 0 a round is one plain autoregressive step. The prompt rides on the first round's pass (its
rows come first and only the last K + 1 rows are kept), so a run makes exactly one target pass per
round. Everything that is not the algorithm (choosing K, timing, statistics, probes, the drafter
catching up on tokens it has not seen) sits behind ``run`` (rounds.py) and can be skipped on a first
read.

``tree_speculative_generate`` is the same loop verifying a token tree per round (tree.py).
"""

from __future__ import annotations

from typing import Callable

from .model import Model
from .rejection import accept_reject
from .rounds import SpecResult, start_run
from .tree import accept_tree, kept_features, verify_tree


def speculative_generate(target: Model, drafter, prompt_ids, max_new_tokens: int, *, k=4,
                         temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                         seed: int | None = None, stop_ids=None, on_token: Callable[[int], None] | None = None,
                         accept_reject=accept_reject) -> SpecResult:
    """Generate like ``generate(target, ...)`` (the same distribution; greedy: the same tokens), faster
    when the drafter guesses well and cheaply. ``drafter``: a drafter (drafters.py) or a draft Model.
    ``k``: guesses per round, or "auto" (chosen per round by the cost model, policy/auto_k.py).
    Stops after a token in ``stop_ids`` (included). ``accept_reject`` is the rule of rejection.py; the
    losslessness checks pass a deliberately broken twin to show that they can fail."""
    run = start_run(target, drafter, prompt_ids, max_new_tokens, k=k, temperature=temperature, top_k=top_k,
                    top_p=top_p, seed=seed, stop_ids=stop_ids, on_token=on_token)
    while not run.done:
        draft_tokens, draft_probs = run.draft()  # x_1..x_K and q_1..q_K: [K], [K, V]
        K = len(draft_tokens)
        target_logits, features = target.forward(run.last + draft_tokens, run.cache, last=K + 1, hidden=True)  # ONE pass
        # [K+1, V] and [T, D]. run.last is the last emitted token; in round 1 the prompt comes before it
        target_probs = run.warp(target_logits)  # p_1..p_{K+1}: [K+1, V], warped like q
        n, next_token = accept_reject(target_probs, draft_probs, draft_tokens, run.rng)
        run.cache.rollback(len(run.tokens) + n)  # cache length := the last token and x_1..x_n; x_{n+1}.. drop
        run.emit(draft_tokens[:n] + [next_token], n, target_probs, features[: len(features) - K + n])  # f of the kept
    return run.result()


def tree_speculative_generate(target: Model, drafter, prompt_ids, max_new_tokens: int, *, shape=(2, 4),
                              temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                              seed: int | None = None, stop_ids=None,
                              on_token: Callable[[int], None] | None = None) -> SpecResult:
    """Like ``speculative_generate``, but each round verifies a token tree in one target pass (tree.py).
    ``shape``: (width, depth), "auto" (chosen per round by the cost model, policy/tree_shape.py), or a
    TreeShape."""
    run = start_run(target, drafter, prompt_ids, max_new_tokens, shape=shape, temperature=temperature, top_k=top_k,
                    top_p=top_p, seed=seed, stop_ids=stop_ids, on_token=on_token)
    while not run.done:
        tree = run.draft_tree()  # N nodes, each drawn from its q
        target_logits, features = verify_tree(target, run.cache, run.last, tree, hidden=True)  # [N+1, V], [T, D]: one pass
        target_probs = run.warp(target_logits)  # [N+1, V]
        path, next_token = accept_tree(target_probs, tree, run.rng)  # the accepted nodes, root to deepest
        run.cache.keep(len(run.tokens) - 1, [0] + path)  # the root and the accepted nodes, compacted
        run.emit([tree.tokens[node] for node in path] + [next_token], len(path), target_probs,
                 kept_features(features, len(run.last), path))
    return run.result()
