"""CPU tests of the zoo benchmark (benchmarks/zoo.py, benchmarks/harness), the parts that need no
GPU: the command line, the raw files' merge into the result's shape, the markdown rendering (also
of the kept result files), the statistics, and the zoo itself (every kind of convolution; the
DCGAN generator defined here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the harness imports torch")

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import cli, config, networks, raw, render, results, stats, timing  # noqa: E402

GPU = "NVIDIA H100 80GB HBM3"
REQUIRED_KEYS = {"name", "gpu_ms", "eager_ms", "host_us_per_conv_call", "tune_s", "benchmark_search_s",
                 "first_step_s"}


def environment(device: str = GPU) -> dict:
    return {"device": device, "torch": "2.11.0+cu130", "cudnn": "9.19.0", "cuda": "13.0",
            "torch_cudnn_algo": "0.1.0", "extension_loaded": True}


def settings(out: Path, **changes: object) -> config.Settings:
    args = cli.build_parser().parse_args(["--out", str(out)])
    return config.Settings(**{**cli.settings_from(args).__dict__, **changes})


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
                  "ratio": {"plan": stats.ratio_summary([20.0, 22.0, 21.0], [19.0, 20.0, 21.0]),
                            "fastest": stats.ratio_summary([20.0, 22.0, 21.0], [18.0, 24.0, 21.0]),
                            "control": stats.ratio_summary([20.0, 22.0, 21.0], [22.0, 22.0, 20.0])},
                  "configs_tuned_in_rounds": 0},
        "host": {"rounds_us": {"stock": [80.0, 82.0], "plan": [70.0, 72.0], "fastest": [75.0, 74.0]},
                 "median_us_per_call": {"stock": 81.0, "plan": 71.0, "fastest": 74.5},
                 "ratio": {"plan": stats.ratio_summary([80.0, 82.0], [70.0, 72.0]), "fastest": None},
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
                              "ratio": {"plan": stats.ratio_summary([14.4, 14.6], [12.0, 14.6])},
                              "energy_j_per_step": {"benchmark": 7.1, "plan": 6.9}, "errors": {}}},
        "fastest_first_run": {"first_step_s": 9.0, "second_step_s": 0.05, "tuned": 68, "tuned_first_step": 68,
                              "kept": {"kept": 0, "tuned": 68}, "tuning_db_entries": 136,
                              "tuning_db_bytes": 2_000_000,
                              "execution_plans": {"built": 68, "deserialized": 0, "deserialize_failed": 0}},
        "fastest_second_run": {"first_step_s": 0.8, "second_step_s": 0.05, "tuned": 0, "tuned_first_step": 0,
                               "kept": {"kept": 68}, "tuning_db_entries": 136,
                               "tuning_db_bytes": 2_000_000,
                               "execution_plans": {"built": 0, "deserialized": 68, "deserialize_failed": 0}},
    }
    for part, data in parts.items():
        if part in skip:
            continue
        record = {"network": network, "part": part, "measured": measured, "environment": environment(device),
                  "settings": {"rounds": 3, "steps": 3, "quick": False}, **data}
        path = raw.raw_path(out, network, part)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))


# -- command line ---------------------------------------------------------------


def test_defaults() -> None:
    s = cli.settings_from(cli.build_parser().parse_args([]))
    assert s.networks == tuple(networks.ZOO)
    assert s.sections == config.SECTIONS
    assert (s.rounds, s.steps) == (16, 6)
    assert s.out == (BENCHMARKS / "results").resolve()
    assert s.budget_s is None and not s.quick


def test_quick_shrinks_loops_and_explicit_values_win() -> None:
    s = cli.settings_from(cli.build_parser().parse_args(["--quick", "--rounds", "4"]))
    assert s.quick and s.rounds == 4 and s.steps == config.LOOP_DEFAULTS["steps"][1]


def test_lists_are_parsed_and_checked() -> None:
    args = cli.build_parser().parse_args(["--networks", "dcgan_generator, r3d_18,dcgan_generator",
                                          "--sections", "eager,gpu"])
    assert args.networks == ("dcgan_generator", "r3d_18")
    assert args.sections == ("eager", "gpu")
    for bad in (["--networks", "resnet51"], ["--sections", "eager,warp"], ["--rounds", "0"], ["--networks", ","]):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(bad)


def test_child_argv_round_trips() -> None:
    s = cli.settings_from(cli.build_parser().parse_args(["--quick", "--sections", "eager,host", "--steps", "7"]))
    again = cli.settings_from(cli.build_parser().parse_args(s.child_argv()))
    assert again.loops() == s.loops() and again.sections == s.sections and again.out == s.out
    assert not s.knob_search
    knobs = cli.settings_from(cli.build_parser().parse_args(["--knob-search"]))
    assert cli.settings_from(cli.build_parser().parse_args(knobs.child_argv())).knob_search
    assert knobs.loops()["knob_search"] is True


def test_help_runs_without_a_gpu() -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "zoo.py"), "--help"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "--merge-only" in done.stdout and "conv_tasnet" in done.stdout


# -- numbers ----------------------------------------------------------------------


def test_ratio_summary_pairs_rounds_and_skips_missing() -> None:
    summary = stats.ratio_summary([20.0, 22.0, None, 30.0], [10.0, 22.0, 5.0, 0.0])
    assert summary == {"min": 1.0, "median": 1.5, "max": 2.0, "rounds": 2}
    assert stats.ratio_summary([], []) is None
    assert stats.ratio_summary(None, [1.0]) is None
    assert stats.ratio(None, 2.0) is None and stats.ratio(3.0, 2.0) == 1.5


def test_median_ignores_failed_samples() -> None:
    assert stats.median([3.0, None, 1.0, 2.0]) == 2.0
    assert stats.median([None]) is None and stats.median(None) is None


def test_rotation_lets_every_mode_lead() -> None:
    assert [stats.rotated(config.EAGER_MODES, i)[0] for i in range(3)] == ["stock", "plan", "fastest"]
    assert sorted(stats.rotated(config.EAGER_MODES, 4)) == sorted(config.EAGER_MODES)


def test_versions_and_names() -> None:
    assert results.cudnn_text(91900) == "9.19.0"
    assert results.cudnn_text(90100) == "9.1.0"
    assert results.cudnn_text(8906) == "8.9.6"
    assert results.cudnn_text(None) is None
    assert results.device_slug(GPU) == "h100"
    assert results.device_slug("NVIDIA H200") == "h200"
    assert results.device_slug(None) == "unknown"


def test_finite_keeps_json_strict() -> None:
    assert results.finite({"a": [float("nan"), 1.0], "b": float("inf"), "c": (2,)}) == {"a": [None, 1.0], "b": None,
                                                                                     "c": [2]}


def test_finite_rounds_floats_to_the_kept_digits() -> None:
    assert results.finite([7.937409973144531, 30.475830895, 1e-07 / 3, 123456789.0, 12345678901, True]) == [
        7.93741, 30.47583, 3.333333e-08, 123456800.0, 12345678901, True]


def test_child_output_parsing_ignores_other_lines() -> None:
    text = f"noise\n{config.CHILD_RESULT_PREFIX}{{\"written\": [\"setup\"]}}\nmore noise\n"
    assert cli.parse_child_output(text) == {"written": ["setup"]}
    assert cli.parse_child_output("no result") is None
    assert cli.parse_child_output(f"{config.CHILD_RESULT_PREFIX}not json") is None


def test_child_environment_drops_what_would_pin_algorithms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_CUDNN_ALGO_PLAN", "/tmp/plan.json")
    monkeypatch.setenv("TORCH_CUDNN_CONV_FWD_ALGO", "1")
    env = cli.child_environment({"EXTRA": "1"})
    assert "TORCH_CUDNN_ALGO_PLAN" not in env and "TORCH_CUDNN_CONV_FWD_ALGO" not in env
    assert env["EXTRA"] == "1"
    assert cli.child_environment({"TORCH_CUDNN_ALGO_PLAN": "p"})["TORCH_CUDNN_ALGO_PLAN"] == "p"


# -- merge and markdown ---------------------------------------------------------------


def test_merge_gives_the_checked_shape(tmp_path: Path) -> None:
    write_parts(tmp_path, "resnet50_amp")
    write_parts(tmp_path, "dcgan_generator", skip=("benchmark", "first_step"))
    report = raw.merge(tmp_path)
    assert set(report) == {"device", "torch", "cudnn", "date", "own_kernels", "networks"}
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
    results.write_json(raw.raw_path(tmp_path, "resnet50_amp", "eager"),
                   {"network": "resnet50_amp", "part": "eager", "measured": "2026-11-24T11:00:00+00:00",
                    "environment": None, "error": "main child timed out after 240 s"})
    (raw.raw_dir(tmp_path) / "broken.json").write_text("{not json")
    report = raw.merge(tmp_path)
    assert [net["name"] for net in report["networks"]] == ["resnet50_amp"]
    resnet = report["networks"][0]
    assert resnet["eager_ms"] == {"stock": None, "plan": None, "fastest": None}
    assert resnet["errors"] == {"eager": "main child timed out after 240 s"}
    assert "eager failed: main child timed out" in render.render_markdown(report)


def table_rows(markdown: str, title: str) -> dict[str, list[str]]:
    """The rows of the table under ``## title``, by network name, split into cells."""
    section = markdown.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split(" | ") for line in section.splitlines() if line.startswith("| ")]
    header, *body = rows
    assert all(len(row) == len(header) for row in body)
    return {row[0].split(" (")[0].strip(): [cell.strip() for cell in row[1:]] for row in body}


