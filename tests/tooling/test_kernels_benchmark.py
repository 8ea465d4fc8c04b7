"""CPU: the kernels benchmark's roofline per GPU (benchmarks/harness/roofline.py peaks_of,
benchmarks/harness/kernels.py with_bound, render and --render): bounds against the GPU the run was
on (the H200's faster memory, not the H100's), no bound for a GPU without figures, and a saved
result's bounds rewritten for its GPU without one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import kernels  # noqa: E402
from harness.roofline import H100, H200, conv_bound, peaks_of  # noqa: E402

STEM = ("conv2d: input [64, 3, 224, 224] torch.float16 channels_last, weight [16, 3, 3, 3], "
        "output [64, 16, 112, 112], stride [2, 2], padding [1, 1], dilation [1, 1], groups 1, "
        "allow_tf32=False, deterministic=False, device cuda:0")


@pytest.mark.parametrize(("name", "expected"), [("NVIDIA H200", H200), ("NVIDIA H100 80GB HBM3", H100),
                                                ("NVIDIA A100-SXM4-80GB", None), (None, None)])
def test_peaks_are_those_of_the_gpu_named(name, expected) -> None:
    assert peaks_of(name) == expected


def test_a_memory_bound_convolution_is_bound_by_each_gpus_bandwidth() -> None:
    on_h100, on_h200 = conv_bound(STEM), conv_bound(STEM, H200)
    assert on_h100.memory_bound and on_h200.memory_bound
    # x, weight and y in fp16, once each.
    assert on_h100.bytes == (64 * 3 * 224 * 224 + 16 * 27 + 64 * 16 * 112 * 112) * 2
    assert on_h200.bound_ms == pytest.approx(on_h100.bound_ms * 3.35 / 4.8)


def record(ours_ms: float, best_ms: float) -> dict:
    return {"convolution": STEM, "label": "stem", "direction": "bwd_filter", "spec": "conv2d ...",
            "cudnn_best": {"value": "eng1", "time_ms": best_ms, "max_rel_error": 1e-4}, "stock_ms": best_ms,
            "ours": {"status": "ok", "time_ms": ours_ms, "max_rel_error": 1e-4, "workspace": 0},
            "tolerance": 0.01}


def report(device: str, *records: dict) -> dict:
    return {"environment": {"device": device, "torch": "2.11.0", "cudnn": "9.19.0"}, "date": "2026-11-28",
            "reps": 20, "only": "stem", "layers": list(records)}


def test_the_table_states_the_runs_gpu_and_its_share_of_that_bandwidth() -> None:
    bound = conv_bound(STEM, H200)
    layer = kernels.with_bound(record(0.071, 0.124), H200)
    assert layer["bound_ms"] == pytest.approx(bound.bound_ms)
    assert layer["ours"]["percent_of_peak_bandwidth"] == pytest.approx(100 * bound.tb_per_s(0.071) / 4.8)
    text = kernels.render(report("NVIDIA H200", layer))
    assert "H200 peaks: 4.8 TB/s" in text and "TB/s (% of 4.8)" in text
    assert f"| {bound.bound_ms:.3f} | {0.071 / bound.bound_ms:.1f} |" in text
    assert "1 of 1 layer directions at least 1.5x cuDNN's best" in text


def test_a_gpu_without_figures_gets_no_bound() -> None:
    layer = kernels.with_bound(record(0.071, 0.124), None)
    assert layer["bound_ms"] is None
    text = kernels.render(report("NVIDIA A100-SXM4-80GB", layer))
    assert "No roofline peaks are known for this GPU" in text
    # ours/best still; bound, ours/bound and TB/s left empty.
    assert "| 0.071 | 1.75 | — | - | - | 1.0e-04 |" in text, text


def test_render_rewrites_a_saved_results_bounds_for_its_gpu(tmp_path: Path, capsys) -> None:
    saved = tmp_path / "kernels-h200-2026-11-28.json"
    # As a run with the H100's peaks left it.
    saved.write_text(json.dumps(report("NVIDIA H200", kernels.with_bound(record(0.071, 0.124), H100))))
    assert kernels.main(["--render", str(saved)]) == 0
    rewritten = json.loads(saved.read_text())["layers"][0]
    assert rewritten["bound_ms"] == pytest.approx(conv_bound(STEM, H200).bound_ms, rel=1e-4)
    assert "H200 peaks" in capsys.readouterr().out
