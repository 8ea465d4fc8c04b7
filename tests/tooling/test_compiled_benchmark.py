"""CPU: the torch.compile benchmark (benchmarks/compiled.py, benchmarks/harness/compiled.py): which
children run which variants, the ratios across children, the baseline handed to the children, the
rendered tables; and its convolution time (benchmarks/harness/conv_time.py): the recorded calls,
their join with torch.profiler's rows and their roofline bound."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import compiled, conv_time, roofline, step_profile  # noqa: E402

REPORT = {
    "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "cudnn": "9.19.0", "date": "2026-11-27",
    "argv": "--networks regnety_016", "compile_modes": ["default", "max-autotune"],
    "networks": [{"name": "regnety_016", "setup": {"tune_s": 2.0}, "children": {
        "eager": {"median_ms": {"eager stock": 10.0, "eager plan": 9.0}},
        "default": {"median_ms": {"eager stock": 20.0, "default stock": 16.0, "default plan": 15.0},
                    "first_step_s": 30.0},
        "max-autotune stock": {"median_ms": {"eager stock": 10.0, "max-autotune stock": 8.0}, "first_step_s": 200.0},
        "max-autotune plan": {"error": "timed out after 900 s"}}}],
}


def test_children_and_their_variants() -> None:
    assert compiled.children(["default", "max-autotune"]) == ["eager", "default", "max-autotune stock",
                                                              "max-autotune plan"]
    assert compiled.variants_of("eager") == ("eager stock", "eager plan")
    assert compiled.variants_of("default") == ("default stock", "default plan")
    assert compiled.variants_of("max-autotune plan") == ("max-autotune plan",)


def test_ratios_across_children_divide_by_each_childs_own_eager_stock_step() -> None:
    record = REPORT["networks"][0]
    rel = compiled.normalised(record)
    # The default child ran at half the clock: its own eager-stock step was 20 ms, not 10.
    assert rel["default stock"] == pytest.approx(0.8) and rel["default plan"] == pytest.approx(0.75)
    assert rel["eager stock"] == pytest.approx(1.0) and rel["eager plan"] == pytest.approx(0.9)
    assert rel["max-autotune stock"] == pytest.approx(0.8) and "max-autotune plan" not in rel
    assert compiled.variant_ms(record)["eager stock"] == 10.0  # the eager child's reference is its stock


def test_render_shows_gains_compile_times_the_peer_and_errors() -> None:
    text = compiled.render(REPORT)
    assert "| regnety_016 | eager | 10.00 | 9.00 | 1.000 | 0.900 | 1.111 | - |" in text
    assert "| regnety_016 | default | 16.00 | 15.00 | 0.800 | 0.750 | 1.067 | 30.0 |" in text
    assert "| regnety_016 | max-autotune | 8.00 | — | 0.800 | — | — | 200.0 / — |" in text
    # max-autotune stock (0.8 of eager stock) over ours: eager plan 0.9, default plan 0.75.
    assert "| regnety_016 | 0.889 | 1.067 | — |" in text
    assert "- regnety_016 max-autotune plan: timed out after 900 s" in text


def test_child_environment_is_stocks_with_its_own_inductor_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_CUDNN_ALGO_PLAN", "/some/plan.json")
    monkeypatch.setenv("TORCH_CUDNN_CONV_FWD_ALGO", "fastest")
    env = compiled.child_env("/tmp/inductor-3")
    assert "TORCH_CUDNN_ALGO_PLAN" not in env and "TORCH_CUDNN_CONV_FWD_ALGO" not in env
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/inductor-3"


def test_command_line_refuses_unknown_networks_and_modes(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--networks", "not_a_net"], ["--compile-modes", "reduce-overhead"], ["--repeats", "0"]):
        with pytest.raises(SystemExit):
            compiled.main(argv)
        assert "networks are" in capsys.readouterr().err


def test_each_child_is_saved_as_it_ends(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A run stopped from outside keeps the children that ended: the result files are written after
    each one, and a network with only some children renders."""
    results = iter([{"tune_s": 1.0}, {"median_ms": {"eager stock": 10.0, "eager plan": 9.0}}])

    def fake_child(argv: list[str], timeout_s: float, env: dict) -> dict:
        if "default" in argv:
            raise KeyboardInterrupt  # the outer timeout, in the middle of the default child
        return next(results)

    monkeypatch.setattr(compiled, "run_child", fake_child)
    monkeypatch.setattr(compiled, "environment", lambda: {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0",
                                                          "cudnn": "9.19.0"})
    with pytest.raises(KeyboardInterrupt):
        compiled.main(["--networks", "regnety_016", "--compile-modes", "default", "--out", str(tmp_path)])
    (saved,) = tmp_path.glob("compiled-*.json")
    network = json.loads(saved.read_text())["networks"][0]
    assert network["setup"] == {"tune_s": 1.0} and list(network["children"]) == ["eager"]
    assert "| regnety_016 | eager | 10.00 | 9.00 |" in saved.with_suffix(".md").read_text()


