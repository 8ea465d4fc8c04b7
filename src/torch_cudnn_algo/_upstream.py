"""Runs one of PyTorch's own test files stock and under pinned cuDNN algorithms.

The logic behind ``scripts/run-upstream-tests`` (whose ``--help`` is the user
documentation). Standard library only, and importable without torch: the script
loads this file directly, so the runner's own process never imports torch or
touches the GPU; every pytest run is a subprocess whose environment carries the
setting (``TORCH_CUDNN_CONV_*``, read by the package's autoload at ``import torch``).

Pure pieces, tested on the CPU: setting parsing (:func:`parse_setting_spec`,
:func:`select_settings`), the child environment (:func:`child_environment`),
junit parsing (:func:`parse_junit`), ``-v`` log parsing and crash attribution
(:func:`parse_verbose_log`), classification (:func:`classify`), regression
detection (:func:`rerun_candidates`, :func:`stock_rerun_candidates`) and the
table (:func:`render_markdown`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import importlib.util
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

try:
    from . import _algorithms
except ImportError:  # loaded as a standalone module by scripts/run-upstream-tests
    _spec = importlib.util.spec_from_file_location(
        "_torch_cudnn_algo_upstream_algorithms", Path(__file__).with_name("_algorithms.py")
    )
    assert _spec is not None and _spec.loader is not None
    _algorithms = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _algorithms
    _spec.loader.exec_module(_algorithms)

DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
ENV_VARS = {
    "fwd": "TORCH_CUDNN_CONV_FWD_ALGO",
    "bwd_data": "TORCH_CUDNN_CONV_BWD_DATA_ALGO",
    "bwd_filter": "TORCH_CUDNN_CONV_BWD_FILTER_ALGO",
}
STRICT_VAR = "TORCH_CUDNN_CONV_ALGO_STRICT"
# Every variable the package reads starts with this; all are removed from the
# environment of every run, then the setting's own are added.
ENV_PREFIX = "TORCH_CUDNN_CONV_"
DEFAULT_K = "CUDA or cuda or cudnn"
DEFAULT_JOBS = 4
DEFAULT_TIMEOUT = 0.0  # per pytest process: none
DEFAULT_TEST_TIMEOUT = 600.0  # no new line in the -v output for this long: the running test hangs
DEFAULT_MAX_RESTARTS = 10
DEFAULT_OUT = "upstream-test-results"
RAW_URL = "https://raw.githubusercontent.com/pytorch/pytorch/{commit}/test/nn/test_convolution.py"

# Outcomes of one test in one run.
PASSED, FAILED, ERROR, SKIPPED, CRASHED, TIMEOUT = "passed", "failed", "error", "skipped", "crashed", "timeout"
XFAILED = "xfailed"  # an expected failure that failed: counted with the skipped ones
FAILING = frozenset({FAILED, ERROR, CRASHED, TIMEOUT})
# pytest exit codes of a run that finished: all passed, some failed, none collected.
FINISHED_EXIT_CODES = frozenset({0, 1, 5})

EXCLUDE_VAR = "TCA_UPSTREAM_EXCLUDE"
PLUGIN_NAME = "tca_upstream_exclude"
PLUGIN_SOURCE = '''"""Written by torch_cudnn_algo's scripts/run-upstream-tests: deselects exactly the
node ids listed in the file named by $TCA_UPSTREAM_EXCLUDE (tests already run, and
tests that crashed). pytest's own --deselect matches node-id prefixes, which would
also drop e.g. test_Conv2d_groups_nobias_v2 with test_Conv2d_groups_nobias."""
import os


def pytest_collection_modifyitems(config, items):
    path = os.environ.get("TCA_UPSTREAM_EXCLUDE")
    if not path:
        return
    with open(path, encoding="utf-8") as fh:
        exclude = {line.rstrip("\\n") for line in fh if line.strip()}
    dropped = [item for item in items if item.nodeid in exclude]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.nodeid not in exclude]
'''


class UsageError(ValueError):
    """A bad command line: the script prints it with the usage and exits 2."""


# --------------------------------------------------------------------------- settings


@dataclasses.dataclass(frozen=True)
class Setting:
    """A named choice of pinned algorithms: direction -> canonical flag value as text."""

    name: str
    pins: tuple[tuple[str, str], ...]  # in DIRECTIONS order

    @property
    def pin_map(self) -> dict[str, str]:
        return dict(self.pins)

    def env_vars(self, strict: bool = False) -> dict[str, str]:
        env = {ENV_VARS[direction]: value for direction, value in self.pins}
        if strict:
            env[STRICT_VAR] = "1"
        return env

    def describe(self) -> str:
        return " ".join(f"{direction}={value}" for direction, value in self.pins)


def make_setting(name: str, pins: Mapping[str, object]) -> Setting:
    """Validates ``name`` and each direction's value (the package's own parser), canonically."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name or ""):
        raise UsageError(f"bad setting name {name!r}: use letters, digits, '_', '.', '-'")
    if name == "stock":
        raise UsageError("'stock' is the run without any pin; choose another setting name")
    if not pins:
        raise UsageError(f"setting {name!r} pins no direction")
    canonical = {}
    for direction, value in pins.items():
        if direction not in DIRECTIONS:
            raise UsageError(
                f"setting {name!r}: bad direction {direction!r}; expected one of {', '.join(DIRECTIONS)}"
            )
        try:
            parsed = _algorithms.parse_algo_value(_algorithms.DIRECTIONS[direction], value)
        except ValueError as exc:
            raise UsageError(f"setting {name!r}: bad value {value!r} for {direction}: {exc}") from None
        if parsed is None:
            raise UsageError(f"setting {name!r}: {direction} needs a value")
        canonical[direction] = str(parsed)
    return Setting(name, tuple((d, canonical[d]) for d in DIRECTIONS if d in canonical))


def _all3(value: object) -> dict[str, object]:
    return {direction: value for direction in DIRECTIONS}


# Together they pin every legacy algorithm of every direction at least once
# (backward filter 4 is in cuDNN's enum but not implemented), plus engine 0
# everywhere and the "fastest" policy everywhere.
DEFAULT_SETTINGS: tuple[Setting, ...] = tuple(
    make_setting(name, pins)
    for name, pins in (
        ("legacy0", _all3(0)),
        ("legacy1", _all3(1)),
        ("fft", {"fwd": 4, "bwd_data": 2, "bwd_filter": 2}),
        ("fft_tiling", {"fwd": 5, "bwd_data": 3, "bwd_filter": 6}),
        ("winograd", {"fwd": 6, "bwd_data": 4}),
        ("winograd_nonfused", {"fwd": 7, "bwd_data": 5, "bwd_filter": 5}),
        ("gemm", {"fwd": 2}),
        ("direct", {"fwd": 3}),
        ("algo3", {"bwd_filter": 3}),
        ("eng0", _all3("eng0")),
        ("fastest", _all3("fastest")),
    )
)


