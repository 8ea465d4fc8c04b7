"""What an energy measurement found (``_energy.measure``): every window, per mode the
joules per call as median and spread, the ratio to the reference mode round by round, the A/A
control beside it, and the second source's agreement with the counter. Pure Python: formatted
and tested without a GPU.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from . import _text_table

__all__ = ["EnergyReport", "ModeEnergy", "Spread", "WarmupResult", "Window", "integrate_power"]


@dataclass(frozen=True)
class Spread:
    """Median, min and max of samples (``n`` of them)."""

    median: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Spread | None:
        """The spread of the values present (None entries are failed samples); None where none is."""
        present = [v for v in values if v is not None and math.isfinite(v)]
        if not present:
            return None
        return cls(statistics.median(present), min(present), max(present), len(present))

    @property
    def half_width(self) -> float:
        """The largest distance of a sample from 1, for a spread of ratios (the A/A's resolution)."""
        return max(abs(self.max - 1.0), abs(self.min - 1.0))

    def text(self, digits: int) -> str:
        """``median (min-max)``."""
        return f"{self.median:.{digits}f} ({self.min:.{digits}f}-{self.max:.{digits}f})"

    def to_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Window:
    """One measuring window of one mode: from one update of NVML's energy counter to the first
    update after ``window_s`` had passed, with the calls that completed between the two."""

    joules: float  # the counter's difference between the two updates
    calls: int  # calls completed between the two updates
    seconds: float  # host time between the two updates
    gpu_seconds: float | None  # CUDA events around the counted calls
    power_joules: float | None  # the second source: power readings integrated over the same host time
    power_samples: int  # power readings inside the window

    @property
    def j_per_call(self) -> float:
        return self.joules / self.calls

    @property
    def ms_per_call(self) -> float:
        return (self.gpu_seconds if self.gpu_seconds is not None else self.seconds) * 1e3 / self.calls

    @property
    def watts(self) -> float:
        return self.joules / self.seconds

    @property
    def counter_vs_power(self) -> float | None:
        """The counter's joules over the power readings' integral (1: the two sources agree)."""
        if self.power_joules is None or self.power_joules <= 0:
            return None
        return self.joules / self.power_joules

    def to_dict(self) -> dict[str, float | int | None]:
        return dataclasses.asdict(self)


def integrate_power(samples: Sequence[tuple[float, float]], start: float, end: float) -> tuple[float | None, int]:
    """Joules between host times ``start`` and ``end`` from ``(time s, power mW)`` readings sorted
    by time: the trapezoid rule over the readings inside, each end interpolated between the
    readings around it (or held from the nearest reading within the interval where none lies
    beyond it). Returns (joules, readings inside); joules is None without a reading inside or
    an interval of no length."""
    if end <= start:
        return None, 0
    inside = [(t, p) for t, p in samples if start <= t <= end]
    if not inside:
        return None, 0

    def at(time: float, fallback: tuple[float, float]) -> float:
        before = [s for s in samples if s[0] <= time]
        after = [s for s in samples if s[0] >= time]
        if before and after:
            (t0, p0), (t1, p1) = before[-1], after[0]
            return p0 if t1 == t0 else p0 + (p1 - p0) * (time - t0) / (t1 - t0)
        return fallback[1]

    points = [(start, at(start, inside[0])), *inside, (end, at(end, inside[-1]))]
    millijoules = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:]))
    return millijoules / 1e3, len(inside)


@dataclass(frozen=True)
class WarmupResult:
    """How the GPU was brought to a steady temperature before the first window."""

    seconds: float
    start_c: float | None
    end_c: float | None
    stopped: str  # why it stopped: steady, at its time limit, no temperature reading, or not asked

    def text(self) -> str:
        if self.start_c is None or self.end_c is None:
            return f"warm-up {self.seconds:.0f} s ({self.stopped})"
        return f"warm-up {self.seconds:.0f} s, {self.start_c:.0f} -> {self.end_c:.0f} °C ({self.stopped})"

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ModeEnergy:
    """One mode's windows (None: a window that failed, its reason in ``failures``) and what they give."""

    label: str
    windows: tuple[Window | None, ...]
    vs_reference: Spread | None  # this mode's J/call over the reference's, round by round
    failures: tuple[str, ...] = ()

    @property
    def measured(self) -> list[Window]:
        return [w for w in self.windows if w is not None]

    @property
    def j_per_call(self) -> Spread | None:
        return Spread.of(w.j_per_call for w in self.measured)

    @property
    def ms_per_call(self) -> Spread | None:
        return Spread.of(w.ms_per_call for w in self.measured)

    @property
    def watts(self) -> Spread | None:
        return Spread.of(w.watts for w in self.measured)

    @property
    def counter_vs_power(self) -> Spread | None:
        return Spread.of(w.counter_vs_power for w in self.measured)

    def to_dict(self) -> dict[str, object]:
        def spread(value: Spread | None) -> dict | None:
            return None if value is None else value.to_dict()

        return {"label": self.label, "j_per_call": spread(self.j_per_call), "ms_per_call": spread(self.ms_per_call),
                "watts": spread(self.watts), "vs_reference": spread(self.vs_reference),
                "counter_vs_power": spread(self.counter_vs_power), "failures": list(self.failures),
                "windows": [None if w is None else w.to_dict() for w in self.windows]}


