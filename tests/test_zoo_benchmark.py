"""CPU tests of benchmarks/zoo.py, the parts that need no GPU: the command line, the raw files'
merge into the report's checked shape, the markdown rendering, the ratios, and the zoo itself
(every kind of convolution the issues ask for; the DCGAN generator defined here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="benchmarks/zoo.py imports torch")

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import zoo  # noqa: E402
import zoo_networks  # noqa: E402

GPU = "NVIDIA H100 80GB HBM3"
REQUIRED_KEYS = {"name", "gpu_ms", "eager_ms", "host_us_per_conv_call", "tune_s", "benchmark_search_s",
                 "first_step_s"}


def environment(device: str = GPU) -> dict:
    return {"device": device, "torch": "2.11.0+cu130", "cudnn": "9.19.0", "cuda": "13.0",
            "torch_cudnn_algo": "0.1.0", "extension_loaded": True}


def settings(out: Path, **changes: object) -> zoo.Settings:
    args = zoo.build_parser().parse_args(["--out", str(out)])
    return zoo.Settings(**{**zoo.settings_from(args).__dict__, **changes})


def write_parts(out: Path, network: str, device: str = GPU, measured: str = "2026-11-24T10:00:00+00:00",
                skip: tuple[str, ...] = ()) -> None:
    """A network's raw files as the children write them: stock at 20 ms eager, plan and fastest faster."""
    parts = {
        "setup": {"workload": {"input": [64, 3, 224, 224], "precision": "amp_fp16"}, "first_step_s": 4.0,
                  "tune_s": 2.0, "plan_file_bytes": 12345, "plan_entries": 68, "plan_non_stock_entries": 23,
                  "modes": {"fastest": {"tuning_s": 1.8, "pinned_runs_per_step": {"fwd": 53}}}},
        "eager": {"rounds_ms": {"stock": [20.0, 22.0, 21.0], "plan": [19.0, 20.0, 21.0],
                                "fastest": [18.0, 24.0, 21.0], "control": [22.0, 22.0, 20.0]},
                  "median_ms": {"stock": 21.0, "plan": 20.0, "fastest": 21.0, "control": 22.0},
                  "ratio": {"plan": zoo.ratio_summary([20.0, 22.0, 21.0], [19.0, 20.0, 21.0]),
                            "fastest": zoo.ratio_summary([20.0, 22.0, 21.0], [18.0, 24.0, 21.0]),
                            "control": zoo.ratio_summary([20.0, 22.0, 21.0], [22.0, 22.0, 20.0])},
                  "configs_tuned_in_rounds": 0},
        "host": {"rounds_us": {"stock": [80.0, 82.0], "plan": [70.0, 72.0], "fastest": [75.0, 74.0]},
                 "median_us_per_call": {"stock": 81.0, "plan": 71.0, "fastest": 74.5},
                 "ratio": {"plan": zoo.ratio_summary([80.0, 82.0], [70.0, 72.0]), "fastest": None},
                 "conv_calls_per_step": {"stock": 159.0, "plan": 159.0, "fastest": 159.0}, "ops": {}},
        "gpu": {"method": {"heuristics": "graph", "fastest": "events"},
                "repeats_ms": {"heuristics": [14.0, 14.2], "fastest": [13.0, 13.2]},
                "median_ms": {"heuristics": 14.1, "fastest": 13.1}, "ratio": {"fastest": None},
                "energy_j_per_step": {"heuristics": 7.0, "fastest": None},
                "errors": {"fastest": "CUDA graph capture failed, timed by CUDA events around eager steps: "
                                       "RuntimeError: operation not permitted when stream is capturing"}},
        "first_step": {"first_step_s": 1.0, "plan_applied_by": "environment", "plan_entries_run": 68,
                       "plan_build_counts": {"built": 0, "deserialized": 68, "deserialize_failed": 0}},
        "names_first_step": {"first_step_s": 3.0, "plan_applied_by": "environment", "plan_entries_run": 68,
                             "plan_build_counts": {"built": 68, "deserialized": 0, "deserialize_failed": 0}},
        "benchmark": {"benchmark_search_s": 16.0, "second_step_s": 0.02, "plan_pinned_runs_per_step": {"fwd": 53},
                      "gpu": {"method": {"benchmark": "graph", "plan": "graph"},
                              "repeats_ms": {"benchmark": [14.4, 14.6], "plan": [12.0, 14.6]},
                              "median_ms": {"benchmark": 14.5, "plan": 13.3},
                              "ratio": {"plan": zoo.ratio_summary([14.4, 14.6], [12.0, 14.6])},
                              "energy_j_per_step": {"benchmark": 7.1, "plan": 6.9}, "errors": {}}},
    }
    for part, data in parts.items():
        if part in skip:
            continue
        record = {"network": network, "part": part, "measured": measured, "environment": environment(device),
                  "settings": {"rounds": 3, "steps": 3, "quick": False}, **data}
        path = zoo.raw_path(out, network, part)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))


