"""What a run found: each test's outcome, and how a pytest process ended."""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Mapping

# Outcomes of one test in one run.
PASSED, FAILED, ERROR, SKIPPED, CRASHED, TIMEOUT = "passed", "failed", "error", "skipped", "crashed", "timeout"
XFAILED = "xfailed"  # an expected failure that failed: counted with the skipped ones
FAILING = frozenset({FAILED, ERROR, CRASHED, TIMEOUT})
# pytest exit codes of a run that finished: all passed, some failed, none collected.
FINISHED_EXIT_CODES = frozenset({0, 1, 5})


@dataclasses.dataclass
class TestResult:
    """One test's outcome in one run; ``message``/``text`` from junit when it failed."""

    __test__ = False  # not a pytest test class

    nodeid: str
    outcome: str
    message: str = ""
    text: str = ""
    returncode: int | None = None  # of the pytest process, for crashes and timeouts


@dataclasses.dataclass
class RunResult:
    """One logical run (all its restarts): the tests' results and how it went."""

    name: str
    results: dict[str, TestResult]
    duration: float
    attempts: list[dict]
    run_error: str | None = None


def count_outcomes(results: Mapping[str, TestResult]) -> dict[str, int]:
    """The table's columns: passed, failed, skipped (with xfailed), errors, crashed (with timeouts)."""
    counts = {PASSED: 0, FAILED: 0, SKIPPED: 0, "errors": 0, "crashed": 0}
    for r in results.values():
        if r.outcome == ERROR:
            counts["errors"] += 1
        elif r.outcome in (CRASHED, TIMEOUT):
            counts["crashed"] += 1
        elif r.outcome == XFAILED:
            counts[SKIPPED] += 1
        else:
            counts[r.outcome] += 1
    return counts


def describe_returncode(returncode: int) -> str:
    """``-11`` -> ``"signal 11 (SIGSEGV)"``; ``3`` -> ``"exit code 3"``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"signal {-returncode} ({name})"
    return f"exit code {returncode}"