def test_markdown_tables(tmp_path: Path) -> None:
    write_parts(tmp_path, "resnet50_amp")
    markdown = render.render_markdown(raw.merge(tmp_path))
    gpu = table_rows(markdown, "GPU time per training step")["resnet50_amp"]
    assert gpu[:3] == ["14.10 / 14.50 / 13.10", "13.30", "1.100 (1.00–1.20)"]  # plan vs benchmark, one process
    first = table_rows(markdown, "First step of a fresh process")["resnet50_amp"]
    assert first == ["4.00 / 3.00 / 1.00", "0.25", "16.00"]  # stock / choices alone / with execution plans
    assert table_rows(markdown, "Tuning time")["resnet50_amp"][:3] == ["2.00", "16.00", "0.125"]
    eager = table_rows(markdown, "Eager training step")["resnet50_amp"]
    assert eager[:2] == ["21.00 / 20.00 / 21.00", "1.053 (1.00–1.10)"]  # medians; per-round ratio
    assert eager[3] == "1.000 (0.91–1.05)"  # stock/control: the A/A spread
    assert table_rows(markdown, "Host time per convolution call")["resnet50_amp"][0] == "81.0 / 71.0"
    fastest = table_rows(markdown, '`"fastest"` run twice on one tuning database')["resnet50_amp"]
    assert fastest == ["4.00 / 9.00 / 0.80", "0.20", "0 / 0", "136 / 2000000"]


