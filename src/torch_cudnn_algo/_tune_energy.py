"""``tune(policy="lowest_energy")``: decisions from measured energy, with a time guard, at a cost
that stays tractable on a whole network.

1. Every configuration is first decided by the ``"fastest"`` tuner (seconds for a whole network,
   and kept in the tuning database): its pick, the pick's time and the time of stock's own
   configuration.
2. The configurations are ordered by stock's time, the longest first (where a saving weighs most
   in a step). In that order, until ``energy_budget_s`` seconds are spent: the configuration is
   profiled for time (the profile table, as ``"least_workspace"`` uses it: every engine
   configuration built and timed, about a second or two each), and energy is measured for the
   candidates (at most ``MAX_CANDIDATES``, fastest first) whose time is within ``time_guard`` of
   stock's own configuration, against stock's configuration and its A/A twin (``_energy``). Both
   count towards the budget, so it bounds the policy's cost on any network.
3. A measured configuration's pick is the ``"lowest_energy"`` rule (``choose_lowest_energy``):
   the least energy within the guard, where it saves more than the A/A spread and the minimum
   saving.
4. Everywhere else (energy not measured, or no saving resolved) the ``"fastest"`` pick runs, if
   it is within the guard and was not measured to cost more energy than stock's configuration:
   without a resolved measurement, less time is the best estimate of less energy (on whole
   steps the plans' energy fell with their time, though not one for one: docs/energy.md), and a
   configuration's saving too small to resolve alone still counts in a step. Otherwise stock's
   own path runs.

Every decision is recorded (:func:`energy_decisions`): what was measured, why a configuration
runs what it runs, and each pick's energy and time against stock's.
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
FastestFor = Callable[[ConvSpec, bool, bool], PlanEntry]
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


def _within_guard(entry: PlanEntry, time_guard: float) -> bool:
    return (entry.choice is not None and entry.time_ms is not None and entry.stock_ms is not None
            and entry.time_ms <= entry.stock_ms * (1 + time_guard))


def _time_as_proxy(spec: ConvSpec, fastest: PlanEntry, time_guard: float, why: str,
                   measured: ProfileTable | None = None, resolution: float | None = None,
                   values: tuple[int | str, ...] = (), seconds: float = 0.0) -> tuple[PlanEntry, EnergyDecision]:
    """The entry and decision of a configuration without a resolved energy saving: the
    ``"fastest"`` pick where it is within the guard and not measured to cost more energy than
    stock's configuration (beyond the A/A spread), else stock's path. ``why``: why energy did
    not decide."""
    stock_ms = fastest.stock_ms
    stock_row = measured.stock if measured is not None else None
    stock_j = stock_row.energy_j if stock_row is not None else None
    costs_more = False
    if measured is not None and fastest.choice is not None:
        row = next((r for r in measured.rows if r.value == fastest.choice), None)
        if row is not None and row.energy_vs_stock is not None:
            costs_more = row.energy_vs_stock > 1 + (resolution or 0.0)
    if _within_guard(fastest, time_guard) and not costs_more:
        entry = dataclasses.replace(fastest, energy_j=None)
        decision = EnergyDecision(str(spec), fastest.choice, f"{why}; the fastest pick (less time as the estimate "
                                  "of less energy)", stock_ms, fastest.time_ms, stock_j, None, None, resolution,
                                  values, seconds)
        return entry, decision
    if costs_more:
        why = f"{why}; the fastest pick was measured to cost more energy than stock's configuration"
    elif fastest.choice is not None:
        why = f"{why}; the fastest pick is outside the time guard"
    decision = EnergyDecision(str(spec), None, f"{why}: stock's path", stock_ms, stock_ms, stock_j, stock_j, None,
                              resolution, values, seconds)
    return PlanEntry(None, stock_ms, stock_ms, None, stock_j), decision


def decide_lowest_energy(
    configurations: Sequence[Configuration],
    fastest_for: FastestFor,
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
    """Every configuration's entry (see the module docstring). ``fastest_for`` gives the
    ``"fastest"`` tuner's decision (its pick, the pick's time and stock's configuration's),
    ``table_for`` profiles a configuration for time, ``energy_for`` measures energy of the named
    candidates into its table; all run on the configuration's device (the caller's concern)."""
    _DECISIONS.clear()
    fastest = {spec: fastest_for(spec, deterministic, allow_tf32)
               for spec, deterministic, allow_tf32, _ in progress(configurations)}
    order = sorted(configurations, key=lambda c: -(fastest[c[0]].stock_ms or 0.0))
    spent, warmed = 0.0, False
    entries: dict[ConvSpec, PlanEntry] = {}
    decisions: dict[ConvSpec, EnergyDecision] = {}
    for spec, deterministic, allow_tf32, _ in order:
        if spent >= energy_budget_s:
            entries[spec], decisions[spec] = _time_as_proxy(
                spec, fastest[spec], time_guard, f"not measured: the energy budget of {energy_budget_s:g} s was spent")
            continue
        started = clock()
        table = table_for(spec, deterministic, allow_tf32)
        spent += clock() - started
        values = candidates_within_guard(table, time_guard, deterministic, allow_tf32, workspace_limit)
        if not values:
            stock = table.stock
            why = "stock's time unknown" if stock is None or stock.time_ms is None else \
                f"no candidate within the time guard ({time_guard * 100:g}% of stock's time) in the profile"
            entries[spec], decisions[spec] = _time_as_proxy(spec, fastest[spec], time_guard, why)
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
        if pick is None:
            why = (f"no candidate within the time guard saves more than "
                   f"{max(LOWEST_ENERGY_MIN_SAVING, resolution or 0.0) * 100:.1f}% (the minimum saving, or the "
                   "A/A spread)")
            entries[spec], decisions[spec] = _time_as_proxy(spec, fastest[spec], time_guard, why, measured,
                                                            resolution, tuple(values), seconds)
        else:
            stock_ms = stock.time_ms if stock is not None else None
            stock_j = stock.energy_j if stock is not None else None
            decisions[spec] = EnergyDecision(str(spec), pick.value, "the least energy within the time guard",
                                             stock_ms, pick.time_ms, stock_j, pick.energy_j, pick.energy_vs_stock,
                                             resolution, tuple(values), seconds)
            entries[spec] = PlanEntry(pick.value, pick.time_ms, stock_ms, pick.workspace, pick.energy_j)
    _DECISIONS.extend(decisions[spec] for spec, *_ in configurations)
    by_energy = sum(1 for d in _DECISIONS if d.energy_vs_stock is not None)
    by_time = sum(1 for d in _DECISIONS if d.choice is not None and d.energy_vs_stock is None)
    measured_count = sum(1 for d in _DECISIONS if d.measured)
    logger.info("lowest_energy: energy measured on %d of %d configurations, %.0f s of time profiles and energy "
                "(budget %g s, time guard %g%%); %d run a candidate measured to save energy, %d the fastest pick, "
                "the others stock's path", measured_count, len(configurations), spent, energy_budget_s,
                time_guard * 100, by_energy, by_time)
    return {spec: entries[spec] for spec, *_ in configurations}
