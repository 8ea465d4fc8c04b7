"""``tune(policy="lowest_energy")``: decisions from measured energy, with a time guard, at a cost
that stays tractable on a whole network.

1. The configurations are ordered by the time of stock's own configuration, the longest first
   (where a saving weighs most in a step), as the ``"fastest"`` tuner measures it (seconds for a
   whole network, and kept in the tuning database).
2. In that order, until ``energy_budget_s`` seconds are spent: the configuration is profiled for
   time (the profile table, as ``"least_workspace"`` uses it: every engine configuration built
   and timed, about a second or two each), and energy is measured only where there is a choice
   to make: for the candidates (at most ``MAX_CANDIDATES``, fastest first) whose time is within
   ``time_guard`` of stock's own configuration, against stock's configuration and its A/A twin
   (``_energy``). Both count towards the budget, so it bounds the policy's cost on any network.
3. A configuration's pick is the ``"lowest_energy"`` rule (``choose_lowest_energy``): the least
   energy within the guard, only where it saves more than the A/A spread and the minimum saving.
   Elsewhere, and where energy was not measured (no candidate within the guard, budget spent),
   stock's own path runs: without a measured saving there is no reason to leave it.

Every decision is recorded (:func:`energy_decisions`): what was measured, why a configuration
kept stock's path, and each pick's energy and time against stock's.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._conv_spec import ConvSpec
from ._energy import PRE_ROLL, EnergySettings, WarmupRule
from ._plan import PlanEntry
from ._table import LOWEST_ENERGY_MIN_SAVING, ProfileTable, eligible_rows, tolerance_for

__all__ = ["TUNE_ENERGY", "EnergyDecision", "decide_lowest_energy", "energy_decisions"]

logger = logging.getLogger("torch_cudnn_algo")

# Per configuration: 1 s windows, 3 rounds; the warm-up to a steady temperature before the first
# configuration measured, a 1 s pre-roll before each later one (the GPU is warm by then).
TUNE_ENERGY = EnergySettings(window_s=1.0, rounds=3, warmup=WarmupRule())
MAX_CANDIDATES = 3
DEFAULT_ENERGY_BUDGET_S = 300.0


@dataclass(frozen=True)
class EnergyDecision:
    """How one configuration was decided by ``"lowest_energy"``."""

    configuration: str
    choice: int | str | None  # None: stock's path
    reason: str
    stock_ms: float | None
    time_ms: float | None  # the choice's
    stock_j: float | None  # per call, measured alternately with the candidates
    energy_j: float | None  # the choice's per call
    energy_vs_stock: float | None  # median of the per-round ratios
    resolution: float | None  # the A/A spread of this configuration's measurement
    measured: tuple[int | str, ...] = ()  # candidates whose energy was measured
    seconds: float = 0.0  # spent measuring energy


_DECISIONS: list[EnergyDecision] = []


def energy_decisions() -> list[EnergyDecision]:
    """The decisions of the last ``tune(policy="lowest_energy")`` in this process."""
    return list(_DECISIONS)


Configuration = tuple[ConvSpec, bool, bool, int]
StockTimeFor = Callable[[ConvSpec, bool, bool], "float | None"]
TableFor = Callable[[ConvSpec, bool, bool], ProfileTable]
EnergyFor = Callable[[ConvSpec, ProfileTable, Sequence[int | str], EnergySettings, bool, bool], ProfileTable]


def candidates_within_guard(table: ProfileTable, time_guard: float, deterministic: bool, allow_tf32: bool,
                            workspace_limit: int | None) -> list[int | str]:
    """The values of the eligible candidates (accuracy, determinism, TF32, workspace rules) whose
    median time is within ``time_guard`` of stock's, fastest first, at most ``MAX_CANDIDATES``."""
    stock = table.stock
    if stock is None or not stock.ok or stock.time_ms is None:
        return []
    rows = eligible_rows(table.rows, tolerance=tolerance_for(table.dtype, allow_tf32), deterministic=deterministic,
                         reduced_precision_allowed=allow_tf32 or table.dtype != "float32",
                         workspace_limit=workspace_limit)
    within = sorted((row for row in rows if row.time_ms <= stock.time_ms * (1 + time_guard)),
                    key=lambda row: row.time_ms)
    return [row.value for row in within[:MAX_CANDIDATES]]


