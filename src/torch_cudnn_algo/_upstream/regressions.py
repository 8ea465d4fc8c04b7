"""Which tests to re-run alone, one pytest process at a time.

Runs sharing one GPU can fail memory-hungry tests for reasons that are not the
setting's, so a failure seen in the parallel phase counts only if it repeats alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .outcomes import FAILING, PASSED, SKIPPED, XFAILED, TestResult


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