# -- command line ---------------------------------------------------------------


def test_defaults() -> None:
    s = zoo.settings_from(zoo.build_parser().parse_args([]))
    assert s.networks == tuple(zoo_networks.ZOO)
    assert s.sections == zoo.SECTIONS
    assert (s.rounds, s.steps) == (16, 6)
    assert s.out == (BENCHMARKS / "results").resolve()
    assert s.budget_s is None and not s.quick


def test_quick_shrinks_loops_and_explicit_values_win() -> None:
    s = zoo.settings_from(zoo.build_parser().parse_args(["--quick", "--rounds", "4"]))
    assert s.quick and s.rounds == 4 and s.steps == zoo.LOOP_DEFAULTS["steps"][1]


def test_lists_are_parsed_and_checked() -> None:
    args = zoo.build_parser().parse_args(["--networks", "dcgan_generator, r3d_18,dcgan_generator",
                                          "--sections", "eager,gpu"])
    assert args.networks == ("dcgan_generator", "r3d_18")
    assert args.sections == ("eager", "gpu")
    for bad in (["--networks", "resnet51"], ["--sections", "eager,warp"], ["--rounds", "0"], ["--networks", ","]):
        with pytest.raises(SystemExit):
            zoo.build_parser().parse_args(bad)


def test_child_argv_round_trips() -> None:
    s = zoo.settings_from(zoo.build_parser().parse_args(["--quick", "--sections", "eager,host", "--steps", "7"]))
    again = zoo.settings_from(zoo.build_parser().parse_args(s.child_argv()))
    assert again.loops() == s.loops() and again.sections == s.sections and again.out == s.out
    assert not s.knob_search
    knobs = zoo.settings_from(zoo.build_parser().parse_args(["--knob-search"]))
    assert zoo.settings_from(zoo.build_parser().parse_args(knobs.child_argv())).knob_search
    assert knobs.loops()["knob_search"] is True


def test_help_runs_without_a_gpu() -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "zoo.py"), "--help"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "--merge-only" in done.stdout and "conv_tasnet" in done.stdout


# -- numbers ----------------------------------------------------------------------


def test_ratio_summary_pairs_rounds_and_skips_missing() -> None:
    summary = zoo.ratio_summary([20.0, 22.0, None, 30.0], [10.0, 22.0, 5.0, 0.0])
    assert summary == {"min": 1.0, "median": 1.5, "max": 2.0, "rounds": 2}
    assert zoo.ratio_summary([], []) is None
    assert zoo.ratio_summary(None, [1.0]) is None
    assert zoo.ratio(None, 2.0) is None and zoo.ratio(3.0, 2.0) == 1.5


def test_median_ignores_failed_samples() -> None:
    assert zoo.median([3.0, None, 1.0, 2.0]) == 2.0
    assert zoo.median([None]) is None and zoo.median(None) is None


def test_rotation_lets_every_mode_lead() -> None:
    assert [zoo.rotated(zoo.EAGER_MODES, i)[0] for i in range(3)] == ["stock", "plan", "fastest"]
    assert sorted(zoo.rotated(zoo.EAGER_MODES, 4)) == sorted(zoo.EAGER_MODES)


def test_versions_and_names() -> None:
    assert zoo.cudnn_text(91900) == "9.19.0"
    assert zoo.cudnn_text(90100) == "9.1.0"
    assert zoo.cudnn_text(8906) == "8.9.6"
    assert zoo.cudnn_text(None) is None
    assert zoo.device_slug(GPU) == "h100"
    assert zoo.device_slug("NVIDIA H200") == "h200"
    assert zoo.device_slug(None) == "unknown"


def test_finite_keeps_json_strict() -> None:
    assert zoo.finite({"a": [float("nan"), 1.0], "b": float("inf"), "c": (2,)}) == {"a": [None, 1.0], "b": None,
                                                                                     "c": [2]}


