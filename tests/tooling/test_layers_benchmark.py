"""CPU tests of the per-layer benchmark (benchmarks/layers.py, benchmarks/harness/layers.py): the
work of a convolution, the count-weighted sums, and the markdown of the kept ResNet-50 result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import layers  # noqa: E402

KEPT = BENCHMARKS / "results" / "h100-2026-11-22.json"


def row(name: str, direction: str, count: int, **median_ms: float) -> dict:
    layer = {"name": name, "input": [64, 64, 56, 56], "weight": [64, 64, 3, 3], "stride": 1, "padding": 1,
             "count": count}
    return {"layer": layer, "direction": direction, "median_ms": median_ms, "errors": {}}


def test_conv_flops_counts_the_multiply_adds_twice() -> None:
    layer = {"input": [64, 64, 56, 56], "weight": [64, 64, 3, 3], "stride": 1, "padding": 1}
    assert layers.conv_flops(layer) == 2 * 64 * 64 * 64 * 9 * 56 * 56
    strided = {**layer, "stride": 2}
    assert layers.conv_flops(strided) == 2 * 64 * 64 * 64 * 9 * 28 * 28


def test_weighted_totals_use_counts_and_the_faster_pick() -> None:
    rows = [row("00", "fwd", 3, stock=1.1, stock_benchmark=1.0, fastest=0.9, fastest_knobs=0.8),
            row("01", "fwd", 1, stock=2.0, stock_benchmark=2.0, fastest=2.0, fastest_knobs=2.2),
            row("02", "fwd", 5, stock=9.0)]  # not every variant measured: left out of the sums
    totals = layers.weighted_totals(rows)
    assert totals["total"]["stock"] == pytest.approx(3 * 1.1 + 2.0)
    assert totals["total"]["best_found"] == pytest.approx(3 * 0.8 + 2.0)
    assert set(totals) == {"fwd", "total"}
    assert "best_found" not in rows[0]["median_ms"]  # the sums add it to a copy


def test_stock_config_ratios() -> None:
    rows = [row("00", "fwd", 1, stock=1.0, stock_config=1.01), row("01", "bwd_data", 1, stock=1.0)]
    assert [(round(r, 3), x["layer"]["name"]) for r, x in layers.stock_config_ratios(rows)] == [(1.01, "00")]


def test_kept_result_renders_its_findings() -> None:
    """The kept ResNet-50 report's per-layer section: the best configuration found is 1.005x
    faster than benchmark=True, and pinning stock's configuration costs at most 1.010x."""
    import json

    result = json.loads(KEPT.read_text())
    markdown = layers.render_markdown(result)
    assert "| total |" in markdown and "1.005 | 1.015 |" in markdown
    assert "worst 1.010 (layer 01 bwd_filter) over 69 layer-direction pairs" in markdown
    assert markdown.count("\n## ") == 2  # float16 and float32
    rows = [row for table in result["sections"]["layers"]["tables"].values() for row in table["rows"]]
    assert all(isinstance(ms, float) for row in rows for ms in row["median_ms"].values())  # no round's times


def test_render_command_needs_no_gpu() -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "layers.py"), "--render", str(KEPT)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# ResNet-50 convolutions")