def parse_setting_spec(spec: str) -> Setting:
    """``"NAME=fwd:4,bwd_data:2,bwd_filter:2"`` -> a validated :class:`Setting`."""
    name, sep, body = spec.partition("=")
    if not sep or not body.strip():
        raise UsageError(f"--setting {spec!r}: expected NAME=DIRECTION:VALUE[,DIRECTION:VALUE...]")
    pins: dict[str, str] = {}
    for item in body.split(","):
        direction, colon, value = item.strip().partition(":")
        direction, value = direction.strip(), value.strip()
        if not colon or not direction or not value:
            raise UsageError(f"--setting {spec!r}: bad item {item.strip()!r}; expected DIRECTION:VALUE")
        if direction in pins:
            raise UsageError(f"--setting {spec!r}: {direction} given twice")
        pins[direction] = value
    return make_setting(name.strip(), pins)


def select_settings(names: str | None, custom: Sequence[str] = ()) -> list[Setting]:
    """The default settings named in ``names`` (comma-separated; ``None``: all of
    them; ``"none"``: none), then the ``--setting`` specs."""
    by_name = {s.name: s for s in DEFAULT_SETTINGS}
    chosen: list[Setting] = []
    if names is None:
        chosen = list(DEFAULT_SETTINGS)
    elif names.strip().lower() != "none":
        for name in (n.strip() for n in names.split(",")):
            if not name:
                continue
            if name not in by_name:
                raise UsageError(f"unknown setting {name!r}; the defaults are {', '.join(by_name)}")
            if by_name[name] not in chosen:
                chosen.append(by_name[name])
    for spec in custom:
        setting = parse_setting_spec(spec)
        if any(s.name == setting.name for s in chosen) or setting.name in by_name:
            raise UsageError(f"--setting {spec!r}: a setting named {setting.name!r} already exists")
        chosen.append(setting)
    if not chosen:
        raise UsageError("no setting to run: name some with --settings or add one with --setting")
    return chosen


def child_environment(
    base: Mapping[str, str], setting: Setting | None, strict: bool = False
) -> dict[str, str]:
    """``base`` without any ``TORCH_CUDNN_CONV_*`` variable, plus the setting's (none for stock)."""
    env = {key: value for key, value in base.items() if not key.startswith(ENV_PREFIX)}
    if setting is not None:
        env.update(setting.env_vars(strict))
    return env


def settings_help_table() -> str:
    lines = [f"  {'setting':<19}{'fwd':<9}{'bwd_data':<10}bwd_filter"]
    for s in DEFAULT_SETTINGS:
        pins = s.pin_map
        fwd, bwd_data, bwd_filter = (pins.get(d, "-") for d in DIRECTIONS)
        lines.append(f"  {s.name:<19}{fwd:<9}{bwd_data:<10}{bwd_filter}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- results


@dataclasses.dataclass
class TestResult:
    """One test's outcome in one run; ``message``/``text`` from junit when it failed."""

    __test__ = False  # not a pytest test class

    nodeid: str
    outcome: str
    message: str = ""
    text: str = ""
    returncode: int | None = None  # of the pytest process, for crashes and timeouts


def nodeid_from_junit(classname: str, name: str, file_name: str) -> str:
    """pytest junit ``classname="test_x.TestA"``, ``name="test_b"`` -> ``"test_x.py::TestA::test_b"``
    for a file ``test_x.py`` in the rootdir (the runner runs pytest from the file's folder)."""
    stem = file_name[:-3] if file_name.endswith(".py") else file_name
    if classname == stem:
        return f"{file_name}::{name}"
    if classname.startswith(stem + "."):
        return "::".join([file_name, *classname[len(stem) + 1 :].split("."), name])
    return f"{classname}::{name}" if classname else name


def _element_text(element: ET.Element) -> str:
    return element.text or ""


def parse_junit(xml_text: str, file_name: str) -> dict[str, TestResult]:
    """Outcomes by node id from pytest's junit XML (failure beats error beats skipped)."""
    results: dict[str, TestResult] = {}
    root = ET.fromstring(xml_text)
    rank = {PASSED: 0, SKIPPED: 1, XFAILED: 1, ERROR: 2, FAILED: 3}
    for case in root.iter("testcase"):
        nodeid = nodeid_from_junit(case.get("classname", ""), case.get("name", ""), file_name)
        outcome, message, text = PASSED, "", ""
        for child in case:
            kind = {"failure": FAILED, "error": ERROR, "skipped": SKIPPED}.get(child.tag)
            if kind == SKIPPED and child.get("type") == "pytest.xfail":
                kind = XFAILED
            if kind is not None and rank[kind] > rank[outcome]:
                outcome, message, text = kind, child.get("message", ""), _element_text(child)
        previous = results.get(nodeid)
        if previous is None or rank[outcome] >= rank.get(previous.outcome, 0):
            results[nodeid] = TestResult(nodeid, outcome, message, text)
    return results


_RESULT_WORDS = {
    "PASSED": PASSED,
    "XPASS": PASSED,
    "FAILED": FAILED,
    "ERROR": ERROR,
    "SKIPPED": SKIPPED,
    "XFAIL": XFAILED,
}
_VERBOSE_LINE = re.compile(r"(?P<id>\S+)(?: (?P<word>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b)?")


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
        outcome = _RESULT_WORDS[word]
        if outcomes.get(nodeid) not in (FAILED, ERROR):  # a teardown ERROR after FAILED keeps FAILED
            outcomes[nodeid] = outcome
        pending = None
    return outcomes, pending


def describe_returncode(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"signal {-returncode} ({name})"
    return f"exit code {returncode}"


def crash_note(log: str, nodeid: str) -> str:
    """The first fatal-error line printed after the test's node id, if any."""
    start = log.rfind(nodeid)
    tail = log[start:] if start >= 0 else log
    for line in tail.splitlines():
        for marker in ("Fatal Python error:", "terminate called", "Segmentation fault", "Aborted", "CUDA error"):
            idx = line.find(marker)
            if idx >= 0:
                return line[idx:].strip()[:200]
    return ""


# --------------------------------------------------------------------------- classification


@dataclasses.dataclass(frozen=True)
class Classification:
    cls: str  # "ours" or "numerics"
    kind: str  # exception, crash, timeout, oom, layout/dtype, other; tolerance, gradcheck, nondeterminism
    detail: str
    max_abs: float | None = None
    max_rel: float | None = None
    label: str = ""  # "ours: crash (signal 11)", "numerics", ...


_NUMERIC_MARKERS = ("Tensor-likes are not close", "Scalars are not close", "Mismatched elements")
_ATTRIBUTE_MISMATCH = re.compile(
    r"The values for attribute '(?:stride\(\)|dtype|layout|memory_format|device)' do not match[^\n]*"
)
_GENERIC_BOOL_ASSERT = re.compile(r"(False is not true|True is not false|assert False|is not true)")
_LAYOUT_SOURCE = re.compile(r"is_contiguous|memory_format|\.stride\(|\bstride\(\)|\.dtype\b")
_GREATEST_ABS = re.compile(r"Greatest absolute difference: (\S+)(?:[^\n]*?\(up to (\S+) allowed\))?")
_GREATEST_REL = re.compile(r"Greatest relative difference: (\S+)(?:[^\n]*?\(up to (\S+) allowed\))?")
_SCALAR_ABS = re.compile(r"^Absolute difference: (\S+)(?:[^\n]*?\(up to (\S+) allowed\))?", re.MULTILINE)
_SCALAR_REL = re.compile(r"^Relative difference: (\S+)(?:[^\n]*?\(up to (\S+) allowed\))?", re.MULTILINE)
_MISMATCHED = re.compile(r"Mismatched elements: ([^\n]+)")


def _to_float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.rstrip(".,;"))
    except ValueError:
        return None


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.3g}"


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def _error_lines(text: str) -> str:
    """The ``E   ...`` lines of a pytest traceback: the exception, when junit had no message."""
    lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    return "\n".join(lines)


