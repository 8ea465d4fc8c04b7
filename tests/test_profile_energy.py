"""CPU: the profile table's energy columns (_profile_energy) on a simulated GPU: which candidates
are measured (time filter, at most N, or the ones named), stock as the reference with its A/A
twin, graph replays counted per call, and the rows and environment that come back."""

from __future__ import annotations

import functools

import pytest
from energy_fakes import FakeGpu, FakeTimeline

from torch_cudnn_algo import ProfileRow, ProfileTable, energy
from torch_cudnn_algo._profile_energy import EnergyRequest, measure_rows_energy, selected

SETTINGS = energy.EnergySettings(window_s=0.25, rounds=2, warmup=None, sample_period_s=0.002, counter_timeout_s=0.5)
WATTS = {None: 300.0, "eng1": 240.0, "eng2": 300.0, "eng3": 200.0, 0: 100.0}


def rows() -> list[ProfileRow]:
    return [ProfileRow(None, "stock", "ok", 1.0), ProfileRow("eng1", "h", "ok", 1.05),
            ProfileRow("eng2", "h", "ok", 0.98), ProfileRow("eng3", "h", "ok", 1.5),
            ProfileRow(0, "IMPLICIT_GEMM", "ok", 1.08), ProfileRow("eng9", "h", "unsupported: no")]


def test_selection_filters_by_time_and_count_fastest_first() -> None:
    reference, chosen = selected(rows(), EnergyRequest(SETTINGS, within=0.10, candidates=6))
    assert reference.value is None and [r.value for r in chosen] == ["eng2", "eng1", 0]
    _, chosen = selected(rows(), EnergyRequest(SETTINGS, within=0.10, candidates=2))
    assert [r.value for r in chosen] == ["eng2", "eng1"]
    _, chosen = selected(rows(), EnergyRequest(SETTINGS, within=None, candidates=6))
    assert [r.value for r in chosen] == ["eng2", "eng1", 0, "eng3"]
    _, chosen = selected(rows(), EnergyRequest(SETTINGS, values=("eng3",)))
    assert [r.value for r in chosen] == ["eng3"]
    no_stock = [r for r in rows() if r.value is not None]
    reference, chosen = selected(no_stock, EnergyRequest(SETTINGS, within=0.10))
    assert reference.value == "eng2" and [r.value for r in chosen] == ["eng1"]


@pytest.mark.parametrize(("bad", "message"), [({"within": -1}, "energy_within must be a fraction >= 0"),
                                              ({"candidates": 0}, "energy_candidates must be an integer >= 1"),
                                              ({"settings": 3}, "must be an EnergySettings")])
def test_bad_requests_say_what_is_valid(bad: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EnergyRequest(**bad)


def test_rows_get_energy_with_spread_and_ratio_to_stock_per_call_of_the_replays() -> None:
    gpu = FakeGpu()
    power: dict = {}
    replays: list[int] = []

    def run_of(row: ProfileRow):
        run = gpu.mode(WATTS[row.value], 0.001)
        power[run] = WATTS[row.value]
        return run

    def replay(run, calls: int):
        # A fake graph replay: ``calls`` calls of 1 ms at the candidate's power in one run.
        replays.append(calls)
        return gpu.mode(power[run], 0.001 * calls), None

    measure = functools.partial(energy.measure, meter=gpu, timeline=FakeTimeline())
    updated, info = measure_rows_energy(rows(), run_of, EnergyRequest(SETTINGS, within=0.10), replay=replay,
                                        measure=measure)
    table = ProfileTable("fwd", "conv", "float16", updated, {"energy_measure": info})
    stock, frugal, same = table.row(None), table.row("eng1"), table.row("eng2")
    assert stock.energy_j is not None and stock.energy_vs_stock is None
    assert frugal.energy_min_j <= frugal.energy_j <= frugal.energy_max_j
    assert frugal.energy_vs_stock == pytest.approx(0.8, rel=0.08)
    assert same.energy_vs_stock == pytest.approx(1.0, abs=0.08)
    assert table.row("eng3").energy_j is None  # 1.5x stock's time: not measured
    # calls_per_replay: 2 calls of stock's 1.0 ms, 3 of eng2's 0.98 ms; energy is per call, not per replay.
    assert sorted(replays) == [2, 2, 2, 3]
    assert stock.energy_j == pytest.approx(300.0 * 0.001, rel=0.15)
    assert info["reference"] == "stock" and info["measured"] == ["stock", "eng2", "eng1", "0"]
    assert info["methods"]["eng1"] == "CUDA graph of 2 calls" and "A/A" in info["summary"]
    assert info["resolution"] is not None and str(table).splitlines()[-1].startswith("energy: NVML")


def test_a_candidate_that_cannot_be_captured_is_measured_eagerly_and_says_why() -> None:
    gpu = FakeGpu()
    measure = functools.partial(energy.measure, meter=gpu, timeline=FakeTimeline())
    updated, info = measure_rows_energy(
        rows(), lambda row: gpu.mode(WATTS[row.value], 0.001), EnergyRequest(SETTINGS, within=0.0),
        replay=lambda run, calls: (None, "CUDA graph capture failed (RuntimeError: no)"), measure=measure)
    assert info["measured"] == ["stock", "eng2"]
    assert info["methods"]["eng2"].startswith("eager calls: CUDA graph capture failed")
    assert next(r for r in updated if r.value == "eng2").energy_j == pytest.approx(0.3, rel=0.15)
