# What the emulation's rewrites of a kernel file share (transform_*.py): every
# rewrite must match exactly as counted, so a change in the kernel file that
# the emulation would silently miss fails here instead, and no CUDA-only syntax
# may be left for g++.
import re
import sys


class Rewrite:
    def __init__(self, src: str) -> None:
        self.src = src

    def sub(self, pattern: str, repl: str, count: int) -> None:
        new, n = re.subn(pattern, repl, self.src)
        if n != count:
            sys.exit(f"transform: {pattern!r} matched {n} times, expected {count}")
        self.src = new

    def write(self, path: str, forbidden: tuple[str, ...] = ('<<<', 'asm volatile')) -> None:
        if any(token in self.src for token in forbidden):
            sys.exit("transform: CUDA-only syntax left")
        with open(path, 'w') as out:
            out.write(self.src)