def _source_lines(text: str) -> list[str]:
    """The ``>`` lines of a long pytest traceback: the source lines that raised."""
    return [line[1:].strip() for line in text.splitlines() if line.startswith(">")]


def classify(result: TestResult) -> Classification:
    """Why a test that passes stock fails under a setting: *ours* or *numerics*."""
    if result.outcome == CRASHED:
        rc = result.returncode if result.returncode is not None else 0
        what = f"signal {-rc}" if rc < 0 else f"exit {rc}"
        detail = describe_returncode(rc) + (f"; {result.message}" if result.message else "")
        return Classification("ours", "crash", detail, label=f"ours: crash ({what})")
    if result.outcome == TIMEOUT:
        return Classification("ours", "timeout", result.message or "run timed out in this test", label="ours: timeout")
    message = result.message or _error_lines(result.text)
    if not message and not result.text:
        return Classification(
            "ours", "other", f"{result.outcome}, no message (the run died before writing junit)",
            label="ours: other",
        )
    first = _first_line(message) or _first_line(result.text)
    if "torch_cudnn_algo" in message:
        line = next((ln.strip() for ln in message.splitlines() if "torch_cudnn_algo" in ln), first)
        return Classification("ours", "exception", line[:300], label="ours: exception")
    if "OutOfMemoryError" in message or "out of memory" in message.lower():
        return Classification("ours", "oom", first, label="ours: oom")
    attribute = _ATTRIBUTE_MISMATCH.search(message)
    if attribute:
        return Classification("ours", "layout/dtype", attribute.group(0).strip(), label="ours: layout/dtype")
    if any(marker in message for marker in _NUMERIC_MARKERS):
        abs_match = _GREATEST_ABS.search(message) or _SCALAR_ABS.search(message)
        rel_match = _GREATEST_REL.search(message) or _SCALAR_REL.search(message)
        max_abs = _to_float(abs_match.group(1)) if abs_match else None
        max_rel = _to_float(rel_match.group(1)) if rel_match else None
        parts = []
        for what, match, value in (("abs", abs_match, max_abs), ("rel", rel_match, max_rel)):
            if match:
                allowed = f" (allowed {match.group(2)})" if match.group(2) else ""
                parts.append(f"max {what} diff {_fmt(value)}{allowed}")
        mismatched = _MISMATCHED.search(message)
        if mismatched:
            parts.append(f"mismatched {mismatched.group(1).strip()}")
        return Classification("numerics", "tolerance", ", ".join(parts) or first, max_abs, max_rel, "numerics")
    if "Jacobian mismatch" in message:
        return Classification("numerics", "gradcheck", first, label="numerics")
    if "Backward is not reentrant" in message:
        return Classification("numerics", "nondeterminism", first, label="numerics")
    if any(word in message for word in ("is_contiguous", "memory_format")) or (
        _GENERIC_BOOL_ASSERT.search(message) and any(_LAYOUT_SOURCE.search(src) for src in _source_lines(result.text))
    ):
        source = next((src for src in _source_lines(result.text) if _LAYOUT_SOURCE.search(src)), first)
        return Classification("ours", "layout/dtype", source[:300], label="ours: layout/dtype")
    return Classification("ours", "other", first, label="ours: other")


# --------------------------------------------------------------------------- regressions


def stock_rerun_candidates(
    stock: Mapping[str, TestResult], settings: Iterable[Mapping[str, TestResult]]
) -> list[str]:
    """Tests to re-run stock alone: every stock failure, and every test stock skipped
    (free GPU memory, say) that some setting ran and failed."""
    failing_somewhere = set()
    for results in settings:
        failing_somewhere.update(t for t, r in results.items() if r.outcome in FAILING)
    return sorted(
        t for t, r in stock.items()
        if r.outcome in FAILING or (r.outcome == SKIPPED and t in failing_somewhere)
    )


def rerun_candidates(stock: Mapping[str, TestResult], setting: Mapping[str, TestResult]) -> list[str]:
    """Tests to re-run under the setting alone: those that pass stock but failed
    (or were skipped: resource checks) in the parallel run under the setting, and
    expected failures of stock that fail otherwise (an unexpected success, say:
    the setting changed what the test checks)."""
    return sorted(
        t for t, r in setting.items()
        if t in stock and (
            (stock[t].outcome == PASSED and r.outcome in FAILING | {SKIPPED})
            or (stock[t].outcome == XFAILED and r.outcome in FAILING)
        )
    )


def count_outcomes(results: Mapping[str, TestResult]) -> dict[str, int]:
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


