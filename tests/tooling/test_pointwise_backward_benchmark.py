"""CPU tests of the fused 1x1 backward benchmark (benchmarks/pointwise_backward.py,
benchmarks/harness/pointwise_backward.py): its layers, bounds, rendering and command-line errors.
The measuring itself shares fused_backward's checked runs (tested there)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import pointwise_backward  # noqa: E402
from harness.roofline import H200  # noqa: E402


def layer(fused: float | None, calls: dict) -> dict:
    record = {"label": "64x24x56x56 -> 72", "c_in": 24, "c_out": 72, "size": 56, "calls": calls, "tolerance": 0.01,
              "stock": {"time_ms": 0.04, "max_rel_error": [3e-4, 3e-4]},
              "bwd_data": {"cudnn_best": {"value": "eng1", "time_ms": 0.02}, "ours_ms": None},
              "bwd_filter": {"cudnn_best": {"value": "eng2", "time_ms": 0.016}, "ours_ms": None},
              "fused": None if fused is None else {"tile_pixels": 128, "blocks_per_sm": 2, "status": "ok", "time_ms": fused,
                                                   "max_rel_error": [2e-4, 3e-4]}}
    return pointwise_backward.with_bounds(record, H200)


def test_the_layers_are_the_two_networks_1x1_convolutions_once_each() -> None:
    keys = [(c_in, c_out, size) for c_in, c_out, size, _ in pointwise_backward.LAYERS]
    assert len(keys) == len(set(keys))
    assert all(size > 1 and calls for _, _, size, calls in pointwise_backward.LAYERS)
    networks = {network for *_, calls in pointwise_backward.LAYERS for network in calls}
    assert networks == {"mobilenet_v3_large", "efficientnet_b0"}


def test_bounds_read_dy_once_fused_and_twice_apart() -> None:
    bounds = pointwise_backward.bounds(24, 72, 56, H200)
    pixels = 64 * 56 * 56
    assert bounds["memory_ms"] == pytest.approx(2 * (2 * pixels * 24 + pixels * 72 + 2 * 24 * 72) / 4.8e9)
    assert bounds["separate_memory_ms"] - bounds["memory_ms"] == pytest.approx(2 * pixels * 72 / 4.8e9)


def test_the_table_gives_ratios_totals_and_a_dash_where_the_kernel_does_not_apply() -> None:
    report = {"environment": {"device": "NVIDIA H200", "torch": "2.11.0", "cudnn": "9.19.0"}, "date": "2026-11-28",
              "reps": 11, "layers": [layer(0.018, {"mobilenet_v3_large": 2}), layer(None, {"efficientnet_b0": 1})]}
    text = pointwise_backward.render(report)
    assert "| 64x24x56x56 -> 72 | mobilenet 2 | 0.040 | 0.036 | 0.018 (128 px, 2/SM) | 2.00 |" in text
    assert "| 64x24x56x56 -> 72 | efficientnet 1 | 0.040 | 0.036 | - | — |" in text
    assert "1 of 1 layers it applies to faster, 1 at least 1.5x; median 2.00x" in text
    assert "| mobilenet_v3_large | 0.080 | 0.072 | 0.036 | 0.036 |" in text
    assert "| efficientnet_b0 | 0.040 | 0.036 | 0.036 | 0.000 |" in text


def test_reps_below_one_are_refused() -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "pointwise_backward.py"), "--reps", "0"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--reps must be at least 1, got 0" in done.stderr


def test_the_forward_table_compares_ours_with_the_faster_of_cudnn_and_tca_direct() -> None:
    measured = layer(0.018, {"mobilenet_v3_large": 2})
    measured["forward"] = {"stock": {"time_ms": 0.03, "max_rel_error": [3e-4]},
                           "fwd": {"cudnn_best": {"value": "eng0", "time_ms": 0.025}, "ours_ms": 0.02},
                           "fused": {"tile_pixels": 64, "blocks_per_sm": 4, "status": "ok", "time_ms": 0.01,
                                     "max_rel_error": [2e-4]},
                           "fused_choices": 8, "fused_failures": []}
    unmeasured = layer(None, {"efficientnet_b0": 1})
    report = {"environment": {"device": "NVIDIA H200", "torch": "2.11.0", "cudnn": "9.19.0"}, "date": "2026-11-28",
              "reps": 11, "layers": [measured, unmeasured]}
    text = pointwise_backward.render(report)
    bound = pointwise_backward.bounds(24, 72, 56, H200)["forward_memory_ms"]
    assert "## The forward pass" in text
    assert (f"| 64x24x56x56 -> 72 | mobilenet 2 | 0.030 | 0.020 | 0.010 (64 px, 4/SM) | 2.00 | {bound:.4f} | "
            f"{0.01 / bound:.1f} | 2.0e-04 |") in text
    assert "| mobilenet_v3_large | 0.060 | 0.040 | 0.020 | 0.020 |" in text
    assert "efficientnet_b0 | 0.0" not in text.split("## The forward pass")[1]


@pytest.mark.parametrize(("text", "message"), [("3", "takes FIRST:END"), ("a:b", "takes FIRST:END"),
                                               ("40:50", "names none of the 34 layers")])
def test_a_layer_range_that_names_no_layer_is_refused(text: str, message: str) -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "pointwise_backward.py"), "--layers", text],
                          capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr


def test_a_layer_range_picks_its_slice() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    assert pointwise_backward.layer_range(parser, "") == pointwise_backward.LAYERS
    assert pointwise_backward.layer_range(parser, ":2") == pointwise_backward.LAYERS[:2]
    assert pointwise_backward.layer_range(parser, "30:") == pointwise_backward.LAYERS[30:]
