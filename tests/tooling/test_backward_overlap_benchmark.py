"""CPU tests of the overlap benchmark (benchmarks/backward_overlap.py,
benchmarks/harness/backward_overlap.py): its table and command-line errors. The measuring is the
zoo's measure_gpu (tested there)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import backward_overlap  # noqa: E402


def report() -> dict:
    gpu = {"median_ms": {backward_overlap.SEQUENTIAL: 7.2, backward_overlap.CONTROL: 7.21,
                         backward_overlap.OVERLAPPED: 7.1},
           "ratio": {backward_overlap.CONTROL: {"min": 0.99, "median": 1.0, "max": 1.01, "rounds": 3},
                     backward_overlap.OVERLAPPED: {"min": 1.01, "median": 1.014, "max": 1.02, "rounds": 3}}}
    return {"environment": {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "cudnn": "9.19.0"}, "date": "2026-11-29",
            "gpu_repeats": 3, "gpu_replays": 20,
            "networks": [{"network": "mobilenet_v3_large", "gpu": gpu},
                         {"network": "conv_tasnet", "error": "RuntimeError: out of memory"}]}


def test_the_table_gives_both_times_the_control_and_the_ratio_and_keeps_a_failed_network() -> None:
    markdown = backward_overlap.render(report())
    assert "| mobilenet_v3_large | 7.200 | 7.100 | 1.000 (0.990-1.010) | 1.014 (1.010-1.020) |" in markdown
    assert "| conv_tasnet | error: RuntimeError: out of memory |" in markdown
    assert "--gpu-repeats 3" in markdown


def test_render_prints_a_saved_result_without_a_gpu(tmp_path: Path) -> None:
    saved = tmp_path / "backward-overlap-h200-2026-11-29.json"
    saved.write_text(json.dumps(report()))
    done = subprocess.run([sys.executable, str(BENCHMARKS / "backward_overlap.py"), "--render", str(saved)],
                          capture_output=True, text=True, check=True)
    assert done.stdout == backward_overlap.render(report())


def test_unknown_networks_and_bad_counts_are_refused_with_the_valid_values() -> None:
    for argv, message in ((["--networks", "alexnet"], "--networks takes names of"),
                          (["--gpu-repeats", "0"], "must be at least 1")):
        done = subprocess.run([sys.executable, str(BENCHMARKS / "backward_overlap.py"), *argv],
                              capture_output=True, text=True)
        assert done.returncode == 2 and message in done.stderr