def test_sections_not_measured_leave_their_tables_out(tmp_path: Path) -> None:
    """What `zoo.py --sections gpu,first_step,benchmark` writes: the GPU-time, first-step and tuning
    tables, no eager or host table."""
    write_parts(tmp_path, "dcgan_generator", skip=("eager", "host", "fastest_first_run", "fastest_second_run"))
    markdown = render.render_markdown(raw.merge(tmp_path))
    titles = [line[3:] for line in markdown.splitlines() if line.startswith("## ")]
    assert titles == ["GPU time per training step", "First step of a fresh process", "Tuning time",
                      "Errors and notes"]


def test_gpu_first_step_benchmark_command_line() -> None:
    args = cli.build_parser().parse_args(["--sections", "gpu,first_step,benchmark", "--networks",
                                          "resnet50_amp,conv_tasnet", "--budget-s", "510"])
    s = cli.settings_from(args)
    assert s.sections == ("gpu", "first_step", "benchmark") and s.budget_s == 510
    assert s.networks == ("resnet50_amp", "conv_tasnet")


def test_kept_results_render(tmp_path: Path) -> None:
    """Every zoo result kept under benchmarks/results renders, with its headline ratios."""
    kept = sorted((BENCHMARKS / "results").glob("zoo-*.json"))
    assert kept
    for path in kept:
        report = json.loads(path.read_text())
        markdown = render.render_markdown(report)
        assert markdown.startswith("# Zoo:") and "## " in markdown
        assert set(render.summary(report)) == {"plan_vs_benchmark_gpu", "fastest_vs_heuristics_gpu",
                                               "first_step_plan_over_stock", "tune_over_benchmark_search",
                                               "fastest_second_run_first_step_over_stock"}


