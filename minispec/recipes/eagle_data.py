"""Training data for the EAGLE head, made on this machine in shards, resumable after any interruption.

    python -m minispec.recipes.eagle_data --tokens 2500000 [--threads 2]      # runs for hours: start it in the background
    python -m minispec.recipes.eagle_data --export weights/eagle-data/generations-s2.npz   # the generated windows
    python -m minispec.recipes.eagle_data --generations weights/eagle-data/generations-s2.npz   # rebuild: features only
    python -m minispec.recipes.eagle_data --generate-only --out DIR --generations FILE --tokens N   # more windows, no features
        [--generations-manifest M]   # M: FILE's committed manifest, whose records of its shards DIR's manifest keeps

Generating is the dear part (the target writes every token). So the generated windows are exported as token ids
(about a byte a token, compressed) and committed, and a rebuild on another machine reuses them: it computes their
features and the text shards' again, one teacher-forced pass per batch (``features``). A shard generated here reads
its features from the generation's own passes instead (``generate(with_features=True)``: the pass that makes token
t + 1 computes token t's hidden states). ``--generate-only`` makes only the generated shards' windows (no features,
no text shards), to grow the committed file where the features would not be kept; a later build in the same folder
computes the features of those shards from their windows.

Each shard is one unit of work, seeded by (seed, shard index) alone, so an interrupted run restarts at the first
missing shard and makes the same data (the settings that shape the data are kept in ``settings.json``; a run with
other settings is refused). Shards cycle through seven kinds:

    code-greedy, chat-greedy, chat-t1, text, chat-greedy, code-t1, text

- ``code-*``: the target continues a few lines of a standard-library function (plain text, as ``minispec/data``'s
  code prompts are), greedy or at T = 1;
- ``chat-*``: the target answers an instruction in its chat template: templates x topics, or a request built from a
  standard-library function (write it from its docstring's first line, or explain it);
- ``text``: standard-library source in chunks of ``--seq`` tokens (teacher-forced: no generation).

``--kinds`` sets another cycle (``chat-greedy,chat-t1``: a folder of answers only). ``--asked-code F``: for a share
F of each code shard's prompts the target writes the function itself: asked in its chat template for a short Python
function or class of some style about some programming subject, its first top-level ``def`` or ``class`` line, its
docstring's first line as a one-line docstring, and 0 to 3 lines of the body after it become a plain-text prompt
(``function_head``), the shape of ``minispec/data``'s code prompts; a standard-library prompt stands in where it
wrote none, where the head is not 8 to 160 tokens, or where it holds a short evaluation prompt (the shard's ``asked``
counts the heads kept; the manifest's ``asked_requests`` adds up chat requests and code heads). ``--asked F``: for a share F of
each chat shard's prompts the target is asked to write the request itself (self-instruct, Wang et al. 2023, arXiv
2212.10560): asked for a request of some style about some subject, it writes one (``--ask-wording`` chooses how it
is asked: ``chatbot``, "... that a user could ask a chatbot", the first folders' wording, led about one chat prompt in
seven to name a chatbot, an AI or an assistant; ``person``, "... as a person would ask it"; ``--ask-subjects own``
first asks it to list topics of a few listed subjects, and asks for each request about one of the topics it listed,
so that the requests are about more things than the lists here hold, and ``--ask-subjects wordnet`` asks about one
of about 8,400 nouns of WordNet (``wordnet_subjects.py``: Debian's wordnet-base, or the folder ``--wordnet DIR``);
``--ask-filter shape`` keeps only what reads as a user's question or instruction, ``reads_as_request``, of twice as
many asked for). What it writes is replaced by a built request (``chat_instruction``: a template's, or one made from
a standard-library function, half and half) where it is not 3 to 40 words, so fewer than F of the prompts end up its
own (the shard records ``asked``: how many are). Template x topic prompts repeat their few wordings; the target's
own requests vary as users' do. An asked request that holds a whole short evaluation prompt (fewer than 8 words,
which the window rule cannot see) is replaced so too (``EvalRuns.holds_short``).

Every window (prompt + answer, or chunk) that shares a run of 8 lowercased words with an evaluation prompt
(``eval_overlap.py``: minispec/data and the external prompt sets) is dropped before its features are computed, and
listed in ``manifest.json`` (the repository commits a copy: docs/eagle/data_manifest.json).

For every kept token a shard stores, in float16, the target's hidden states that a head may read: ``top`` (after
the final norm: what the LM head reads, EAGLE-1's feature), and ``low`` and ``mid`` (the outputs of layers
``LOW`` and ``MID``: EAGLE-3's fused features with ``top``), from the generation or one causal pass per batch.

Files under ``--out`` (default ``$MINISPEC_CACHE/eagle-data-v2``): ``shard-00000.npz`` (tokens [n] int32, starts
[m + 1], top/low/mid [n, D] float16) and ``shard-00000.json`` (its kind, counts, dropped windows and minutes; written
last, so a shard without it is redone), and ``manifest.json`` (the totals, rewritten after every shard).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

from ..harness.provenance import provenance
from .eval_overlap import EvalRuns, external_prompts_dir, prompt_files
from .windows import read_windows, write_windows
from .wordnet_subjects import WORDNET_DIR, wordnet_subjects

KINDS = ("code-greedy", "chat-greedy", "chat-t1", "text", "chat-greedy", "code-t1", "text")
LOW, MID = 2, 14  # layer outputs stored beside the top: hidden_states[LOW + 1] and [MID + 1] in transformers

MORE_TOPICS = [
    "the Pythagorean theorem", "photosynthesis in deserts", "how a bicycle stays upright", "the history of tea",
    "garbage collection", "TCP and UDP", "the Fibonacci sequence", "how vaccines are tested", "matrix multiplication",
    "the nitrogen cycle", "big-O notation", "dynamic programming", "the Silk Road", "how compilers work",
    "electric cars", "the human heart", "ocean tides", "machine learning", "the Renaissance", "caching strategies",
    "probability", "graph traversal", "rust and corrosion", "composting", "interest rates", "the ancient Egyptians",
    "version control", "the periodic table", "solar panels", "earthquakes", "API design", "writing a resume",
    "saving money", "learning a language", "healthy breakfasts", "the water footprint of food", "migratory birds",
    "the Internet", "encryption", "virtual memory", "threads and processes", "SQL joins", "code review",
    "the scientific method", "statistics", "the Great Wall of China", "how airplanes fly", "magnetism", "evolution",
    "photosynthesis and respiration", "coral reefs", "rain forests", "the metric system", "knitting", "gardening",
    "running a marathon", "meditation", "public speaking", "time management", "writing good tests",
    "floating point numbers", "Unicode", "the command line", "shell scripts", "Docker containers", "web servers",
    "HTML and CSS", "recursion versus iteration", "binary trees", "heaps and priority queues", "queues",
    "string formatting in Python", "list comprehensions", "Python decorators", "Python generators", "exceptions",
    "context managers", "type hints", "virtual environments", "reading CSV files", "dates and times in Python",
    "random numbers", "the mean and the median", "fractions", "percentages", "the solar system", "the Moon's phases",
    "dinosaurs", "volcanic islands", "honey bees", "photosynthetic algae", "antibiotics", "the common cold",
    "friendship", "teamwork", "job interviews", "cooking rice", "making pancakes", "planning a trip", "city parks",
]
MORE_TEMPLATES = [
    "Can you explain {t} in simple terms?", "Write a step-by-step guide to {t}.", "Why does {t} matter?",
    "Describe {t} in three sentences.", "Write a short story that involves {t}.", "Compare {t} with something similar.",
    "What should everyone know about {t}?", "Give an analogy that explains {t}.", "Write a quiz question about {t}.",
    "What is the history of {t}?", "Write an email to a friend about {t}.", "Create a short lesson plan on {t}.",
]


ASK_STYLES = [
    "question", "how-to question", "why question", "request for advice", "request for a short poem",
    "request for a list of ideas", "request for an email", "request for a recipe", "request for tips",
    "request for a short story", "what-if question", "request for a plan", "request for a comparison",
    "request for a simple explanation", "request for a definition", "question a student might ask",
]
ASK_WORDINGS = {  # --ask-wording: what the target is asked, to write a chat request itself
    # the first folders' wording: 56 of 384 chat prompts of 12 of their shards named a chatbot, an AI or an assistant
    "chatbot": "Write one {style} about {subject} that a user could ask a chatbot. Only write the request itself, in "
               "one sentence.",
    "person": "Write one {style} about {subject}, as a person would ask it. Only write the request itself, in one "
              "sentence.",
}
TOPICS_WORDING = "List ten specific topics about {subject} as a numbered list, a few words each."  # --ask-subjects own
SUBJECTS = [
    "cooking", "travel", "health", "history", "science", "money", "friendship", "pets", "sports", "music", "movies",
    "the weather", "cars", "home repair", "school", "work", "programming", "mathematics", "geography", "art", "books",
    "gardening", "animals", "space", "the ocean", "food", "exercise", "sleep", "language", "holidays", "shopping",
    "technology", "phones", "computers", "the environment", "energy", "chemistry", "physics", "biology", "medicine",
    "psychology", "philosophy", "law", "politics", "economics", "business", "marketing", "writing", "poetry",
    "photography", "fashion", "architecture", "cities", "farming", "insects", "birds", "plants", "rivers",
    "mountains", "deserts", "festivals", "family life", "parenting", "careers", "hobbies", "games", "puzzles",
]


CODE_STYLES = [
    "function", "function", "recursive function", "class with two methods", "function that uses a dictionary",
    "function that loops over a list", "function that works on strings", "generator function",
    "function with a while loop", "function that validates its input", "function that returns a tuple",
]
CODE_SUBJECTS = [
    "strings", "lists", "dictionaries", "sets", "sorting", "searching", "text files", "dates", "numbers",
    "prime numbers", "parsing text", "matrices", "stacks", "queues", "linked lists", "binary trees", "graphs", "JSON",
    "CSV rows", "email addresses", "passwords", "counting words", "averages", "geometry", "a dice game",
    "a bank account", "an inventory", "temperatures", "student grades", "a shopping cart", "a to-do list",
    "time intervals", "URLs", "vowels", "anagrams", "palindromes", "fractions", "roman numerals", "a calculator",
    "a tic-tac-toe board", "a cache", "a counter", "a timer", "log lines", "phone numbers", "a deck of cards",
    "rectangles", "vectors", "polynomials", "a library of books", "a queue of tasks", "file names", "units of length",
]


def all_topics():
    from .train_draft import TOPICS
    return TOPICS + MORE_TOPICS


def all_templates():
    from .train_draft import TEMPLATES
    return TEMPLATES + MORE_TEMPLATES


def functions(files, rng, tries: int = 50):
    """A standard-library function with a docstring: (its source lines, its name and signature line, the docstring's
    first line), or None after ``tries`` misses."""
    for _ in range(tries):
        lines = files[rng.integers(len(files))].read_text(errors="ignore").splitlines()
        starts = [i for i, line in enumerate(lines) if line.lstrip().startswith("def ")]
        if not starts:
            continue
        i = starts[rng.integers(len(starts))]
        body = lines[i: i + 25]
        doc = next((line.strip().strip('"').strip("'").strip() for line in body[1:4] if '"""' in line or "'''" in line), "")
        if len(doc.split()) >= 4:
            return body, lines[i].strip().rstrip(":"), doc
    return None


