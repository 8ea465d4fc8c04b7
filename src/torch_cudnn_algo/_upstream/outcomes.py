"""What a run found: each test's outcome, how a pytest process ended, and how both
are read back -- from pytest's junit XML (a run that finished) or from its ``-v``
log, written line by line (``PYTHONUNBUFFERED=1``), which is all there is of a
process that crashed or was killed.
"""

from __future__ import annotations

import dataclasses
import re
import signal
import xml.etree.ElementTree as ET
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


# --------------------------------------------------------------------------- quoting

def first_line(text: str) -> str:
    """The first non-blank line, stripped and cut to 300 characters."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def last_meaningful_line(text: str) -> str:
    """The last line that is neither blank nor a ``====``/``----`` rule (pytest's
    closing summary line, say), stripped and cut to 300 characters."""
    for line in reversed(text.splitlines()):
        if line.strip() and not set(line.strip()) <= set("=-_ "):
            return line.strip()[:300]
    return ""


# --------------------------------------------------------------------------- junit XML

# When a test case carries several results (a failure, then an error in teardown),
# the worst one is its outcome.
_RANK = {PASSED: 0, SKIPPED: 1, XFAILED: 1, ERROR: 2, FAILED: 3}
_OUTCOME_OF_TAG = {"failure": FAILED, "error": ERROR, "skipped": SKIPPED}


def nodeid_from_junit(classname: str, name: str, file_name: str) -> str:
    """pytest junit ``classname="test_x.TestA"``, ``name="test_b"`` -> ``"test_x.py::TestA::test_b"``
    for a file ``test_x.py`` in the rootdir (the runner runs pytest from the file's folder)."""
    stem = file_name[:-3] if file_name.endswith(".py") else file_name
    if classname == stem:
        return f"{file_name}::{name}"
    if classname.startswith(stem + "."):
        return "::".join([file_name, *classname[len(stem) + 1 :].split("."), name])
    return f"{classname}::{name}" if classname else name


def parse_junit(xml_text: str, file_name: str) -> dict[str, TestResult]:
    """Outcomes by node id from pytest's junit XML (failure beats error beats skipped)."""
    results: dict[str, TestResult] = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        nodeid = nodeid_from_junit(case.get("classname", ""), case.get("name", ""), file_name)
        outcome, message, text = PASSED, "", ""
        for child in case:
            kind = _OUTCOME_OF_TAG.get(child.tag)
            if kind == SKIPPED and child.get("type") == "pytest.xfail":
                kind = XFAILED
            if kind is not None and _RANK[kind] > _RANK[outcome]:
                outcome, message, text = kind, child.get("message", ""), child.text or ""
        previous = results.get(nodeid)
        if previous is None or _RANK[outcome] >= _RANK.get(previous.outcome, 0):
            results[nodeid] = TestResult(nodeid, outcome, message, text)
    return results


# --------------------------------------------------------------------------- the -v log

_RESULT_WORDS = {
    "PASSED": PASSED,
    "XPASS": PASSED,
    "FAILED": FAILED,
    "ERROR": ERROR,
    "SKIPPED": SKIPPED,
    "XFAIL": XFAILED,
}
_VERBOSE_LINE = re.compile(r"(?P<id>\S+)(?: (?P<word>" + "|".join(_RESULT_WORDS) + r")\b)?")
_FATAL_MARKERS = ("Fatal Python error:", "terminate called", "Segmentation fault", "Aborted", "CUDA error")


def parse_verbose_log(log: str, file_name: str) -> tuple[dict[str, str], str | None]:
    """Outcomes printed by ``pytest -v``, and the test the process died in: the
    last node id printed without a result (``None`` when every test printed one)."""
    outcomes: dict[str, str] = {}
    pending: str | None = None
    prefix = file_name + "::"
    for line in log.splitlines():
        if not line.startswith(prefix):
            continue
        match = _VERBOSE_LINE.match(line)
        if match is None:
            continue
        nodeid, word = match.group("id"), match.group("word")
        if word is None:
            pending = nodeid
            continue
        if outcomes.get(nodeid) not in (FAILED, ERROR):  # a teardown ERROR after FAILED keeps FAILED
            outcomes[nodeid] = _RESULT_WORDS[word]
        pending = None
    return outcomes, pending


def crash_note(log: str, nodeid: str) -> str:
    """The first fatal-error line printed after the test's node id, if any."""
    start = log.rfind(nodeid)
    tail = log[start:] if start >= 0 else log
    for line in tail.splitlines():
        for marker in _FATAL_MARKERS:
            idx = line.find(marker)
            if idx >= 0:
                return line[idx:].strip()[:200]
    return ""