def test_result_keeps_the_headline_shape_and_adds_the_detail(tmp_path: Path) -> None:
    write_parts(tmp_path, "resnet50_amp")
    net = raw.merge(tmp_path)["networks"][0]
    assert set(net["eager_ms"]) == {"stock", "plan", "fastest"}  # the control goes with the detail
    assert net["eager_control_ms"] == 22.0
    assert net["gpu_ms_plan_in_benchmark_process"] == 13.3
    assert net["gpu_speedup_plan_vs_benchmark_same_process"]["median"] == pytest.approx(1.1)
    assert net["first_step_plan_names_s"] == 3.0
    assert net["first_step_plan_build_counts"]["plan"]["deserialized"] == 68
    assert net["first_step_plan_build_counts"]["plan_names"]["built"] == 68
    assert net["fastest_runs"]["second"]["tuned"] == 0
    assert net["fastest_runs"]["second"]["execution_plans"]["deserialized"] == 68
    assert net["fastest_second_run_first_step_over_stock"] == pytest.approx(0.2)


def test_result_leaves_the_bulk_no_table_shows_in_the_raw_files(tmp_path: Path) -> None:
    """Each round's times and the host time per op stay in the raw files (the ratios keep what the
    rounds give), and of the loop settings the main child's, which the markdown reads."""
    write_parts(tmp_path, "resnet50_amp")
    net = raw.merge(tmp_path)["networks"][0]
    assert not {"eager_rounds_ms", "eager_orders", "host_rounds_us", "host_ops", "host_ops_gpu_drained",
                "gpu_repeats_ms"} & set(net)
    assert net["eager_ratio"]["plan"]["rounds"] == 3
    assert net["loops"] == {"setup": {"rounds": 3, "steps": 3, "quick": False}}
    knob_search = {**net, "loops": {"setup": {**net["loops"]["setup"], "knob_search": True}}}
    assert "Measured with `--knob-search`" in render.render_markdown({**raw.merge(tmp_path), "networks": [knob_search]})


def test_choices_only_plan_keeps_choices_and_drops_execution_plans() -> None:
    tca = pytest.importorskip("torch_cudnn_algo")
    fwd = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"
    bwd = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last bwd_data"
    built = tca.SerializedExecutionPlan(b"built plan bytes", "Test GPU", 91900, 13200)
    plan = tca.Plan({fwd: tca.PlanEntry("eng0_k2=1", time_ms=0.07, execution_plan=built), bwd: tca.PlanEntry(1)})
    from harness import measure

    names = measure.without_execution_plans(plan)
    assert {str(c): e.choice for c, e in names.entries.items()} == {str(c): e.choice for c, e in plan.entries.items()}
    assert all(entry.execution_plan is None for entry in names.entries.values())
    assert plan[fwd].execution_plan is built  # the tuned plan itself is left as it was
    assert config.names_plan_path(Path("/t/resnet50_amp.plan.json")) == Path("/t/resnet50_amp.names.plan.json")


def test_merge_only_command(tmp_path: Path) -> None:
    write_parts(tmp_path, "wav2letter")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "zoo.py"), "--merge-only", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "zoo-h100-2026-11-24.json").read_text())
    assert written["networks"][0]["name"] == "wav2letter"
    assert (tmp_path / "zoo-h100-2026-11-24.md").read_text() in done.stdout + "\n"


