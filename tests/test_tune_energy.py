"""CPU: tune(policy="lowest_energy")'s decisions (_tune_energy) on synthetic profile tables:
energy measured only for candidates within the time guard, longest configurations first (by stock's
time) until the budget is spent, time profiles counted in it, one warm-up then pre-rolls, and the
"fastest" pick within the guard (else stock's path) wherever no saving is resolved."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest

import torch_cudnn_algo
from torch_cudnn_algo import ConvSpec, ProfileRow, ProfileTable
from torch_cudnn_algo._energy import PRE_ROLL
from torch_cudnn_algo._plan import PlanEntry
from torch_cudnn_algo._tune_energy import TUNE_ENERGY, candidates_within_guard, decide_lowest_energy, \
    energy_decisions

LONG = ConvSpec.parse("conv2d 64x256x56x56 -> 256x3x3 s1 p1 fp16 channels_last fwd")
MIDDLE = ConvSpec.parse("conv2d 64x128x28x28 -> 128x3x3 s1 p1 fp16 channels_last fwd")
SHORT = ConvSpec.parse("conv2d 64x64x14x14 -> 64x1x1 s1 p0 fp16 channels_last fwd")


def row(value, time_ms: float, error: float = 1e-4) -> ProfileRow:
    return ProfileRow(value, "stock" if value is None else "heuristics_a", "ok", time_ms, 0, True, (), error)


TABLES = {
    LONG: [row(None, 2.0), row("eng1", 2.02), row("eng2", 1.9), row("eng3", 3.0)],
    MIDDLE: [row(None, 1.0), row("eng4", 1.5)],  # nothing within the guard
    SHORT: [row(None, 0.5), row("eng5", 0.5)],
}
# What energy_for measures: J/call over stock's per candidate, and the A/A spread.
RATIOS = {"eng1": 0.90, "eng2": 0.98, "eng3": 1.10, "eng4": 0.85, "eng5": 0.80}


def table_for(spec, deterministic, allow_tf32) -> ProfileTable:
    return ProfileTable(spec.direction, str(spec), "float16", list(TABLES[spec]))


def stock_time_for(spec, deterministic, allow_tf32) -> float:
    return next(r.time_ms for r in TABLES[spec] if r.value is None)


# The "fastest" tuner's decisions: LONG's pick eng2 (1.9 ms, measured at 0.98x: no resolved saving),
# MIDDLE's pick outside the 2% guard, SHORT's eng5.
FASTEST = {LONG: ("eng2", 1.9), MIDDLE: ("eng4", 1.5), SHORT: ("eng5", 0.495)}


def fastest_for(spec, deterministic, allow_tf32) -> PlanEntry:
    choice, time_ms = FASTEST[spec]
    return PlanEntry(choice, time_ms, stock_time_for(spec, deterministic, allow_tf32), 0)


class Recorder:
    def __init__(self, seconds: float = 10.0, resolution: float = 0.01, ratios: dict | None = None) -> None:
        self.calls: list[tuple[ConvSpec, tuple, object]] = []
        self.now, self.seconds, self.resolution = 0.0, seconds, resolution
        self.ratios = RATIOS if ratios is None else ratios

    def clock(self) -> float:
        return self.now

    def energy_for(self, spec, table, values, settings, allow_tf32, deterministic) -> ProfileTable:
        self.calls.append((spec, tuple(values), settings.warmup))
        self.now += self.seconds
        rows = [dataclasses.replace(r, energy_j=1.0) if r.value is None else
                dataclasses.replace(r, energy_j=self.ratios[r.value], energy_vs_stock=self.ratios[r.value])
                if r.value in values else r for r in table.rows]
        return ProfileTable(table.direction, table.convolution, table.dtype, rows,
                            {"energy_measure": {"resolution": self.resolution, "summary": "fake"}})


def configurations():
    return [(SHORT, False, True, 0), (LONG, False, True, 0), (MIDDLE, False, True, 0)]


def test_measures_only_candidates_within_the_guard_longest_configuration_first() -> None:
    recorder = Recorder()
    entries = decide_lowest_energy(configurations(), fastest_for, table_for, recorder.energy_for, time_guard=0.02,
                                   energy_budget_s=100.0, clock=recorder.clock)
    assert [(spec, values) for spec, values, _ in recorder.calls] == [(LONG, ("eng2", "eng1")), (SHORT, ("eng5",))]
    # One warm-up to a steady temperature, then a pre-roll before each later configuration.
    assert [warmup for *_, warmup in recorder.calls] == [TUNE_ENERGY.warmup, PRE_ROLL]
    assert list(entries) == [SHORT, LONG, MIDDLE]  # the plan keeps the model's order
    assert entries[LONG].choice == "eng1" and entries[LONG].energy_j == 0.90 and entries[LONG].stock_ms == 2.0
    assert entries[SHORT].choice == "eng5"
    assert entries[MIDDLE].choice is None
    decisions = {d.configuration: d for d in energy_decisions()}
    assert "no candidate within the time guard (2%" in decisions[str(MIDDLE)].reason
    assert decisions[str(LONG)].energy_vs_stock == 0.90 and decisions[str(LONG)].measured == ("eng2", "eng1")


def test_a_wider_guard_admits_slower_candidates() -> None:
    recorder = Recorder()
    decide_lowest_energy(configurations(), fastest_for, table_for, recorder.energy_for, time_guard=0.6,
                         energy_budget_s=100.0, clock=recorder.clock)
    assert (MIDDLE, ("eng4",)) in [(spec, values) for spec, values, _ in recorder.calls]


def test_when_the_budget_is_spent_the_rest_run_the_fastest_pick_within_the_guard() -> None:
    recorder = Recorder(seconds=10.0)
    entries = decide_lowest_energy(configurations(), fastest_for, table_for, recorder.energy_for, time_guard=0.02,
                                   energy_budget_s=5.0, clock=recorder.clock)
    assert [spec for spec, *_ in recorder.calls] == [LONG]
    # SHORT: not measured, its fastest pick (0.495 ms against stock's 0.5) runs, with no energy
    # claimed; MIDDLE: its fastest pick is 50% slower than stock's, outside the guard.
    assert entries[SHORT].choice == "eng5" and entries[SHORT].time_ms == 0.495 and entries[SHORT].energy_j is None
    assert entries[MIDDLE].choice is None and entries[MIDDLE].time_ms == 1.0
    decisions = {d.configuration: d for d in energy_decisions()}
    assert decisions[str(SHORT)].reason.startswith("not measured: the energy budget of 5 s was spent; the fastest pick")
    assert decisions[str(SHORT)].energy_vs_stock is None
    assert "the fastest pick is outside the time guard: stock's path" in decisions[str(MIDDLE)].reason


def test_time_profiles_count_towards_the_budget_and_are_made_only_within_it() -> None:
    recorder = Recorder(seconds=1.0)
    profiled = []

    def slow_table_for(spec, deterministic, allow_tf32) -> ProfileTable:
        profiled.append(spec)
        recorder.now += 10.0  # a profile table: every engine configuration built and timed
        return table_for(spec, deterministic, allow_tf32)

    entries = decide_lowest_energy(configurations(), fastest_for, slow_table_for, recorder.energy_for,
                                   time_guard=0.02, energy_budget_s=10.5, clock=recorder.clock)
    # LONG (stock 2 ms) is profiled (10 s) and measured (1 s); SHORT and MIDDLE are not even profiled.
    assert profiled == [LONG] and [spec for spec, *_ in recorder.calls] == [LONG]
    assert entries[LONG].choice == "eng1"
    assert entries[MIDDLE].choice is None and entries[MIDDLE].stock_ms == 1.0
    reasons = {d.configuration: d.reason for d in energy_decisions()}
    assert reasons[str(MIDDLE)].startswith("not measured: the energy budget of 10.5 s was spent")


def test_tune_orders_by_the_fastest_tuners_stock_time_and_profiles_in_that_order(monkeypatch) -> None:
    from torch_cudnn_algo import _tune
    from torch_cudnn_algo._plan import Plan, PlanEntry

    asked, profiled = [], []
    recorder = Recorder()

    def fastest(spec, deterministic, allow_tf32, retune):
        asked.append((spec, retune))
        return PlanEntry("eng9", 0.1, stock_time_for(spec, deterministic, allow_tf32))

    def profile(spec, **options):
        profiled.append(spec)
        return table_for(spec, options["deterministic"], options["allow_tf32"])

    def measure_table_energy(spec, table, values, settings, *, allow_tf32, deterministic):
        return recorder.energy_for(spec, table, values, settings, allow_tf32, deterministic)

    monkeypatch.setattr(_tune.torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(_tune, "_decide_fastest", fastest)
    monkeypatch.setattr(_tune, "profile", profile)
    monkeypatch.setattr(_tune, "measure_table_energy", measure_table_energy)
    plan = Plan(policy="lowest_energy")
    _tune._decide_lowest_energy(configurations(), plan, progress=False, execution_plans=False, time_guard=0.02,
                                energy_budget_s=100.0, settings=TUNE_ENERGY)
    # Stock's time from the "fastest" tuner (its kept decisions reused, never retuned), then the
    # profiles in the order of that time, the longest first.
    assert asked == [(SHORT, False), (LONG, False), (MIDDLE, False)]
    assert profiled == [LONG, MIDDLE, SHORT]
    assert plan[LONG].choice == "eng1" and plan[SHORT].choice == "eng5"
    assert plan[MIDDLE].choice == "eng9"  # nothing within the guard in its profile: the fastest pick


def test_a_saving_inside_the_aa_spread_runs_the_fastest_pick() -> None:
    recorder = Recorder(resolution=0.25)  # the A/A control spread 25%: 10% and 20% savings are noise
    entries = decide_lowest_energy(configurations(), fastest_for, table_for, recorder.energy_for, time_guard=0.02,
                                   energy_budget_s=100.0, clock=recorder.clock)
    assert entries[LONG].choice == "eng2" and entries[LONG].energy_j is None  # eng1's 10% saving is not resolved
    assert entries[SHORT].choice == "eng5" and entries[MIDDLE].choice is None
    long = energy_decisions()[1]
    assert "25.0% (the minimum saving, or the A/A spread); the fastest pick" in long.reason
    assert long.energy_vs_stock is None and long.measured == ("eng2", "eng1")


def test_a_fastest_pick_measured_to_cost_more_energy_keeps_stocks_path() -> None:
    # eng2, LONG's fastest pick, costs 5% more energy per call than stock's configuration (beyond
    # the 1% A/A spread); eng1 saves less than the minimum saving.
    recorder = Recorder(ratios={**RATIOS, "eng1": 0.995, "eng2": 1.05})
    entries = decide_lowest_energy(configurations(), fastest_for, table_for, recorder.energy_for, time_guard=0.02,
                                   energy_budget_s=100.0, clock=recorder.clock)
    assert entries[LONG].choice is None and entries[LONG].time_ms == 2.0
    long = energy_decisions()[1]
    assert "the fastest pick was measured to cost more energy than stock's configuration: stock's path" in long.reason


def test_candidates_within_guard_apply_the_policy_rules() -> None:
    table = ProfileTable("fwd", "conv", "float16", [row(None, 1.0), row("eng1", 1.01), row("eng2", 0.9),
                                                    row("eng3", 0.95, error=1.0)])
    assert candidates_within_guard(table, 0.02, False, True, None) == ["eng2", "eng1"]  # eng3: inaccurate
    no_stock = ProfileTable("fwd", "conv", "float16", [row("eng1", 1.0)])
    assert candidates_within_guard(no_stock, 0.02, False, True, None) == []


@pytest.mark.parametrize(("kwargs", "message"), [({"time_guard": -0.1}, "time_guard must be a fraction >= 0"),
                                                 ({"energy_budget_s": -1}, "energy_budget_s must be a number"),
                                                 ({"energy_settings": 5}, "energy_settings must be an EnergySettings")])
def test_tune_rejects_bad_energy_arguments(kwargs: dict, message: str) -> None:
    import torch

    with pytest.raises(ValueError, match=message):
        torch_cudnn_algo.tune(torch.nn.Conv2d(3, 3, 3), (torch.zeros(1, 3, 8, 8),), policy="lowest_energy", **kwargs)
