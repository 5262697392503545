"""The accept/reject rule of speculative sampling. Pure functions: no model inside.

Leviathan, Kalman & Matias 2022 (arXiv 2211.17192), Algorithm 1; Chen et al. 2023
(arXiv 2302.01318), Algorithm 2. Names here -> the paper (Leviathan et al.):

  draft_tokens[i]     x_{i+1} ~ q_{i+1}(x), the draft's guesses          (gamma = K of them)
  draft_probs[i]      q_{i+1}(x), what the draft model *actually sampled from*
  target_probs[i]     p_{i+1}(x), the target's distribution at the same position (K+1 rows:
                      the last one, p_{K+1}, is for the bonus token after all K guesses)
  rng.random()        r_i ~ U(0, 1)
  n_accepted          n, the number of guesses kept
  next_token          t: after a rejection the *correction*, sampled from the residual
                      p'(x) = norm(max(0, p_{n+1}(x) - q_{n+1}(x))); after every guess was kept
                      the *bonus* token, sampled from p_{K+1}(x)

Every token the round emits, ``draft_tokens[:n] + [next_token]``, is distributed exactly as if
sampled from the target one token at a time. Greedy decoding is the special case of one-hot p
and q; ``accept_greedy`` spells it out. ``block_verify`` is the same contract with the guesses
decided jointly (Sun et al. 2025): lossless too; the paper proves it keeps no fewer guesses in
expectation, which tests/test_block.py checks exactly on small tables. ``coupled_verify`` (Daliri et al.
2024) is the same contract again with no uniform at all: its fourth argument is keyed noise (keyed.py), the
target's token at each position is a race on it, and a guess is kept while it is that token, so the output is
the same whatever the drafter.

Each rule says what it is in attributes: ``joint``, False for a rule that decides each guess on its own
(``accept_reject``: the threshold min(1, p/q), the residual norm(max(0, p - q))), True for one that decides
the K guesses jointly (``block_verify``: its threshold h_i, a residual weighted by the kept prefix's running
weight); ``keyed``, True for a rule that races on keyed noise instead of drawing from a generator
(``coupled_verify``). ``decides_jointly(rule)`` and ``is_keyed(rule)`` read them, for a caller that explains a
rule (trace/) or hands it its randomness (rounds.py), whatever its name.
"""

from __future__ import annotations

import numpy as np

from .keyed import Keyed, coupled_acceptance
from .sampling import sample


def declares(*, joint: bool, keyed: bool = False):
    """Marks a verification rule with what it is: ``joint``, whether it decides the K guesses jointly; ``keyed``,
    whether it races on keyed noise (keyed.py) rather than drawing uniforms from a generator: the loop then hands it,
    and the drafter, the run's noise seen from the round's first new position."""
    def mark(rule):
        rule.joint, rule.keyed = joint, keyed
        return rule
    return mark


def is_keyed(rule) -> bool:
    """True for a rule that declares it races on keyed noise (``coupled_verify``)."""
    return getattr(rule, "keyed", False) is True


def guess_acceptance(rule):
    """(p row, q row) -> P(the rule keeps one guess drawn from q): ``coupled_acceptance`` for a keyed rule, else
    ``overlap`` (the token-wise rule's; block verification's for a single guess too). The policy's probes use it."""
    return coupled_acceptance if is_keyed(rule) else overlap


def decides_jointly(rule) -> bool | None:
    """True for a rule that declares it decides the guesses jointly, False for one that decides each on its own,
    None for a rule that declares neither (a caller's own function)."""
    joint = getattr(rule, "joint", None)
    return joint if isinstance(joint, bool) else None


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


