"""What a run of the speculative loop records: one ``RoundRecord`` per round, and the statistics read from them.

``rounds.Run.emit`` appends each round's record to the run's log and hands it to the run's observers (``Observer``:
a trace, trace/). The statistics (``SpecStats``: guesses drafted and accepted, by position, and the time spent
drafting and verifying) are read from the log when asked for, after the run: the loop never computes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass
class RoundRecord:
    """One round. ``drafted``: guesses drafted (a tree: its depth; 0: a plain round), ``accepted`` kept, ``emitted``
    the tokens output; seconds drafting and verifying (``prefill``: the pass also carried the prompt);
    ``plain_cause``: why a plain round drafted nothing; ``tree``: a tree round's (nodes verified, whether its walk
    ended at a leaf), None for a chain."""
    drafted: int
    accepted: int
    emitted: list
    t_draft: float
    t_verify: float
    prefill: bool
    plain_cause: str = ""
    tree: tuple | None = None


@runtime_checkable
class Observer(Protocol):
    """What watches a run without changing it (a ``trace.Trace``): told of each round once it is done."""

    def round_done(self, record: RoundRecord) -> None: ...


@dataclass
class SpecStats:
    """A run's statistics, read from its rounds' records (``log``). ``draft_forwards``: the drafter's passes."""
    log: list = field(default_factory=list)  # a RoundRecord per round
    draft_forwards: int = 0

    @property
    def rounds(self) -> int:
        """Rounds = target passes (the first also carried the prompt)."""
        return len(self.log)

    @property
    def drafted(self) -> int:
        return sum(r.drafted for r in self.log)

    @property
    def accepted(self) -> int:
        return sum(r.accepted for r in self.log)

    @property
    def position_drafted(self) -> list[int]:
        """[j]: rounds that drafted a token at position j+1."""
        K = max((r.drafted for r in self.log), default=0)
        return [sum(r.drafted > j for r in self.log) for j in range(K)]

    @property
    def position_accepted(self) -> list[int]:
        """[j]: rounds that accepted the token they drafted at position j+1."""
        K = max((r.drafted for r in self.log), default=0)
        return [sum(r.drafted > j and r.accepted > j for r in self.log) for j in range(K)]

    @property
    def tokens_per_pass(self) -> dict:
        """Tokens emitted by a round -> how many rounds."""
        out: dict = {}
        for r in self.log:
            out[len(r.emitted)] = out.get(len(r.emitted), 0) + 1
        return out

    @property
    def rounds_log(self) -> list[tuple[int, int]]:
        """(drafted, accepted) of every round."""
        return [(r.drafted, r.accepted) for r in self.log]

    @property
    def time_draft(self) -> float:
        return sum(r.t_draft for r in self.log)

    @property
    def time_verify(self) -> float:
        """The verification passes and the rule, the prompt's pass excluded."""
        return sum(r.t_verify for r in self.log if not r.prefill)

    @property
    def time_prefill(self) -> float:
        """The first round's pass, which carried the prompt."""
        return sum(r.t_verify for r in self.log if r.prefill)

    @property
    def plain_causes(self) -> dict:
        """Why rounds drafted nothing -> how many: "policy" (K = 0 was asked for: by the policy, or a fixed K of 0),
        "end" (one token still wanted), "room" (the draft's context was full), "nothing" (nothing to propose)."""
        out: dict = {}
        for r in self.log:
            if r.drafted == 0:
                out[r.plain_cause or "nothing"] = out.get(r.plain_cause or "nothing", 0) + 1
        return out

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def per_position_acceptance(self) -> list[float]:
        """P(position j accepted | drafted), j = 1..K."""
        return [a / d if d else float("nan") for a, d in zip(self.position_accepted, self.position_drafted)]

    @property
    def mean_tokens_per_pass(self) -> float:
        n = sum(self.tokens_per_pass.values())
        return sum(t * c for t, c in self.tokens_per_pass.items()) / n if n else float("nan")

    @property
    def plain_rounds(self) -> int:
        """Rounds that drafted nothing: plain decoding steps (an adaptive policy's K = 0)."""
        return sum(1 for r in self.log if r.drafted == 0)
