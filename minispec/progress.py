"""A dependency-free progress bar on stderr (quiet when stderr is not a terminal, unless forced)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, desc: str = "", stream=None, force: bool = False, quiet: bool = False):
        self.total, self.desc, self.n = max(int(total), 1), desc, 0
        self.stream = stream or sys.stderr
        self.enabled = not quiet and (force or self.stream.isatty())
        self.start = self.last = time.perf_counter()
        if not self.enabled and not quiet and desc:
            print(f"{desc} ...", file=self.stream, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.perf_counter()
        if self.enabled and (now - self.last > 0.1 or self.n >= self.total):
            self.last = now
            frac = min(self.n / self.total, 1.0)
            eta = (now - self.start) / frac * (1 - frac) if frac > 0 else 0
            bar = "#" * int(30 * frac)
            self.stream.write(f"\r{self.desc} [{bar:<30}] {self.n}/{self.total} eta {eta:4.0f}s   ")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write(f"\r{self.desc} done in {time.perf_counter() - self.start:.1f}s" + " " * 40 + "\n")
            self.stream.flush()
