"""CPU: the torch.compile benchmark (benchmarks/compiled.py, benchmarks/harness/compiled.py): which
children run which variants, the ratios across children, and the rendered tables."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import compiled  # noqa: E402

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
