"""The conformance kit: minispec's exact checks pointed at another implementation's rule or loop.

    contract.py    the two entry points (a rule, a loop), loading MODULE:FUNCTION, calling a peer safely
    cases.py       the generated tables a rule is checked on
    symbolic.py    a generator with symbolic draws: the exact law of a peer's rule
    stats.py       a Monte Carlo check's distance, its noise, and its power
    rule_check.py  the rule check
    models.py      the tiny random pair of Hugging Face-format models a loop is checked on
    loop_check.py  the loop check
    twins.py       the planted bugs, one per class peers have shipped
    adapters.py    minispec's own rules and loop behind the two contracts
    transformers_peers.py  transformers behind the two contracts
    peers.py       the committed run on transformers (docs/peers/peers.json)
    peers_figures.py  docs/peers.md's generated sections
    report.py      the verdicts in words
    command.py     ``minispec conform rule|loop MODULE:FUNCTION``
"""
