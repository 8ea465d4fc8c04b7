"""CPU tests of the one-launch floor benchmark (benchmarks/backward_floor.py,
benchmarks/harness/backward_floor.py): its layers, per-network totals, table and command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import backward_floor  # noqa: E402


def record(label: str, calls: dict, stock: float, floor: float, kernels: float = 3.0) -> dict:
    return {"kind": "1x1", "label": label, "calls": calls, "stock_us": stock, "floor_us": floor,
            "kernels_per_call": kernels, "kernel_us_per_call": stock - 1.0}


def report() -> dict:
    return {"environment": {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "cudnn": "9.19.0"},
            "date": "2026-11-29", "reps": 9,
            "layers": [record("se 1152 -> 48", {"efficientnet_b0": 4}, 10.0, 2.0),
                       record("1x1 80 -> 480, 14x14", {"efficientnet_b0": 3, "mobilenet_v3_large": 1}, 20.0, 2.5, 2),
                       {"kind": "depthwise", "label": "dw 16", "calls": {"mobilenet_v3_large": 1},
                        "error": "RuntimeError: boom"}]}


def test_every_convolution_of_both_networks_once_with_its_calls() -> None:
    layers = backward_floor.layers()
    labels = [layer["label"] for layer in layers]
    assert len(labels) == len(set(labels))
    kinds = {layer["kind"] for layer in layers}
    assert kinds == {"squeeze-excitation", "1x1", "depthwise"}
    assert all(layer["calls"] for layer in layers)
    assert all(layer["bias"] == (layer["kind"] == "squeeze-excitation") for layer in layers)
    se = [layer for layer in layers if layer["kind"] == "squeeze-excitation"]
    assert all(layer["input"][2:] == [1, 1] for layer in se)
    # Each squeeze-and-excitation block has a squeeze and an excitation, called alike.
    pairs = {(layer["weight"][1], layer["weight"][0]): layer["calls"] for layer in se}
    assert all(pairs[(c_out, c_in)] == calls for (c_in, c_out), calls in pairs.items())


def test_totals_weight_each_layer_by_its_calls_and_skip_failed_layers() -> None:
    totals = backward_floor.network_totals(report())
    assert totals["efficientnet_b0"] == {"calls": 7, "stock_us": 100.0, "floor_us": 15.5, "kernels": 18.0}
    assert totals["mobilenet_v3_large"] == {"calls": 1, "stock_us": 20.0, "floor_us": 2.5, "kernels": 2.0}


def test_the_table_and_the_totals_render_and_a_failed_layer_stays_visible() -> None:
    markdown = backward_floor.render(report())
    assert "| se 1152 -> 48 | 1x1 | efficientnet 4 | 10.0 | 3 | 9.0 | 2.0 | 8.0 |" in markdown
    assert "| dw 16 | depthwise | mobilenet 1 | error: RuntimeError: boom |" in markdown
    assert "| efficientnet_b0 | 7 | 18 | 0.100 | 0.015 | 0.085 |" in markdown


def test_render_prints_a_saved_result_and_bad_reps_are_refused(tmp_path: Path) -> None:
    saved = tmp_path / "backward-floor-h200-2026-11-29.json"
    saved.write_text(json.dumps(report()))
    script = str(BENCHMARKS / "backward_floor.py")
    done = subprocess.run([sys.executable, script, "--render", str(saved)], capture_output=True, text=True, check=True)
    assert done.stdout == backward_floor.render(report())
    refused = subprocess.run([sys.executable, script, "--reps", "0"], capture_output=True, text=True)
    assert refused.returncode == 2 and "--reps must be at least 1" in refused.stderr


def test_gain_line_counts_faster_layers_and_those_at_one_and_a_half() -> None:
    from harness.stats import gain_line

    assert gain_line("Ours", [0.5, 1.0, 1.2, 1.5, 2.0]) == (
        "Ours: 3 of 5 layers faster, 2 at least 1.5x; median 1.20x, min 0.50x, max 2.00x.")
    assert gain_line("Fused", [1.1], "layers it applies to").startswith("Fused: 1 of 1 layers it applies to faster")
