"""The floor's comparison (minispec/harness/measure.py ``alternate``, used by ``minispec bench auto``): the two sides
alternate with neither always first, each keeps its fastest run, and the run side is set up afresh, outside the clock,
before each of its runs. The clock is scripted: no timing is taken here."""

from minispec.harness import measure


def scripted(monkeypatch, seconds: dict):
    """``measure.timed`` replaced by a log of what ran, each side's runs taking the scripted seconds in turn."""
    log, turns = [], {side: iter(s) for side, s in seconds.items()}

    def timed(fn):
        side, out = fn()
        log.append(side)
        return out, next(turns[side])
    monkeypatch.setattr(measure, "timed", timed)
    return log


def test_the_sides_alternate_in_reversed_pairs_and_keep_their_fastest(monkeypatch):
    log = scripted(monkeypatch, {"plain": [3.0, 2.0, 2.5], "run": [1.5, 1.0, 4.0]})
    prepared = []

    def prepare():
        prepared.append(len(log))  # how many runs had happened when this one was set up
        n = len(prepared)
        return lambda: ("run", f"result {n}")

    plain_seconds, (result, seconds) = measure.alternate(lambda: ("plain", "tokens"), prepare, repeats=3)
    assert log == ["plain", "run", "run", "plain", "plain", "run"]
    assert prepared == [1, 2, 5]  # a fresh one before each of its runs, never inside another's clock
    assert plain_seconds == 2.0
    assert (result, seconds) == ("result 2", 1.0)  # the fastest run's own result


def test_a_slow_first_run_does_not_favour_either_side(monkeypatch):
    # two identical sides, each pair's first run 10% slower (a warm-up): the ratio is 1, whichever side that is
    log = scripted(monkeypatch, {"plain": [1.1, 1.0], "run": [1.0, 1.1]})
    plain_seconds, (_, seconds) = measure.alternate(lambda: ("plain", None), lambda: (lambda: ("run", None)), repeats=2)
    assert log == ["plain", "run", "run", "plain"]
    assert plain_seconds == seconds == 1.0
