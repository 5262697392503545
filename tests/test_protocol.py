"""The drafter protocol (drafters/protocol.py): every shipped drafter declares what it can do, and a drafter kind
that minispec has never seen, reading the target's features, is driven and timed through its capabilities alone."""

import numpy as np
import pytest

from minispec.drafters import (
    Drafter,
    DraftModel,
    HasModel,
    HasRoom,
    LayerSkip,
    PromptLookup,
    ProposesTrees,
    ReadsFeatures,
    TimesItself,
    TimesItsTreeLevels,
)
from minispec.generate import generate
from minispec.policy import timing
from minispec.speculative import speculative_generate


def test_shipped_drafters_declare_their_capabilities(small_pair):
    target, draft = small_pair
    caps = (Drafter, HasRoom, ProposesTrees, ReadsFeatures, HasModel, TimesItself, TimesItsTreeLevels)
    have = {type(d).__name__: {c.__name__ for c in caps if isinstance(d, c)}
            for d in (DraftModel(draft), LayerSkip(target, 1), PromptLookup())}
    assert have["DraftModel"] >= {"Drafter", "HasModel", "ProposesTrees"} and "ReadsFeatures" not in have["DraftModel"]
    assert "Drafter" in have["PromptLookup"] and not have["PromptLookup"] & {"HasModel", "TimesItself", "ReadsFeatures"}


class EchoFeatures:
    """A drafter kind minispec has never seen: it reads the target's features (the top layer's, after the norm)
    and guesses the target's own greedy token from the last one, through the target's head. It is not EAGLE."""

    def __init__(self, target):
        self.target, self.name, self.forwards, self.seen = target, "echo-features", 0, 0
        self.features = None

    def context(self, tokens) -> int:
        return 0

    def see_features(self, tokens, features) -> None:
        self.seen += 1
        self.features = np.asarray(features)[-1:]  # [1, D], the last position's

    def propose(self, tokens, k, warp, rng, keep=None):
        if self.features is None or k < 1:
            return [], np.zeros((0, self.target.cfg.vocab_size), np.float32)
        logits = self.features @ np.asarray(self.target.lm_head)  # [1, V]
        q = np.zeros((1, self.target.cfg.vocab_size), np.float32)
        guess = int(np.argmax(logits[0]))
        q[0, guess] = 1.0  # deterministic: one-hot, the distribution the guess was drawn from
        return [guess], q

    def measure_costs(self, clock, repeats: int) -> tuple[float, float]:  # its own cost hook
        self.timed = getattr(self, "timed", 0) + 1
        return 1e-5, 1e-6


def test_a_new_feature_drafter_is_driven_and_timed_through_its_capabilities(small_pair):
    target, _ = small_pair
    d = EchoFeatures(target)
    assert isinstance(d, Drafter) and isinstance(d, ReadsFeatures) and isinstance(d, TimesItself)
    res = speculative_generate(target, d, [1, 2, 3], 12, k=1)
    assert res.tokens == generate(target, [1, 2, 3], 12)  # greedy: the target's own tokens
    assert d.seen > 0 and res.stats.drafted > 0  # the loop handed it the target's features, and it drafted
    assert timing.self_timed_costs(d)(3) == (1e-5, 1e-6) and d.timed == 1  # timed by its own hook


@pytest.mark.parametrize("k", [1, "auto"])
def test_the_new_drafter_under_fixed_and_automatic_k(small_pair, k):
    target, _ = small_pair
    res = speculative_generate(target, EchoFeatures(target), [1, 2, 3], 10, k=k, temperature=1.0, seed=2)
    assert len(res.tokens) == 10