@declares(joint=False)
def accept_reject(target_probs, draft_probs, draft_tokens, rng: np.random.Generator) -> tuple[int, int]:
    """The rule for one round: target_probs [K+1, V], draft_probs [K, V], draft_tokens [K] -> (n_accepted, next_token)."""
    K = len(draft_tokens)
    if target_probs.shape[0] != K + 1 or draft_probs.shape[0] != K:
        raise ValueError(f"need K+1 target rows and K draft rows for K={K} tokens, "
                         f"got {target_probs.shape[0]} and {draft_probs.shape[0]}")
    for i, x in enumerate(draft_tokens):
        r = rng.random()
        if r < acceptance_probability(target_probs[i, x], draft_probs[i, x]):
            continue  # x_{i+1} accepted
        return i, sample(residual(target_probs[i], draft_probs[i]), rng)  # rejected: the correction, and stop
    return K, sample(target_probs[K], rng)  # all K accepted: the bonus token from p_{K+1}


@declares(joint=True)
def block_verify(target_probs, draft_probs, draft_tokens, rng: np.random.Generator) -> tuple[int, int]:
    """Block verification (Sun et al., ICLR 2025, arXiv 2403.10444, Algorithm 2): the K guesses decided jointly.
    target_probs [K+1, V], draft_probs [K, V], draft_tokens [K] -> (n_accepted, next_token), like ``accept_reject``.

    Names -> the paper (M_b the target, M_s the draft, X_i the guesses, gamma = K):

      weight[i]       p_i = min(1, p_{i-1} M_b(X_i) / M_s(X_i)), p_0 = 1: how much of the block so far the target
                      would still "owe" the draft; the token-wise rule's product of acceptances, kept but capped at 1
      mass            sum_x max(0, p_i M_b(x | X^i) - M_s(x | X^i)): what a stop after X_i could still emit
      h[i]            h_i = mass / (mass + 1 - p_i) for i < K, h_K = p_K: P(the block is kept through X_i), given
                      that it is not kept further (a stop after X_i is only taken when no longer prefix is)
      rng.random()    eta_i ~ U(0, 1), one per guess, all drawn; tau = the LAST i with eta_i <= h_i (0 if none)
      next_token      Y: for tau < K the correction, ~ norm(max(0, p_tau M_b(. | X^tau) - M_s(. | X^tau))), the
                      residual weighted by p_tau, the running weight of the kept prefix; for tau = K the bonus
                      token, ~ M_b(. | X^K)

    Lossless: the emitted tokens X_1..X_tau, Y are distributed as the target's (the paper's Theorem 1; level 1
    integrates it exactly, tests/test_block.py). The paper proves (Theorem 2) that it keeps the most guesses in
    expectation of all valid rules, so no fewer than ``accept_reject``; tests/test_block.py checks the "no fewer"
    exactly on generated tables (K <= 3, V <= 3) and the paper's example, target (1/3, 2/3) and draft (2/3, 1/3)
    at K = 2: 11/9 guesses per round against 10/9. Where the token-wise rule stops at the first
    rejection for good, here a later guess that the target likes more than the draft did can buy back an earlier
    one (p_i can rise again). Greedy (one-hot rows) it is the greedy rule: p_i is 1 up to the first mismatch, 0
    from it on. It adds no target work: the same K + 1 rows.
    """
    K = len(draft_tokens)
    if target_probs.shape[0] != K + 1 or draft_probs.shape[0] != K:
        raise ValueError(f"need K+1 target rows and K draft rows for K={K} tokens, "
                         f"got {target_probs.shape[0]} and {draft_probs.shape[0]}")
    weight, tau, weights = 1.0, 0, [1.0]
    for i, x in enumerate(draft_tokens, start=1):
        weight = min(1.0, weight * target_probs[i - 1, x] / draft_probs[i - 1, x]) if draft_probs[i - 1, x] > 0 else 0.0
        weights.append(weight)
        if i < K:
            mass = np.maximum(weight * target_probs[i] - draft_probs[i], 0.0).sum()
            h = mass / (mass + 1.0 - weight) if mass + 1.0 - weight > 0 else 1.0
        else:
            h = weight
        if rng.random() <= h:
            tau = i  # the block is kept through X_i, unless a later eta keeps more
    if tau == K:
        return K, sample(target_probs[K], rng)
    return tau, sample(weighted_residual(target_probs[tau], draft_probs[tau], weights[tau]), rng)


