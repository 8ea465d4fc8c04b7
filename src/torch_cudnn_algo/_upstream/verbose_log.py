"""Test outcomes from the ``pytest -v`` log, and the test a dead process died in.

junit XML is written only when pytest finishes; the log, written line by line
(``PYTHONUNBUFFERED=1``), is all there is of a process that crashed or was killed.
"""

from __future__ import annotations

import re

from .outcomes import ERROR, FAILED, PASSED, SKIPPED, XFAILED

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
