"""The conformance kit: minispec's exact checks pointed at another implementation's rule or loop.

    contract.py    the two entry points (a rule, a loop), loading MODULE:FUNCTION, calling a peer safely
    cases.py       the generated tables a rule is checked on
    symbolic.py    a generator with symbolic draws: the exact law of a peer's rule
    stats.py       a Monte Carlo check's distance, its noise, and its power
    rule_check.py  the rule check
    loop_check.py  the loop check, on tiny random Hugging Face-format models
    twins.py       the planted bugs, one per class peers have shipped
    adapters.py    minispec's own rules and loop behind the two contracts
    peers.py       transformers behind the two contracts
    report.py      the verdicts in words and as JSON
    command.py     ``minispec conform rule|loop MODULE:FUNCTION``
"""