def test_child_output_parsing_ignores_other_lines() -> None:
    text = f"noise\n{zoo.CHILD_RESULT_PREFIX}{{\"written\": [\"setup\"]}}\nmore noise\n"
    assert zoo.parse_child_output(text) == {"written": ["setup"]}
    assert zoo.parse_child_output("no result") is None
    assert zoo.parse_child_output(f"{zoo.CHILD_RESULT_PREFIX}not json") is None


def test_child_environment_drops_what_would_pin_algorithms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_CUDNN_ALGO_PLAN", "/tmp/plan.json")
    monkeypatch.setenv("TORCH_CUDNN_CONV_FWD_ALGO", "1")
    env = zoo.child_environment({"EXTRA": "1"})
    assert "TORCH_CUDNN_ALGO_PLAN" not in env and "TORCH_CUDNN_CONV_FWD_ALGO" not in env
    assert env["EXTRA"] == "1"
    assert zoo.child_environment({"TORCH_CUDNN_ALGO_PLAN": "p"})["TORCH_CUDNN_ALGO_PLAN"] == "p"


# -- merge and markdown ---------------------------------------------------------------


def test_merge_gives_the_checked_shape(tmp_path: Path) -> None:
    write_parts(tmp_path, "resnet50_amp")
    write_parts(tmp_path, "dcgan_generator", skip=("benchmark", "first_step"))
    report = zoo.merge(tmp_path)
    assert set(report) == {"device", "torch", "cudnn", "date", "networks"}
    assert (report["device"], report["cudnn"], report["date"]) == (GPU, "9.19.0", "2026-11-24")
    assert [net["name"] for net in report["networks"]] == ["resnet50_amp", "dcgan_generator"]
    for net in report["networks"]:
        assert REQUIRED_KEYS <= set(net)
        assert set(net["gpu_ms"]) == {"heuristics", "benchmark", "fastest"}
        assert set(net["eager_ms"]) == {"stock", "plan", "fastest"}
        assert set(net["host_us_per_conv_call"]) == {"stock", "plan"}
        assert set(net["first_step_s"]) == {"stock", "plan"}
    resnet, dcgan = report["networks"]
    assert resnet["gpu_ms"] == {"heuristics": 14.1, "benchmark": 14.5, "fastest": 13.1}
    assert resnet["eager_ms"] == {"stock": 21.0, "plan": 20.0, "fastest": 21.0}
    assert resnet["host_us_per_conv_call"] == {"stock": 81.0, "plan": 71.0}
    assert (resnet["tune_s"], resnet["benchmark_search_s"]) == (2.0, 16.0)
    assert resnet["first_step_s"] == {"stock": 4.0, "plan": 1.0}
    assert resnet["gpu_speedup_fastest"]["vs_benchmark"] == pytest.approx(14.5 / 13.1)
    assert resnet["tune_over_benchmark_search"] == pytest.approx(0.125)
    assert resnet["plan_file_bytes"] == 12345
    assert resnet["eager_ratio"]["plan"]["max"] == pytest.approx(1.1)
    assert any("CUDA graph capture failed" in note for note in resnet["notes"])
    assert dcgan["gpu_ms"]["benchmark"] is None and dcgan["benchmark_search_s"] is None
    assert dcgan["first_step_s"] == {"stock": 4.0, "plan": None}
    json.dumps(report, allow_nan=False)


def test_merge_records_errors_and_keeps_other_gpus_out(tmp_path: Path) -> None:
    write_parts(tmp_path, "resnet50_amp")
    write_parts(tmp_path, "r3d_18", device="NVIDIA H200", measured="2026-11-01T10:00:00+00:00")
    zoo.write_json(zoo.raw_path(tmp_path, "resnet50_amp", "eager"),
                   {"network": "resnet50_amp", "part": "eager", "measured": "2026-11-24T11:00:00+00:00",
                    "environment": None, "error": "main child timed out after 240 s"})
    (zoo.raw_dir(tmp_path) / "broken.json").write_text("{not json")
    report = zoo.merge(tmp_path)
    assert [net["name"] for net in report["networks"]] == ["resnet50_amp"]
    resnet = report["networks"][0]
    assert resnet["eager_ms"] == {"stock": None, "plan": None, "fastest": None}
    assert resnet["errors"] == {"eager": "main child timed out after 240 s"}
    assert "eager failed: main child timed out" in zoo.render_markdown(report)


