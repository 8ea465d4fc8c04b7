"""CPU tests of the single-pixel backward benchmark (benchmarks/single_pixel_backward.py,
benchmarks/harness/single_pixel_backward.py): its launch choices, per-network totals, table and
command line. The kernel runs only on a GPU (its runs are checked against float64 there)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import single_pixel_backward  # noqa: E402


def layer(label: str, calls: dict, stock: float, ours: float | None) -> dict:
    best = None if ours is None else {"split_k": 4, "split_m": 1, "status": "ok", "time_us": ours, "stock_us": stock,
                                       "max_rel_error": [3e-4, 2e-4, 1e-4], "repeats_bitwise": True}
    return {"label": label, "c_in": 8, "c_out": 32, "calls": calls, "tolerance": 0.01,
            "stock_max_rel_error": [3e-4, 2e-4, 1e-4], "stock_us": stock, "ours": best, "choices": 21,
            "failures": []}


def report() -> dict:
    return {"environment": {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "cudnn": "9.19.0"},
            "date": "2026-11-29", "reps": 9, "inner": 20,
            "layers": [layer("se 32 -> 8", {"efficientnet_b0": 1}, 12.0, 6.0),
                       layer("se 48 -> 1152", {"efficientnet_b0": 4}, 12.0, 24.0),
                       layer("se 8 -> 32", {"mobilenet_v3_large": 2}, 10.0, None),
                       {"label": "se 1 -> 2", "calls": {"mobilenet_v3_large": 1}, "error": "RuntimeError: boom"}]}


def test_the_sweep_splits_each_reduction_in_distinct_ways() -> None:
    assert len(set(single_pixel_backward.SWEEP)) == len(single_pixel_backward.SWEEP)
    assert (1, 1) in single_pixel_backward.SWEEP
    assert all(k >= 1 and m >= 1 for k, m in single_pixel_backward.SWEEP)


def test_totals_keep_stock_where_ours_is_slower_or_failed() -> None:
    totals = single_pixel_backward.network_totals(report())
    assert totals["efficientnet_b0"] == [12.0 + 48.0, 6.0 + 48.0]
    assert totals["mobilenet_v3_large"] == [20.0, 20.0]


def test_the_table_gives_speed_errors_and_failures() -> None:
    markdown = single_pixel_backward.render(report())
    assert "| se 32 -> 8 | efficientnet 1 | 12.0 | 6.0 (4, 1) | 2.00 | 3.0e-04, 2.0e-04, 1.0e-04 |" in markdown
    assert "| se 8 -> 32 | mobilenet 2 | 10.0 | - | — |" in markdown
    assert "| se 1 -> 2 | mobilenet 1 | error: RuntimeError: boom |" in markdown
    assert "Ours against stock: 1 of 2 layers faster, 1 at least 1.5x; median 2.00x, min 0.50x, max 2.00x." in markdown
    assert "| efficientnet_b0 | 0.060 | 0.054 | 0.006 |" in markdown


def test_render_prints_a_saved_result_and_bad_reps_are_refused(tmp_path: Path) -> None:
    saved = tmp_path / "single-pixel-backward-h200-2026-11-29.json"
    saved.write_text(json.dumps(report()))
    script = str(BENCHMARKS / "single_pixel_backward.py")
    done = subprocess.run([sys.executable, script, "--render", str(saved)], capture_output=True, text=True, check=True)
    assert done.stdout == single_pixel_backward.render(report())
    refused = subprocess.run([sys.executable, script, "--reps", "0"], capture_output=True, text=True)
    assert refused.returncode == 2 and "--reps must be at least 1" in refused.stderr
