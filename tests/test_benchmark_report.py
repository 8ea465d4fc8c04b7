"""CPU tests of benchmarks/report.py and benchmarks/report_render.py: the report is
rendered from synthetic raw data (targets met / missed / not run), the command line
renders raw files without a GPU and refuses to measure without one."""

from __future__ import annotations

import copy
import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import report_render  # noqa: E402
from report_render import MET, MISSED, NOT_RUN, evaluate_targets, render_markdown  # noqa: E402

GPU = "NVIDIA H100 80GB HBM3"


def environment(date: str = "2025-01-02T03:04:05+00:00") -> dict:
    return {"gpu": GPU, "driver": "570.00", "torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91900,
            "cudnn_torch": 91900, "torchvision": None, "torch_cudnn_algo": "0.1.0", "python": "3.12.0",
            "date": date, "git_commit": "0123456789abcdef", "git_dirty": False,
            "command": "python benchmarks/report.py --out benchmarks/results"}


def section(name: str, **results: object) -> dict:
    return {"section": name, "environment": environment(), "quick": False, "complete": True, "seconds": 12.0,
            **results}


def log_entry(direction: str, pick_ms: float, stock_ms: float, pick: str | None = "eng1_k2=1") -> dict:
    return {"direction": direction, "conv": f"conv2d {direction}", "deterministic": False, "pick": pick,
            "stock_config": "eng0_k2=0", "pick_ms": pick_ms, "stock_config_ms": stock_ms, "candidates": 30,
            "timed": 8, "knob_configs": 0, "seconds": 0.5, "workspace": 0}


def tuning_mode(tuning_s: float | None, log: list[dict]) -> dict:
    return {"first_step_s": 4.0, "second_step_s": 0.03, "tuning_s": tuning_s,
            "configs_tuned": len(log) if tuning_s is not None else None, "tuning_log": log,
            "pinned_runs_second_step": {"fwd": 53, "bwd_data": 52, "bwd_filter": 53}, "child_seconds": 20.0}


def network_mode(wall: float, gpu: float, graph: float) -> dict:
    return {"wall_ms": [wall] * 3, "gpu_ms": [gpu] * 3, "conv_gpu_ms": [gpu * 0.6] * 3, "graph_ms": [graph] * 3,
            "first_step_s": 1.0, "warmup_s": 2.0, "configs_tuned_in_warmup": 0, "configs_tuned_in_rounds": 0,
            "pinned_runs_per_step": {"fwd": 0, "bwd_data": 0, "bwd_filter": 0}, "graph_error": None,
            "top_kernels": [{"name": "sm90_xmma_fprop_implicit_gemm", "ms_per_step": 1.0, "conv": True}]}


def network_variant(fastest_speedup: float) -> dict:
    """One process per policy; stock at 10 ms everywhere (benchmark=True slightly slower),
    the policy at 10 / speedup."""
    ours = 10.0 / fastest_speedup
    return {policy: {"settings": {"variant": "x"}, "child_seconds": 60.0, "measured": "2025-01-02", "modes": {
        "stock": network_mode(10.0, 10.0, 10.0),
        "stock_benchmark": network_mode(10.5, 10.5, 10.5),
        policy: network_mode(ours, ours, ours),
    }} for policy in ("fastest", "fastest_knobs")}


LAYER = {"name": "00", "input": [64, 3, 224, 224], "weight": [64, 3, 7, 7], "stride": 2, "padding": 3, "count": 2}


def layer_row(direction: str, stock_config_ratio: float, found_speedup: float) -> dict:
    """Stock and benchmark=True at 1 ms, stock's config at the ratio, the picks at 1 / speedup."""
    return {"layer": LAYER, "direction": direction, "flops": report_render.conv_flops(LAYER),
            "stock_config": "eng0", "fastest_pick": "eng1", "knobs_pick": None, "errors": {},
            "ms": {"stock": [1.0] * 3, "stock_benchmark": [1.0] * 3, "stock_config": [stock_config_ratio] * 3,
                   "fastest": [1.0 / found_speedup] * 3, "fastest_knobs": [1.0 / found_speedup] * 3}}