def test_markdown_table(tmp_path: Path) -> None:
    write_parts(tmp_path, "resnet50_amp")
    markdown = zoo.render_markdown(zoo.merge(tmp_path))
    header = next(line for line in markdown.splitlines() if line.startswith("| network"))
    row = next(line for line in markdown.splitlines() if line.startswith("| resnet50_amp"))
    assert header.count("|") == row.count("|") == len(zoo.TABLE_HEADER) + 1
    assert "21.00 / 20.00 / 21.00" in row  # eager medians
    assert "1.053 (1.00–1.10)" in row  # stock/plan per round: median (min–max)
    assert "81.0 / 71.0" in row and "14.10 / 14.50 / 13.10" in row and "2.00 / 16.00" in row
    assert "4.00 / 3.00 / 1.00" in row  # first step: stock / choices alone / with execution plans
    assert "1.000 (0.91–1.05)" in row  # stock/control: the A/A spread
    assert "1.100 (1.00–1.20)" in row  # plan vs benchmark, interleaved in the benchmark process


def test_report_keeps_the_issue_shape_and_adds_the_detail(tmp_path: Path) -> None:
    write_parts(tmp_path, "resnet50_amp")
    net = zoo.merge(tmp_path)["networks"][0]
    assert set(net["eager_ms"]) == {"stock", "plan", "fastest"}  # the control goes with the detail
    assert net["eager_control_ms"] == 22.0
    assert net["gpu_ms_plan_in_benchmark_process"] == 13.3
    assert net["gpu_speedup_plan_vs_benchmark_same_process"]["median"] == pytest.approx(1.1)
    assert net["first_step_plan_names_s"] == 3.0
    assert net["first_step_plan_build_counts"]["plan"]["deserialized"] == 68
    assert net["first_step_plan_build_counts"]["plan_names"]["built"] == 68


def test_choices_only_plan_keeps_choices_and_drops_execution_plans() -> None:
    tca = pytest.importorskip("torch_cudnn_algo")
    fwd = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"
    bwd = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last bwd_data"
    built = tca.SerializedPlan(b"built plan bytes", "Test GPU", 91900, 13200)
    plan = tca.Plan({fwd: tca.PlanEntry("eng0_k2=1", time_ms=0.07, execution_plan=built), bwd: tca.PlanEntry(1)})
    names = zoo.without_execution_plans(plan)
    assert {str(c): e.choice for c, e in names.entries.items()} == {str(c): e.choice for c, e in plan.entries.items()}
    assert all(entry.execution_plan is None for entry in names.entries.values())
    assert plan[fwd].execution_plan is built  # the tuned plan itself is left as it was
    assert zoo.names_plan_path(Path("/t/resnet50_amp.plan.json")) == Path("/t/resnet50_amp.names.plan.json")


def test_merge_only_command(tmp_path: Path) -> None:
    write_parts(tmp_path, "wav2letter")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "zoo.py"), "--merge-only", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "zoo-h100-2026-11-24.json").read_text())
    assert written["networks"][0]["name"] == "wav2letter"
    assert (tmp_path / "zoo-h100-2026-11-24.md").read_text() in done.stdout + "\n"


def test_merge_only_without_raw_files_fails_cleanly(tmp_path: Path) -> None:
    assert not zoo.write_report(tmp_path)


