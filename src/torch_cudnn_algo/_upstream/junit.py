"""Test outcomes from pytest's junit XML, the record of a run that finished."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .outcomes import ERROR, FAILED, PASSED, SKIPPED, XFAILED, TestResult

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