def test_merge_only_without_raw_files_fails_cleanly(tmp_path: Path) -> None:
    assert not cli.write_report(tmp_path)


def test_a_failed_child_leaves_its_error_in_every_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that crashes writes nothing; the parent records the error for each part it owed."""
    s = settings(tmp_path)
    monkeypatch.setattr(cli, "SCRIPT", tmp_path / "crash.py")
    (tmp_path / "crash.py").write_text("import sys; sys.exit(3)\n")
    result = cli.run_child("main", "dcgan_generator", ["setup", "eager"], s, 60, tmp_path / "plan.json")
    assert "exit status 3" in result["error"]
    for part in ("setup", "eager"):
        assert "exit status 3" in json.loads(raw.raw_path(tmp_path, "dcgan_generator", part).read_text())["error"]


def test_benchmark_section_alone_runs_the_main_child_that_tunes_its_plan(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(cli, "run_child", lambda kind, network, parts, *_: ran.append((kind, parts)) or {})
    s = cli.settings_from(cli.build_parser().parse_args(["--sections", "benchmark", "--out", str(tmp_path)]))
    assert cli.run_network("dcgan_generator", s, cli.Budget(None), tmp_path)
    assert ran == [("main", ["setup"]), ("benchmark", ["benchmark"])]


def test_the_benchmark_search_runs_on_an_empty_jit_cache_unless_one_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stock's search is measured cold, as tune() is on an empty tuning database; a named cache
    (to measure a warm one) is left to the child."""
    envs: dict[str, dict[str, str]] = {}
    monkeypatch.setattr(cli, "run_child", lambda kind, network, parts, settings, timeout, plan_path, env=None:
                        envs.setdefault(kind, env or {}) and {})
    monkeypatch.delenv("CUDA_CACHE_PATH", raising=False)
    s = cli.settings_from(cli.build_parser().parse_args(["--sections", "benchmark", "--out", str(tmp_path)]))
    assert cli.run_network("dcgan_generator", s, cli.Budget(None), tmp_path)
    cache = Path(envs["benchmark"]["CUDA_CACHE_PATH"])
    assert cache.parent == tmp_path and not cache.exists()
    assert "CUDA_CACHE_PATH" not in envs["main"]
    envs.clear()
    monkeypatch.setenv("CUDA_CACHE_PATH", str(tmp_path / "warm"))
    assert cli.run_network("dcgan_generator", s, cli.Budget(None), tmp_path)
    assert "CUDA_CACHE_PATH" not in envs["benchmark"]


def test_fastest_db_section_runs_fastest_twice_on_one_database_of_its_own(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Both runs see all three flags "fastest" and the same database, one that tune() in the main
    child never wrote to; stock's first step comes from the main child."""
    ran: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr(cli, "run_child", lambda kind, network, parts, settings, timeout, plan_path, env=None:
                        ran.append((kind, parts, env or {})) or {})
    s = cli.settings_from(cli.build_parser().parse_args(["--sections", "fastest_db", "--out", str(tmp_path)]))
    assert cli.run_network("dcgan_generator", s, cli.Budget(None), tmp_path)
    assert [(kind, parts) for kind, parts, _ in ran] == [
        ("main", ["setup"]), ("fastest_first_run", ["fastest_first_run"]), ("fastest_second_run", ["fastest_second_run"])]
    first, second = ran[1][2], ran[2][2]
    assert first == second
    assert all(first[name] == "fastest" for name in config.FASTEST_ENV)
    assert first[config.TUNING_DB_ENV_VAR] == str(tmp_path / "dcgan_generator-fastest-db")


def test_gpu_drained_hooks_wait_before_every_conv_and_come_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """One wait before each conv module's forward and one before its backward, also where an
    in-place activation follows the conv (a module backward hook would make that an error)."""
    waits: list[int] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *_: waits.append(1))
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(inplace=True),
                                torch.nn.ConvTranspose2d(4, 2, 1), torch.nn.Linear(6, 1))
    with timing.gpu_drained_before_convs(model):
        model(torch.randn(1, 3, 8, 8)).sum().backward()
    assert len(waits) == 4
    model(torch.randn(1, 3, 8, 8)).sum().backward()
    assert len(waits) == 4


