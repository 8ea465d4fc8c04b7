"""CPU: the variable-shape benchmark (benchmarks/variable_shapes.py,
benchmarks/harness/variable_shapes.py): its shape schedules and its table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import variable_shapes  # noqa: E402


@pytest.mark.parametrize("workload", variable_shapes.WORKLOADS)
def test_every_run_meets_the_same_tens_of_shapes_in_the_same_order(workload: str) -> None:
    distinct = variable_shapes.shapes(workload)
    assert len(distinct) == len(set(distinct)) == variable_shapes.SHAPES
    order = variable_shapes.schedule(workload, 200)
    assert len(order) == 200 and set(order) == set(distinct)
    assert order == variable_shapes.schedule(workload, 200)  # seeded: every mode's process runs the same
    assert order[:len(distinct)] != sorted(distinct)  # shuffled, as a loader delivers them


@pytest.mark.parametrize(("workload", "rank"), [("detection", 2), ("audio", 1)])
def test_every_shape_is_the_tuple_the_training_step_unpacks(workload: str, rank: int) -> None:
    # Trainer.step unpacks (height, width) or (length,): a bare int would fail in every child.
    for shape in variable_shapes.shapes(workload):
        assert isinstance(shape, tuple) and len(shape) == rank and all(isinstance(n, int) for n in shape), shape


def test_detection_sizes_are_a_loaders_after_the_models_resize() -> None:
    for height, width in variable_shapes.shapes("detection"):
        assert min(height, width) == 512 and max(height, width) <= 853


def test_the_table_compares_each_mode_with_stock_and_counts_what_fastest_did() -> None:
    counts = {"tuned": 0, "kept": {"kept": 140}, "execution_plans": {"built": 0}}
    report = {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "cudnn": "9.19.0", "date": "2026-11-27",
              "argv": "--workloads audio", "workloads": [{"name": "audio", "distinct_shapes": 24, "modes": {
                  "stock": {"wall_s": 40.0, "gpu_ms_per_pass": 2000.0},
                  "benchmark": {"wall_s": 90.0, "gpu_ms_per_pass": 1900.0},
                  "fastest_empty": {"wall_s": 44.0, "gpu_ms_per_pass": 1800.0, "tuned": 140,
                                    "kept": {"kept": 0, "borrowed": 20}, "execution_plans": {"built": 500}},
                  "fastest_second": {"wall_s": 36.0, "gpu_ms_per_pass": 1800.0, **counts}}}]}
    text = variable_shapes.render(report)
    assert "| audio (24 shapes) | benchmark | 90.0 | 2.250 | 1900.0 | 1.053 | — |" in text
    assert "| audio (24 shapes) | fastest_empty | 44.0 | 1.100 | 1800.0 | 1.111 | 140 / 20 / 0 / 500 |" in text
    assert "| audio (24 shapes) | fastest_second | 36.0 | 0.900 | 1800.0 | 1.111 | 0 / 0 / 140 / 0 |" in text
    report["workloads"][0]["modes"]["benchmark"] = {"error": "timed out after 900 s"}
    assert "| audio | benchmark | — | — | — | — | timed out after 900 s |" in variable_shapes.render(report)


def test_command_line_refuses_unknown_workloads_and_too_few_steps(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--workloads", "segmentation"], ["--steps", "5"]):
        with pytest.raises(SystemExit):
            variable_shapes.main(argv)
        assert "workloads are detection, audio" in capsys.readouterr().err


def test_command_line_refuses_unknown_modes_and_a_second_run_without_the_first(
        capsys: pytest.CaptureFixture[str]) -> None:
    for modes in ("stock,warm", "stock,fastest_second", ""):
        with pytest.raises(SystemExit):
            variable_shapes.main(["--modes", modes])
        assert "fastest_second needs fastest_empty" in capsys.readouterr().err