STDLIB_REQUESTS = ("Write a Python function `", "Explain what this Python function does:")  # chat_instruction's
STAND_IN = "Write a Python function that adds two numbers."  # chat_instruction's, where it finds no function


def request_source(request: str) -> str:
    """Where a chat window's request came from: "stdlib" (built from a standard-library function,
    ``chat_instruction``), "template" (a template of ``all_templates`` filled with a topic of ``all_topics``), or
    "asked" (the target's own, ``--asked``; or anything else). A request the target wrote that is word for word a
    template's is counted a template's: nothing in a window tells the two apart."""
    if request.startswith(STDLIB_REQUESTS) or request == STAND_IN:
        return "stdlib"
    return "template" if request in template_requests() else "asked"


@functools.cache
def template_requests() -> frozenset:
    """Every request ``chat_instruction`` can fill a template with: each template with each topic (made once)."""
    return frozenset(t.format(t=topic) for t in all_templates() for topic in all_topics())


def chat_instruction(files, rng) -> str:
    """One instruction: template x topic (half the time), or a request built from a standard-library function."""
    if rng.random() < 0.5:
        templates, topics = all_templates(), all_topics()
        return templates[rng.integers(len(templates))].format(t=topics[rng.integers(len(topics))])
    f = functions(files, rng)
    if f is None:
        return STAND_IN
    body, head, doc = f
    if rng.random() < 0.5:
        return f"{STDLIB_REQUESTS[0]}{head.removeprefix('def ')}` that does this: {doc}"
    return f"{STDLIB_REQUESTS[1]}\n```python\n" + "\n".join(body[:15]) + "\n```"