def test_budget_stops_starting_children() -> None:
    assert cli.Budget(None).child_timeout(240) == 240
    assert cli.Budget(1e6).child_timeout(240) == 240
    assert cli.Budget(config.MIN_CHILD_S / 2).child_timeout(240) is None


# -- the zoo --------------------------------------------------------------------------


def test_zoo_covers_every_kind_of_convolution() -> None:
    kinds = set().union(*(entry.kinds for entry in networks.ZOO.values()))
    assert {"depthwise", "grouped", "3d", "transposed", "1d", "timm", "amp_fp16", "fp32_tf32"} <= kinds
    assert len(networks.ZOO) >= 9
    assert all(name == entry.name for name, entry in networks.ZOO.items())


def test_dcgan_generator_makes_64x64_images() -> None:
    workload = networks.dcgan()
    assert workload.precision == networks.AMP_FP16
    assert list(workload.example_input.shape) == [networks.DCGAN_BATCH, networks.DCGAN_LATENT, 1, 1]
    generator = networks.dcgan_generator()
    assert sum(isinstance(m, torch.nn.ConvTranspose2d) for m in generator.modules()) == 5
    images = generator(torch.randn(2, networks.DCGAN_LATENT, 1, 1))
    assert images.shape == (2, 3, 64, 64)
    networks.loss_of(images).backward()


def test_loss_of_tuple_outputs() -> None:
    a = torch.ones(2, 3, requires_grad=True)
    loss = networks.loss_of((a * 2, {"aux": a.half() * 4, "lengths": torch.tensor([1, 2])}))
    assert loss.item() == pytest.approx(6.0)
    with pytest.raises(TypeError):
        networks.loss_of("text")


@pytest.mark.parametrize("name", ["resnet50_amp", "resnet50_tf32", "mobilenet_v3_large", "resnext50_32x4d",
                                  "efficientnet_b0", "r3d_18"])
def test_torchvision_builders(name: str) -> None:
    pytest.importorskip("torchvision", reason="torchvision is a benchmark-only dependency, not installed here")
    workload = networks.ZOO[name].build()
    assert isinstance(workload.model, torch.nn.Module) and workload.example_input.dim() in (4, 5)
    assert workload.precision in (networks.AMP_FP16, networks.FP32_TF32)


@pytest.mark.parametrize("name", ["convnext_tiny", "regnety_016"])
def test_timm_builders(name: str) -> None:
    pytest.importorskip("timm", reason="timm is a benchmark-only dependency, not installed here")
    assert isinstance(networks.ZOO[name].build().model, torch.nn.Module)


@pytest.mark.parametrize("name", ["conv_tasnet", "wav2letter"])
def test_torchaudio_builders(name: str) -> None:
    pytest.importorskip("torchaudio", reason="torchaudio is a benchmark-only dependency, not installed here")
    workload = networks.ZOO[name].build()
    assert workload.example_input.dim() == 3
    assert any(isinstance(m, torch.nn.Conv1d) for m in workload.model.modules())


def test_execution_plan_census_counts_what_was_not_serialised() -> None:
    tca = pytest.importorskip("torch_cudnn_algo")
    spec = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last "
    built = tca.SerializedExecutionPlan(b"built plan bytes", "Test GPU", 91900, 13200)
    why = "cuDNN cannot serialise it: runtime-compiled"
    plan = tca.Plan({spec + "fwd": tca.PlanEntry("eng0_k2=1", execution_plan=built),
                     spec + "bwd_data": tca.PlanEntry("eng7_k2=1", execution_plan_unavailable=why),
                     spec + "bwd_filter": tca.PlanEntry("eng7_k2=0", execution_plan_unavailable=why)})
    from harness import measure

    assert measure.execution_plan_census(plan) == {"carried": 1, "unavailable": {why: 2}}
