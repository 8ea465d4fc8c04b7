"""The numbers every benchmark reports: medians over samples that may have failed, ratios, the
per-round ratio summary, the rotation of modes within a round, and how they are printed."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

__all__ = ["median", "num", "ratio", "ratio_summary", "rotated", "spread", "trio"]


def median(values: Iterable[float | None] | None) -> float | None:
    """Median of the values measured (None entries are failed samples); None where there is none."""
    present = [v for v in values or () if v is not None]
    return statistics.median(present) if present else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``; None where either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def ratio_summary(stock: Sequence[float | None] | None, ours: Sequence[float | None] | None) -> dict | None:
    """stock/ours per round (both measured in the same round), as min, median and max: above 1
    means ours took less time. None where no round has both."""
    ratios = [r for r in (ratio(s, o) for s, o in zip(stock or (), ours or ())) if r is not None]
    if not ratios:
        return None
    return {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios), "rounds": len(ratios)}


def rotated(items: Sequence[str], index: int) -> list[str]:
    """The order of the modes in round ``index``: each mode leads in turn, so drift over a
    round (clocks, temperature) does not always favour the same mode."""
    shift = index % len(items)
    return [*items[shift:], *items[:shift]]


def num(value: float | None, digits: int) -> str:
    """``value`` with ``digits`` decimals; an em dash where it was not measured."""
    return "—" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.{digits}f}"


def trio(values: Sequence[float | None], digits: int) -> str:
    """Several values of one row, ``a / b / c``."""
    return " / ".join(num(v, digits) for v in values)


def spread(summary: dict | None) -> str:
    """A :func:`ratio_summary` as ``median (min–max)``."""
    if not summary:
        return "—"
    return f"{summary['median']:.3f} ({summary['min']:.2f}–{summary['max']:.2f})"