def paired_ratios(windows: Sequence[Window | None], reference: Sequence[Window | None]) -> Spread | None:
    """J/call of ``windows`` over ``reference``'s, round by round (rounds where both were measured)."""
    return Spread.of(w.j_per_call / r.j_per_call if w is not None and r is not None and r.joules > 0 else None
                     for w, r in zip(windows, reference))


@dataclass(frozen=True)
class EnergyReport:
    """Energy per call of several modes measured alternately in one process."""

    modes: dict[str, ModeEnergy]  # in the order given, the A/A twin last
    reference: str
    aa_label: str | None  # the reference measured a second time as a mode of its own; None: no A/A
    settings: Mapping[str, object]  # window_s, rounds, ... as measured
    warmup: WarmupResult | None
    power_source: str | None  # the second source's NVML reading; None: not sampled
    orders: tuple[tuple[str, ...], ...] = ()  # the order of the modes in each round

    def __getitem__(self, label: str) -> ModeEnergy:
        return self.modes[label]

    @property
    def aa(self) -> Spread | None:
        """The A/A control: the reference's twin over the reference, round by round."""
        return None if self.aa_label is None else self.modes[self.aa_label].vs_reference

    @property
    def resolution(self) -> float | None:
        """The largest relative difference the A/A control showed between two identical modes:
        a smaller difference between two modes is not resolved by this measurement."""
        aa = self.aa
        return None if aa is None else aa.half_width

    def compared(self) -> list[str]:
        """The modes compared with the reference (the reference and its twin left out)."""
        return [label for label in self.modes if label not in (self.reference, self.aa_label)]

    def to_dict(self) -> dict[str, object]:
        aa = self.aa
        return {"reference": self.reference, "aa_label": self.aa_label,
                "aa": None if aa is None else aa.to_dict(), "resolution": self.resolution,
                "settings": dict(self.settings), "warmup": None if self.warmup is None else self.warmup.to_dict(),
                "power_source": self.power_source, "orders": [list(order) for order in self.orders],
                "modes": {label: mode.to_dict() for label, mode in self.modes.items()}}

    def summary(self) -> str:
        """One line: how it was measured, the A/A spread and the second source's agreement."""
        parts = [f"NVML energy counter, {self.settings.get('window_s')} s windows x {self.settings.get('rounds')} "
                 "rounds, modes alternated in rotated order"]
        if self.warmup is not None:
            parts.append(self.warmup.text())
        aa = self.aa
        if aa is not None:
            parts.append(f"A/A ({self.reference} vs itself) {aa.text(3)}, resolution +/-{aa.half_width * 100:.1f}%")
        agreement = Spread.of(w.counter_vs_power for mode in self.modes.values() for w in mode.measured)
        if agreement is not None:
            parts.append(f"counter / integrated {self.power_source} {agreement.text(3)}")
        elif self.power_source is None:
            parts.append("no second source")
        return "; ".join(parts)

    def format(self, unit: str = "call") -> str:
        """A table: per mode J/``unit`` median (min-max), ms/``unit``, watts, ratio to the
        reference per round, counter vs power readings; then the summary line."""
        header = ("mode", f"J/{unit} median (min-max)", f"ms/{unit}", "W", f"vs {self.reference} (per round)",
                  "counter/power")
        rows = [header]
        for label, mode in self.modes.items():
            j, ms, watts, ratio, agree = mode.j_per_call, mode.ms_per_call, mode.watts, mode.vs_reference, \
                mode.counter_vs_power
            if j is None:
                rows.append((label, "n/a: " + ("; ".join(sorted(set(mode.failures))) or "no window"), "", "", "", ""))
                continue
            rows.append((label + (" (A/A)" if label == self.aa_label and "A/A" not in label else ""),
                         _sig(j.median) + f" ({_sig(j.min)}-{_sig(j.max)})", f"{ms.median:.4g}" if ms else "-",
                         f"{watts.median:.0f}" if watts else "-",
                         "1 (reference)" if label == self.reference else (ratio.text(3) if ratio else "-"),
                         f"{agree.median:.3f}" if agree else "-"))
        return "\n".join([*_text_table.aligned(rows), self.summary()])

    def __str__(self) -> str:
        return self.format()


def _sig(value: float) -> str:
    return f"{value:.4g}"