def first_text(reply: str) -> str:
    """What a reply names or writes: the text between its first pair of double quotes (it answers 'A user might ask:
    "..."'), else its first line, stripped."""
    quoted = reply.split('"')
    return (quoted[1] if len(quoted) >= 3 else reply.strip().split("\n")[0]).strip()


def listed_topics(reply: str, complete: bool = True) -> list[str]:
    """The items of a list in ``reply`` ("1. Birdsong", "2) **Migration**: ...", "- Flight"), each up to a colon or a
    dash, of 1 to 6 words, without repeats; ``complete=False`` (the reply was cut off): its last line is left out."""
    items = []
    lines = reply.splitlines()
    for line in lines if complete else lines[:-1]:
        m = re.match(r"\s*(?:\d+[.)]|[-*])\s+(.*)", line)
        item = re.split(r"[:\u2013\u2014]| - ", m.group(1))[0].strip(" *_") if m else ""
        if 1 <= len(item.split()) <= 6 and item not in items:
            items.append(item)
    return items


def own_subjects(target, tok, subjects: list[str], rng, seed: int, overlap) -> list[str]:
    """``--ask-subjects own``: a topic in place of each listed subject, drawn from the topics the target lists
    (``TOPICS_WORDING``, at T = 0.7 and top-p 0.9) for a quarter of them (at least one), without those that hold a
    short evaluation prompt; the listed subjects stay where it lists none."""
    asked = subjects[: max(1, len(subjects) // 4)]
    prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": TOPICS_WORDING.format(subject=s)}]))
               for s in asked]
    pool = []
    for p, seq in zip(prompts, generate(target, tok, prompts, 100, False, seed, temperature=0.7, top_p=0.9)[0]):
        reply = tok.decode([x for x in seq[len(p):] if x not in tok.eos_ids])
        pool += [t for t in listed_topics(reply, complete=seq[-1] in tok.eos_ids)
                 if t not in pool and not overlap.holds_short(t)]
    return [pool[rng.integers(len(pool))] for _ in subjects] if pool else list(subjects)


REQUEST_VERBS = {  # --ask-filter shape: a request that does not end in a question mark starts with one of these
    "write", "explain", "describe", "give", "list", "tell", "suggest", "create", "compare", "summarize", "recommend",
    "share", "name", "design", "teach", "show", "help", "make", "plan", "find", "translate", "draft", "outline",
    "imagine", "calculate", "convert", "define", "compose", "invent", "rewrite", "solve",
}
NOT_A_USER = {"you", "you're", "sure", "here", "here's", "great", "certainly"}  # first words in the assistant's voice
ASSISTANT_VOICE = (r"\b(ai|assistant|chatbot)\b|\b(assist|help) you\b|\bi'm (ready|here|happy|sorry|not sure)\b"
                   r"|\bi'd be (happy|glad)\b|\bi'd love to help\b|\b(what|how) can i (help|do)\b|^i can\b")
ABOUT_THE_REQUEST = r"\b(a|the|my|this|your|to) request\b|^please provide\b"  # text about the request, not one
POLITE = ("please ", "can you ", "could you ", "would you ")  # before an instruction's verb


def reads_as_request(text: str) -> bool:
    """``--ask-filter shape``: whether the target's text reads as a user's request: a question, or an instruction
    starting (after a polite "please", "can you" ...) with one of ``REQUEST_VERBS``; not one in the assistant's voice
    (``NOT_A_USER``, ``ASSISTANT_VOICE``: any that names an AI, an assistant or a chatbot among them) or about the
    request itself (``ABOUT_THE_REQUEST``): the 135M target, asked for a request, often answers "I'm ready to help!
    What can I assist you with?" or "A request for a recipe about ..."."""
    low = text.lower().strip()
    words = re.findall(r"[a-z']+", low)
    if not words or words[0] in NOT_A_USER or re.search(ASSISTANT_VOICE, low) or re.search(ABOUT_THE_REQUEST, low):
        return False
    for polite in POLITE:
        low = low.removeprefix(polite)
    rest = re.findall(r"[a-z']+", low)
    return low.endswith("?") or (bool(rest) and rest[0] in REQUEST_VERBS)


def asked_instructions(target, tok, n: int, rng, seed: int, overlap, wording: str = "chatbot",
                       own: bool = False, shape: bool = False, subjects: list[str] | None = None) -> list[str | None]:
    """n requests the target writes itself (the module docstring's ``--asked``), asked in ``ASK_WORDINGS[wording]``
    at T = 0.6 and top-p 0.9 about a subject of ``subjects`` (default: the lists here; ``--ask-subjects wordnet``:
    WordNet's nouns, wordnet_subjects.py), or (``own``) about a topic the target lists first, ``own_subjects``:
    ``first_text`` of its reply; None where that is not 3 to 40 words, or holds a short evaluation prompt, or
    (``shape``) does not read as a user's request (``reads_as_request``)."""
    subjects = subjects or all_topics() + SUBJECTS
    styles, chosen = [], []
    for _ in range(n):  # (drawn in this order, style then subject, as before --ask-subjects: the same requests)
        styles.append(ASK_STYLES[rng.integers(len(ASK_STYLES))])
        chosen.append(subjects[rng.integers(len(subjects))])
    if own:
        chosen = own_subjects(target, tok, chosen, rng, seed + 25_000, overlap)
    metas = [ASK_WORDINGS[wording].format(style=style, subject=subject) for style, subject in zip(styles, chosen)]
    prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": m}])) for m in metas]
    out = []
    for p, s in zip(prompts, generate(target, tok, prompts, 48, False, seed, temperature=0.6, top_p=0.9)[0]):
        text = first_text(tok.decode([t for t in s[len(p):] if t not in tok.eos_ids]))
        ok = 3 <= len(text.split()) <= 40 and not overlap.holds_short(text) and (not shape or reads_as_request(text))
        out.append(text if ok else None)
    return out


def function_head(answer: str, body_lines: int) -> str | None:
    """The head of the first top-level function or class in ``answer`` (a chat reply, its code fenced or not): the
    ``def``/``class`` line, the first line of the docstring under it as a one-line docstring, and ``body_lines``
    lines of what follows the docstring; None where there is no such line, or no docstring right under it."""
    lines = answer.splitlines()
    i = next((k for k, line in enumerate(lines) if line.startswith(("def ", "class ")) and line.rstrip().endswith(":")),
             None)
    if i is None or i + 1 >= len(lines):
        return None
    opener = lines[i + 1].strip()
    quote = opener[:3]
    if quote not in ('"""', "'''"):
        return None
    indent = lines[i + 1][: len(lines[i + 1]) - len(lines[i + 1].lstrip())]
    if opener.count(quote) >= 2:  # a one-line docstring
        first, end = opener[3:].split(quote)[0].strip(), i + 1
    else:  # its text on the opener's line or the next that has any; it ends at the line with the closing quotes
        end = next((k for k in range(i + 2, len(lines)) if quote in lines[k]), None)
        if end is None:
            return None
        first = next((t for t in [opener[3:].strip()] + [line.strip() for line in lines[i + 2: end]]
                      + [lines[end].split(quote)[0].strip()] if t), "")
    if not first:
        return None
    body = lines[end + 1: end + 1 + body_lines]
    body = body[: next((k for k, line in enumerate(body) if line.startswith("```")), len(body))]  # the code's end
    return "\n".join([lines[i], f'{indent}"""{first}"""'] + body) + "\n"


def asked_code_heads(target, tok, n: int, rng, seed: int, overlap) -> list[str | None]:
    """n function heads the target writes itself (the module docstring's ``--asked-code``), asked at T = 0.6 and
    top-p 0.9; None where its reply has no ``function_head``, or the head holds a short evaluation prompt."""
    metas = [f"Write a short Python {CODE_STYLES[rng.integers(len(CODE_STYLES))]} about "
             f"{CODE_SUBJECTS[rng.integers(len(CODE_SUBJECTS))]}, with a docstring." for _ in range(n)]
    body = [int(rng.integers(0, 4)) for _ in range(n)]
    prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": m}])) for m in metas]
    out = []
    for p, s, b in zip(prompts, generate(target, tok, prompts, 160, False, seed, temperature=0.6, top_p=0.9)[0], body):
        head = function_head(tok.decode([t for t in s[len(p):] if t not in tok.eos_ids]), b)
        out.append(head if head and not overlap.holds_short(head) else None)
    return out


def shard_prompts(kind: str, files, tok, n: int, rng, requests=None) -> list[list[int]]:
    """The shard's prompts; ``requests``: ones the target wrote (None: a template's or a standard-library function's
    instead) for the first of them: chat requests, or plain-text code heads of 8 to 160 tokens."""
    requests = list(requests or [])
    if kind.startswith("code"):
        from .train_draft import code_prompts
        own = [tok.encode(r) for r in requests if r]
        own = [ids for ids in own if 8 <= len(ids) <= 160]
        return own + code_prompts(files, tok, n - len(own), rng)
    return [tok.encode(tok.apply_chat_template([{"role": "user", "content": (requests[j] if j < len(requests) and requests[j]
                                                                             else chat_instruction(files, rng))}]))
            for j in range(n)]


def generate(target, tok, prompts, new_tokens: int, greedy: bool, seed: int, temperature: float = 1.0,
             top_p: float = 1.0, with_features: bool = False) -> tuple[list, list | None]:
    """-> (prompt + the target's continuation, to its end-of-sequence token included, for each prompt; with
    ``with_features``, each sequence's {top, low, mid} [len, D] float16 from the generation's own passes, else None).

    The pass that makes token t + 1 computes token t's hidden states, so with features one token more than asked is
    generated and dropped: every kept token is then read by a pass, except the end token of a row that ends on the
    generation's last step (it stops there, when every row has ended). Such a row's entry is None, and
    ``features_of`` gives it a pass of its own. The first ``new_tokens`` are the same either way: the extra token's
    draw comes after theirs."""
    import torch
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])  # left padding with <|endoftext|>
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    torch.manual_seed(seed)
    sampling = {} if greedy else dict(temperature=temperature, top_k=0, top_p=top_p)
    with torch.no_grad():
        out = target.generate(ids, attention_mask=mask, max_new_tokens=new_tokens + int(with_features),
                              do_sample=not greedy, pad_token_id=0, eos_token_id=tok.eos_ids,
                              return_dict_in_generate=True, output_hidden_states=with_features, **sampling)
    seqs = []
    for p, row in zip(prompts, out.sequences[:, width:].tolist()):
        row = row[:new_tokens]
        ends = [j for j, t in enumerate(row) if t in tok.eos_ids]
        seqs.append(p + (row[: ends[0] + 1] if ends else row))
    if not with_features:
        return seqs, None
    steps = out.hidden_states  # step 0: the prompt pass, layers of [B, width, D]; step s: [B, 1, D], token width + s - 1
    if len(steps) != out.sequences.shape[1] - width or steps[0][0].shape[1] != width:
        raise RuntimeError(f"transformers' generate returned {len(steps)} steps of hidden states, the first of "
                           f"{steps[0][0].shape[1]} positions, for {out.sequences.shape[1] - width} new tokens after a "
                           f"prompt of {width}: not one pass per token (a chunked prefill?); build without them")
    hidden = {key: torch.cat([step[layer] for step in steps], dim=1).float().numpy()  # [B, width + steps - 1, D]
              for key, layer in stored_layers(len(steps[0])).items()}
    gen_features = []
    for r, (p, seq) in enumerate(zip(prompts, seqs)):
        a, b = width - len(p), width - len(p) + len(seq)  # the row's tokens, in padded positions
        read = b <= width + len(steps) - 1  # whether a pass computed the row's last token
        gen_features.append({k: h[r, a:b].astype(np.float16) for k, h in hidden.items()} if read else None)
    return seqs, gen_features


