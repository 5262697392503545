"""Subjects for the chat requests the target writes itself (eagle_data.py's ``--ask-subjects wordnet``): the nouns of
WordNet, Princeton's lexical database of English (Debian's package ``wordnet-base``, in /usr/share/wordnet), that
its sense-tagged corpus counts, whose commonest sense is of a kind a person asks about.

Why: the head keeps fewer first guesses on chat prompts whose answers state facts of a subject the data seldom
touches (docs/eagle/scaling.md, "Where the chat head misses"), and the lists eagle_data.py asks about hold 209
subjects, most of them broad ("science", "the weather"). Debian's WordNet 3.0 gives 8,383 nouns of 17 of its 26
noun files, things and foods ("fog", "lemon", "ambulance") as well as acts, states and ideas ("vaccination",
"fever", "gravity"); none of them is an evaluation prompt: nouns of one word or a few ("ice cream"), while the rule
that drops a window copying one (eval_overlap.py) needs a run of ``eval_overlap.RUN`` (8) words.

    cntlist.rev   one line a tagged sense: ``lemma%ss_type:lex_filenum:lex_id:head_word:head_id sense_number
                  tag_count``; ss_type 1 is a noun, lex_filenum its lexicographer file (KINDS), sense_number 1 its
                  commonest sense; lemmas lowercase, words joined by "_"
"""

from __future__ import annotations

import re
from pathlib import Path

WORDNET_DIR = Path("/usr/share/wordnet")  # where Debian's wordnet-base installs it
KINDS = {  # lexicographer files kept (WordNet's lexnames): things, foods, places, phenomena, acts and states;
    # left out: Tops (3), attributes (7), groups (14), motives (16), people (18), quantities (23), relations (24),
    # shapes (25) and times (28), whose tagged nouns are mostly abstract ("proximity", "lot", "last") or odd
    # as a subject ("redheader")
    4: "act", 5: "animal", 6: "artifact", 8: "body", 9: "cognition", 10: "communication", 11: "event",
    12: "feeling", 13: "food", 15: "location", 17: "object", 19: "phenomenon", 20: "plant", 21: "possession",
    22: "process", 26: "state", 27: "substance",
}
WORD = re.compile(r"[a-z][a-z'-]+[a-z]( [a-z][a-z'-]*)*")  # a lemma kept: its first word 3 letters or more, no digits or dots
# ("b-52", "d.c."; "tv", "us": two letters are mostly abbreviations)
LINE = re.compile(r"([^%\s]+)%([0-9]+):([0-9]+):[^:\s]*:[^:\s]*:[^:\s]* ([0-9]+) ([0-9]+)")  # cntlist.rev's form


def wordnet_subjects(folder=WORDNET_DIR) -> list[str]:
    """The nouns of ``folder``'s cntlist.rev whose commonest sense (sense number 1) is of ``KINDS`` ("lot", whose
    commonest sense is a quantity, is left out though one of its senses is an artifact), "_" read as a space,
    sorted, each once. A missing file is refused naming the package that holds it; a line not of cntlist.rev's form
    (a blank line too) or not UTF-8, by its number."""
    file = Path(folder) / "cntlist.rev"
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no WordNet sense counts there; Debian's wordnet-base installs them in "
                                f"{WORDNET_DIR} (apt-get install wordnet-base), or pass the folder that holds them (--wordnet DIR)")
    subjects = set()
    raw = file.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ValueError(f"{file}:{line}: not UTF-8 text ({e.reason})") from None
    for n, line in enumerate(text.removesuffix("\n").split("\n") if text else [], 1):  # numbered as the bytes are
        m = LINE.fullmatch(line.strip())
        if not m:
            raise ValueError(f"{file}:{n}: not a line of WordNet's cntlist.rev ('lemma%ss_type:lex_filenum:lex_id:"
                             f"head_word:head_id sense_number tag_count'): {line[:80]!r}")
        lemma, ss_type, lex_file, sense, count = m[1].replace("_", " "), int(m[2]), int(m[3]), int(m[4]), int(m[5])
        if ss_type == 1 and sense == 1 and count > 0 and lex_file in KINDS and WORD.fullmatch(lemma):
            subjects.add(lemma)
    if not subjects:
        raise ValueError(f"{file}: no tagged noun of the kinds kept ({', '.join(KINDS.values())})")
    return sorted(subjects)