def decide_lowest_energy(
    configurations: Sequence[Configuration],
    stock_time_for: StockTimeFor,
    table_for: TableFor,
    energy_for: EnergyFor,
    *,
    time_guard: float,
    energy_budget_s: float,
    settings: EnergySettings = TUNE_ENERGY,
    workspace_limit: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[Sequence[Configuration]], Sequence[Configuration]] = lambda items: items,
) -> dict[ConvSpec, PlanEntry]:
    """Every configuration's entry (see the module docstring). ``stock_time_for`` gives the
    time of stock's own configuration (ms, or None where unknown), ``table_for`` profiles a
    configuration for time, ``energy_for`` measures energy of the named candidates into its
    table; all run on the configuration's device (the caller's concern)."""
    _DECISIONS.clear()
    stock_times = {spec: stock_time_for(spec, deterministic, allow_tf32)
                   for spec, deterministic, allow_tf32, _ in progress(configurations)}
    order = sorted(configurations, key=lambda c: -(stock_times[c[0]] or 0.0))
    spent, warmed = 0.0, False
    entries: dict[ConvSpec, PlanEntry] = {}
    decisions: dict[ConvSpec, EnergyDecision] = {}
    for spec, deterministic, allow_tf32, _ in order:
        if spent >= energy_budget_s:
            stock_ms = stock_times[spec]
            decisions[spec] = EnergyDecision(str(spec), None, f"not measured: the energy budget of "
                                             f"{energy_budget_s:g} s was spent", stock_ms, stock_ms, None, None,
                                             None, None)
            continue
        started = clock()
        table = table_for(spec, deterministic, allow_tf32)
        spent += clock() - started
        stock = table.stock
        stock_ms = stock.time_ms if stock is not None else None
        values = candidates_within_guard(table, time_guard, deterministic, allow_tf32, workspace_limit)
        if not values:
            reason = "stock's time unknown" if stock_ms is None else \
                f"no candidate within the time guard ({time_guard * 100:g}% of stock's time)"
            decisions[spec] = EnergyDecision(str(spec), None, reason, stock_ms, stock_ms, None, None, None, None)
            continue
        started = clock()
        measured = energy_for(spec, table, values, settings if not warmed else
                              dataclasses.replace(settings, warmup=PRE_ROLL), allow_tf32, deterministic)
        warmed = True
        seconds = clock() - started
        spent += seconds
        stock = measured.stock
        energy = measured.environment.get("energy_measure") or {}
        resolution = energy.get("resolution") if isinstance(energy, dict) else None
        pick = measured.pick("lowest_energy", deterministic=deterministic, allow_tf32=allow_tf32,
                             workspace_limit=workspace_limit, time_guard=time_guard)
        stock_j = stock.energy_j if stock is not None else None
        if pick is None:
            reason = (f"no candidate within the time guard saves more than "
                      f"{max(LOWEST_ENERGY_MIN_SAVING, resolution or 0.0) * 100:.1f}% (the minimum saving, or the "
                      "A/A spread)")
            decisions[spec] = EnergyDecision(str(spec), None, reason, stock_ms, stock_ms, stock_j, stock_j, None,
                                             resolution, tuple(values), seconds)
            entries[spec] = PlanEntry(None, stock_ms, stock_ms, None, stock_j)
        else:
            decisions[spec] = EnergyDecision(str(spec), pick.value, "the least energy within the time guard",
                                             stock_ms, pick.time_ms, stock_j, pick.energy_j, pick.energy_vs_stock,
                                             resolution, tuple(values), seconds)
            entries[spec] = PlanEntry(pick.value, pick.time_ms, stock_ms, pick.workspace, pick.energy_j)
    for spec, *_ in configurations:
        if spec not in entries:
            stock_ms = decisions[spec].stock_ms
            entries[spec] = PlanEntry(None, stock_ms, stock_ms, None, None)
    _DECISIONS.extend(decisions[spec] for spec, *_ in configurations)
    picked = sum(1 for d in _DECISIONS if d.choice is not None)
    measured_count = sum(1 for d in _DECISIONS if d.measured)
    logger.info("lowest_energy: energy measured on %d of %d configurations, %.0f s of time profiles and energy "
                "(budget %g s, time guard %g%%); %d run a candidate that saves energy, the others stock's path",
                measured_count, len(configurations), spent, energy_budget_s, time_guard * 100, picked)
    return {spec: entries[spec] for spec, *_ in configurations}
