"""The batch-invariance measurement (minispec/harness/batch_invariance.py) tells a model whose rows do not depend on
the pass from one whose rows do."""

import numpy as np

from minispec.harness import batch_invariance
from minispec.model import load_model
from minispec.model.tiny import write_random_model


class RowByRow:
    """A model whose every pass runs its rows one at a time: batch-invariant by construction."""

    def __init__(self, model):
        self.model = model

    def new_cache(self, n):
        return self.model.new_cache(n)

    def forward(self, ids, cache, last=None):
        rows = np.concatenate([self.model.forward([t], cache) for t in ids])
        return rows if last is None else rows[-last:]


class Drifting(RowByRow):
    """The planted twin: a row's logits move by 1e-6 times the number of rows in its pass."""

    def forward(self, ids, cache, last=None):
        return super().forward(ids, cache, last) + np.float32(1e-6 * len(ids))


def test_it_finds_invariant_rows_invariant_and_a_pass_dependent_twin_not(tmp_path):
    model = load_model(write_random_model(tmp_path / "m", seed=5))
    ids = [int(t) for t in np.random.default_rng(0).integers(0, 64, 48)]
    same = batch_invariance.measure(RowByRow(model), ids, prefix=16)
    assert all(same[str(n)]["identical_rows"] == 1.0 and same[str(n)]["max_abs_diff"] == 0.0 for n in batch_invariance.NS)
    drift = batch_invariance.measure(Drifting(model), ids, prefix=16)
    assert all(drift[str(n)]["identical_rows"] < 1.0 for n in batch_invariance.NS)
    assert drift["16"]["max_abs_diff"] > 0
