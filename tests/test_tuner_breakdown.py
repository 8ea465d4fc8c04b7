"""CPU: benchmarks/tuner_breakdown.py adds up a tuning log's breakdown (the fields
fastest_tuner.cpp writes) and renders its JSONL records as a table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import tuner_breakdown  # noqa: E402


def entry(pick, stock, stock_rtc, build_s, **phases):
    time_s = dict.fromkeys(tuner_breakdown.PHASES, 0.0)
    time_s.update(phases)
    configs = [{"config": stock, "rank": 0, "rtc": stock_rtc, "build_s": build_s[0], "cached": False,
                "runnable": True, "warmup_ms": 0.1, "ms": 1.0},
               {"config": "eng9_k2=1", "rank": 1, "rtc": False, "build_s": build_s[1], "cached": False,
                "runnable": True, "warmup_ms": 0.1, "ms": 0.5},
               {"config": "eng16_k3=0", "rank": 2, "rtc": True, "build_s": None, "cached": False,
                "runnable": False, "warmup_ms": None, "ms": None}]
    return {"pick": pick, "stock_config": stock, "pick_ms": 0.5 if pick else None, "stock_config_ms": 1.0,
            "seconds": 2.0, "built": 2, "built_rtc": int(stock_rtc), "listed_rtc": 1 + stock_rtc,
            "deferred_rtc": 1, "time_s": time_s, "configs": configs}


LOG = [entry("eng9_k2=1", "eng1_k2=0", True, [0.5, 0.001], build=0.6, build_sum=0.501, timing=0.2),
       entry(None, "eng1_k2=0", False, [0.002, 0.001], build=0.01, build_sum=0.003, accuracy=0.1)]


def test_summarize_adds_up_phases_counts_and_builds() -> None:
    summary = tuner_breakdown.summarize(LOG)
    assert summary["build"] == pytest.approx(0.61) and summary["build_sum"] == pytest.approx(0.504)
    assert summary["timing"] == pytest.approx(0.2) and summary["accuracy"] == pytest.approx(0.1)
    assert summary["seconds"] == 4.0 and summary["built"] == 4 and summary["deferred_rtc"] == 2
    assert summary["stock_config_rtc"] == 1 and summary["rtc_build_sum"] == pytest.approx(0.5)
    assert summary["stock_config_build_sum"] == pytest.approx(0.502)
    assert summary["non_stock_picks"] == 1
    # A None pick is stock's own path: its time is stock's configuration's.
    assert summary["pick_ms_sum"] == pytest.approx(1.5) and summary["stock_config_ms_sum"] == 2.0


def test_summarize_renders_jsonl_records_as_a_table(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    record = {"network": "mobilenet_v3_large", "label": "k4", "mode": "tune", "configurations": 2,
              "tuning_s": 4.2, "log": LOG}
    path.write_text(json.dumps(record) + "\n")
    lines = tuner_breakdown.table([str(path)]).splitlines()
    assert len(lines) == 3 and lines[0].startswith("| network | label | mode |")
    assert lines[2].startswith("| mobilenet_v3_large | k4 | tune | 2 | 4.2 |")
    assert tuner_breakdown.main(["--summarize", str(path)]) == 0


def test_trade_replays_the_launch_cost_rules(tmp_path: Path) -> None:
    # Stock's configuration: 1 ms, 10 µs to launch (free allowance: up to 13 µs).
    # rank 1: 0.9 ms for 62 µs (49 µs beyond the allowance, 100 µs saved: within the 2x trade);
    # rank 2: 0.5 ms for 800 µs (500 µs saved: too little for 787 µs); rank 5: 0.95 ms, 12 µs.
    configs = [{"config": "s", "rank": 0, "ms": 1.0, "host_us": 10.0},
               {"config": "a", "rank": 1, "ms": 0.9, "host_us": 62.0},
               {"config": "b", "rank": 2, "ms": 0.5, "host_us": 800.0},
               {"config": "c", "rank": 5, "ms": 0.95, "host_us": 12.0},
               {"config": "unbuilt", "rank": 3, "ms": None, "host_us": None}]
    log_entry = {"stock_config": "s", "configs": configs}
    picks = {(first_round, rule): tuner_breakdown.replay_pick(log_entry, first_round, saved)["config"]
             for first_round in (4, None) for rule, saved in tuner_breakdown.TRADE_RULES.items()}
    assert picks == {(4, "gpu time alone"): "b", (4, "2x trade"): "a", (4, "no trade"): "s",
                     (None, "gpu time alone"): "b", (None, "2x trade"): "a", (None, "no trade"): "c"}
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"network": "n", "label": "x", "log": [log_entry]}) + "\n")
    rows = tuner_breakdown.trade_table([str(path)]).splitlines()[2:]
    assert rows[1] == "| n | x | 4 | 2x trade | 1.000 | 0.900 | 1.111 | +52 |"
    assert rows[5] == "| n | x | all timed | no trade | 1.000 | 0.950 | 1.053 | +2 |"
