"""The accept/reject rule of speculative sampling. Pure functions: no model inside.

Leviathan, Kalman & Matias 2022 (arXiv 2211.17192), Algorithm 1; Chen et al. 2023
(arXiv 2302.01318), Algorithm 2. Names here -> the paper (Leviathan et al.):

  draft_tokens[i]     x_{i+1} ~ q_{i+1}(x), the draft's guesses          (gamma = K of them)
  draft_probs[i]      q_{i+1}(x), what the draft model *actually sampled from*
  target_probs[i]     p_{i+1}(x), the target's distribution at the same position (K+1 rows:
                      the last one, p_{K+1}, is for the bonus token after all K guesses)
  rng.random()        r_i ~ U(0, 1)
  n_accepted          n, the number of guesses kept
  next_token          t, sampled from p'(x) = norm(max(0, p_{n+1}(x) - q_{n+1}(x))) after a
                      rejection, or from p_{K+1}(x) when every guess was accepted

Every token the round emits, ``draft_tokens[:n] + [next_token]``, is distributed exactly as if
sampled from the target one token at a time. Greedy decoding is the special case of one-hot p
and q; ``accept_greedy`` spells it out.
"""

from __future__ import annotations

import numpy as np

from .sampling import sample


def acceptance_probability(target_p: float, draft_q: float) -> float:
    """min(1, p(x) / q(x)) for a proposed token x."""
    if draft_q <= 0:
        raise ValueError("the draft proposed a token it gave probability 0: draft_probs are not "
                         "the distribution the draft sampled from (a drafter bug)")
    return min(1.0, target_p / draft_q)


def overlap(target_row: np.ndarray, draft_row: np.ndarray) -> float:
    """sum_x min(p(x), q(x)) = 1 - TV(p, q): the probability that the rule accepts one guess drawn from q
    (beta in Leviathan et al., section 3.5). A plain round knows p for the next token, so it can measure
    a guess it never verifies (rounds.py: Run.measure_probe)."""
    return float(np.minimum(target_row, draft_row).sum())


def residual(target_row: np.ndarray, draft_row: np.ndarray) -> np.ndarray:
    """norm(max(0, p - q)): the part of p that q under-covers. [V] -> [V]"""
    r = np.maximum(target_row - draft_row, 0.0)
    total = r.sum()
    if total <= 1e-12:  # p == q up to rounding: a rejection is then (almost) impossible; fall back to p
        return target_row / target_row.sum()
    return r / total


def accept_reject(target_probs, draft_probs, draft_tokens, rng: np.random.Generator) -> tuple[int, int]:
    """One round: target_probs [K+1, V], draft_probs [K, V], draft_tokens [K] -> (n_accepted, next_token)."""
    K = len(draft_tokens)
    if target_probs.shape[0] != K + 1 or draft_probs.shape[0] != K:
        raise ValueError(f"need K+1 target rows and K draft rows for K={K} tokens, "
                         f"got {target_probs.shape[0]} and {draft_probs.shape[0]}")
    for i, x in enumerate(draft_tokens):
        r = rng.random()
        if r < acceptance_probability(target_probs[i, x], draft_probs[i, x]):
            continue  # x_{i+1} accepted
        return i, sample(residual(target_probs[i], draft_probs[i]), rng)  # rejected: resample and stop
    return K, sample(target_probs[K], rng)  # all K accepted: one bonus token from p_{K+1}


def accept_greedy(target_scores, draft_tokens) -> tuple[int, int]:
    """Greedy rule: keep guesses while they equal the target's argmax; then emit the target's argmax.

    target_scores [K+1, V] may be probabilities or logits (only the argmax is used).
    """
    best = np.argmax(np.asarray(target_scores), axis=-1)  # [K+1]
    n = 0
    while n < len(draft_tokens) and draft_tokens[n] == best[n]:
        n += 1
    return n, int(best[n])