def stored_layers(n: int) -> dict:
    """{top, low, mid}: which of transformers' ``n`` hidden states each is (the last: after the final norm; for a
    target shallower than LOW or MID, the deepest stored layer below the top)."""
    last = n - 2
    return dict(top=n - 1, low=min(LOW + 1, last), mid=min(MID + 1, last))


def text_index(i: int, kinds=KINDS) -> int:
    """Which text shard shard ``i`` is: the number of text shards before it (bug: i // len(KINDS) gave the two text
    shards of a cycle the same files)."""
    return sum(kinds[j % len(kinds)] == "text" for j in range(i))


def text_windows(files, tok, shard: int, per_shard: int, seq: int, seed: int) -> list[list[int]]:
    """Standard-library source, ``per_shard`` files of a fixed permutation for text shard ``shard``, cut in
    windows of ``seq`` ids (each file ended by id 0; a last partial window dropped)."""
    order = np.random.default_rng((seed, 7)).permutation(len(files))
    ids: list[int] = []
    for i in order[shard * per_shard: (shard + 1) * per_shard]:
        ids += tok.encode(files[i].read_text(errors="ignore")) + [0]
    return [ids[a: a + seq] for a in range(0, len(ids) - seq + 1, seq)]


def features(target, seqs, batch_tokens: int = 8192) -> dict:
    """{top, low, mid}: [sum len, D] float16 hidden states of every token (right-padded causal batches)."""
    import torch
    out = {k: [None] * len(seqs) for k in ("top", "low", "mid")}
    order = sorted(range(len(seqs)), key=lambda j: len(seqs[j]))
    i = 0
    while i < len(order):
        n = max(1, batch_tokens // max(len(seqs[order[i]]), 1))
        group = order[i: i + n]
        width = max(len(seqs[j]) for j in group)
        ids = torch.tensor([seqs[j] + [0] * (width - len(seqs[j])) for j in group])
        with torch.no_grad():
            hs = target.model(input_ids=ids, output_hidden_states=True).hidden_states  # [B, width, D] each
        for key, layer in stored_layers(len(hs)).items():
            h = hs[layer].float().numpy()
            for row, j in enumerate(group):
                out[key][j] = h[row, : len(seqs[j])].astype(np.float16)
        i += n
    return {k: np.concatenate(v) for k, v in out.items()}


def features_of(target, seqs, gen_features) -> dict:
    """``features`` of ``seqs``, taking ``gen_features[j]`` where the generation computed sequence j's (``generate``)
    and a teacher-forced pass for the rest (``gen_features``: None, or a list with None entries)."""
    gen_features = gen_features or [None] * len(seqs)
    missing = [j for j, f in enumerate(gen_features) if f is None]
    made = features(target, [seqs[j] for j in missing]) if missing else {}
    parts, at = list(gen_features), 0
    for j in missing:
        parts[j] = {k: v[at: at + len(seqs[j])] for k, v in made.items()}
        at += len(seqs[j])
    return {k: np.concatenate([p[k] for p in parts]) for k in ("top", "low", "mid")}


FOLDER_ONLY = ("target", "external_prompts")  # a folder's settings that an exported file does not carry (``main``)


def windows_shaping(settings: dict) -> dict:
    """The settings that shape the windows themselves: a folder's, less what only its own machine can read."""
    return {k: v for k, v in settings.items() if k not in FOLDER_ONLY}


def export_generations(out: Path, file: Path, shaping: dict) -> dict:
    """The generated shards' kept windows, token ids only, into ``file`` (windows.py's format), with ``shaping``
    (``windows_shaping``: a folder's settings may be given): with ``--generations FILE`` a rebuild on another machine
    skips generating them and computes their features only."""
    shaping = windows_shaping(shaping)
    windows, shard_of = [], []
    for rec in sorted(out.glob("shard-*.json")):
        r = json.loads(rec.read_text())
        if r["kind"] == "text" or not r["kept"]:
            continue
        with np.load(rec.with_suffix(".npz")) as z:
            t, st = z["tokens"], z["starts"]
        windows += [t[a:b] for a, b in zip(st[:-1], st[1:])]
        shard_of += [r["shard"]] * (len(st) - 1)
    if not windows:
        raise ValueError(f"{out}: no generated shards to export")
    tokens = write_windows(file, windows, shard_of, shaping)
    return dict(windows=len(windows), tokens=tokens, shards=len(set(shard_of)))


def load_generations(file: Path, shaping: dict) -> dict:
    """{shard: its windows} from an ``export_generations`` file made with the same settings (else refused)."""
    shaping = windows_shaping(shaping)
    t, st, sh, made = read_windows(file)
    if made != shaping:
        raise ValueError(f"{file} was made with other settings ({made}); build with those to reuse it")
    out: dict[int, list] = {}
    for a, b, s in zip(st[:-1], st[1:], sh):
        out.setdefault(int(s), []).append(t[a:b].tolist())
    return out


def windows_without_features(out: Path) -> dict:
    """{shard: (its windows, its record)} of the shards that ``--generate-only`` wrote (records say ``features: false``)."""
    pending = {}
    for rec in sorted(out.glob("shard-*.json")):
        r = json.loads(rec.read_text())
        if r.get("features", True):
            continue
        with np.load(rec.with_suffix(".npz")) as z:
            t, st = z["tokens"].astype(np.int64), z["starts"]
        pending[r["shard"]] = ([t[a:b].tolist() for a, b in zip(st[:-1], st[1:])], r)
    return pending


def make_shard(i: int, target, tok, files, overlap: EvalRuns, args, made=None, subjects=None) -> tuple[dict, dict]:
    """Shard ``i`` -> (arrays, record); ``made``: {shard: windows} generated before (``load_generations``);
    ``subjects``: what the target's requests are about (``asked_instructions``; None: the lists here)."""
    kind = args.kinds[i % len(args.kinds)]
    t0 = time.perf_counter()
    n_asked, gen_features = 0, None  # gen_features: what the generation computed (generate)
    if args.generate_only and kind == "text":
        raise ValueError(f"shard {i} is a text shard: --generate-only makes generated shards only")
    if made is not None and kind != "text" and i in made:
        seqs = made[i]
    elif kind == "text":
        seqs = text_windows(files, tok, text_index(i, args.kinds), args.text_files, args.seq, args.seed)
    else:
        rng = np.random.default_rng((args.seed, i))
        requests = None
        m = int(round((args.asked if kind.startswith("chat") else args.asked_code) * args.gen_batch))
        if m > 0:
            seed = args.seed * 100_000 + 50_000 + i
            if kind.startswith("chat"):
                ask = 2 * m if args.ask_filter == "shape" else m  # shape: twice as many asked for, the first m kept
                requests = asked_instructions(target, tok, ask, rng, seed, overlap, args.ask_wording,
                                              args.ask_subjects == "own", args.ask_filter == "shape", subjects)
                if ask > m:
                    kept = [r for r in requests if r is not None][:m]
                    requests = kept + [None] * (m - len(kept))
            else:
                requests = asked_code_heads(target, tok, m, rng, seed, overlap)
        prompts = shard_prompts(kind, files, tok, args.gen_batch, rng, requests)
        n_asked = sum(r is not None and 8 <= len(tok.encode(r)) <= 160 for r in requests or []) \
            if kind.startswith("code") else sum(r is not None for r in requests or [])
        new = args.chat_tokens if kind.startswith("chat") else args.code_tokens
        seqs, gen_features = generate(target, tok, prompts, new, kind.endswith("greedy"), args.seed * 100_000 + i,
                                      with_features=not args.generate_only)
        seqs = [s[: args.seq] for s in seqs]
        if gen_features:
            gen_features = [f and {k: v[: args.seq] for k, v in f.items()} for f in gen_features]
    t1 = time.perf_counter()
    kept, dropped, kept_features = [], [], []
    for j, s in enumerate(seqs):
        hit = overlap.hit(tok.decode(s))
        if hit is None:
            kept.append(s)
            kept_features.append(gen_features[j] if gen_features else None)
        else:
            dropped.append(dict(window=j, run=hit[0], file=hit[1]))
    arrays = features_of(target, kept, kept_features) if kept and not args.generate_only else {}
    starts = np.cumsum([0] + [len(s) for s in kept])
    arrays.update(tokens=np.array([t for s in kept for t in s], np.int32), starts=starts)
    record = dict(shard=i, kind=kind, windows=len(seqs), kept=len(kept), tokens=int(starts[-1]), dropped=dropped,
                  asked=n_asked,
                  features=not args.generate_only,
                  reused=bool(made is not None and kind != "text" and i in made),
                  generation_minutes=(t1 - t0) / 60, feature_minutes=(time.perf_counter() - t1) / 60)
    return arrays, record


def write_manifest(out: Path, overlap: EvalRuns, args, external, origin: dict | None = None,
                   committed: dict | None = None) -> dict:
    """manifest.json: the shards' totals, the rule and the windows it dropped, and ``origin`` (date, commit, command
    and machine of the run that wrote it last; earlier runs' are in build_log.txt). ``committed``: the manifest of the
    build that generated the shards copied from ``--generations`` (``--generations-manifest``), whose records of them
    (the windows dropped, the requests the target wrote, the minutes) stand for theirs (``with_committed``)."""
    records = [json.loads(p.read_text()) for p in sorted(out.glob("shard-*.json"))]
    if committed is not None and committed_shards(committed) <= {r["shard"] for r in records}:
        return _write(out, with_committed(committed, records, args.generate_only, dict(origin or {})))
    manifest = dict(rule="a window is dropped when it shares a run of 8 lowercased whitespace-separated words with "
                         "any evaluation prompt (minispec/recipes/eval_overlap.py)",
                    evaluation_files=overlap.files, external_prompts=str(external) if external else None,
                    evaluation_runs=len(overlap), seed=args.seed, seq=args.seq, layers=dict(low=LOW, mid=MID),
                    kinds=list(args.kinds), asked_share=args.asked, asked_code_share=args.asked_code,
                    asked_requests=sum(r.get("asked", 0) for r in records),
                    shards=len(records), tokens=sum(r["tokens"] for r in records),
                    windows=sum(r["windows"] for r in records), kept=sum(r["kept"] for r in records),
                    tokens_by_kind={k: sum(r["tokens"] for r in records if r["kind"] == k) for k in sorted(set(args.kinds))},
                    minutes=dict(generation=sum(r["generation_minutes"] for r in records),
                                 features=sum(r["feature_minutes"] for r in records)),
                    shard_minutes=shard_minutes(records), dropped=dropped_windows(records),
                    provenance=origin or {})
    return _write(out, manifest)


def shard_minutes(records: list[dict]) -> list[dict]:
    """The manifest's line per shard: its kind, tokens and minutes."""
    return [dict(shard=r["shard"], kind=r["kind"], tokens=r["tokens"], generation=round(r["generation_minutes"], 3),
                 features=round(r["feature_minutes"], 3)) for r in records]


def dropped_windows(records: list[dict]) -> list[dict]:
    """The manifest's line per window the overlap rule dropped, with its shard and kind."""
    return [dict(shard=r["shard"], kind=r["kind"], **d) for r in records for d in r["dropped"]]


def _write(out: Path, manifest: dict) -> dict:
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    tmp.replace(out / "manifest.json")
    return manifest


def committed_shards(committed: dict) -> set[int]:
    """The shard numbers a committed manifest lists (its ``shard_minutes``): not 0..n-1, since ``--generate-only``
    skips the text shards' numbers (bug: read as 0..n-1, a grown folder's manifest dropped the committed records)."""
    return {int(s["shard"]) for s in committed["shard_minutes"]}


def with_committed(committed: dict, records: list[dict], copied_only: bool, origin: dict) -> dict:
    """The manifest of a folder grown from committed windows: ``committed`` (the manifest of the build that generated
    them) for the shards it lists, each copied here by ``--generate-only`` (``copied_only``) and with its tokens, and
    this folder's records for the rest, totals summed. Refused (ValueError) where the folder's first shards are not
    the committed ones."""
    if not copied_only:
        raise ValueError("--generations-manifest goes with --generate-only: a build with features makes its own records "
                         "of the committed windows")
    n, numbers = committed["shards"], committed_shards(committed)
    first = [r for r in records if r["shard"] in numbers]
    if len(first) != n or not all(r.get("reused") for r in first) or sum(r["tokens"] for r in first) != committed["tokens"]:
        raise ValueError(f"the folder's shards {sorted(numbers)} are not the {n} shards ({committed['tokens']} tokens) "
                         "the committed manifest lists, copied from --generations")
    rest = [r for r in records if r["shard"] not in numbers]
    kinds = sorted(set(committed["tokens_by_kind"]) | {r["kind"] for r in rest})
    return dict(committed, asked_requests=committed["asked_requests"] + sum(r.get("asked", 0) for r in rest),
                shards=n + len(rest), tokens=committed["tokens"] + sum(r["tokens"] for r in rest),
                windows=committed["windows"] + sum(r["windows"] for r in rest),
                kept=committed["kept"] + sum(r["kept"] for r in rest),
                tokens_by_kind={k: committed["tokens_by_kind"].get(k, 0) + sum(r["tokens"] for r in rest if r["kind"] == k)
                                for k in kinds},
                minutes={k: committed["minutes"][k] + sum(r[field] for r in rest)
                         for k, field in (("generation", "generation_minutes"), ("features", "feature_minutes"))},
                shard_minutes=committed["shard_minutes"] + shard_minutes(rest),
                dropped=committed["dropped"] + dropped_windows(rest),
                provenance=origin, earlier_provenance=[committed["provenance"], *committed.get("earlier_provenance", [])])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m minispec.recipes.eagle_data", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="the shard folder (default: $MINISPEC_CACHE/eagle-data-v2)")
    p.add_argument("--target", default=None, help="target directory (default: the converted SmolLM2)")
    p.add_argument("--tokens", type=int, default=2_500_000, help="stop once the shards hold this many tokens")
    p.add_argument("--seed", type=int, default=2)
    p.add_argument("--gen-batch", type=int, default=32, help="generations per generated shard")
    p.add_argument("--chat-tokens", type=int, default=256, help="new tokens per chat answer")
    p.add_argument("--code-tokens", type=int, default=192, help="new tokens per code continuation")
    p.add_argument("--text-files", type=int, default=6, help="standard-library files per text shard")
    p.add_argument("--seq", type=int, default=384, help="the longest window kept, in tokens")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help="the cycle of shard kinds, comma-separated (default: %(default)s)")
    p.add_argument("--asked", type=float, default=0.0, metavar="F",
                   help="share of chat instructions the target writes itself (0 to 1; default 0)")
    p.add_argument("--ask-wording", choices=sorted(ASK_WORDINGS), default="chatbot",
                   help="with --asked, how the target is asked to write a request (ASK_WORDINGS; default chatbot, "
                        "the first folders')")
    p.add_argument("--ask-subjects", choices=("lists", "own", "wordnet"), default="lists",
                   help="with --asked, what a request is about: a subject of the lists here (default), a topic the "
                        "target lists first for a few of them (own), or one of WordNet's tagged nouns (wordnet: "
                        "about 8,400, from Debian's wordnet-base; wordnet_subjects.py)")
    p.add_argument("--wordnet", default=None, metavar="DIR",
                   help="with --ask-subjects wordnet, the folder of WordNet's cntlist.rev (default: /usr/share/wordnet)")
    p.add_argument("--ask-filter", choices=("none", "shape"), default="none",
                   help="with --asked, which of the target's requests are kept beside the length and evaluation "
                        "rules: all (none, default), or those that read as a user's question or instruction (shape: "
                        "twice as many are asked for, and the first that pass are kept); a built request (a template's "
                        "or a standard-library function's) stands in for each one missing")
    p.add_argument("--asked-code", type=float, default=0.0, metavar="F",
                   help="share of code prompts whose function the target writes itself (0 to 1; default 0)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--export", default=None, metavar="FILE",
                   help="write the generated windows (token ids only, compressed) to FILE and stop")
    p.add_argument("--generations", default=None, metavar="FILE",
                   help="reuse the generated windows of an --export file made with the same settings: only their "
                        "features are computed")
    p.add_argument("--generations-manifest", default=None, metavar="M",
                   help="with --generations and --generate-only: the manifest of the build that generated that file "
                        "(docs/eagle/data_manifest*.json), whose records of those shards (windows dropped, requests "
                        "the target wrote, minutes) the folder's manifest keeps")
    p.add_argument("--generate-only", action="store_true",
                   help="make only the generated shards' windows, without features (for --export); --tokens then "
                        "counts generated tokens, and a later build in the same folder adds the features")
    p.add_argument("--external-prompts", default=None,
                   help="the external evaluation prompts folder (default: $MINISPEC_EXTERNAL_PROMPTS, else "
                        "../shared/external_prompts); 'none' to build without it (recorded in the manifest)")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if min(args.tokens, args.gen_batch, args.chat_tokens, args.code_tokens, args.text_files) <= 0 or args.seq < 16:
        print("error: --tokens, --gen-batch, --chat-tokens, --code-tokens and --text-files must be positive and --seq "
              "at least 16", file=sys.stderr)
        return 2
    args.kinds = tuple(k.strip() for k in args.kinds.split(","))
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown:
        print(f"error: --kinds {','.join(args.kinds)}: unknown kind {unknown}; the kinds are {sorted(set(KINDS))}",
              file=sys.stderr)
        return 2
    if not 0.0 <= args.asked <= 1.0:
        print(f"error: --asked {args.asked}: a share, from 0 to 1", file=sys.stderr)
        return 2
    if args.ask_wording != "chatbot" and not args.asked:
        print(f"error: --ask-wording {args.ask_wording} words the requests of --asked, which is 0", file=sys.stderr)
        return 2
    if args.ask_filter != "none" and not args.asked:
        print(f"error: --ask-filter {args.ask_filter} filters the requests of --asked, which is 0", file=sys.stderr)
        return 2
    if args.ask_subjects != "lists" and not args.asked:
        print(f"error: --ask-subjects {args.ask_subjects} chooses what the requests of --asked are about, which is 0",
              file=sys.stderr)
        return 2
    if args.wordnet and args.ask_subjects != "wordnet":
        print(f"error: --wordnet {args.wordnet} is where --ask-subjects wordnet reads its nouns; pass both",
              file=sys.stderr)
        return 2
    subjects = None  # what requests are asked about: the lists here, unless --ask-subjects wordnet
    if args.ask_subjects == "wordnet":
        try:
            subjects = wordnet_subjects(args.wordnet or WORDNET_DIR)
        except (OSError, ValueError) as e:
            print(f"error: --ask-subjects wordnet: {e}", file=sys.stderr)
            return 2
    if args.asked and not any(k.startswith("chat") for k in args.kinds):
        print(f"error: --asked {args.asked} needs a chat kind in --kinds ({','.join(args.kinds)})", file=sys.stderr)
        return 2
    if not 0.0 <= args.asked_code <= 1.0:
        print(f"error: --asked-code {args.asked_code}: a share, from 0 to 1", file=sys.stderr)
        return 2
    if args.asked_code and not any(k.startswith("code") for k in args.kinds):
        print(f"error: --asked-code {args.asked_code} needs a code kind in --kinds ({','.join(args.kinds)})",
              file=sys.stderr)
        return 2
    if args.generations_manifest and not (args.generations and args.generate_only):
        print("error: --generations-manifest describes the shards of --generations, copied by --generate-only; pass "
              "both", file=sys.stderr)
        return 2
    if args.generate_only and all(k == "text" for k in args.kinds):
        print("error: --generate-only makes generated shards, and --kinds has only text", file=sys.stderr)
        return 2
    external = None if args.external_prompts == "none" else Path(args.external_prompts or external_prompts_dir())
    if external is not None and not external.is_dir():
        print(f"error: {external}: no external evaluation prompts there, so windows that copy them could not be "
              "dropped; pass --external-prompts PATH, or --external-prompts none to build without them", file=sys.stderr)
        return 2
    from .training import import_torch
    torch = import_torch()
    if torch is None:
        return 2
    import transformers

    from ..model.tokenizer import load_tokenizer
    from .fetch import cache_dir, resolve_model
    from .train_draft import stdlib_files

    out = Path(args.out) if args.out else cache_dir() / "eagle-data-v2"
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    shaping = dict(seed=args.seed, gen_batch=args.gen_batch, chat_tokens=args.chat_tokens, code_tokens=args.code_tokens,
                   text_files=args.text_files, seq=args.seq, kinds=list(args.kinds), low=LOW, mid=MID, text_order="text_index")
    if args.asked:  # (absent at 0, so that folders and exports made before --asked keep their settings)
        shaping["asked"] = args.asked
    if args.asked_code:  # (likewise)
        shaping["asked_code"] = args.asked_code
    if args.ask_wording != "chatbot":  # (likewise)
        shaping["ask_wording"] = args.ask_wording
    if args.ask_subjects != "lists":  # (likewise)
        shaping["ask_subjects"] = args.ask_subjects
    if args.ask_filter != "none":  # (likewise)
        shaping["ask_filter"] = args.ask_filter
    if subjects:  # which nouns: another WordNet would ask other requests
        listed = "\n".join(subjects).encode()
        shaping["subjects"] = dict(count=len(subjects), sha256=hashlib.sha256(listed).hexdigest()[:16])
    folder = dict(shaping)  # the folder's settings: the windows' shaping, and FOLDER_ONLY: another target writes
    if args.target:  # other windows and features, and a build without the external sets keeps windows their rule
        folder["target"] = str(Path(args.target).resolve())  # would drop, so a resume that changes either is refused
    if external is None:
        folder["external_prompts"] = "none"
    settings = out / "settings.json"
    if settings.exists() and json.loads(settings.read_text()) != folder:
        print(f"error: {out} holds shards made with other settings ({settings.read_text().strip()}); pass another --out, "
              "or the same settings to resume", file=sys.stderr)
        return 2
    if args.export:
        try:
            got = export_generations(out, Path(args.export), shaping)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"exported {got['windows']} windows ({got['tokens']} tokens) of {got['shards']} generated shards to "
              f"{args.export}", file=sys.stderr)
        return 0
    generations = None
    if args.generations:
        try:
            generations = load_generations(Path(args.generations), shaping)
        except (OSError, ValueError, KeyError) as e:
            print(f"error: --generations {args.generations}: {e}", file=sys.stderr)
            return 2
    committed = None
    if args.generations_manifest:
        try:
            committed = json.loads(Path(args.generations_manifest).read_text())
            tokens = sum(len(w) for ws in generations.values() for w in ws)
            if (committed["shards"], committed["tokens"]) != (len(generations), tokens):
                raise ValueError(f"it lists {committed['shards']} shards and {committed['tokens']} tokens, and "
                                 f"{args.generations} holds {len(generations)} and {tokens}")
            missing = [k for k in ("windows", "kept", "asked_requests", "tokens_by_kind", "minutes", "shard_minutes",
                                   "dropped", "provenance") if k not in committed]
            missing += [f"minutes.{k}" for k in ("generation", "features") if k not in committed.get("minutes", {})]
            if missing:
                raise ValueError(f"it has no {', '.join(missing)}")
            if committed_shards(committed) != set(generations):
                raise ValueError(f"it lists shards {sorted(committed_shards(committed))}, and {args.generations} holds "
                                 f"shards {sorted(generations)}")
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"error: --generations-manifest {args.generations_manifest}: {e!r}", file=sys.stderr)
            return 2
    pending = {}
    if not args.generate_only:  # shards written by --generate-only: their windows are kept, their features made here
        pending = windows_without_features(out)
        if pending:
            generations = {**(generations or {}), **{i: w for i, (w, _) in pending.items()}}
    settings.write_text(json.dumps(folder) + "\n")
    overlap = EvalRuns(prompt_files(external))
    target_dir = resolve_model(args.target)
    tok = load_tokenizer(target_dir)
    target = transformers.AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    files = stdlib_files()
    logf = open(out / "build_log.txt", "a")

    def log(msg):
        line = f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}"
        print(line, file=sys.stderr, flush=True)
        logf.write(line + "\n")
        logf.flush()

    log(f"args {vars(args)}; {len(overlap)} evaluation word runs from {len(overlap.files)} files")
    origin = provenance(argv, "python -m minispec.recipes.eagle_data")
    try:
        manifest = write_manifest(out, overlap, args, external, origin, committed)
    except ValueError as e:  # the folder's first shards are not the committed ones (with_committed)
        print(f"error: --generations-manifest {args.generations_manifest}: {e}", file=sys.stderr)
        return 2
    made, spent = 0, 0.0  # tokens and seconds of the shards this run generated: the rate the rest will go at

    def write_shard(i: int) -> dict:
        nonlocal manifest, made, spent
        start = time.perf_counter()
        arrays, record = make_shard(i, target, tok, files, overlap, args, generations, subjects)
        if i in pending:  # what the generating run made and dropped, and its minutes
            first = pending[i][1]
            record.update(windows=first["windows"], dropped=first["dropped"] + record["dropped"], asked=first.get("asked", 0),
                          generation_minutes=first["generation_minutes"])
        tmp = out / f"shard-{i:05d}.tmp.npz"
        np.savez(tmp, **arrays)
        tmp.replace(out / f"shard-{i:05d}.npz")
        (out / f"shard-{i:05d}.json").write_text(json.dumps(record) + "\n")
        manifest = write_manifest(out, overlap, args, external, origin, committed)
        if not (args.generate_only and generations and i in generations):  # a committed shard copied: no work
            made, spent = made + record["tokens"], spent + time.perf_counter() - start
        pace = (f"{made / spent:.0f} tok/s this run, {max(args.tokens - manifest['tokens'], 0) / (made / spent) / 3600:.1f} h "
                "to go" if made else "the pace is measured on the first shard generated")
        log(f"shard {i} {record['kind']}: {record['kept']}/{record['windows']} windows kept, {record['tokens']} tokens "
            f"in {record['generation_minutes'] + record['feature_minutes']:.1f} min; total {manifest['tokens']} of "
            f"{args.tokens} ({pace})")
        return record

    for i in sorted(pending):  # first the shards without features (each record stays until its shard is replaced)
        write_shard(i)
    i = 0
    while manifest["tokens"] < args.tokens:
        text = args.kinds[i % len(args.kinds)] == "text"
        if not (out / f"shard-{i:05d}.json").exists() and not (args.generate_only and text):
            if text and text_index(i, args.kinds) * args.text_files >= len(files):
                log(f"error: text shard {i} found no standard-library files left ({len(files)} files, --text-files "
                    f"{args.text_files} a shard): {manifest['tokens']} of --tokens {args.tokens} made; ask for fewer "
                    "tokens or fewer text shards (--kinds)")  # (bug: it made empty shards for ever)
                return 2
            write_shard(i)
        i += 1
    log(f"done: {manifest['tokens']} tokens in {manifest['shards']} shards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
