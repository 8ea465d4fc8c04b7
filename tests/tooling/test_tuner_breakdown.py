"""CPU: the tuner breakdown (benchmarks/tuner_breakdown.py, benchmarks/harness/tuner.py) adds up a tuning log's breakdown (the fields
fastest_tuner.cpp writes) and renders its JSONL records as a table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import roofline  # noqa: E402
from harness import tuner as tuner_breakdown  # noqa: E402


def entry(pick, stock, stock_rtc, build_s, **phases):
    time_s = dict.fromkeys(tuner_breakdown.PHASES, 0.0)
    time_s.update(phases)
    configs = [{"config": stock, "rank": 0, "rtc": stock_rtc, "build_s": build_s[0], "cached": False,
                "runnable": True, "warmup_ms": 0.1, "ms": 1.0},
               {"config": "eng9_k2=1", "rank": 1, "rtc": False, "build_s": build_s[1], "cached": False,
                "runnable": True, "warmup_ms": 0.1, "ms": 0.5},
               {"config": "eng16_k3=0", "rank": 2, "rtc": True, "build_s": None, "cached": False,
                "runnable": False, "warmup_ms": None, "ms": None},
               {"config": "eng71_k2=3", "rank": 7, "rtc": False, "build_s": 0.04, "cached": False, "extra": True,
                "probe": "far", "runnable": True, "warmup_ms": 0.2, "ms": 4.0},
               {"config": "eng70", "rank": 8, "rtc": False, "build_s": 0.03, "cached": False, "extra": True,
                "probe": "near", "runnable": True, "warmup_ms": 0.2, "ms": 0.6},
               {"config": "tca.direct", "rank": 9, "rtc": False, "build_s": 0.0, "cached": False,
                "runnable": True, "warmup_ms": 3.0, "ms": 2.5}]
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
    # The wide search's extras and our own kernel, over both entries.
    assert summary["extras"] == 4 and summary["extras_near"] == 2
    assert summary["extra_build_sum"] == pytest.approx(0.14)
    assert summary["own_kernel_runnable"] == 2 and summary["own_kernel_picks"] == 0
    assert summary["own_kernel_warmup_ms_sum"] == pytest.approx(6.0) and summary["own_kernel_ms_sum"] == 5.0


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


CONV = ("conv2d: input [64, 64, 56, 56] torch.float16 channels_last, weight [64, 64, 3, 3], output [64, 64, 56, 56], "
        "stride [1, 1], padding [1, 1], dilation [1, 1], groups 1, allow_tf32=False, deterministic=False, device cuda:0")


def test_conv_bound_is_the_roofline_of_the_three_tensors_and_the_multiply_adds() -> None:

    bound = roofline.conv_bound(CONV)
    assert bound.flops == 2 * (64 * 64 * 56 * 56) * (64 * 9)
    assert bound.bytes == (2 * 64 * 64 * 56 * 56 + 64 * 64 * 9) * 2
    # 51.5 MB at 3.35 TB/s (15.4 µs) is slower than 14.8 GFLOP at 989.4 TFLOP/s (15.0 µs).
    assert bound.memory_bound and bound.bound_ms == pytest.approx(bound.bytes / 3.35e12 * 1e3)
    assert bound.tflops(0.03) == pytest.approx(bound.flops / 0.03e-3 / 1e12)
    # fp32: TF32 tensor cores when allowed, else the FP32 units; a 1x1 conv with many channels is compute-bound.
    wide = ("conv2d: input [256, 1024, 14, 14] torch.float32 contiguous, weight [1024, 1024, 1, 1], "
            "output [256, 1024, 14, 14], stride [1, 1], padding [0, 0], dilation [1, 1], groups 1, allow_tf32={}, "
            "deterministic=False, device cuda:0")
    tf32, fp32 = roofline.conv_bound(wide.format("True")), roofline.conv_bound(wide.format("False"))
    assert (tf32.peak_tflops, fp32.peak_tflops) == (494.7, 66.9)
    assert not fp32.memory_bound and fp32.bound_ms == pytest.approx(fp32.flops / 66.9e12 * 1e3)
    # A transposed convolution's multiply-adds follow its (smaller) input: the cuDNN problem's output.
    transposed = roofline.conv_bound(
        "conv_transpose2d: input [8, 512, 1, 4001] torch.float16 contiguous, weight [512, 1, 1, 16], "
        "output [8, 1, 1, 32000], stride [1, 8], padding [0, 8], output_padding [0, 0], dilation [1, 1], "
        "groups 1, allow_tf32=False, deterministic=False, device cuda:0")
    assert transposed.flops == 2 * (8 * 512 * 4001) * 16
    with pytest.raises(ValueError, match="not a convolution description"):
        roofline.conv_bound("linear: input [4, 4]")


def test_ceiling_sets_stock_and_the_best_timed_against_the_bound(tmp_path: Path) -> None:
    configs = [{"config": "s", "rank": 0, "ms": 0.060}, {"config": "a", "rank": 1, "ms": 0.045},
               {"config": "unbuilt", "rank": 2, "ms": None}]
    log_entry = {"direction": "bwd_filter", "conv": CONV, "stock_config": "s", "stock_config_ms": 0.060,
                 "pick_ms": 0.045, "configs": configs}
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"network": "n", "label": "x", "log": [log_entry]}) + "\n")
    lines = tuner_breakdown.ceiling_table([str(path)]).splitlines()
    assert lines[2] == "| n | x | 1 | 0.060 | 0.045 | 0.015 | 1.333 | 2.93 |"
    row = lines[-1]
    assert row.startswith("| bwd_filter | conv2d: input [64, 64, 56, 56] float16 channels_last, weight [64, 64, 3, 3]")
    # 14.8 GFLOP in 45 µs: 329 TFLOP/s, 33% of 989.4; 51.5 MB in 45 µs: 1.14 TB/s, 34% of 3.35.
    assert row.endswith("| 0.060 | 0.045 | 1.33 | 0.015 | 2.9 | 329 (33%) | 1.14 (34%) | memory |"), row
    assert tuner_breakdown.main(["--ceiling", str(path)]) == 0