def synthetic_raw(tuning_s: float = 3.0, slower_pick: bool = False, host_fastest_us: float = 9.0,
                  network_speedup: float = 1.05, found_speedup: float = 1.2, stock_config_ratio: float = 1.01) -> dict:
    """A merged raw dict with every section; the defaults meet every target."""
    log = [log_entry("fwd", 0.9, 1.0), log_entry("bwd_data", 1.0, 1.0, pick="eng0_k2=0"),
           log_entry("bwd_filter", 1.1 if slower_pick else 0.8, 1.0)]
    tuning = section("tuning", settings={"batch": 64}, modes={
        "stock": tuning_mode(None, []), "stock_benchmark": tuning_mode(None, []),
        "fastest": tuning_mode(tuning_s, log), "fastest_deterministic": tuning_mode(3.5, log[:2]),
        "fastest_knobs": tuning_mode(8.0, log),
    })
    host_samples = {"stock": [10.0, 10.2, 9.8], "pinned_stock_config": [8.0, 8.1, 7.9],
                    "fastest": [host_fastest_us] * 3}
    host = section("host", settings={"input": [1, 8, 8, 8], "weight": [8, 8, 3, 3], "padding": 1,
                                     "dtype": "float32", "calls": 2000, "rounds": 3},
                   stock_configs={"fwd": "eng0", "bwd_data": "eng0", "bwd_filter": "eng0"},
                   workloads={w: {"us_per_call": copy.deepcopy(host_samples)} for w in ("fwd", "fwd_bwd")})
    network = section("network", settings={"batch": 64, "warmup_steps": 5, "rounds": 3, "eager_steps": 10,
                                           "profiled_steps": 3, "graph_replays": 20}, variants={
        name: network_variant(network_speedup) for name in ("amp_fp16", "fp32_tf32", "deterministic")})
    fp16_rows = [layer_row(d, stock_config_ratio, found_speedup) for d in ("fwd", "bwd_data", "bwd_filter")]
    fp32_rows = [{**layer_row(d, 1.0, 1.0), "ms": {"stock": [2.0] * 3, "stock_config": [2.0] * 3}}
                 for d in ("fwd", "bwd_data", "bwd_filter")]
    layers = section("layers", settings={"batch": 64, "reps": 20, "rounds": 3, "roofline_tflops": 989.0}, tables={
        "float16": {"dtype": "float16", "memory_format": "channels_last", "allow_tf32": True, "rows": fp16_rows},
        "float32": {"dtype": "float32", "memory_format": "contiguous", "allow_tf32": True, "rows": fp32_rows},
    })
    return {"environment": environment(), "report": {"generated": "2025-01-02T04:00:00+00:00", "command": "x"},
            "sections": {"tuning": tuning, "host": host, "network": network, "layers": layers}}


def verdicts(raw: dict) -> dict[str, str]:
    return {target.number: target.verdict for target in evaluate_targets(raw)}


def test_device_slug() -> None:
    assert report_render.device_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert report_render.device_slug("NVIDIA H200") == "h200"
    assert report_render.device_slug("NVIDIA A100-SXM4-80GB") == "a100"
    assert report_render.device_slug("Weird GPU!") == "weirdgpu"
    assert report_render.device_slug(None) == "unknown"


def test_conv_flops_and_stats() -> None:
    # ResNet-50's first layer: 64 x 3 x 224 x 224 input, 64 x 3 x 7 x 7 weight, stride 2 -> 112 x 112.
    assert report_render.conv_flops(LAYER) == 2 * 64 * 64 * 3 * 7 * 7 * 112 * 112
    summary = report_render.stats([3.0, None, 1.0, 2.0])
    assert (summary.minimum, summary.median, summary.maximum) == (1.0, 2.0, 3.0)
    assert report_render.stats([None]) is None
    assert report_render.paired_ratios([2.0, None, 3.0], [1.0, 1.0, 2.0]) == [2.0, 1.5]


def test_all_targets_met() -> None:
    raw = synthetic_raw()
    assert verdicts(raw) == dict.fromkeys(("1", "2", "3", "4a", "4b", "4c", "5", "6", "7"), MET)
    text = render_markdown(raw)
    assert "## Targets" in text and "not run" not in text and MISSED not in text
    for title in ("1. Tuning", "2. Host", "3. ResNet-50 training step", "4. ResNet-50 convolution layers"):
        assert f"## {title}" in text


@pytest.mark.parametrize(("change", "missed"), [
    ({"tuning_s": 5.5}, "1"),
    ({"slower_pick": True}, "2"),
    ({"host_fastest_us": 10.5}, "3"),
    ({"found_speedup": 1.05}, "5"),
    ({"stock_config_ratio": 1.03}, "6"),
])
def test_one_target_missed(change: dict, missed: str) -> None:
    result = verdicts(synthetic_raw(**change))
    assert result.pop(missed) == MISSED
    assert set(result.values()) == {MET}


