"""CPU: the energy benchmark (benchmarks/energy.py, benchmarks/harness/energy.py): its summary
of a network's result (ratios per round, A/A, best trade within the time guard), its table,
its options and the merge of one network per call."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import energy  # noqa: E402


def spread(median: float, low: float, high: float, n: int = 3) -> dict:
    return {"median": median, "min": low, "max": high, "n": n}


def result() -> dict:
    return {
        "time_guard": 0.02,
        "gpu_ms": {"stock": [10.0, 10.1, 10.0], "fastest": [9.8, 9.9, 9.8], "lowest_energy": [10.1, 10.2, 10.1],
                   "stock (A/A)": [10.0, 10.0, 10.1]},
        "energy": {"aa": spread(1.002, 0.995, 1.008), "warmup": {"stopped": "steady: +0 °C over the last 10 s"},
                   "modes": {"stock": {"j_per_call": spread(9.2, 9.1, 9.3), "vs_reference": spread(1, 1, 1),
                                       "counter_vs_power": spread(1.01, 1.0, 1.02)},
                             "fastest": {"j_per_call": spread(9.1, 9.0, 9.2), "vs_reference": spread(0.99, 0.98, 1.0),
                                         "counter_vs_power": spread(1.01, 1.0, 1.02)},
                             "lowest_energy": {"j_per_call": spread(8.7, 8.6, 8.8),
                                               "vs_reference": spread(0.945, 0.94, 0.95),
                                               "counter_vs_power": spread(1.0, 0.99, 1.01)},
                             "stock (A/A)": {"j_per_call": spread(9.21, 9.1, 9.3),
                                             "vs_reference": spread(1.002, 0.995, 1.008),
                                             "counter_vs_power": spread(1.01, 1.0, 1.02)}}},
        "tuning": {"lowest_energy": {"seconds": 95.0, "not_stock": 4, "decisions": [
            {"configuration": "conv2d a fwd", "choice": "eng1", "energy_vs_stock": 0.9, "resolution": 0.01,
             "time_ms": 0.5, "stock_ms": 0.5, "measured": ["eng1"]},
            {"configuration": "conv2d b fwd", "choice": None, "energy_vs_stock": None, "resolution": None,
             "time_ms": 0.2, "stock_ms": 0.2, "measured": []}]}},
    }


def test_summary_compares_each_mode_with_stock_per_round_and_finds_the_best_trade() -> None:
    summary = energy.summarize(result())
    rows = summary["rows"]
    assert list(rows) == ["stock", "fastest", "lowest_energy", "stock (A/A)"]
    assert rows["fastest"]["gpu_vs_stock"]["median"] == pytest.approx(0.98)
    assert rows["lowest_energy"]["gpu_vs_stock"]["median"] == pytest.approx(1.01)
    assert rows["stock"]["gpu_vs_stock"] is None and rows["stock"]["j_vs_stock"] is None
    # lowest_energy is 1% slower (within the 2% guard) and 5.5% more frugal: the best trade.
    assert summary["best_trade"] == {"mode": "lowest_energy", "energy": 0.945, "time": pytest.approx(1.01)}
    assert summary["aa_gpu"]["median"] == pytest.approx(1.0)
    assert (summary["configurations_measured"], summary["configurations"]) == (1, 2)
    assert [d["choice"] for d in summary["per_convolution_best"]] == ["eng1"]


def test_a_mode_slower_than_the_guard_is_no_trade() -> None:
    slow = result()
    slow["gpu_ms"]["lowest_energy"] = [10.5, 10.6, 10.5]
    assert energy.summarize(slow)["best_trade"]["mode"] == "fastest"


def test_the_table_shows_every_mode_the_aa_and_the_trade() -> None:
    report = {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "cudnn": "9.19.0", "date": "2026-12-01",
              "argv": ["--networks mobilenet_v3_large"],
              "networks": {"mobilenet_v3_large": result(), "resnet50_amp": {"error": "timed out after 580 s"}}}
    text = energy.render(report)
    for needle in ("## mobilenet_v3_large", "| stock (A/A) |", "| lowest_energy | 10.100 (10.100–10.200) |",
                   "A/A spread of J/step: ±0.8%", "`lowest_energy`, 0.945x stock's energy at 1.010x its GPU time",
                   "energy measured on 1 of 2 configurations", "- conv2d a fwd: `eng1` 0.900x stock's J/call",
                   "## resnet50_amp", "not measured: timed out after 580 s",
                   "`python benchmarks/energy.py --networks mobilenet_v3_large`"):
        assert needle in text, needle


def test_the_child_gets_the_parents_settings() -> None:
    parser = energy.build_parser()
    args = parser.parse_args(["--networks", "resnet50_amp", "--window-s", "1.5", "--rounds", "4",
                              "--tune-energy-budget-s", "90"])
    again = parser.parse_args(["--child", "resnet50_amp", *energy.settings_argv(args)])
    for name in ("window_s", "rounds", "warmup_max_s", "repeats", "replays", "time_guard", "tune_energy_budget_s",
                 "tune_window_s"):
        assert getattr(again, name) == getattr(args, name), name


@pytest.mark.parametrize(("argv", "message"), [(["--networks", "lenet"], "unknown ['lenet']"),
                                               (["--window-s", "0"], "--window-s must be > 0"),
                                               (["--rounds", "0"], "--rounds must be >= 1"),
                                               (["--time-guard", "-1"], "--time-guard and")])
def test_bad_options_are_errors(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit):
        energy.main(argv)
    assert message in capsys.readouterr().err


def test_render_only_needs_no_gpu(tmp_path: Path, capsys) -> None:
    path = tmp_path / "energy.json"
    path.write_text(json.dumps({"device": "d", "torch": "t", "cudnn": "c", "date": "x", "argv": [],
                                "networks": {"resnet50_amp": result()}}))
    assert energy.main(["--render", str(path)]) == 0
    assert "## resnet50_amp" in capsys.readouterr().out
