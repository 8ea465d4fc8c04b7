"""Judging a run against stock: which tests to re-run alone, and why a test that
passes stock fails under a setting: *ours* or *numerics*.

Runs sharing one GPU can fail memory-hungry tests for reasons that are not the
setting's, so a failure seen in the parallel phase counts only if it repeats alone.

*numerics* is a tolerance miss an algorithm may legitimately cause; everything
else -- an exception naming the package, a crash, a hang, an out-of-memory, a
wrong layout or dtype, anything unrecognised -- is *ours* to look at.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping

from .outcomes import (
    CRASHED, FAILING, PASSED, SKIPPED, TIMEOUT, XFAILED, TestResult, describe_returncode, first_line,
)


@dataclasses.dataclass(frozen=True)
class Classification:
    cls: str  # "ours" or "numerics"; "stock" for a failure of stock itself
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
_MISMATCHED = re.compile(r"Mismatched elements: ([^\n]+)")


def _difference(head: str, flags: int = 0) -> re.Pattern[str]:
    """torch.testing's ``HEAD: VALUE ... (up to ALLOWED allowed)`` line: groups VALUE, ALLOWED."""
    return re.compile(head + r" difference: (\S+)(?:[^\n]*?\(up to (\S+) allowed\))?", flags)


# Tensors report the greatest difference; scalars (a line of their own) just the difference.
_ABS_DIFFERENCES = (_difference("Greatest absolute"), _difference("^Absolute", re.MULTILINE))
_REL_DIFFERENCES = (_difference("Greatest relative"), _difference("^Relative", re.MULTILINE))


def _search_first(patterns: tuple[re.Pattern[str], ...], text: str) -> re.Match[str] | None:
    return next((m for m in (p.search(text) for p in patterns) if m), None)


def _to_float(text: str) -> float | None:
    try:
        return float(text.rstrip(".,;"))
    except ValueError:
        return None


def _error_lines(text: str) -> str:
    """The ``E   ...`` lines of a pytest traceback: the exception, when junit had no message."""
    return "\n".join(line[1:].strip() for line in text.splitlines() if line.startswith("E "))


def _source_lines(text: str) -> list[str]:
    """The ``>`` lines of a long pytest traceback: the source lines that raised."""
    return [line[1:].strip() for line in text.splitlines() if line.startswith(">")]


# Explicit mantissa bits: a value in [2**e, 2**(e+1)) has a rounding step (ulp) of 2**(e - bits).
_MANTISSA_BITS = (("float16", 10), ("bfloat16", 7), ("float32", 23))


def _binade(exponent: int) -> str:
    return f"[{2.0 ** exponent:g}, {2.0 ** (exponent + 1):g})"


def rounding_step_note(max_abs: float | None) -> str | None:
    """Where ``max_abs`` is a power of two: the magnitudes at which it is exactly one
    rounding step of float16, bfloat16 and float32. A difference of one step is the
    same result rounded the other way (a different summation order), not a wrong one."""
    if max_abs is None or not math.isfinite(max_abs) or max_abs <= 0:
        return None
    mantissa, exponent = math.frexp(max_abs)  # max_abs = mantissa * 2**exponent, mantissa in [0.5, 1)
    if mantissa != 0.5:
        return None
    step = exponent - 1  # max_abs == 2**step
    where = ", ".join(f"{name} values in {_binade(step + bits)}" for name, bits in _MANTISSA_BITS)
    return f"max abs diff = 2^{step}: one rounding step (ulp) of {where}"


def _tolerance(message: str, first: str) -> Classification:
    """A tolerance miss, with the greatest absolute and relative differences parsed."""
    abs_match = _search_first(_ABS_DIFFERENCES, message)
    rel_match = _search_first(_REL_DIFFERENCES, message)
    max_abs = _to_float(abs_match.group(1)) if abs_match else None
    max_rel = _to_float(rel_match.group(1)) if rel_match else None
    parts = []
    for what, match, value in (("abs", abs_match, max_abs), ("rel", rel_match, max_rel)):
        if match:
            shown = "?" if value is None else f"{value:.3g}"
            allowed = f" (allowed {match.group(2)})" if match.group(2) else ""
            parts.append(f"max {what} diff {shown}{allowed}")
    mismatched = _MISMATCHED.search(message)
    if mismatched:
        parts.append(f"mismatched {mismatched.group(1).strip()}")
    step = rounding_step_note(max_abs)
    if step:
        parts.append(step)
    return Classification("numerics", "tolerance", ", ".join(parts) or first, max_abs, max_rel, "numerics")


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
    first = first_line(message) or first_line(result.text)
    if "torch_cudnn_algo" in message:
        line = next((ln.strip() for ln in message.splitlines() if "torch_cudnn_algo" in ln), first)
        return Classification("ours", "exception", line[:300], label="ours: exception")
    if "OutOfMemoryError" in message or "out of memory" in message.lower():
        return Classification("ours", "oom", first, label="ours: oom")
    attribute = _ATTRIBUTE_MISMATCH.search(message)
    if attribute:
        return Classification("ours", "layout/dtype", attribute.group(0).strip(), label="ours: layout/dtype")
    if any(marker in message for marker in _NUMERIC_MARKERS):
        return _tolerance(message, first)
    if "Jacobian mismatch" in message:
        return Classification("numerics", "gradcheck", first, label="numerics")
    if "Backward is not reentrant" in message:
        return Classification("numerics", "nondeterminism", first, label="numerics")
    # A bare assertTrue failure says nothing; the source line that raised may name a layout check.
    layout_sources = [src for src in _source_lines(result.text) if _LAYOUT_SOURCE.search(src)]
    if any(word in message for word in ("is_contiguous", "memory_format")) or (
        _GENERIC_BOOL_ASSERT.search(message) and layout_sources
    ):
        source = layout_sources[0] if layout_sources else first
        return Classification("ours", "layout/dtype", source[:300], label="ours: layout/dtype")
    return Classification("ours", "other", first, label="ours: other")


def classify_stock_failure(result: TestResult) -> Classification:
    """Why a test fails under stock itself: never *ours* (no pin of ours runs there), so
    only its kind: "other", "crash (signal 11)", "numerics" ..."""
    c = classify(result)
    label = c.label.removeprefix("ours: ")
    return dataclasses.replace(c, cls="stock", label=label)


# --------------------------------------------------------------------------- re-runs alone

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