def test_network_thresholds_differ_for_determinism() -> None:
    # 1.02x: below the 1.03x GPU-time target, above deterministic's break-even.
    result = verdicts(synthetic_raw(network_speedup=1.02))
    assert (result["4a"], result["4b"], result["4c"]) == (MISSED, MISSED, MET)


def test_speedup_is_against_the_better_stock_mode() -> None:
    raw = synthetic_raw()
    modes = report_render.network_process(raw, "amp_fp16", "fastest")
    speedup = report_render.network_speedup(modes, "fastest", "gpu_ms")
    assert speedup.stock_mode == "stock" and speedup.value == pytest.approx(1.05)


def test_weighted_layer_totals_use_counts() -> None:
    rows = synthetic_raw(found_speedup=2.0)["sections"]["layers"]["tables"]["float16"]["rows"]
    total = report_render.weighted_totals(rows)["total"]
    assert total["stock"] == pytest.approx(3 * 2 * 1.0)  # three directions, count 2
    assert total["best_found"] == pytest.approx(3 * 2 * 0.5)


def test_missing_sections_say_not_run() -> None:
    raw = synthetic_raw()
    del raw["sections"]["tuning"], raw["sections"]["network"], raw["sections"]["layers"]
    result = verdicts(raw)
    assert result == {"1": NOT_RUN, "2": NOT_RUN, "3": MET, "4a": NOT_RUN, "4b": NOT_RUN, "4c": NOT_RUN,
                      "5": NOT_RUN, "6": NOT_RUN, "7": MET}
    text = render_markdown(raw)
    for title in ("1. Tuning cost (ResNet-50, first training step)", "3. ResNet-50 training step",
                  "4. ResNet-50 convolution layers"):
        assert f"## {title}\n\nnot run\n" in text
    assert render_markdown({"sections": {}}).count("not run") >= 4  # nothing measured at all


def test_failed_children_and_partial_sections_render() -> None:
    raw = synthetic_raw()
    raw["sections"]["tuning"]["modes"]["fastest"] = {"error": "RuntimeError: boom", "child_seconds": 1.0}
    raw["sections"]["network"]["variants"]["fp32_tf32"]["fastest"] = {"error": "timed out after 540 s"}
    raw["sections"]["layers"]["complete"] = False
    raw["sections"]["layers"]["tables"]["float16"]["rows"][0]["errors"] = {"stock_config": "RuntimeError: refused"}
    result = verdicts(raw)
    assert result["1"] == NOT_RUN and result["4b"] == NOT_RUN and result["4a"] == MET
    text = render_markdown(raw)
    assert "failed: RuntimeError: boom" in text and "timed out after 540 s" in text
    assert "(partial)" in text and "RuntimeError: refused" in text


# Runs report.py as a script with torchvision unimportable, installed or not: rendering needs
# only what the [test] extra installs; torchvision is imported where a network is built.
_WITHOUT_TORCHVISION = ("import os, runpy, sys; sys.modules['torchvision'] = None; sys.argv = sys.argv[1:]; "
                        "sys.path.insert(0, os.path.dirname(sys.argv[0])); "
                        "runpy.run_path(sys.argv[0], run_name='__main__')")


def run_report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _WITHOUT_TORCHVISION, str(BENCHMARKS / "report.py"), *args],
                          capture_output=True, text=True, timeout=300)


def test_report_only_writes_markdown_and_merged_json(tmp_path: Path) -> None:
    raw = synthetic_raw()
    (tmp_path / "raw").mkdir()
    for name in ("host", "layers"):
        (tmp_path / "raw" / f"{name}.json").write_text(json.dumps(raw["sections"][name]))
    done = run_report("--report-only", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    stem = f"h100-{datetime.date.today().isoformat()}"
    markdown = (tmp_path / f"{stem}.md").read_text()
    merged = json.loads((tmp_path / f"{stem}.json").read_text())
    assert set(merged["sections"]) == {"host", "layers"}
    assert merged["environment"]["gpu"] == GPU
    assert "## 1. Tuning cost (ResNet-50, first training step)\n\nnot run" in markdown
    assert "| 3 |" in markdown and "| 6 |" in markdown


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_sections_need_a_gpu(tmp_path: Path) -> None:
    done = run_report("--out", str(tmp_path), "--sections", "host", "--quick")
    assert done.returncode == 2
    assert "no CUDA GPU" in done.stderr
    assert not (tmp_path / "raw").exists()
