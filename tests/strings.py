"""Varied strings for tokenizer parity: code, unicode, emoji, digits, whitespace runs, chat markup."""

import numpy as np

PIECES = [
    "def f(x):\n    return x ** 2\n", "for i in range(10):", "if (a && b) { return -1; }", "#include <stdio.h>",
    "SELECT * FROM users WHERE id = 42;", "print(f\"{name!r:>10}\")", "x = [1, 2, 3]", "λx. x + 1", "naïve café",
    "Straße", "日本語のテキスト", "中文字符", "한국어", "Ελληνικά", "русский текст", "עברית", "العربية", "🙂", "🚀🔥",
    "👩‍💻", "🇫🇷", "12345", "3.14159", "1e-10", "0x1F", "2024-11-29", "1,000,000", "   ", "\n\n\n", "\t\t", " \n ",
    "<|im_start|>user\n", "<|im_end|>\n", "<|im_start|>assistant\n", "<|endoftext|>", "Hello", " world", "!!!", "...",
    "—", "“quotes”", "it's", "can't", "HTTP/1.1 200 OK", "https://example.com/a?b=c&d=e", "user@example.com",
    "α β γ", "\\n", "\\\\", "''", '"""', "# comment", "    indented", "CamelCaseName", "snake_case_name", "ALLCAPS",
    "\u00a0", "\u200b", "Ω≈ç√∫", "½ ¾", "①②③", "™", "\r\n", "a" * 20, " " * 7, "0" * 9, "-" * 12,
]


def tokenizer_strings(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    out = list(PIECES)
    while len(out) < n:
        k = int(rng.integers(2, 6))
        s = "".join(PIECES[i] for i in rng.integers(0, len(PIECES), k))
        if rng.random() < 0.3:
            s = " " + s
        out.append(s)
    return out[:n]
