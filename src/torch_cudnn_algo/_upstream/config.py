"""What one invocation of the runner asked for, resolved from the command line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .settings import Setting


@dataclasses.dataclass(frozen=True)
class Config:
    file: Path  # the test file, resolved; pytest runs in its folder
    settings: tuple[Setting, ...]
    extra: tuple[str, ...]  # pytest arguments after `--`
    k: str
    jobs: int
    timeout: float | None  # per pytest process; None: none
    test_timeout: float | None  # no new line of -v output for this long; None: off
    out: Path  # resolved
    python: str
    strict: bool
    max_restarts: int
    preflight: bool

    @property
    def rootdir(self) -> Path:
        return self.file.parent

    @property
    def file_name(self) -> str:
        return self.file.name
