"""``minispec generate --show``: the text, coloured by where each token came from, round by round.

On a terminal (and without ``NO_COLOR``): a kept guess green, the correction (next_token after a rejection) red,
the bonus token (next_token after a round that kept every guess) blue, a plain round's token as it is. Without colour the same
structure in plain text: each round's kept guesses in [brackets], then *correction or +bonus.
"""

from __future__ import annotations

COLOURS = {"kept": "\x1b[32m", "correction": "\x1b[31m", "bonus": "\x1b[34m", "plain": ""}
RESET = "\x1b[0m"


class ShowStream:
    """Called with each traced round (``Trace.on_round``); writes its tokens' text to ``out``."""

    def __init__(self, tokenizer, out, colour: bool):
        self.tok, self.out, self.colour = tokenizer, out, colour
        self.ids, self.printed = [], ""

    def delta(self, token: int) -> str:
        """The text this token adds (empty while it ends inside a character's bytes)."""
        self.ids.append(int(token))
        text = self.tok.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        new, self.printed = text[len(self.printed):], text
        return new

    def __call__(self, round_) -> None:
        parts = [(kind, self.delta(t)) for t, kind in zip(round_.emitted, round_.kinds())]
        if self.colour:
            text = "".join(f"{COLOURS[k]}{s}{RESET}" if COLOURS[k] and s else s for k, s in parts)
        else:
            kept = "".join(s for k, s in parts if k == "kept")
            rest = "".join(("*" if k == "correction" else "+" if k == "bonus" else "") + s for k, s in parts if k != "kept")
            text = (f"[{kept}]" if any(k == "kept" for k, _ in parts) else "") + rest
        self.out.write(text)
        self.out.flush()

    def legend(self) -> str:
        if self.colour:
            return ("[legend: " + "  ".join(f"{COLOURS[k]}{name}{RESET}" for k, name in
                                            (("kept", "kept guess"), ("correction", "correction: after a rejection"),
                                             ("bonus", "bonus: every guess kept"))) + "  plain round: uncoloured]")
        return ("[legend: [kept guesses] of a round, *the correction after a rejection, +the bonus token after "
                "every guess was kept; a plain round's token as it is]")