def test_a_failed_child_leaves_its_error_in_every_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that crashes writes nothing; the parent records the error for each part it owed."""
    s = settings(tmp_path)
    monkeypatch.setattr(zoo, "SCRIPT", tmp_path / "crash.py")
    (tmp_path / "crash.py").write_text("import sys; sys.exit(3)\n")
    result = zoo.run_child("main", "dcgan_generator", ["setup", "eager"], s, 60, tmp_path / "plan.json")
    assert "exit status 3" in result["error"]
    for part in ("setup", "eager"):
        assert "exit status 3" in json.loads(zoo.raw_path(tmp_path, "dcgan_generator", part).read_text())["error"]


def test_benchmark_section_alone_runs_the_main_child_that_tunes_its_plan(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(zoo, "run_child", lambda kind, network, parts, *_: ran.append((kind, parts)) or {})
    s = zoo.settings_from(zoo.build_parser().parse_args(["--sections", "benchmark", "--out", str(tmp_path)]))
    assert zoo.run_network("dcgan_generator", s, zoo.Budget(None), tmp_path)
    assert ran == [("main", ["setup"]), ("benchmark", ["benchmark"])]


def test_gpu_drained_hooks_wait_before_every_conv_and_come_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """One wait before each conv module's forward and one before its backward, also where an
    in-place activation follows the conv (a module backward hook would make that an error)."""
    waits: list[int] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *_: waits.append(1))
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(inplace=True),
                                torch.nn.ConvTranspose2d(4, 2, 1), torch.nn.Linear(6, 1))
    with zoo.gpu_drained_before_convs(model):
        model(torch.randn(1, 3, 8, 8)).sum().backward()
    assert len(waits) == 4
    model(torch.randn(1, 3, 8, 8)).sum().backward()
    assert len(waits) == 4


def test_budget_stops_starting_children() -> None:
    assert zoo.Budget(None).child_timeout(240) == 240
    assert zoo.Budget(1e6).child_timeout(240) == 240
    assert zoo.Budget(zoo.MIN_CHILD_S / 2).child_timeout(240) is None


# -- the zoo --------------------------------------------------------------------------


def test_zoo_covers_every_kind_of_convolution() -> None:
    kinds = set().union(*(entry.kinds for entry in zoo_networks.ZOO.values()))
    assert {"depthwise", "grouped", "3d", "transposed", "1d", "timm", "amp_fp16", "fp32_tf32"} <= kinds
    assert len(zoo_networks.ZOO) >= 9
    assert all(name == entry.name for name, entry in zoo_networks.ZOO.items())


def test_dcgan_generator_makes_64x64_images() -> None:
    workload = zoo_networks.dcgan()
    assert workload.precision == zoo_networks.AMP_FP16
    assert list(workload.example_input.shape) == [zoo_networks.DCGAN_BATCH, zoo_networks.DCGAN_LATENT, 1, 1]
    generator = zoo_networks.dcgan_generator()
    assert sum(isinstance(m, torch.nn.ConvTranspose2d) for m in generator.modules()) == 5
    images = generator(torch.randn(2, zoo_networks.DCGAN_LATENT, 1, 1))
    assert images.shape == (2, 3, 64, 64)
    zoo_networks.loss_of(images).backward()


def test_loss_of_tuple_outputs() -> None:
    a = torch.ones(2, 3, requires_grad=True)
    loss = zoo_networks.loss_of((a * 2, {"aux": a.half() * 4, "lengths": torch.tensor([1, 2])}))
    assert loss.item() == pytest.approx(6.0)
    with pytest.raises(TypeError):
        zoo_networks.loss_of("text")


@pytest.mark.parametrize("name", ["resnet50_amp", "resnet50_tf32", "mobilenet_v3_large", "resnext50_32x4d",
                                  "efficientnet_b0", "r3d_18"])
def test_torchvision_builders(name: str) -> None:
    pytest.importorskip("torchvision", reason="torchvision is a benchmark-only dependency, not installed here")
    workload = zoo_networks.ZOO[name].build()
    assert isinstance(workload.model, torch.nn.Module) and workload.example_input.dim() in (4, 5)
    assert workload.precision in (zoo_networks.AMP_FP16, zoo_networks.FP32_TF32)


@pytest.mark.parametrize("name", ["convnext_tiny", "regnety_016"])
def test_timm_builders(name: str) -> None:
    pytest.importorskip("timm", reason="timm is a benchmark-only dependency, not installed here")
    assert isinstance(zoo_networks.ZOO[name].build().model, torch.nn.Module)


@pytest.mark.parametrize("name", ["conv_tasnet", "wav2letter"])
def test_torchaudio_builders(name: str) -> None:
    pytest.importorskip("torchaudio", reason="torchaudio is a benchmark-only dependency, not installed here")
    workload = zoo_networks.ZOO[name].build()
    assert workload.example_input.dim() == 3
    assert any(isinstance(m, torch.nn.Conv1d) for m in workload.model.modules())


def test_execution_plan_census_counts_what_was_not_serialised() -> None:
    tca = pytest.importorskip("torch_cudnn_algo")
    spec = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last "
    built = tca.SerializedPlan(b"built plan bytes", "Test GPU", 91900, 13200)
    why = "cuDNN cannot serialise it: runtime-compiled"
    plan = tca.Plan({spec + "fwd": tca.PlanEntry("eng0_k2=1", execution_plan=built),
                     spec + "bwd_data": tca.PlanEntry("eng7_k2=1", execution_plan_unavailable=why),
                     spec + "bwd_filter": tca.PlanEntry("eng7_k2=0", execution_plan_unavailable=why)})
    assert zoo.execution_plan_census(plan) == {"carried": 1, "unavailable": {why: 2}}