def _json_float(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return str(value)


def regression_entry(nodeid: str, result: TestResult, parallel_outcome: str, repro: str = "") -> dict:
    c = classify(result)
    return {
        "test": nodeid,
        "class": c.cls,
        "label": c.label,
        "kind": c.kind,
        "detail": c.detail,
        "max_abs": _json_float(c.max_abs),
        "max_rel": _json_float(c.max_rel),
        "parallel_outcome": parallel_outcome,
        "alone_outcome": result.outcome,
        "repro": repro,
    }


# --------------------------------------------------------------------------- rendering


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _short_test(nodeid: str) -> str:
    return nodeid.split("::", 1)[1] if "::" in nodeid else nodeid


def render_markdown(summary: Mapping) -> str:
    """The summary (the dict written to summary.json) as markdown."""
    out = ["# PyTorch's tests under pinned cuDNN algorithms", ""]
    torch_info = summary.get("torch") or {}
    facts = [f"file `{summary.get('file', '?')}`", f"`-k {summary.get('k') or ''}`"]
    if torch_info.get("version"):
        facts.append(f"torch {torch_info['version']} (git {str(torch_info.get('git_version') or '?')[:12]})")
    if torch_info.get("device"):
        facts.append(str(torch_info["device"]))
    facts.append(f"{summary.get('jobs', '?')} runs in parallel")
    facts.append("strict" if summary.get("strict") else "not strict")
    if summary.get("elapsed") is not None:
        facts.append(f"{summary['elapsed']:.0f} s in all")
    out += [", ".join(facts) + ".", ""]
    if summary.get("phase") not in (None, "final"):
        out += ["**Preliminary**: the job has not finished; regressions marked *unconfirmed* have not been "
                "re-run alone yet.", ""]
    out.append("| setting | pins | passed | failed | skipped | errors | crashed | ours | numerics | cleared | time |")
    out.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for run in summary.get("runs", []):
        regressions = run.get("regressions", [])
        is_stock = run["setting"] == "stock"
        ours = sum(1 for r in regressions if r["class"] == "ours")
        numerics = sum(1 for r in regressions if r["class"] == "numerics")
        row = [
            run["setting"],
            run.get("pins") or "-",
            run.get("passed", 0),
            run.get("failed", 0),
            run.get("skipped", 0),
            run.get("errors", 0),
            run.get("crashed", 0),
            "-" if is_stock else ours,
            "-" if is_stock else numerics,
            "-" if is_stock else len(run.get("cleared", [])),
            f"{run.get('duration', 0.0):.1f} s",
        ]
        out.append("| " + " | ".join(_cell(x) for x in row) + " |")
    out += [
        "",
        "Counts are the parallel runs'; *ours* and *numerics* count the tests that pass stock and "
        "fail under the setting, confirmed by a re-run alone on the GPU; *cleared* failed in the "
        "parallel run and passed alone.",
    ]
    run_errors = [(run["setting"], run["run_error"]) for run in summary.get("runs", []) if run.get("run_error")]
    if run_errors:
        out += ["", "Runs that did not finish normally:", ""]
        out += [f"- {_cell(name)}: {_cell(err)}" for name, err in run_errors]
    stock = summary.get("stock_rerun") or {}
    if stock.get("tests"):
        out += [
            "",
            f"Stock failures re-run alone: {stock['tests']}; passed alone: {len(stock.get('passed_alone', []))}, "
            f"still failing: {len(stock.get('still_failing', []))}.",
        ]
        for item in stock.get("still_failing", []):
            test, label, detail = _cell(_short_test(item["test"])), _cell(item["label"]), _cell(item["detail"])
            out.append(f"- stock fails: `{test}`: {label}: {detail}")
    rerun = summary.get("rerun") or {}
    if rerun:
        out += [
            "",
            f"Re-run alone: {rerun.get('candidates', 0)} tests that passed stock and failed or skipped "
            f"under a setting in parallel; {rerun.get('confirmed', 0)} failed again (confirmed), "
            f"{rerun.get('cleared', 0)} failed in parallel and passed alone (cleared).",
        ]
    rows = [(run["setting"], reg) for run in summary.get("runs", []) for reg in run.get("regressions", [])]
    out += ["", "## Regressions: pass stock, fail under the setting", ""]
    if rows:
        out += ["| setting | test | class | detail |", "|---|---|---|---|"]
        for name, reg in rows:
            test, label, detail = _cell(_short_test(reg["test"])), _cell(reg["label"]), _cell(reg["detail"])
            if reg.get("confirmed") is False:
                label += " (unconfirmed)"
            out.append(f"| {_cell(name)} | `{test}` | {label} | {detail} |")
    else:
        out.append("None.")
    cleared = [(run["setting"], t) for run in summary.get("runs", []) for t in run.get("cleared", [])]
    if cleared:
        out += ["", "Cleared by the re-run alone (failed only while runs shared the GPU):", ""]
        out += [f"- {_cell(name)}: `{_cell(_short_test(t))}`" for name, t in cleared]
    status = summary.get("exit_status")
    if status is not None:
        verdict = "no failure classified ours." if status == 0 else "failures classified ours."
        out += ["", f"Exit status {status}: {verdict}"]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- running


PREFLIGHT_CODE = r"""
import json, sys, warnings
info = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        import torch
    except Exception as exc:
        print("TCA_PREFLIGHT " + json.dumps({"error": "import torch failed: %s: %s" % (type(exc).__name__, exc)}))
        sys.exit(0)
    info["version"] = torch.__version__
    info["git_version"] = getattr(torch.version, "git_version", None)
    info["cuda"] = bool(torch.cuda.is_available())
    info["device"] = torch.cuda.get_device_name(0) if info["cuda"] else None
    cudnn = torch.backends.cudnn
    missing = object()
    info["flags"] = {}
    for d in ("fwd", "bwd_data", "bwd_filter"):
        value = getattr(cudnn, "conv_%s_algo" % d, missing)
        info["flags"][d] = "<missing>" if value is missing else value
    strict = getattr(cudnn, "conv_algo_strict", missing)
    info["strict"] = "<missing>" if strict is missing else strict
    try:
        import torch_cudnn_algo
        info["extension"] = bool(torch_cudnn_algo.is_available())
        info["load_error"] = torch_cudnn_algo.load_error()
    except Exception as exc:
        info["package_error"] = "%s: %s" % (type(exc).__name__, exc)
info["warnings"] = [str(w.message) for w in caught if "torch_cudnn_algo" in str(w.message)]
print("TCA_PREFLIGHT " + json.dumps(info, default=str))
"""


def preflight_problems(info: Mapping, setting: Setting | None, strict: bool) -> list[str]:
    """What is wrong with a run's environment, from the preflight child's report."""
    name = setting.name if setting else "stock"
    if info.get("error"):
        return [f"{name}: {info['error']}"]
    problems = []
    if info.get("package_error"):
        problems.append(f"{name}: torch_cudnn_algo does not import ({info['package_error']})")
    elif not info.get("extension"):
        problems.append(f"{name}: the torch_cudnn_algo extension is not loaded ({info.get('load_error')})")
    expected = setting.pin_map if setting else {}
    for direction in DIRECTIONS:
        got = info.get("flags", {}).get(direction)
        if got == "<missing>":
            problems.append(
                f"{name}: torch.backends.cudnn.conv_{direction}_algo does not exist after `import torch` "
                "(package not installed in this interpreter, or TORCH_DEVICE_BACKEND_AUTOLOAD=0)"
            )
            break
        want = expected.get(direction)
        if (None if got is None else str(got)) != want:
            problems.append(f"{name}: conv_{direction}_algo reads {got!r} after autoload, expected {want!r}")
    if setting is not None and strict and info.get("strict") is not True:
        problems.append(f"{name}: conv_algo_strict reads {info.get('strict')!r}, expected True")
    problems += [f"{name}: {w}" for w in info.get("warnings", [])]
    return problems


@dataclasses.dataclass
class RunResult:
    name: str
    results: dict[str, TestResult]
    duration: float
    attempts: list[dict]
    run_error: str | None = None


class Runner:
    def __init__(self, args: argparse.Namespace, settings: list[Setting], extra: list[str]) -> None:
        self.file = Path(args.file).resolve()
        self.rootdir = self.file.parent
        self.file_name = self.file.name
        self.settings = settings
        self.extra = extra
        self.k = args.k
        self.jobs = args.jobs
        self.timeout = args.timeout if args.timeout and args.timeout > 0 else None
        self.test_timeout = args.test_timeout if args.test_timeout and args.test_timeout > 0 else None
        self.out = Path(args.out).resolve()
        self.python = args.python
        self.strict = args.strict
        self.max_restarts = args.max_restarts
        self.preflight = not args.no_preflight
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen] = set()
        self._stopping = False
        self._start = time.monotonic()

    # -- output
    def say(self, text: str) -> None:
        with self._lock:
            print(f"[{time.monotonic() - self._start:7.1f} s] {text}", file=sys.stderr, flush=True)

    def env_for(self, setting: Setting | None) -> dict[str, str]:
        env = child_environment(os.environ, setting, self.strict)
        env["PYTHONUNBUFFERED"] = "1"  # so the -v log is complete when a test kills the process
        return env

    # -- subprocesses
    def _spawn(self, cmd: list[str], env: Mapping[str, str], log: Path) -> tuple[int, str | None, float]:
        """Runs one pytest process; returns its exit status, why it was killed
        (--timeout, or no progress in its log for --test-timeout), and its duration."""
        start = time.monotonic()
        with open(log, "wb") as fh:
            fh.write(("$ " + shlex.join(cmd) + "\n").encode())
            fh.flush()
            proc = subprocess.Popen(
                cmd, cwd=self.rootdir, env=dict(env), stdout=fh, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
            with self._lock:
                self._live.add(proc)
            killed: str | None = None
            last_size, last_change = -1, start
            try:
                while True:
                    try:
                        rc = proc.wait(timeout=1.0)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    now = time.monotonic()
                    size = log.stat().st_size
                    if size != last_size:
                        last_size, last_change = size, now
                    if self.timeout and now - start > self.timeout:
                        killed = f"the run passed --timeout {self.timeout:g} s"
                    elif self.test_timeout and now - last_change > self.test_timeout:
                        killed = f"no progress for {self.test_timeout:g} s (--test-timeout)"
                    if killed:
                        self._kill(proc)
                        rc = proc.wait()
                        break
            finally:
                with self._lock:
                    self._live.discard(proc)
        return rc, killed, time.monotonic() - start

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_all(self) -> None:
        """Kills every running pytest process group; no new one starts afterwards."""
        self._stopping = True
        with self._lock:
            live = list(self._live)
        for proc in live:
            self._kill(proc)

    def run_preflight(self, setting: Setting | None) -> dict:
        env = self.env_for(setting)
        try:
            done = subprocess.run(
                [self.python, "-c", PREFLIGHT_CODE], env=env, capture_output=True, text=True,
                timeout=600, stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"error": f"{self.python} did not run: {exc}"}
        for line in done.stdout.splitlines():
            if line.startswith("TCA_PREFLIGHT "):
                return json.loads(line[len("TCA_PREFLIGHT "):])
        return {"error": f"{self.python} failed (exit {done.returncode}): {_first_line(done.stderr[-2000:])}"}

    def pytest_command(self, targets: Sequence[str], junit: Path, use_k: bool, exclude: bool) -> list[str]:
        cmd = [self.python, "-m", "pytest", *targets]
        if use_k and self.k:
            cmd += ["-k", self.k]
        cmd += [
            "-p", "no:cacheprovider", "-v", "--color=no", f"--junitxml={junit}",
            "-c", str(self.out / "pytest.ini"), "--rootdir", str(self.rootdir), "--confcutdir", str(self.rootdir),
        ]
        if exclude:
            cmd += ["-p", PLUGIN_NAME]
        return cmd + list(self.extra)

    def run_pytest(self, label: str, setting: Setting | None, targets: Sequence[str] | None) -> RunResult:
        """One logical run (the file with ``-k``, or the given node ids), restarted
        after a crash or a timeout without the tests already done and the one that died."""
        folder = self.out / label
        folder.mkdir(parents=True, exist_ok=True)
        base_env = self.env_for(setting)
        results: dict[str, TestResult] = {}
        exclude: set[str] = set()
        attempts: list[dict] = []
        run_error = None
        total = 0.0
        for attempt in range(1, self.max_restarts + 2):
            if self._stopping:
                run_error = "interrupted"
                break
            junit, log = folder / f"junit-{attempt}.xml", folder / f"pytest-{attempt}.log"
            for path in (junit, log):
                path.unlink(missing_ok=True)
            env = dict(base_env)
            if exclude:
                exclude_file = folder / f"exclude-{attempt}.txt"
                exclude_file.write_text("".join(t + "\n" for t in sorted(exclude)), encoding="utf-8")
                env[EXCLUDE_VAR] = str(exclude_file)
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.out / "_plugin"), env.get("PYTHONPATH")]))
            cmd = self.pytest_command(targets if targets is not None else [self.file_name], junit,
                                      targets is None, bool(exclude))
            rc, killed, seconds = self._spawn(cmd, env, log)
            timed_out = killed is not None
            total += seconds
            if self._stopping:
                run_error = "interrupted"
                break
            text = log.read_text(encoding="utf-8", errors="replace")
            verbose, pending = parse_verbose_log(text, self.file_name)
            for nodeid, outcome in verbose.items():
                results[nodeid] = TestResult(nodeid, outcome)
            if junit.exists():
                try:
                    results.update(parse_junit(junit.read_text(encoding="utf-8", errors="replace"), self.file_name))
                except ET.ParseError as exc:
                    run_error = f"unreadable junit {junit}: {exc}"
            attempts.append({"attempt": attempt, "returncode": rc, "timed_out": timed_out,
                             "seconds": round(seconds, 2), "log": str(log), "command": shlex.join(cmd)})
            if not timed_out and rc in FINISHED_EXIT_CODES:
                break
            if pending is None:
                what = f"was killed ({killed})" if timed_out else f"ended with {describe_returncode(rc)}"
                run_error = f"pytest {what} outside any test (log: {log}): {_last_meaningful_line(text)}"
                break
            if timed_out:
                results[pending] = TestResult(pending, TIMEOUT, f"killed in this test: {killed}", returncode=rc)
            else:
                results[pending] = TestResult(pending, CRASHED, crash_note(text, pending), returncode=rc)
            self.say(f"{label}: {pending.split('::', 1)[-1]} "
                     f"{'timed out' if timed_out else 'crashed: ' + describe_returncode(rc)}; restarting without it")
            exclude |= {t for t, r in results.items() if r.outcome in (PASSED, SKIPPED, XFAILED, CRASHED, TIMEOUT)}
        else:
            run_error = f"gave up after {self.max_restarts} restarts"
        if targets is not None:  # a re-run: only the tests asked for
            wanted = set(targets)
            results = {t: r for t, r in results.items() if t in wanted}
        return RunResult(label, results, total, attempts, run_error)

    def repro(self, setting: Setting | None, nodeid: str) -> str:
        env = setting.env_vars(self.strict) if setting else {}
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        return f"cd {shlex.quote(str(self.rootdir))} && {prefix + ' ' if prefix else ''}" \
               f"{shlex.quote(self.python)} -m pytest -p no:cacheprovider {shlex.quote(nodeid)}"

    def _summary_line(self, run: RunResult) -> str:
        c = count_outcomes(run.results)
        text = (f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped, {c['errors']} errors, "
                f"{c['crashed']} crashed in {run.duration:.1f} s")
        return text + (f" ({run.run_error})" if run.run_error else "")

    # -- the whole job
    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        (self.out / "_plugin").mkdir(exist_ok=True)
        (self.out / "_plugin" / f"{PLUGIN_NAME}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
        all_runs: list[Setting | None] = [None, *self.settings]

        torch_info: dict = {}
        if self.preflight:
            self.say(f"preflight: {len(all_runs)} interpreters read their flags back after `import torch`")
            with concurrent.futures.ThreadPoolExecutor(self.jobs) as pool:
                infos = list(pool.map(self.run_preflight, all_runs))
            problems = [p for s, info in zip(all_runs, infos) for p in preflight_problems(info, s, self.strict)]
            if problems:
                print("run-upstream-tests: preflight failed (use --no-preflight to run anyway):", file=sys.stderr)
                for problem in problems:
                    print(f"  {problem}", file=sys.stderr)
                return 2
            torch_info = {k: infos[0].get(k) for k in ("version", "git_version", "cuda", "device")}
            self.say(f"torch {torch_info['version']} (git {torch_info['git_version']}), "
                     f"{torch_info['device'] or 'no CUDA device: the CUDA tests will skip'}")

        names = ["stock"] + [s.name for s in self.settings]
        self.say(f"parallel phase: {len(all_runs)} runs of {self.file_name}, {self.jobs} at a time")
        parallel: dict[str, RunResult] = {}
        with concurrent.futures.ThreadPoolExecutor(self.jobs) as pool:
            futures = {pool.submit(self.run_pytest, name, s, None): name for name, s in zip(names, all_runs)}
            for future in concurrent.futures.as_completed(futures):
                run = future.result()
                parallel[run.name] = run
                self.say(f"{run.name}: {self._summary_line(run)}")

        stock = parallel["stock"]
        if not stock.results:
            tail = stock.attempts[-1]["log"] if stock.attempts else "?"
            print(f"run-upstream-tests: the stock run ran no test ({stock.run_error or 'nothing selected'}); "
                  f"see {tail}", file=sys.stderr)
            return 2

        # A preliminary summary (nothing confirmed yet), rewritten after every re-run,
        # so that a job cut short still leaves one.
        stock_final = dict(stock.results)
        stock_rerun: dict = {"tests": 0, "passed_alone": [], "still_failing": []}
        alone: dict[str, RunResult] = {}
        self.write_summary(self.summary(torch_info, parallel, stock_final, stock_rerun, alone, "parallel"))

        # Serial phase, one pytest process at a time: stock's true result first.
        stock_ids = stock_rerun_candidates(stock.results, (parallel[n].results for n in names[1:]))
        stock_rerun["tests"] = len(stock_ids)
        if stock_ids:
            self.say(f"stock: re-running {len(stock_ids)} tests alone")
            stock_alone = self.run_pytest("rerun-stock", None, stock_ids)
            for t in stock_ids:
                r = stock_alone.results.get(t)
                if r is None:
                    continue
                stock_final[t] = r
                if r.outcome == PASSED:
                    stock_rerun["passed_alone"].append(t)
                elif r.outcome in FAILING:
                    c = classify(r)
                    stock_rerun["still_failing"].append({"test": t, "label": c.label, "detail": c.detail})
        for name, setting in zip(names[1:], self.settings):
            candidates = rerun_candidates(stock_final, parallel[name].results)
            if candidates:
                self.say(f"{name}: re-running {len(candidates)} tests alone")
                alone[name] = self.run_pytest(f"rerun-{name}", setting, candidates)
            else:
                alone[name] = RunResult(f"rerun-{name}", {}, 0.0, [])
            self.write_summary(self.summary(torch_info, parallel, stock_final, stock_rerun, alone, "rerun"))

        summary = self.summary(torch_info, parallel, stock_final, stock_rerun, alone, "final")
        markdown = self.write_summary(summary)
        sys.stdout.write(markdown)
        sys.stdout.flush()
        self.say(f"wrote {self.out / 'summary.md'} and {self.out / 'summary.json'}")
        return summary["exit_status"]

    def write_summary(self, summary: dict) -> str:
        for name, text in (("summary.json", json.dumps(summary, indent=2) + "\n"),
                           ("summary.md", render_markdown(summary))):
            tmp = self.out / f".{name}.tmp"
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(self.out / name)
        return render_markdown(summary)

    def summary(self, torch_info: Mapping, parallel: Mapping[str, RunResult], stock_final: Mapping[str, TestResult],
                stock_rerun: Mapping, alone: Mapping[str, RunResult], phase: str) -> dict:
        """The summary.json content. ``phase``: "parallel" (nothing re-run yet), "rerun"
        (some settings re-run), "final". Regressions not yet re-run alone carry
        ``"confirmed": false``; the exit status is set only when final."""
        runs_json = [self._run_json(parallel["stock"], None, [], [], 0)]
        totals = {"candidates": 0, "confirmed": 0, "cleared": 0}
        for setting in self.settings:
            entry = self._setting_json(parallel[setting.name], setting, stock_final, alone.get(setting.name))
            runs_json.append(entry)
            if setting.name in alone:
                totals["candidates"] += entry["rerun_candidates"]
                totals["confirmed"] += sum(1 for r in entry["regressions"] if r["test"] != "(run)")
                totals["cleared"] += len(entry["cleared"])
        ours = any(r["class"] == "ours" for run in runs_json for r in run["regressions"])
        git_version = torch_info.get("git_version")
        return {
            "phase": phase,
            "file": str(self.file),
            "k": self.k,
            "python": self.python,
            "jobs": self.jobs,
            "strict": self.strict,
            "timeout": self.timeout,
            "test_timeout": self.test_timeout,
            "torch": dict(torch_info) or None,
            "test_file_url": RAW_URL.format(commit=git_version) if git_version else None,
            "elapsed": round(time.monotonic() - self._start, 1),
            "runs": runs_json,
            "stock_rerun": dict(stock_rerun),
            "rerun": totals,
            "exit_status": (1 if ours else 0) if phase == "final" else None,
        }

    def _setting_json(self, run: RunResult, setting: Setting, stock_final: Mapping[str, TestResult],
                      alone: RunResult | None) -> dict:
        candidates = rerun_candidates(stock_final, run.results)
        regressions, cleared = [], []
        for t in candidates:
            first = run.results[t].outcome
            if alone is None:  # not re-run yet: the parallel failure, unconfirmed
                if first in FAILING:
                    regressions.append(regression_entry(t, run.results[t], first, self.repro(setting, t)))
                    regressions[-1]["confirmed"] = False
                continue
            r = alone.results.get(t)
            if r is not None and r.outcome in FAILING:
                regressions.append(regression_entry(t, r, first, self.repro(setting, t)))
                regressions[-1]["confirmed"] = True
            elif first in FAILING:
                cleared.append(t)
        if run.run_error and not run.results:
            regressions.append({
                "test": "(run)", "class": "ours", "label": "ours: run failed", "kind": "run",
                "detail": run.run_error, "max_abs": None, "max_rel": None, "parallel_outcome": "",
                "alone_outcome": "", "repro": "", "confirmed": True,
            })
        failed_both = sum(1 for t, r in run.results.items()
                          if r.outcome in FAILING and t in stock_final and stock_final[t].outcome in FAILING)
        entry = self._run_json(run, setting, regressions, cleared, failed_both)
        entry["rerun_candidates"] = len(candidates)
        entry["rerun_duration"] = round(alone.duration, 1) if alone is not None else None
        return entry

    def _run_json(self, run: RunResult, setting: Setting | None, regressions: list, cleared: list,
                  failed_both: int) -> dict:
        counts = count_outcomes(run.results)
        return {
            "setting": run.name,
            "env": setting.env_vars(self.strict) if setting else {},
            "pins": setting.describe() if setting else "",
            "passed": counts[PASSED],
            "failed": counts[FAILED],
            "skipped": counts[SKIPPED],
            "errors": counts["errors"],
            "crashed": counts["crashed"],
            "duration": round(run.duration, 1),
            "attempts": len(run.attempts),
            "run_error": run.run_error,
            "failed_both": failed_both,
            "regressions": regressions,
            "cleared": cleared,
        }


def _last_meaningful_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip() and not set(line.strip()) <= set("=-_ "):
            return line.strip()[:300]
    return ""


# --------------------------------------------------------------------------- command line

DESCRIPTION = """\
Run one of PyTorch's own test files (default use: test/nn/test_convolution.py) once
stock and once per *setting* -- a choice of pinned cuDNN algorithms, passed to each
pytest run through torch_cudnn_algo's environment variables (TORCH_CUDNN_CONV_FWD_ALGO,
TORCH_CUDNN_CONV_BWD_DATA_ALGO, TORCH_CUDNN_CONV_BWD_FILTER_ALGO,
TORCH_CUDNN_CONV_ALGO_STRICT), read by the package's autoload at `import torch` --
several runs in parallel on one GPU, and report per setting the passed / failed /
skipped / errors counts and, by name, every test that passes stock and fails under
the setting."""

EPILOG = """\
getting the test file:
  The file must match the installed torch. Read it at the commit torch was built
  from, e.g.
    GIT=$(python3 -c "import torch; print(torch.version.git_version)")
    mkdir -p scratch/upstream
    curl -fsSL -o scratch/upstream/test_convolution.py \\
      https://raw.githubusercontent.com/pytorch/pytorch/$GIT/test/nn/test_convolution.py
  PyTorch's test files are never committed to this repository: keep them under
  scratch/ (git-ignored). They need pytest, expecttest and numpy (scipy and
  hypothesis are optional: without scipy the *_vs_scipy tests skip). The package
  itself must be installed in the interpreter (--python), or the settings would
  change nothing: a preflight checks that every setting's flags read back after
  `import torch` (--no-preflight skips it).

default settings (each pins the named directions at once; together they cover every
legacy algorithm of every direction; `stock` is always run too, with no variable):
{settings}

how it runs:
  Each run is `python -m pytest FILE -k EXPR -p no:cacheprovider -v --junitxml=...`
  started in FILE's folder (with an empty ini file, --rootdir and --confcutdir set to
  that folder, so neither this repository's nor PyTorch's pytest configuration
  applies), extra pytest arguments after `--` appended. Its environment is the
  caller's minus every TORCH_CUDNN_CONV_* variable, plus the setting's (and
  TORCH_CUDNN_CONV_ALGO_STRICT=1 with --strict); PYTORCH_TEST_* and everything else
  are inherited unchanged.
  Runs sharing one GPU can fail memory-hungry tests for reasons that are not the
  setting's, so after the parallel phase every test that passed stock and failed (or
  skipped: PyTorch's largeTensorTest checks free memory) under a setting is re-run
  alone on the GPU (one pytest process at a time, only those node ids) and only a
  failure that repeats counts; the summary says how many were confirmed and how many
  cleared. So is every expected failure of stock that fails otherwise under a setting
  (an unexpected success: the setting changed what the test checks). Tests that
  failed stock in parallel are re-run alone first, for stock's true result.
  A run whose pytest process dies (a signal, or an exit code other than 0, 1, 5), or
  is killed (--timeout, or --test-timeout without a new line of -v output), is
  restarted without the tests already passed or skipped and without the test it died
  in -- the last node id the -v output printed without a result -- which is reported
  as `ours: crash (signal N)` (or `ours: timeout`); at most --max-restarts restarts
  per run. Restarts drop exact node ids through a small
  plugin written to OUT/_plugin (pytest's --deselect matches node-id prefixes, and
  test_Conv2d_groups_nobias is a prefix of test_Conv2d_groups_nobias_v2). Runs get
  PYTHONUNBUFFERED=1 so that the log is complete; do not pass -q after `--`.

classification of a test that passes stock and fails under a setting:
  ours: exception   the failure message names torch_cudnn_algo
  ours: crash       the process died in the test (signal N, or exit N)
  ours: timeout     the run was killed in the test (--timeout, --test-timeout)
  ours: oom         OutOfMemoryError / "out of memory"
  ours: layout/dtype  assertEqual's stride / dtype / layout mismatch, or a failed
                    assertTrue on is_contiguous / memory_format / stride
  numerics          a tolerance miss: "Tensor-likes are not close", "Scalars are not
                    close", "Mismatched elements" (with the greatest absolute and
                    relative differences parsed), a gradcheck "Jacobian mismatch", or
                    "Backward is not reentrant" (a non-deterministic algorithm)
  ours: other       anything else (the first line of the message)

output:
  A markdown table on stdout and in OUT/summary.md; OUT/summary.json (per setting:
  env, passed, failed, skipped, errors, duration, and the regressions with test id,
  class, detail and a copy-paste repro); each run's junit XML and log under
  OUT/<setting>/ (re-runs under OUT/rerun-<setting>/). Progress and each run's
  elapsed time go to stderr.

exit status: 0 when no failure is classified ours, 1 otherwise, 2 on a usage error
(or a failed preflight, or a stock run that ran no test).

example:
  scripts/run-upstream-tests scratch/upstream/test_convolution.py --settings legacy0,fft \\
      --setting mine=fwd:1,bwd_data:eng0 -j 4 --test-timeout 300 --out /tmp/upstream -- --durations=10
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run-upstream-tests",
        description=DESCRIPTION,
        epilog=EPILOG.format(settings=settings_help_table()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s FILE [options] [-- PYTEST_ARGS...]",
    )
    parser.add_argument("file", metavar="FILE", help="a PyTorch test file matching the installed torch")
    parser.add_argument("--settings", metavar="LIST", default=None,
                        help="comma-separated default settings to run (default: all; 'none': only --setting ones)")
    parser.add_argument("--setting", metavar="NAME=DIR:VALUE,...", action="append", default=[],
                        help="add a setting, e.g. mine=fwd:4,bwd_data:2,bwd_filter:eng0 (repeatable); "
                             "directions fwd, bwd_data, bwd_filter; values as the flags take them: "
                             "legacy int or name, engine configuration, 'fastest'")
    parser.add_argument("--strict", action="store_true", help="set TORCH_CUDNN_CONV_ALGO_STRICT=1 in every setting")
    parser.add_argument("-k", metavar="EXPR", default=DEFAULT_K, help=f"pytest -k expression (default: {DEFAULT_K!r})")
    parser.add_argument("-j", "--jobs", type=int, default=DEFAULT_JOBS, metavar="N",
                        help=f"pytest runs at once in the parallel phase (default {DEFAULT_JOBS})")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="limit per pytest process (a run restarted after a crash starts a new one); "
                             "0: none (the default)")
    parser.add_argument("--test-timeout", type=float, default=DEFAULT_TEST_TIMEOUT, metavar="SECONDS",
                        help="kill a pytest process whose -v output has not moved for this long: the test "
                             f"it was running counts as a timeout (default {DEFAULT_TEST_TIMEOUT:g}; 0: off)")
    parser.add_argument("--max-restarts", type=int, default=DEFAULT_MAX_RESTARTS, metavar="N",
                        help=f"restarts of one run after crashes or timeouts (default {DEFAULT_MAX_RESTARTS})")
    parser.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                        help=f"folder for junit XML, logs, summary.md and summary.json (default ./{DEFAULT_OUT})")
    parser.add_argument("--python", metavar="PATH", default=sys.executable,
                        help="interpreter that runs pytest, with torch and this package (default: this one)")
    parser.add_argument("--no-preflight", action="store_true",
                        help="skip checking that each setting's flags read back after `import torch`")
    parser.add_argument("--list-settings", action="store_true", help="print the default settings and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, extra = argv[:split], argv[split + 1 :]
    parser = build_parser()
    if "--list-settings" in argv:
        print(settings_help_table())
        return 0
    args = parser.parse_args(argv)
    try:
        settings = select_settings(args.settings, args.setting)
        if args.jobs < 1:
            raise UsageError("-j must be at least 1")
        if args.max_restarts < 0:
            raise UsageError("--max-restarts must be at least 0")
        if not Path(args.file).is_file():
            raise UsageError(f"no test file at {args.file} (see 'getting the test file' in --help)")
    except UsageError as exc:
        parser.error(str(exc))  # exits 2
    runner = Runner(args, settings, extra)

    def stop(signum: int, _frame: object) -> None:
        # Children run in their own sessions: kill them first, or the worker
        # threads (and the pool's exit) would wait for them.
        runner.kill_all()
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return runner.run()
    except KeyboardInterrupt:
        runner.kill_all()
        print(f"run-upstream-tests: interrupted; partial results in {runner.out}", file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