def weighted_residual(target_row: np.ndarray, draft_row: np.ndarray, weight: float) -> np.ndarray:
    """norm(max(0, weight p - q)): block verification's residual after a kept prefix of running weight ``weight``
    (``weight`` 1: the token-wise ``residual``). [V] -> [V]"""
    r = np.maximum(weight * target_row - draft_row, 0.0)
    total = r.sum()
    if total <= 1e-12:  # nothing left to emit: a stop here has probability 0; fall back to p
        return target_row / target_row.sum()
    return r / total


@declares(joint=False, keyed=True)
def coupled_verify(target_probs, draft_probs, draft_tokens, noise: Keyed) -> tuple[int, int]:
    """Drafter-invariant verification (Daliri, Musco & Suresh 2024, arXiv 2408.07978): keep a guess while it is
    the target's own keyed sample at its position. target_probs [K+1, V], draft_probs [K, V], draft_tokens [K],
    ``noise`` keyed noise from the round's first new position (keyed.KeyedNoise) -> (n_accepted, next_token).

    Names -> the paper: ``noise.race(p_i, i)`` is Gumbel sampling of p at position t + i, y_{t+i} =
    argmin_x E_{t+i}(x) / p_{t+i}(x) with E exponential noise keyed by (seed, t + i); a guess x_i drawn by the
    draft's race on the same noise is accepted iff x_i = y_{t+i}. The output is y_t, y_{t+1}, ..., exactly plain
    keyed sampling of the target: the same tokens for any drafter, K, tree or policy, and for no drafter at all.
    The guess is accepted with probability ``keyed.coupled_acceptance(p, q)`` >= (1 - TV) / (1 + TV), below
    the token-wise rule's 1 - TV, when the drafter raced q on the same noise; sum_x p(x) q(x) when it did not.

    Departures from Leviathan et al.'s rule: no uniform, no threshold min(1, p/q), no residual: the correction
    after a mismatch is the target's own sample y, and the rule never reads q (draft_probs is checked, not used).
    """
    K = len(draft_tokens)
    if target_probs.shape[0] != K + 1 or draft_probs.shape[0] != K:
        raise ValueError(f"need K+1 target rows and K draft rows for K={K} tokens, "
                         f"got {target_probs.shape[0]} and {draft_probs.shape[0]}")
    for i, x in enumerate(draft_tokens):
        y = noise.race(target_probs[i], i)  # y_{t+i}: the target's own keyed sample at the guess's position
        if x != y:
            return i, y  # rejected: the correction is the target's sample itself, and stop
    return K, noise.race(target_probs[K], K)  # all K kept: the bonus, the target's sample at t + K


def verification_rule(rule):
    """"token" -> ``accept_reject``, "block" -> ``block_verify``, "coupled" -> ``coupled_verify``; a function of their
    signature passes through (the checks pass a deliberately broken twin)."""
    if callable(rule):
        return rule
    if rule in RULES:
        return globals()[RULES[rule]]  # looked up when asked, so a test that replaces a rule is obeyed
    raise ValueError(f"rule must be one of {', '.join(map(repr, RULES))} or a function like accept_reject, got {rule!r}")


RULES = {"token": "accept_reject", "block": "block_verify", "coupled": "coupled_verify"}  # CLI name -> function name


def accept_greedy(target_scores, draft_tokens) -> tuple[int, int]:
    """Greedy rule: keep guesses while they equal the target's argmax; then emit the target's argmax.

    target_scores [K+1, V] may be probabilities or logits (only the argmax is used).
    """
    best = np.argmax(np.asarray(target_scores), axis=-1)  # [K+1]
    n = 0
    while n < len(draft_tokens) and draft_tokens[n] == best[n]:
        n += 1
    return n, int(best[n])
