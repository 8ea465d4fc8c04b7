"""CPU tests of the fused depthwise backward benchmark (benchmarks/fused_backward.py,
benchmarks/harness/fused_backward.py): its bounds, the best pair a plan runs, the per-network
totals, the rendering (of the kept result file too) and its command-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import fused_backward  # noqa: E402
from harness.roofline import H200  # noqa: E402

KEPT = sorted((BENCHMARKS / "results").glob("fused-backward-*.json"))


def layer(pair_data: float | None, pair_filter: float, fused: float | None, calls: dict, error: str | None = None):
    record = {"label": "64x72x56x56 3x3 s1", "channels": 72, "size": 56, "filter_size": 3, "stride": 1,
              "calls": calls, "tolerance": 0.01, "stock": {"time_ms": 0.09, "max_rel_error": [3e-4, 3e-4]},
              "bwd_data": {"cudnn_best": {"value": "eng6", "time_ms": 0.04}, "ours_ms": pair_data},
              "bwd_filter": {"cudnn_best": {"value": "eng16", "time_ms": pair_filter}, "ours_ms": None},
              "fused": None if fused is None else {"tile_rows": 8, "tile_columns": 16, "block_channels": 32,
                                                   "blocks_per_sm": 4, "threads": 128, "status": "ok",
                                                   "time_ms": fused, "max_rel_error": [3e-4, 2e-4]}}
    if error:
        record = {key: record[key] for key in ("label", "channels", "size", "filter_size", "stride", "calls")}
        record["error"] = error
    return fused_backward.with_bounds(record, H200)


def report(*layers: dict) -> dict:
    return {"environment": {"device": "NVIDIA H200", "torch": "2.11.0", "cudnn": "9.19.0"}, "date": "2026-11-28",
            "reps": 11, "layers": list(layers)}


def test_bounds_count_the_fused_pass_bytes_and_both_gradients_multiply_adds() -> None:
    bounds = fused_backward.bounds(72, 56, 3, 1, H200)
    x = dy = 64 * 72 * 56 * 56
    assert bounds["memory_ms"] == pytest.approx(2 * (2 * x + dy + 2 * 72 * 9) / 4.8e12 * 1e3)
    assert bounds["fma_ms"] == pytest.approx(2 * (2 * dy * 9) / 66.9e12 * 1e3)
    # Stride 2 halves dy's extent: 112 -> 56.
    assert fused_backward.output_size(112, 3, 2) == 56 and fused_backward.output_size(14, 5, 2) == 7


def test_the_best_pair_takes_the_faster_of_cudnn_and_ours_per_direction() -> None:
    assert fused_backward.best_pair_ms(layer(0.03, 0.05, None, {})) == pytest.approx(0.03 + 0.05)
    assert fused_backward.best_pair_ms(layer(None, 0.05, None, {})) == pytest.approx(0.04 + 0.05)
    no_filter = layer(None, 0.05, None, {})
    no_filter["bwd_filter"] = {"cudnn_best": None, "ours_ms": None}
    assert fused_backward.best_pair_ms(no_filter) is None


def test_network_totals_use_the_fused_kernel_only_where_it_is_faster() -> None:
    totals = fused_backward.network_totals(report(
        layer(None, 0.05, 0.06, {"mobilenet_v3_large": 2}),            # fused 0.06 beats the pair 0.09
        layer(None, 0.05, 0.12, {"mobilenet_v3_large": 1, "efficientnet_b0": 1}),  # pair wins
        layer(None, 0.05, 0.01, {"efficientnet_b0": 1}, error="CUDA error"),  # skipped
    ))
    assert totals["mobilenet_v3_large"]["best_pair_ms"] == pytest.approx(3 * 0.09)
    assert totals["mobilenet_v3_large"]["with_fused_ms"] == pytest.approx(2 * 0.06 + 0.09)
    assert totals["mobilenet_v3_large"]["stock_ms"] == pytest.approx(3 * 0.09)
    assert totals["efficientnet_b0"]["with_fused_ms"] == pytest.approx(0.09)


def test_the_table_gives_each_layers_ratio_bounds_and_the_summary() -> None:
    text = fused_backward.render(report(layer(None, 0.05, 0.06, {"mobilenet_v3_large": 2}),
                                        layer(None, 0.05, 0.12, {"efficientnet_b0": 1}),
                                        layer(None, 0.05, None, {"efficientnet_b0": 1}, error="boom")))
    assert "| 64x72x56x56 3x3 s1 | mobilenet 2 | 0.090 | 0.090 | 0.060 (8x16, 32 ch, 4/SM, 128 thr) | 1.50 |" in text
    assert "| 64x72x56x56 3x3 s1 | efficientnet 1 | error: boom |" in text
    assert "1 of 2 layers faster, 1 at least 1.5x; median 1.50x, min 0.75x, max 1.50x." in text
    assert "| mobilenet_v3_large | 0.180 | 0.180 | 0.120 | 0.060 |" in text
    assert "at 4.8 TB/s" in text and "66.9 TFLOPS" in text


@pytest.mark.parametrize("path", KEPT, ids=[p.name for p in KEPT])
def test_a_kept_result_renders_to_its_markdown(path: Path) -> None:
    shown = subprocess.run([sys.executable, str(BENCHMARKS / "fused_backward.py"), "--render", str(path)],
                           capture_output=True, text=True, check=True).stdout
    assert shown == path.with_suffix(".md").read_text()


def test_kept_results_exist() -> None:
    assert KEPT, "benchmarks/results keeps the fused backward benchmark's latest run"


def test_reps_below_one_are_refused() -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "fused_backward.py"), "--reps", "0"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--reps must be at least 1, got 0" in done.stderr


def test_building_without_nvcc_says_what_to_do(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(fused_backward.shutil, "which", lambda name: None)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    with pytest.raises(SystemExit, match="needs nvcc.*CUDA_HOME.*--library"):
        fused_backward.build(tmp_path)


def test_a_checked_run_reports_an_unwritten_output_as_an_infinite_error(monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(fused_backward, "timed", lambda call, reps: 0.05)
    reference = torch.ones(4, dtype=torch.float64)
    written, unwritten = torch.empty(4), torch.empty(4)

    def call() -> int:
        written.copy_(reference * 1.001)  # the kernel writes dx, forgets dw
        return 0

    row = fused_backward.checked_run(call, (written, unwritten), (reference, reference), reps=3)
    assert row["status"] == "ok" and row["time_ms"] == 0.05
    assert row["max_rel_error"][0] == pytest.approx(1e-3, rel=1e-3) and row["max_rel_error"][1] == float("inf")
    assert fused_backward.fastest_passing([row], 0.01) == {"fused": None, "fused_choices": 1, "fused_failures": [row]}


def test_a_failed_launch_is_named_and_not_timed(monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    out = torch.empty(2)
    assert fused_backward.checked_run(lambda: 700, (out,), (out.double(),), reps=3) == {"status": "CUDA error 700"}
    assert fused_backward.checked_run(lambda: -1, (out,), (out.double(),), reps=3) == {"status": "does not apply"}


def test_the_fastest_passing_run_wins() -> None:
    sweep = [{"status": "ok", "time_ms": 0.03, "max_rel_error": [1e-4, 2e-2]},   # fast but wrong
             {"status": "ok", "time_ms": 0.05, "max_rel_error": [1e-4, 1e-4]},
             {"status": "ok", "time_ms": 0.04, "max_rel_error": [1e-4, 3e-4]},
             {"status": "CUDA error 700"}]
    chosen = fused_backward.fastest_passing(sweep, 0.01)
    assert chosen["fused"] is sweep[2] and chosen["fused_choices"] == 4
    assert chosen["fused_failures"] == [sweep[0], sweep[3]]