def _fake_children(calls: list[list[str]]):
    """run_child's stand-in: records each child's arguments; the tune child writes its plan file."""

    def fake_child(argv: list[str], timeout_s: float, env: dict) -> dict:
        calls.append(argv)
        if argv[:2] == ["--child", "tune"]:
            Path(argv[argv.index("--plan-path") + 1]).write_text("{}")
            return {"tune_s": 1.0}
        child = argv[argv.index("--which") + 1]
        return {"median_ms": {"eager stock": 10.0, **{label: 8.0 for label in compiled.variants_of(child)}},
                "first_step_s": 100.0}

    return fake_child


def test_a_network_measured_over_two_runs_merges_into_one_file(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    """max-autotune compiles for longer than one sitting allows: the first run measures eager and
    max-autotune stock and keeps the plan, the second measures max-autotune plan on that plan,
    and the day's file holds all three children."""
    calls: list[list[str]] = []
    monkeypatch.setattr(compiled, "run_child", _fake_children(calls))
    monkeypatch.setattr(compiled, "environment", lambda: {"device": "NVIDIA H200", "torch": "2.11.0", "cudnn": "9.19.0"})
    plans, out = tmp_path / "plans", tmp_path / "out"
    common = ["--networks", "mobilenet_v3_large", "--compile-modes", "max-autotune", "--plan-dir", str(plans),
              "--out", str(out)]
    compiled.main([*common, "--children", "eager,max-autotune stock"])
    assert [argv[argv.index("--which") + 1] for argv in calls if "--which" in argv] == ["eager", "max-autotune stock"]
    assert (plans / "mobilenet_v3_large.json").exists()

    calls.clear()
    compiled.main([*common, "--children", "max-autotune plan", "--merge"])
    assert [argv[1] for argv in calls] == ["measure"]  # the kept plan is measured, not tuned again
    assert calls[0][calls[0].index("--plan-path") + 1] == str(plans / "mobilenet_v3_large.json")

    (saved,) = out.glob("compiled-*.json")
    report = json.loads(saved.read_text())
    (network,) = report["networks"]
    assert list(network["children"]) == ["eager", "max-autotune stock", "max-autotune plan"]
    assert network["setup"] == {"tune_s": 1.0}  # the run that tuned it
    assert len(report["argv"]) == 2
    text = saved.with_suffix(".md").read_text()
    assert "| mobilenet_v3_large | max-autotune | 8.00 | 8.00 | 0.800 | 0.800 | 1.000 | 100.0 / 100.0 |" in text
    assert text.count("`python benchmarks/compiled.py --networks mobilenet_v3_large") == 2


def test_without_merge_a_run_writes_the_days_file_anew(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(compiled, "run_child", _fake_children([]))
    monkeypatch.setattr(compiled, "environment", lambda: {"device": "NVIDIA H200", "torch": "2.11.0", "cudnn": "9.19.0"})
    compiled.main(["--networks", "regnety_016", "--compile-modes", "default", "--out", str(tmp_path)])
    compiled.main(["--networks", "efficientnet_b0", "--compile-modes", "default", "--children", "eager",
                   "--out", str(tmp_path)])
    (saved,) = tmp_path.glob("compiled-*.json")
    report = json.loads(saved.read_text())
    assert [record["name"] for record in report["networks"]] == ["efficientnet_b0"]
    assert list(report["networks"][0]["children"]) == ["eager"] and isinstance(report["argv"], str)


def test_merged_keeps_other_children_and_the_tuning_runs_setup() -> None:
    earlier = {"name": "n", "setup": {"tune_s": 2.0}, "children": {"eager": {"a": 1}, "default": {"b": 1}}}
    later = {"name": "n", "setup": {"plan_from": "/p/n.json"}, "children": {"default": {"b": 2}}}
    assert compiled.merged(earlier, later) == {"name": "n", "setup": {"tune_s": 2.0},
                                               "children": {"eager": {"a": 1}, "default": {"b": 2}}}
    retuned = {"name": "n", "setup": {"tune_s": 3.0}, "children": {}}
    assert compiled.merged(earlier, retuned)["setup"] == {"tune_s": 3.0}
    assert compiled.merged(None, later) is later


def test_children_must_be_of_the_modes_given(capsys: pytest.CaptureFixture[str]) -> None:
    for children in ("max-autotune stock", ",", "eager,nope"):
        with pytest.raises(SystemExit):
            compiled.main(["--compile-modes", "default", "--children", children])
    assert "children of these modes eager, default" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compiled.main(["--compile-modes", "default", "--merge"])
    assert "--merge needs --plan-dir" in capsys.readouterr().err


def test_devices_run_a_networks_children_at_once_one_a_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """--devices 0,1: each measuring child sees one GPU; they overlap in time; max-autotune's go
    first; the record keeps the usual order and says where each ran."""
    import threading

    lock, both_compiling = threading.Lock(), threading.Barrier(2)
    seen: dict[str, str] = {}
    started: list[str] = []

    def fake_child(argv: list[str], timeout_s: float, env: dict) -> dict:
        if argv[:2] == ["--child", "tune"]:
            Path(argv[argv.index("--plan-path") + 1]).write_text("{}")
            return {"tune_s": 1.0}
        child = argv[argv.index("--which") + 1]
        with lock:
            started.append(child)
            seen[child] = env["CUDA_VISIBLE_DEVICES"]
        if child.startswith("max-autotune"):
            both_compiling.wait(timeout=10)  # broken, and so failing, unless the two run at once
        return {"median_ms": {"eager stock": 10.0, **{label: 8.0 for label in compiled.variants_of(child)}},
                "first_step_s": 100.0}

    monkeypatch.setattr(compiled, "run_child", fake_child)
    monkeypatch.setattr(compiled, "environment", lambda: {"device": "NVIDIA H200", "torch": "2.11.0", "cudnn": "9.19.0"})
    compiled.main(["--networks", "resnext50_32x4d", "--compile-modes", "max-autotune", "--devices", "0,1",
                   "--out", str(tmp_path)])
    assert sorted(seen.values()) in (["0", "0", "1"], ["0", "1", "1"])
    assert seen["max-autotune stock"] != seen["max-autotune plan"]
    assert set(started[:2]) == {"max-autotune stock", "max-autotune plan"} and started[2] == "eager"
    (saved,) = tmp_path.glob("compiled-*.json")
    network = json.loads(saved.read_text())["networks"][0]
    assert list(network["children"]) == ["eager", "max-autotune stock", "max-autotune plan"]
    assert {child: str(result["device_index"]) for child, result in network["children"].items()} == seen
    assert "Children that ran at once, each on its own GPU" in saved.with_suffix(".md").read_text()


def test_a_failing_child_on_one_device_is_raised_after_the_others_end(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    import threading

    ended: list[str] = []
    plan_child_started, stock_child_failing = threading.Event(), threading.Event()

    def fake_child(argv: list[str], timeout_s: float, env: dict) -> dict:
        if argv[:2] == ["--child", "tune"]:
            Path(argv[argv.index("--plan-path") + 1]).write_text("{}")
            return {"tune_s": 1.0}
        child = argv[argv.index("--which") + 1]
        if child == "max-autotune stock":
            assert plan_child_started.wait(5)
            stock_child_failing.set()
            raise KeyboardInterrupt
        plan_child_started.set()
        if child == "max-autotune plan":  # still running when the other fails
            assert stock_child_failing.wait(5)
        ended.append(child)
        return {"median_ms": {"eager stock": 10.0, **{label: 8.0 for label in compiled.variants_of(child)}}}

    monkeypatch.setattr(compiled, "run_child", fake_child)
    monkeypatch.setattr(compiled, "environment", lambda: {"device": "NVIDIA H200", "torch": "2.11.0", "cudnn": "9.19.0"})
    with pytest.raises(KeyboardInterrupt):
        compiled.main(["--networks", "resnext50_32x4d", "--compile-modes", "max-autotune", "--devices", "0,1",
                       "--out", str(tmp_path)])
    # The child already running on the other device ran to its end, and its result was kept.
    assert ended[0] == "max-autotune plan"
    (saved,) = tmp_path.glob("compiled-*.json")
    assert "max-autotune plan" in json.loads(saved.read_text())["networks"][0]["children"]


@pytest.mark.parametrize("devices", ["0,0", "a,1", "", "1,-2"])
def test_devices_must_be_distinct_gpu_indices(devices: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        compiled.main(["--compile-modes", "default", "--devices", devices])
    assert "--devices takes distinct GPU indices" in capsys.readouterr().err


def test_device_groups_share_the_gpus_equally() -> None:
    assert compiled.device_groups([0, 1, 2, 3], 2) == [[0, 1], [2, 3]]
    assert compiled.device_groups([0, 1], 2) == [[0], [1]]
    assert compiled.device_groups([0, 1], 1) == [[0, 1]]
    assert compiled.device_groups([0, 1, 2], 2) == [[0], [1], [2]]
    assert compiled.device_groups([3], 4) == [[3]]


def test_networks_share_the_devices_and_run_at_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """--devices 0,1,2,3 with two networks: each network's tune child and measuring children see
    only its own two GPUs, the four max-autotune compiles run at once, and the file holds both
    networks in the order given."""
    import threading

    lock, all_compiling = threading.Lock(), threading.Barrier(4)
    seen: dict[tuple[str, str], str] = {}

    def fake_child(argv: list[str], timeout_s: float, env: dict) -> dict:
        network = argv[argv.index("--network") + 1]
        if argv[:2] == ["--child", "tune"]:
            with lock:
                seen[(network, "tune")] = env["CUDA_VISIBLE_DEVICES"]
            Path(argv[argv.index("--plan-path") + 1]).write_text("{}")
            return {"tune_s": 1.0}
        child = argv[argv.index("--which") + 1]
        with lock:
            seen[(network, child)] = env["CUDA_VISIBLE_DEVICES"]
        all_compiling.wait(timeout=10)  # broken, and so failing, unless all four run at once
        return {"median_ms": {"eager stock": 10.0, **{label: 8.0 for label in compiled.variants_of(child)}}}

    monkeypatch.setattr(compiled, "run_child", fake_child)
    monkeypatch.setattr(compiled, "environment", lambda: {"device": "NVIDIA H200", "torch": "2.11.0", "cudnn": "9.19.0"})
    compiled.main(["--networks", "mobilenet_v3_large,efficientnet_b0", "--compile-modes", "max-autotune",
                   "--children", "max-autotune stock,max-autotune plan", "--devices", "0,1,2,3",
                   "--out", str(tmp_path)])
    first, second = ({seen[(network, child)] for child in ("max-autotune stock", "max-autotune plan")}
                     for network in ("mobilenet_v3_large", "efficientnet_b0"))
    assert {frozenset(first), frozenset(second)} == {frozenset({"0", "1"}), frozenset({"2", "3"})}
    assert seen[("mobilenet_v3_large", "tune")] == min(first) and seen[("efficientnet_b0", "tune")] == min(second)
    (saved,) = tmp_path.glob("compiled-*.json")
    names = [network["name"] for network in json.loads(saved.read_text())["networks"]]
    assert names == ["mobilenet_v3_large", "efficientnet_b0"]


def test_a_kept_inductor_cache_is_resumed_and_its_seconds_add_up(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """--inductor-cache: a max-autotune child cut off by its timeout leaves its Inductor cache in
    <dir>/<network>/<child>; the next run's child compiles on that cache, and its compile time is
    reported with the seconds the cut-off run spent."""
    caches: list[str] = []
    clock = iter([0.0, 555.0, 1000.0, 1300.0])  # each child's start and end: 555 s, then 300 s
    monkeypatch.setattr(compiled, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    outcomes = iter([{"error": "timed out after 555 s"},
                     {"median_ms": {"eager stock": 10.0, "max-autotune stock": 8.0}, "first_step_s": 250.0}])

    def fake_child(argv: list[str], timeout_s: float, env: dict) -> dict:
        if argv[:2] == ["--child", "tune"]:
            Path(argv[argv.index("--plan-path") + 1]).write_text("{}")
            return {"tune_s": 1.0}
        caches.append(env["TORCHINDUCTOR_CACHE_DIR"])
        return next(outcomes)

    monkeypatch.setattr(compiled, "run_child", fake_child)
    monkeypatch.setattr(compiled, "environment", lambda: {"device": "NVIDIA H200", "torch": "2.11.0", "cudnn": "9.19.0"})
    cache_root, out = tmp_path / "inductor", tmp_path / "out"
    common = ["--networks", "mobilenet_v3_large", "--compile-modes", "max-autotune", "--children",
              "max-autotune stock", "--plan-dir", str(tmp_path / "plans"), "--out", str(out),
              "--inductor-cache", str(cache_root)]
    compiled.main(common)
    kept = cache_root / "mobilenet_v3_large" / "max-autotune-stock"
    assert caches == [str(kept)]
    assert compiled.spent_seconds(kept) == pytest.approx(555.0)

    compiled.main([*common, "--merge"])
    assert caches == [str(kept), str(kept)]  # the same cache, resumed
    assert compiled.spent_seconds(kept) == pytest.approx(855.0)
    (saved,) = out.glob("compiled-*.json")
    child = json.loads(saved.read_text())["networks"][0]["children"]["max-autotune stock"]
    assert child["earlier_runs_s"] == pytest.approx(555.0) and "error" not in child
    assert "| 250.0 + 555 earlier / — |" in saved.with_suffix(".md").read_text()


def test_without_a_kept_cache_every_child_compiles_cold(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    caches: list[str] = []

    def fake_child(argv: list[str], timeout_s: float, env: dict) -> dict:
        caches.append(env["TORCHINDUCTOR_CACHE_DIR"])
        return _fake_children([])(argv, timeout_s, env)

    monkeypatch.setattr(compiled, "run_child", fake_child)
    monkeypatch.setattr(compiled, "environment", lambda: {"device": "NVIDIA H200", "torch": "2.11.0", "cudnn": "9.19.0"})
    compiled.main(["--networks", "mobilenet_v3_large", "--compile-modes", "max-autotune", "--out", str(tmp_path)])
    assert len(set(caches)) == len(caches) == 4  # the tune, eager and two max-autotune children, each its own
    assert not any(Path(cache).exists() for cache in caches)  # temporary, gone once the run ends
    report = json.loads(next(tmp_path.glob("compiled-*.json")).read_text())
    assert all("earlier_runs_s" not in child for child in report["networks"][0]["children"].values())


def test_a_kept_inductor_cache_needs_a_kept_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        compiled.main(["--networks", "mobilenet_v3_large", "--inductor-cache", str(tmp_path)])
    assert "--inductor-cache needs --plan-dir" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------------------------- convolution time and bound

FORWARD, BACKWARD = "aten::convolution", "aten::convolution_backward"
DW_X, DW_W = (64, 72, 56, 56), (72, 1, 3, 3)
STEM_X, STEM_W, STEM_Y = (64, 3, 224, 224), (16, 3, 3, 3), (64, 16, 112, 112)
PW_X, PW_W, PW_Y = (8, 16, 32, 32), (32, 16, 1, 1), (8, 32, 32, 32)


def _forward(x: tuple, w: tuple, y: tuple, bias: tuple = ()) -> conv_time.ConvCall:
    return conv_time.ConvCall("forward", (x, w, bias, *[()] * 6), "float16", x, w, y, False, 1, True)


def _backward(x: tuple, w: tuple, y: tuple, directions: int) -> conv_time.ConvCall:
    return conv_time.ConvCall("backward", (y, x, w, *[()] * 8), "float16", x, w, y, False, directions, True)


def _row(call: conv_time.ConvCall, calls: float, gpu_us: float) -> dict:
    return {"op": FORWARD if call.op == "forward" else BACKWARD, "shapes": conv_time.shapes_key(call.shapes),
            "calls": calls, "gpu_us": gpu_us}


def _one_direction_us(x: tuple, w: tuple, y: tuple) -> float:
    return roofline.conv_bound_of(x, w, y, "float16", False, True, roofline.H200).bound_ms * 1e3


def test_roofline_summary_joins_rows_with_the_recorded_calls() -> None:
    dw_us, stem_us, pw_us = _one_direction_us(DW_X, DW_W, DW_X), _one_direction_us(STEM_X, STEM_W, STEM_Y), \
        _one_direction_us(PW_X, PW_W, PW_Y)
    dw, dw_back = _forward(DW_X, DW_W, DW_X), _backward(DW_X, DW_W, DW_X, directions=2)
    biased = _forward(PW_X, PW_W, PW_Y, bias=(32,))  # eager's call; Inductor's row has no bias
    stem = _forward(STEM_X, STEM_W, STEM_Y)  # recorded, but no row holds it (a Triton template ran it)
    calls = [dw, dw, dw_back, dw_back, biased, stem]
    unknown = {"op": FORWARD, "shapes": "[[1, 2, 3, 4], [2, 2, 1, 1], [], [], [], [], [], [], []]", "calls": 1,
               "gpu_us": 500.0}
    rows = [_row(dw, 2, 4 * dw_us), _row(dw_back, 2, 10 * dw_us), _row(_forward(PW_X, PW_W, PW_Y), 1, pw_us), unknown]

    summary = conv_time.roofline_summary(rows, calls, roofline.H200)
    by_op = {(row["op"], row["shapes"]): row for row in summary["rows"]}
    forward_row, backward_row = by_op[(FORWARD, rows[0]["shapes"])], by_op[(BACKWARD, rows[1]["shapes"])]
    assert forward_row["recorded_calls"] == 2 and forward_row["bound_us"] == pytest.approx(2 * dw_us)
    assert forward_row["fraction"] == pytest.approx(0.5)  # two calls' bound in four bounds' time
    assert backward_row["bound_us"] == pytest.approx(4 * dw_us)  # two calls of two directions each
    assert backward_row["fraction"] == pytest.approx(0.4)
    bound = roofline.conv_bound_of(DW_X, DW_W, DW_X, "float16", False, True, roofline.H200)
    seconds = 4 * dw_us * 1e-6
    assert forward_row["tb_per_s"] == pytest.approx(2 * bound.bytes / seconds / 1e12)
    assert forward_row["tflops"] == pytest.approx(2 * bound.flops / seconds / 1e12)
    assert by_op[(FORWARD, rows[2]["shapes"])]["fraction"] == pytest.approx(1.0)  # joined without its bias
    missing = by_op[(FORWARD, unknown["shapes"])]
    assert missing["bound_us"] is None and missing["fraction"] is None and missing["recorded_calls"] == 0
    assert summary["unmatched_us"] == pytest.approx(500.0)
    assert summary["bound_without_row_us"] == pytest.approx(stem_us)
    assert summary["conv_us"] == pytest.approx(14 * dw_us + pw_us + 500.0)
    assert summary["bound_us"] == pytest.approx(6 * dw_us + pw_us + stem_us)
    assert summary["fraction"] == pytest.approx(summary["bound_us"] / summary["conv_us"])
    assert summary["peaks"] == "H200"


def test_a_call_joins_its_own_row_before_a_bias_free_one() -> None:
    """Eager has rows of both: a biased call stays with its own row, the bias-free row keeps its own."""
    plain, biased = _forward(PW_X, PW_W, PW_Y), _forward(PW_X, PW_W, PW_Y, bias=(32,))
    pw_us = _one_direction_us(PW_X, PW_W, PW_Y)
    summary = conv_time.roofline_summary([_row(plain, 1, pw_us), _row(biased, 1, pw_us)], [plain, biased],
                                         roofline.H200)
    assert [row["recorded_calls"] for row in summary["rows"]] == [1, 1]
    assert [row["fraction"] for row in summary["rows"]] == [pytest.approx(1.0), pytest.approx(1.0)]


def test_conv_bound_and_conv_bound_of_agree() -> None:
    description = ("conv2d: input [64, 3, 224, 224] torch.float32 contiguous, weight [16, 3, 3, 3], "
                   "output [64, 16, 112, 112], stride [2, 2], padding [1, 1], dilation [1, 1], groups 1, "
                   "allow_tf32={}")
    for tf32 in (True, False):
        for peaks in (roofline.H100, roofline.H200):
            assert roofline.conv_bound(description.format(tf32), peaks) == roofline.conv_bound_of(
                STEM_X, STEM_W, STEM_Y, "float32", False, tf32, peaks)
    transposed = ("conv_transpose2d: input [8, 512, 1, 4001] torch.float16 contiguous, weight [512, 1, 1, 16], "
                  "output [8, 1, 1, 32016], stride [1, 8], padding [0, 0], dilation [1, 1], groups 1, allow_tf32=True")
    assert roofline.conv_bound(transposed) == roofline.conv_bound_of(
        (8, 512, 1, 4001), (512, 1, 1, 16), (8, 1, 1, 32016), "float16", True, True)
    with pytest.raises(ValueError):
        roofline.conv_bound_of(STEM_X, STEM_W, STEM_Y, "int8", False, False)


def test_a_backward_calls_bound_is_one_per_gradient() -> None:
    one = conv_time.bound_of_call(_forward(DW_X, DW_W, DW_X), roofline.H100)
    both = conv_time.bound_of_call(_backward(DW_X, DW_W, DW_X, directions=2), roofline.H100)
    assert both.bound_ms == pytest.approx(2 * one.bound_ms) and both.bytes == pytest.approx(2 * one.bytes)
    assert conv_time.bound_of_call(_backward(DW_X, DW_W, DW_X, directions=1), roofline.H100) == one


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")  # torch's note on profiler cycles
@pytest.mark.parametrize("input_grad", [True, False])
def test_record_conv_calls_sees_forward_and_backward_with_the_profilers_keys(input_grad: bool) -> None:
    """On the CPU as on the GPU: the dispatch mode sees the forward call and the backward call
    (the gradients it computes: input and weight, or weight alone), keyed as torch.profiler's rows."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1, stride=2)
    x = torch.randn(2, 3, 16, 16, requires_grad=input_grad)

    def step() -> None:
        conv(x).sum().backward()

    forward, backward = conv_time.record_conv_calls(step)
    assert (forward.op, forward.x, forward.w, forward.y) == ("forward", (2, 3, 16, 16), (8, 3, 3, 3), (2, 8, 8, 8))
    assert forward.shapes[:3] == ((2, 3, 16, 16), (8, 3, 3, 3), (8,)) and len(forward.shapes) == 9
    assert (backward.op, backward.x, backward.w, backward.y) == ("backward", (2, 3, 16, 16), (8, 3, 3, 3),
                                                                 (2, 8, 8, 8))
    assert backward.directions == (2 if input_grad else 1) and forward.directions == 1
    assert forward.dtype == "float32" and not forward.transposed and len(backward.shapes) == 11

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    rows = step_profile.conv_rows(prof.key_averages(group_by_input_shape=True), steps=1)
    assert {conv_time.row_key(row._asdict()) for row in rows} == {forward.key, backward.key}
    summary = conv_time.roofline_summary([row._asdict() for row in rows], [forward, backward], roofline.H100)
    assert all(row["recorded_calls"] == 1 for row in summary["rows"]) and summary["bound_without_row_us"] == 0


def test_record_conv_calls_of_a_transposed_convolution() -> None:
    deconv = torch.nn.ConvTranspose1d(4, 2, 4, stride=2)
    x = torch.randn(1, 4, 10)
    (call,) = conv_time.record_conv_calls(lambda: deconv(x))  # no backward: nothing requires x's gradient
    assert call.transposed and (call.x, call.w, call.y) == ((1, 4, 10), (4, 2, 4), (1, 2, 22))


def test_triton_convolution_kernels_are_inductors_convolution_templates() -> None:
    """Names as an H200 ran them: max-autotune's templates count; a pointwise or reduction kernel
    that fused a convolution's neighbours (batch norm's backward, a bias) only names it."""
    for name in ("triton_tem_fused_convolution_2", "triton_tem_fused__to_copy_convolution_8"):
        assert conv_time.is_triton_conv_kernel(name) and conv_time.is_triton_fused_from_conv(name)
    for name in ("triton_poi_fused__native_batch_norm_legit_functional_convolution_backward_0",
                 "triton_red_fused_convolution_backward_9", "triton_poi_fused__to_copy_convolution_relu_7"):
        assert not conv_time.is_triton_conv_kernel(name) and conv_time.is_triton_fused_from_conv(name)
    for name in ("triton_tem_fused_mm_0", "triton_poi_fused_relu_1", "sm90_xmma_depthwise_convolution_wgrad"):
        assert not conv_time.is_triton_conv_kernel(name) and not conv_time.is_triton_fused_from_conv(name)


def _conv_entry(conv_us: float, triton_us: float = 0.0, bound_us: float | None = None,
                rows: list[dict] | None = None) -> dict:
    roofline_part = None if bound_us is None else {"peaks": "H200", "conv_us": conv_us, "bound_us": bound_us,
                                                   "rows": rows or [], "unmatched_us": 0.0}
    return {"conv_us": conv_us, "total_us": 3 * conv_us, "triton_conv_us": triton_us, "rows": rows or [],
            "roofline": roofline_part}


DW_SHAPES = "[[64, 72, 56, 56], [72, 1, 3, 3], [], [], [], [], [], [], []]"
CONV_REPORT = {
    **REPORT, "baseline": "benchmark", "compile_modes": ["default", "max-autotune"],
    "networks": [{"name": "regnety_016", "setup": {"tune_s": 2.0}, "children": {
        "eager": {"median_ms": {"eager stock": 10.0, "eager plan": 9.0}, "peaks": "H200",
                  "conv": {"eager stock": _conv_entry(4000.0, rows=[{"op": FORWARD, "shapes": DW_SHAPES, "calls": 2,
                                                                     "gpu_us": 1200.0}]),
                           "eager plan": _conv_entry(3000.0, bound_us=1000.0, rows=[
                               {"op": FORWARD, "shapes": DW_SHAPES, "calls": 2, "gpu_us": 800.0, "bound_us": 200.0,
                                "fraction": 0.25, "tb_per_s": 1.5}])},
                  "wall_ms": {"eager stock": 30.0, "eager plan": 28.0}},
        "default": {"median_ms": {"eager stock": 20.0, "default stock": 16.0, "default plan": 15.0},
                    "first_step_s": 30.0, "peaks": "H200",
                    "conv": {"default stock": _conv_entry(3500.0, bound_us=1000.0),
                             "default plan": _conv_entry(2500.0, bound_us=1000.0)},
                    "wall_ms": {"default stock": 20.0, "default plan": 19.0},
                    "errors": {"default plan wall": "RuntimeError: out of memory"}},
        "max-autotune stock": {"median_ms": {"eager stock": 10.0, "max-autotune stock": 8.0}, "first_step_s": 200.0,
                               "conv": {"max-autotune stock": _conv_entry(1000.0, triton_us=1500.0,
                                                                          bound_us=1000.0)}},
        "max-autotune plan": {"error": "timed out after 900 s"}}}],
}


def test_kept_rows_are_every_variants_costliest_with_each_variants_time_of_them() -> None:
    """The JSON keeps only the rows some variant ranks among its costliest, but keeps them in every
    variant: the plan's costliest row keeps stock's time of it though stock ranks it last."""
    def rows(times_us: list[float]) -> list[dict]:
        return [{"op": FORWARD, "shapes": f"[[{index}]]", "calls": 1, "gpu_us": us} for index, us in enumerate(times_us)]

    count = compiled.TOP_EAGER_CONV_ROWS
    stock_times = [float(100 + index) for index in range(count + 5)]  # row 0 is stock's cheapest
    plan_times = [1000.0]  # and the plan's costliest
    record = {"name": "n", "children": {"eager": {"conv": {
        "eager stock": _conv_entry(1.0, rows=rows(stock_times)),
        "eager plan": _conv_entry(1.0, bound_us=1.0, rows=rows(plan_times))}}}}
    kept = compiled.with_kept_conv_rows(record)
    stock = kept["children"]["eager"]["conv"]["eager stock"]
    plan = kept["children"]["eager"]["conv"]["eager plan"]
    stock_kept = {row["shapes"] for row in stock["rows"]}
    assert stock_kept == {"[[0]]", *(f"[[{index}]]" for index in range(5, count + 5))}
    assert [row["shapes"] for row in plan["roofline"]["rows"]] == ["[[0]]"]
    assert stock["conv_us"] == 1.0 and len(record["children"]["eager"]["conv"]["eager stock"]["rows"]) == count + 5
    assert "| forward | 0 | 1 | 0.100 | 1.000 |" in compiled.render({**CONV_REPORT, "networks": [kept]})


def test_render_shows_convolution_time_its_bound_and_wall_time() -> None:
    text = compiled.render(CONV_REPORT)
    assert "Stock: `torch.backends.cudnn.benchmark = True`" in text
    assert "## Convolution time per step" in text and "mode=\"reduce-overhead\"" in text and "H200 peaks" in text
    # conv ms stock / plan, gain, bound, plan / bound, wall ms stock / plan
    assert "| regnety_016 | eager | 4.00 / 3.00 | 1.333 | 1.00 | 3.00 | 30.00 / 28.00 |" in text
    assert "| regnety_016 | default | 3.50 / 2.50 | 1.400 | 1.00 | 2.50 | 20.00 / 19.00 |" in text
    # Triton's convolution kernels count with ATen's; the plan's child timed out.
    assert "| regnety_016 | max-autotune | 2.50 / — | — | 1.00 | — | — / — |" in text
    assert "## The plan's costliest convolutions, eager" in text and "### regnety_016" in text
    assert "| forward | 64x72x56x56, 72x1x3x3 | 2 | 1.200 | 0.800 | 0.200 | 25 | 1.50 |" in text
    assert "- regnety_016 default (default plan wall): RuntimeError: out of memory" in text
    # The first table is as it was.
    assert "| regnety_016 | default | 16.00 | 15.00 | 0.800 | 0.750 | 1.067 | 30.0 |" in text


def test_a_report_without_convolution_time_renders_without_its_tables() -> None:
    text = compiled.render(REPORT)
    assert "Convolution time per step" not in text and "costliest convolutions" not in text
    assert "Stock: cuDNN's heuristics" in text  # a report that names no baseline ran benchmark=False


def test_the_baseline_reaches_every_measuring_child_and_the_report(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(compiled, "run_child", _fake_children(calls))
    monkeypatch.setattr(compiled, "environment", lambda: {"device": "NVIDIA H200", "torch": "2.11.0", "cudnn": "9.19.0"})
    plans = tmp_path / "plans"
    common = ["--networks", "regnety_016", "--compile-modes", "default", "--out", str(tmp_path), "--plan-dir",
              str(plans)]
    compiled.main(common)
    measuring = [argv for argv in calls if argv[1] == "measure"]
    assert [argv[argv.index("--baseline") + 1] for argv in measuring] == ["benchmark", "benchmark"]
    assert all("--baseline" not in argv for argv in calls if argv[1] == "tune")  # tune() against heuristics
    (saved,) = tmp_path.glob("compiled-*.json")
    assert json.loads(saved.read_text())["baseline"] == "benchmark"
    assert "Stock: `torch.backends.cudnn.benchmark = True`" in saved.with_suffix(".md").read_text()

    calls.clear()
    compiled.main([*common, "--baseline", "heuristics"])
    assert {argv[argv.index("--baseline") + 1] for argv in calls if argv[1] == "measure"} == {"heuristics"}
    assert json.loads(saved.read_text())["baseline"] == "heuristics"


def test_merge_keeps_one_baseline_per_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(compiled, "run_child", _fake_children([]))
    monkeypatch.setattr(compiled, "environment", lambda: {"device": "NVIDIA H200", "torch": "2.11.0", "cudnn": "9.19.0"})
    common = ["--networks", "regnety_016", "--compile-modes", "default", "--out", str(tmp_path), "--plan-dir",
              str(tmp_path / "plans")]
    compiled.main([*common, "--children", "eager"])
    with pytest.raises(SystemExit):
        compiled.main([*common, "--children", "default", "--merge", "--baseline", "heuristics"])
    assert "one file holds one baseline" in capsys.readouterr().err


def test_a_failing_convolution_profile_is_recorded_and_the_rest_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """measure_convolutions on the CPU: the calls are recorded from the eager model, one variant's
    profile fails (recorded in errors), the other's is kept with its roofline summary."""
    import contextlib

    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    x = torch.randn(2, 3, 8, 8)
    trainer = types.SimpleNamespace(model=conv)
    trainer.step = lambda: trainer.model(x).sum().backward()
    profiled_rows: dict[str, list] = {}
    order: list[str] = []

    def fake_wall(trainer: object) -> float:
        order.append("wall")
        return 12.5

    def fake_profile(step, steps: int, warm_up: int) -> dict:
        order.append("profile")
        if trainer.model is not conv:
            raise RuntimeError("CUPTI is busy")
        calls = conv_time.record_conv_calls(step)
        profiled_rows["rows"] = [{"op": FORWARD if call.op == "forward" else BACKWARD,
                                  "shapes": conv_time.shapes_key(call.shapes), "calls": 1, "gpu_us": 10.0}
                                 for call in calls]
        return {"total_us": 50.0, "conv_us": 20.0, "triton_conv_us": 0.0, "triton_named_conv_us": 0.0,
                "rows": profiled_rows["rows"]}

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")
    monkeypatch.setattr(conv_time, "profile_conv_time", fake_profile)
    monkeypatch.setattr(compiled, "wall_ms_per_step", fake_wall)
    variants = {label: contextlib.nullcontext for label in ("eager stock", "default stock", "default plan")}
    models = {"eager stock": conv, "default stock": conv, "default plan": torch.nn.Identity()}
    out, errors = compiled.measure_convolutions(trainer, ["default stock", "default plan"], variants, models)
    assert out["conv_calls_per_step"] == 2 and out["peaks"] == "H200"
    assert list(out["conv"]) == ["default stock"]
    assert errors == {"default plan conv profile": "RuntimeError: CUPTI is busy"}
    summary = out["conv"]["default stock"]["roofline"]
    assert summary["unmatched_us"] == 0 and summary["bound_us"] > 0
    assert out["wall_ms"] == {"default stock": 12.5, "default plan": 12.5}
    assert order == ["wall", "wall", "profile", "profile"]  # the profiler slows the host's later steps
