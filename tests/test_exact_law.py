"""Level 1's exact integrals themselves (harness/exact_law.py, harness/exact_race.py): the law of fewer tokens than a
round emits keeps its mass, and a keyed round is integrated over the draft's guesses past its first mismatch."""

import numpy as np

from minispec.harness.equivalence import broken_accept_reject
from minispec.harness.exact_law import continued_law, joint_law, round_law
from minispec.harness.exact_race import pair_outcomes
from minispec.harness.exact_race import round_law as race_round_law
from minispec.rejection import accept_reject


def table(seed, V=3):
    return lambda prefix: np.random.default_rng([seed, len(prefix), *prefix]).dirichlet(np.full(V, 0.7))


def test_the_law_of_fewer_tokens_than_a_round_emits_keeps_its_mass():
    """A K = 2 round's law of its first m = 1 and m = 2 tokens, continued by the target, is the target's: a round
    that kept m guesses or more gives its first m (bug: such rounds were left out, and the law lost their mass). The
    broken rule (a draw from p after a rejection) is told apart at m = 1 and m = 2 all the same."""
    p_of, q_of = table(1), table(2)
    law, _ = round_law(accept_reject, p_of, q_of, 2, 3)
    broken, _ = round_law(broken_accept_reject, p_of, q_of, 2, 3)
    for m in (1, 2, 3):
        want = joint_law(p_of, m, 3)
        assert np.abs(continued_law(law, p_of, m, 3) - want).max() < 1e-12, m
        assert continued_law(broken, p_of, m, 3).sum() > 1 - 1e-12
        assert 0.5 * np.abs(continued_law(broken, p_of, m, 3) - want).sum() > 0.01, m


def emits_the_next_guess(target_probs, draft_probs, draft_tokens, noise):
    """A keyed rule that, at a mismatch before its last guess, emits the draft's next guess as the correction."""
    for i, x in enumerate(draft_tokens):
        y = noise.race(target_probs[i], i)
        if x != y:
            return i, int(draft_tokens[i + 1]) if i + 1 < len(draft_tokens) else y
    return len(draft_tokens), noise.race(target_probs[-1], len(draft_tokens))


def test_a_keyed_round_is_integrated_over_the_guesses_past_its_first_mismatch():
    """With K = 2, the rule above emits x_1 after a mismatch at position 0, and x_1 is the draft's race on q(x_0)
    at position 1: the round's first token has P(z) = sum over the pairs (x_0, y_0) of position 0 of their
    probability times [z = x_0] where they agree, q(z | x_0) where they do not (bug: the walk pinned x_1 to q's most
    likely token, and integrated this rule as if the draft always proposed it)."""
    p_of, q_of = table(3), table(4)
    law, _ = race_round_law(emits_the_next_guess, p_of, q_of, 2, 3)
    first = np.zeros(3)
    for kept, row in law.items():
        if kept:
            first[kept[0]] += row.sum()
        else:
            first += row
    want = np.zeros(3)
    for (x, y), (w, _) in pair_outcomes(p_of(()), q_of(())).items():
        want += w * (np.eye(3)[x] if x == y else q_of((x,)))
    assert abs(first.sum() - 1) < 1e-12 and np.abs(first - want).max() < 1e-9
