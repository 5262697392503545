"""A dependency-free progress indicator on stderr: a bar on a terminal, a line every 15 seconds in a log."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, desc: str = "", stream=None, force: bool = False, quiet: bool = False,
                 log_every: float = 15.0):
        self.total, self.desc, self.n = max(int(total), 1), desc, 0
        self.stream = stream or sys.stderr
        self.quiet, self.bar = quiet, not quiet and (force or self.stream.isatty())
        self.log_every = log_every
        self.start = self.last = time.perf_counter()
        if not self.bar and not quiet and desc:
            print(f"{desc}: {self.total} steps ...", file=self.stream, flush=True)

    def eta(self, now: float) -> float:
        frac = min(self.n / self.total, 1.0)
        return (now - self.start) / frac * (1 - frac) if frac > 0 else 0.0

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.perf_counter()
        if self.bar and (now - self.last > 0.1 or self.n >= self.total):
            self.last = now
            done = "#" * int(30 * min(self.n / self.total, 1.0))
            self.stream.write(f"\r{self.desc} [{done:<30}] {self.n}/{self.total} eta {self.eta(now):4.0f}s   ")
            self.stream.flush()
        elif not self.bar and not self.quiet and now - self.last >= self.log_every and self.n < self.total:
            self.last = now
            print(f"{self.desc}: {self.n}/{self.total}, {now - self.start:.0f}s so far, about {self.eta(now):.0f}s to go",
                  file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar:
            self.stream.write(f"\r{self.desc} done in {time.perf_counter() - self.start:.1f}s" + " " * 40 + "\n")
            self.stream.flush()
        elif not self.quiet and self.desc:
            print(f"{self.desc}: done in {time.perf_counter() - self.start:.1f}s", file=self.stream, flush=True)
