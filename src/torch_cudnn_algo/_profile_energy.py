"""Energy per call for the profile table: which candidates are measured, each replayed as a CUDA
graph of enough calls to keep host time out, measured against stock's configuration with
``_energy.measure`` (alternated, A/A control), and the rows that come back.

Measuring energy holds up only with windows of seconds, so it is measured only where asked
(``profile(energy=...)``) and only for the candidates that could be worth it: those within
``within`` of the reference's time (stock PyTorch's row; the fastest candidate where the table
has none), at most ``candidates`` of them, fastest first. ``tune(policy="lowest_energy")``
names the candidates itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import _energy
from ._energy import EnergyMode, EnergySettings, WarmupRule, calls_per_replay, graph_replay
from ._energy_report import EnergyReport
from ._table import ProfileRow

__all__ = ["PROFILE_ENERGY", "EnergyRequest", "measure_rows_energy"]

# profile(energy=True): one convolution's few candidates, so shorter windows and warm-up than a
# training step's measurement; tune() gives its own settings.
PROFILE_ENERGY = EnergySettings(window_s=1.0, rounds=3, warmup=WarmupRule(max_s=30.0))
STOCK_LABEL = "stock"


@dataclass(frozen=True)
class EnergyRequest:
    """What the profile measures energy for: ``values`` (flag values) when given, else the
    candidates within ``within`` (a fraction; None: no time filter) of the reference's time,
    at most ``candidates`` of them."""

    settings: EnergySettings = PROFILE_ENERGY
    within: float | None = 0.10
    candidates: int = 6
    values: tuple[int | str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.settings, EnergySettings):
            raise ValueError(f"energy settings must be an EnergySettings, got {self.settings!r}")
        if self.within is not None and (isinstance(self.within, bool) or not isinstance(self.within, (int, float))
                                        or self.within < 0):
            raise ValueError(f"energy_within must be a fraction >= 0 (0.1: within 10% of stock's time) or None, "
                             f"got {self.within!r}")
        if isinstance(self.candidates, bool) or not isinstance(self.candidates, int) or self.candidates < 1:
            raise ValueError(f"energy_candidates must be an integer >= 1, got {self.candidates!r}")

    def describe(self) -> str:
        if self.values is not None:
            return f"candidates named by the caller ({len(self.values)})"
        within = "every candidate that ran" if self.within is None else \
            f"candidates within {self.within * 100:g}% of the reference's time"
        return f"{within}, at most {self.candidates}, fastest first"


def _label(row: ProfileRow) -> str:
    return STOCK_LABEL if row.value is None else str(row.value)


def selected(rows: Sequence[ProfileRow], request: EnergyRequest) -> tuple[ProfileRow | None, list[ProfileRow]]:
    """(the reference row, the candidate rows to measure besides it)."""
    timed = [row for row in rows if row.ok and row.time_ms is not None]
    stock = next((row for row in timed if row.value is None), None)
    candidates = sorted((row for row in timed if row.value is not None), key=lambda row: row.time_ms)
    reference = stock if stock is not None else (candidates[0] if candidates else None)
    if reference is None:
        return None, []
    others = [row for row in candidates if row is not reference]
    if request.values is not None:
        return reference, [row for row in others if row.value in request.values]
    if request.within is not None:
        others = [row for row in others if row.time_ms <= reference.time_ms * (1 + request.within)]
    return reference, others[:request.candidates]


def measure_rows_energy(
    rows: Sequence[ProfileRow],
    run_of: Callable[[ProfileRow], Callable[[], object]],
    request: EnergyRequest,
    *,
    replay: Callable[[Callable[[], object], int], tuple[Callable[[], None] | None, str | None]] = graph_replay,
    measure: Callable[..., EnergyReport] = _energy.measure,
) -> tuple[list[ProfileRow], dict[str, object]]:
    """``rows`` with the energy of the selected ones filled in, and what the table's
    environment records of the measurement (``energy_measure``). ``run_of(row)`` gives the
    callable that runs the row's candidate once. Raises ``EnergyUnavailable`` where NVML has
    no energy counter. ``replay`` and ``measure`` are the CUDA graph capture and the
    measurement (tests pass fakes)."""
    reference, chosen = selected(rows, request)
    if reference is None:
        return list(rows), {"summary": "not measured: no candidate ran", "resolution": None}
    modes: dict[str, EnergyMode] = {}
    methods: dict[str, str] = {}
    for row in (reference, *chosen):
        run = run_of(row)
        calls = calls_per_replay(row.time_ms or 0.0)
        replayed, why = replay(run, calls)
        label = _label(row)
        if replayed is None:
            modes[label], methods[label] = EnergyMode(run), f"eager calls: {why}"
        else:
            modes[label], methods[label] = EnergyMode(replayed, calls=calls), f"CUDA graph of {calls} calls"
    report = measure(modes, reference=_label(reference), settings=request.settings)
    measured = {}
    for label, mode in report.modes.items():
        if label == report.aa_label or mode.j_per_call is None:
            continue
        is_reference = label == report.reference
        measured[label] = {"energy_j": mode.j_per_call.median, "energy_min_j": mode.j_per_call.min,
                           "energy_max_j": mode.j_per_call.max,
                           "energy_vs_stock": None if is_reference or reference.value is not None or
                           mode.vs_reference is None else mode.vs_reference.median}
    updated = [dataclasses.replace(row, **measured[_label(row)]) if _label(row) in measured and row.ok else row
               for row in rows]
    info = {"summary": report.summary(), "resolution": report.resolution, "reference": report.reference,
            "selection": request.describe(), "measured": list(modes), "methods": methods,
            "report": report.to_dict()}
    return updated, info
