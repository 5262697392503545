"""What a run of the speculative loop counts: guesses drafted and accepted, by position, and the time
spent drafting and verifying. ``rounds.Run.emit`` records every round; the loops never touch it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpecStats:
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0  # = target passes (the first also carried the prompt)
    draft_forwards: int = 0
    position_drafted: list = field(default_factory=list)  # [j]: rounds that drafted a token at position j+1
    position_accepted: list = field(default_factory=list)  # [j]: rounds that accepted it
    tokens_per_pass: dict = field(default_factory=dict)  # tokens emitted by a round -> how many rounds
    rounds_log: list = field(default_factory=list)  # (drafted, accepted) of every round
    time_draft: float = 0.0
    time_verify: float = 0.0  # the verification passes and the rule, prompt pass excluded
    time_prefill: float = 0.0  # the first round's pass, which carried the prompt
    plain_causes: dict = field(default_factory=dict)  # why rounds drafted nothing -> how many: "policy" (it chose
    # K = 0), "end" (one token still wanted), "room" (the draft's context was full), "nothing" (nothing to propose)

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
        return sum(1 for d, _ in self.rounds_log if d == 0)

    def record(self, n_drafted: int, n_accepted: int, emitted: int, t_draft: float = 0.0, t_verify: float = 0.0,
               prefill: bool = False, plain_cause: str = "") -> None:
        """One round: ``n_drafted`` guesses (a tree: its depth), ``n_accepted`` kept, ``emitted`` tokens
        output; seconds drafting and verifying (``prefill``: the pass also carried the prompt)."""
        self.rounds += 1
        self.drafted += n_drafted
        self.accepted += n_accepted
        while len(self.position_drafted) < n_drafted:
            self.position_drafted.append(0)
            self.position_accepted.append(0)
        for j in range(n_drafted):
            self.position_drafted[j] += 1
            self.position_accepted[j] += j < n_accepted
        self.tokens_per_pass[emitted] = self.tokens_per_pass.get(emitted, 0) + 1
        self.rounds_log.append((n_drafted, n_accepted))
        if n_drafted == 0:
            cause = plain_cause or "nothing"
            self.plain_causes[cause] = self.plain_causes.get(cause, 0) + 1
        self.time_draft += t_draft
        if prefill:
            self.time_prefill += t_verify
        else:
            self.time_verify += t_verify
