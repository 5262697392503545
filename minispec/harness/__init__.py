"""The measuring harness, the heart of the lab: everything that checks or measures the library, never imported by the
core (tests/test_layout.py).

    check.py        ``minispec check``: level-4 losslessness on the real target
    equivalence.py  the deliberately broken rules (twins of the real ones), chi-square and permutation tests
    exact_law.py    level 1: a rule's exact output law (a round, its first token, a tree's), integrated over every draw
    exact_race.py   level 1 for keyed rules: a race's and a coupled round's law, integrated over every cell of the noise
    exact_loop.py   level 3, exact: the loop itself walked over every branch of its randomness
    conform/        ``minispec conform``: the conformance kit, these checks pointed at another implementation's rule or loop
    power.py        ``minispec bench power``: how large a departure level 4 catches (planted, of exact size)
    study.py        ``minispec bench``: acceptance, speedup, r(n), c and memory per drafter and K
    bench.py        ``minispec bench``: the study, ``forward`` and ``decode``, and the dispatch of the subcommands
    bench_commands.py  the table of ``minispec bench``'s subcommands, which the dispatcher and both helps read
    auto_eval.py    ``minispec bench auto``: k="auto" against plain decoding, and predicted against measured rounds
    rules_eval.py   ``minispec bench rules``: the token-wise, block and coupled rules side by side
    draft_eval.py   ``minispec bench draft``: a draft model's acceptance by position and confidence
    eagle_eval.py   ``minispec bench eagle``: the EAGLE head's reduced-head sizes, acceptance by position, c, memory
    crossvocab_eval.py  ``minispec bench vocab``: drafts with their own tokenizer (SLEM, TLI) against the same-tokenizer draft
    int8_eval.py    the shipped drafts stored in int8 against the same drafts in bfloat16: first guesses and acceptance
    gpu.py          ``minispec bench gpu-predict``: costs on a GPU and the speedups they predict
    stop_eval.py    ``minispec bench stop``: the early stop, measured
    specbench.py    ``minispec bench specbench``: Spec-Bench's six tasks, every method beside plain decoding, resumable
    specbench_peers.py  the other engines it runs in the same alternation (transformers, llama.cpp)
    specbench_figures.py  its tables for docs/specbench.md (``docs_tables``) and its plot of speedup by task
    llama_cpp_times.py  llama.cpp's pass over n tokens, timed as minispec's (``bench forward --gguf``)
    command.py      what the commands share: the target and drafters they load, checked first; the JSON they store;
                    a speed figure's honest words (a speedup beyond its tokens per pass is noise; a busy machine)
    measure.py      timing side by side, the weight-streaming floor, memory
    prompts.py      the evaluation prompt sets (minispec/data/)
    docs_tables.py  README and docs/ sections generated from the committed JSON (``--check`` compares)
    doc_figures.py  the figures those sections quote
    kernel_figures.py  the two kernels' figures (docs/kernel/)
    calibration_store.py  the cost model's calibrations kept on disk (the core keeps them in memory; the CLI attaches it)
    batch_invariance.py  whether a row's logits are the same in a pass of 1 and of n rows, per kernel (docs/kernel/)
    near_ties.py    greedy identity through top-2 near-ties on SmolLM2, every drafter, per kernel (docs/kernel/)
    busy_bench.py   a target step and README's main command, quiet and beside two busy processes (docs/busy/)
    busy_figures.py  the figures of those two (docs_tables writes them in)
    example_times.py  each example's run time, measured quiet (docs/examples/times.json)
    round_lines.py  how many lines a reader meets in one run of the textbook's round and of the engine's (a line tracer)
    progress.py     a dependency-free progress indicator on stderr, for long work (here and in recipes/)
    provenance.py   what a stored measurement records of its run: date, commit, command, machine, kernel and BLAS

The recipes that trained the shipped drafters are in recipes/. What a stored measurement records of its run (date,
commit, command, machine) is ``provenance.py``, which the recipes share.
"""
