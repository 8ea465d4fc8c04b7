"""CPU: the step profile benchmark (benchmarks/step_profile.py, benchmarks/harness/step_profile.py):
kernel times from profiler events (annotations left out), convolution rows from a real profile,
the per-mode summaries, what a target needs off the convolutions, the rendered tables, the rows the
JSON keeps and the command line's checks."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import step_profile  # noqa: E402

CUDA = torch.autograd.DeviceType.CUDA
STEM_BWD = "[[64, 16, 112, 112], [64, 3, 224, 224], [16, 3, 3, 3], [], [], [], [], [], [], [], []]"
DW_FWD = "[[64, 72, 56, 56], [72, 1, 3, 3], [], [], [], [], [], [], []]"


def _profile(kernels: dict[str, float], convolutions: list[tuple[str, str, float, float]]) -> dict:
    rows = [{"op": op, "shapes": shapes, "calls": calls, "gpu_us": us} for op, shapes, calls, us in convolutions]
    return {"total_us": sum(kernels.values()), "kernels_us": kernels,
            "convolution_us": step_profile.convolution_us(rows), "convolutions": rows}


RECORD = {
    "name": "mobilenet_v3_large", "tune_s": 4.6, "plan_non_stock_entries": 60,
    # benchmark=True: 8 ms of kernels, 3 of them convolutions; the plan: 7 ms, 2 in convolutions.
    "benchmark": _profile({"batchnorm": 5000.0, "conv": 3000.0},
                          [("aten::convolution", DW_FWD, 1, 1000.0), ("aten::convolution_backward", STEM_BWD, 1, 2000.0)]),
    "plan": _profile({"batchnorm": 5000.0, "dw_gather": 1500.0, "wgrad": 500.0},
                     [("aten::convolution", DW_FWD, 1, 500.0), ("aten::convolution_backward", STEM_BWD, 1, 1500.0)]),
}
REPORT = {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "cudnn": "9.19.0", "date": "2026-11-28",
          "argv": "--networks mobilenet_v3_large", "steps": 5, "target": 1.15,
          "networks": [RECORD, {"name": "conv_tasnet", "error": "RuntimeError: out of memory"}]}


def test_kernel_times_are_per_step_and_leave_annotations_out() -> None:
    events = [SimpleNamespace(device_type=CUDA, name="k", device_time_total=30.0),
              SimpleNamespace(device_type=CUDA, name="k", device_time_total=10.0),
              SimpleNamespace(device_type=CUDA, name="Optimizer.step#SGD.step", device_time_total=99.0,
                              is_user_annotation=True),
              SimpleNamespace(device_type=torch.autograd.DeviceType.CPU, name="aten::add", device_time_total=5.0)]
    assert step_profile.kernel_times(events, steps=2) == {"k": 20.0}


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")  # torch's note on profiler cycles
def test_conv_rows_come_from_a_real_profile_grouped_by_shapes() -> None:
    x, w = torch.randn(2, 4, 8, 8, requires_grad=True), torch.randn(4, 1, 3, 3, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            F.conv2d(x, w, padding=1, groups=4).sum().backward()
            F.conv2d(x[:1], w, padding=1, groups=4)
    rows = step_profile.conv_rows(prof.key_averages(group_by_input_shape=True), steps=3)
    forward = sorted((row.shapes, row.calls) for row in rows if row.op == "aten::convolution")
    assert [calls for _, calls in forward] == [1.0, 1.0]  # one call per step of each input shape
    assert any(shapes.startswith("[[1, 4, 8, 8]") for shapes, _ in forward)
    assert [row.calls for row in rows if row.op == "aten::convolution_backward"] == [1.0]
    assert not {row.op for row in rows} - set(step_profile.CONV_OPS)


def test_summaries_and_what_the_target_needs() -> None:
    bench, plan = step_profile.summary(RECORD["benchmark"]), step_profile.summary(RECORD["plan"])
    assert bench == step_profile.Summary(8.0, 1.0, 2.0) and plan == step_profile.Summary(7.0, 0.5, 1.5)
    assert plan.conv_ms == 2.0
    assert step_profile.needed_off_ms(plan, bench, 1.15) == pytest.approx(7.0 - 8.0 / 1.15)
    assert step_profile.needed_off_ms(plan, bench, 1.1) == 0.0  # 8/7 = 1.143: met already


def test_convolution_table_pairs_the_plans_rows_with_stocks() -> None:
    only_in_plan = ("aten::convolution", "[[1, 2, 3, 4]]", 2, 3000.0)
    record = {**RECORD, "plan": _profile(RECORD["plan"]["kernels_us"], [
        *((row["op"], row["shapes"], row["calls"], row["gpu_us"]) for row in RECORD["plan"]["convolutions"]),
        only_in_plan])}
    table = step_profile.convolution_table(record, top=2)
    assert table == [("forward", "[[1, 2, 3, 4]]", 2, 3.0, None), ("backward", STEM_BWD, 1, 1.5, 2.0)]


def test_kept_convolutions_are_either_modes_costliest_in_both_modes() -> None:
    """The JSON keeps the rows either mode ranks among its costliest, in both modes: the plan's
    costliest row keeps benchmark=True's time of it though benchmark=True ranks it last, a row
    neither ranks goes, and the summaries and the render stay those of all the rows."""
    count = step_profile.TOP_CONVOLUTIONS
    def shapes(index: int) -> str:
        return f"[[{index}]]"
    # Row 0: benchmark=True's cheapest, the plan's costliest; rows 1 and 2: costliest in neither mode.
    bench_rows = [("aten::convolution", shapes(index), 1, 100.0 + index) for index in range(count + 3)]
    plan_rows = [("aten::convolution", shapes(0), 1, 1000.0),
                 *(("aten::convolution", shapes(index), 1, 1.0 + index) for index in range(1, count + 3))]
    record = {**RECORD, "benchmark": _profile(RECORD["benchmark"]["kernels_us"], bench_rows),
              "plan": _profile(RECORD["plan"]["kernels_us"], plan_rows)}
    kept = step_profile.with_kept_convolutions(record)
    kept_shapes = {mode: {row["shapes"] for row in kept[mode]["convolutions"]} for mode in step_profile.MODES}
    expected = {shapes(0), *(shapes(index) for index in range(3, count + 3))}
    assert kept_shapes == {"benchmark": expected, "plan": expected}
    assert len(record["plan"]["convolutions"]) == count + 3  # the record measured is left as it was
    for mode in step_profile.MODES:
        assert step_profile.summary(kept[mode]) == step_profile.summary(record[mode])
    assert "| forward | 0 | 1 | 1.000 | 0.100 |" in step_profile.render({**REPORT, "networks": [kept]})
    assert step_profile.render({**REPORT, "networks": [kept]}) == step_profile.render({**REPORT, "networks": [record]})
    error = {"name": "conv_tasnet", "error": "RuntimeError: out of memory"}
    assert step_profile.with_kept_convolutions(error) == error


def test_render_reports_each_network_and_errors() -> None:
    text = step_profile.render(REPORT)
    assert "| mobilenet_v3_large | 8.00 / 7.00 | 3.00 / 2.00 (0.50 + 1.50) | 29% | 1.143 | 0.04 ms (2%) |" in text
    assert "| conv_tasnet | error: RuntimeError: out of memory |" in text
    assert "| backward | 64x16x112x112, 64x3x224x224, 16x3x3x3 | 1 | 1.500 | 2.000 |" in text
    assert "| `batchnorm` | 5.000 | 71.4% |" in text
    assert "## conv_tasnet" not in text  # an error has no sections


def test_render_command_and_argument_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "step-profile.json"
    saved.write_text(json.dumps(REPORT))
    assert step_profile.main(["--render", str(saved)]) == 0
    assert capsys.readouterr().out == step_profile.render(REPORT)
    for bad in (["--networks", "nope"], ["--steps", "0"], ["--target", "0"]):
        with pytest.raises(SystemExit):
            step_profile.main(bad)
    assert "unknown networks ['nope']" in capsys.readouterr().err
