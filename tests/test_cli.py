"""CPU: the torch-cudnn-algo command — parsing, info, the plan it reports, and
exit status 2 with one line for GPU commands on a machine without a GPU."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_cudnn_algo
from torch_cudnn_algo import Plan, _benchmark_child, _workload, cli

CONV = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"
HIDDEN_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # a child process sees no GPU, on any machine


def run_module(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torch_cudnn_algo", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def test_parser_reads_each_command() -> None:
    parser = cli.build_parser()
    listed = parser.parse_args(["list", CONV, "--no-tf32", "--deterministic"])
    assert str(listed.conv) == CONV and listed.tf32 is False and listed.deterministic is True
    prof = parser.parse_args(["profile", CONV, "--plot", "out.png", "--reps", "5", "--no-energy"])
    assert (prof.plot, prof.reps, prof.energy) == ("out.png", 5, False)
    tune = parser.parse_args(["tune"])
    assert (tune.model, tune.batch, tune.policy, tune.directions, tune.output, tune.amp) == (
        None, 64, "fastest", "fwd,bwd_data,bwd_filter", "torch-cudnn-algo-plan.json", "fp16")
    tune = parser.parse_args(["tune", "mymodels:make", "--policy", "least_workspace", "--directions", "fwd, bwd_filter",
                              "-o", "p.json"])
    assert (tune.model, tune.policy, tune.directions, tune.output) == ("mymodels:make", "least_workspace",
                                                                       "fwd,bwd_filter", "p.json")


@pytest.mark.parametrize("argv, expected", [
    (["list", "conv2d 1x2"], "cannot read a convolution"),
    (["profile"], "required"),
    (["tune", "--directions", "fwd,sideways"], "comma-separated subset"),
    (["tune", "--policy", "cheapest"], "invalid choice"),
    ([], "required"),
])
def test_usage_errors_exit_2_with_the_reason(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert expected in capsys.readouterr().err


def test_non_positive_counts_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tune", "--steps", "0"]) == 2
    assert "--steps must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["list", CONV], ["profile", CONV, "--plot", "x.png"], ["tune"]])
def test_gpu_commands_without_a_gpu_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without one
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"torch-cudnn-algo {argv[0]}: needs a CUDA GPU"), lines


def test_module_entry_point_exit_status_without_a_gpu() -> None:
    result = run_module("tune", **HIDDEN_GPU)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("torch-cudnn-algo tune: needs a CUDA GPU")


def test_info_works_without_a_gpu_and_shows_flags_and_plan(capsys: pytest.CaptureFixture[str]) -> None:
    torch.backends.cudnn.conv_fwd_algo = 1
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for needle in (f"torch            {torch.__version__}", "cuDNN", "GPU", "extension        loaded",
                   "conv_fwd_algo = 1", "conv_bwd_data_algo = None", "plan in force    none"):
        assert needle in out, (needle, out)
    torch_cudnn_algo.use_plan(Plan({CONV: "eng0"}, policy="fastest"))
    assert cli.main(["info"]) == 0
    assert "plan in force    set in this process: 1 configurations, policy fastest" in capsys.readouterr().out


def test_info_prints_cudnn_as_major_minor_patch(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["info"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cuDNN")]
    if not torch.backends.cudnn.is_available():
        assert line.split(None, 1)[1] == "not available"
        return
    number = torch.backends.cudnn.version()  # cuDNN 9: major * 10000 + minor * 100 + patch (91900)
    assert line.split(None, 1)[1] == f"{number // 10000}.{number % 10000 // 100}.{number % 100}"
    assert re.fullmatch(r"cuDNN +\d+\.\d+\.\d+", line), line


def test_info_reports_the_plan_from_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    Plan({CONV: "eng0"}, policy="fastest").save(path)
    result = run_module("info", TORCH_CUDNN_ALGO_PLAN=str(path))
    assert result.returncode == 0, result.stderr
    assert f"plan in force    {path}: 1 configurations" in result.stdout
    broken = tmp_path / "broken.json"
    broken.write_text("[]")
    result = run_module("info", TORCH_CUDNN_ALGO_PLAN=str(broken))
    assert result.returncode == 0
    assert f"plan in force    none (TORCH_CUDNN_ALGO_PLAN={broken} was not applied)" in result.stdout
    assert "not a torch-cudnn-algo plan" in result.stderr


def test_console_script_is_installed_and_runs_info() -> None:
    script = shutil.which("torch-cudnn-algo") or str(Path(sys.executable).with_name("torch-cudnn-algo"))
    if not Path(script).exists():
        pytest.skip("the console script is not installed in this environment (pip install . adds it)")
    result = subprocess.run([script, "info"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "torch-cudnn-algo" in result.stdout and "flags in force" in result.stdout


def test_model_callable_errors_are_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "user_models.py").write_text("def make():\n    return 3\nvalue = 5\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="module:callable"):
        _workload._user_model("user_models")
    with pytest.raises(ValueError, match="is not callable"):
        _workload._user_model("user_models:value")
    with pytest.raises(ValueError, match=r"must return \(model, example_inputs\)"):
        _workload._user_model("user_models:make")


def test_default_outputs_are_ignored_in_a_checkout(tmp_path: Path) -> None:
    # `torch-cudnn-algo tune` run in a checkout must not leave an untracked file behind.
    # Judged by git itself, on the checkout's .gitignore in a scratch repository.
    gitignore = Path(__file__).resolve().parent.parent / ".gitignore"
    if shutil.which("git") is None or not gitignore.exists():
        pytest.skip("needs git and the checkout's .gitignore")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    shutil.copy(gitignore, tmp_path / ".gitignore")
    done = subprocess.run(["git", "check-ignore", "-q", cli.DEFAULT_PLAN_PATH], cwd=tmp_path, timeout=60)
    assert done.returncode == 0, f"{cli.DEFAULT_PLAN_PATH} is not ignored by .gitignore"


# -- tune: the benchmark=True child, its protocol, the summary (CPU, fake numbers) ----------

def tune_args(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["tune", *argv])


def fake_times(wall: list[float], gpu: list[float], conv: list[float], energy: list[float | None]) -> dict:
    return {"wall_ms": wall, "gpu_ms": gpu, "conv_ms": conv, "energy_j": energy}


def test_tune_options_for_the_benchmark_baseline_seed_and_energy() -> None:
    args = tune_args()
    assert (args.seed, args.energy, args.benchmark_baseline, args.benchmark_timeout) == (0, True, True, 900.0)
    args = tune_args("--seed", "3", "--no-energy", "--no-benchmark-baseline", "--benchmark-timeout", "60")
    assert (args.seed, args.energy, args.benchmark_baseline, args.benchmark_timeout) == (3, False, False, 60.0)


def test_tune_help_documents_the_comparison(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["tune", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for needle in ("--no-benchmark-baseline", "--benchmark-timeout", "--seed", "--energy", "fresh process",
                   "stock heuristics", "benchmark=True", "depthwise", "grouped", "energy", "n/a"):
        assert needle in out, needle


def test_non_positive_benchmark_timeout_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tune", "--benchmark-timeout", "0"]) == 2
    assert "--benchmark-timeout must be >= 1" in capsys.readouterr().err


def test_child_gets_the_same_workload_and_timing() -> None:
    args = tune_args("mymodels:make", "--batch", "8", "--image-size", "96", "--amp", "bf16", "--seed", "5",
                     "--rounds", "3", "--steps", "4", "--no-energy", "--policy", "least_workspace")
    command = _benchmark_child.child_command(args)
    assert command[:3] == [sys.executable, "-m", "torch_cudnn_algo._benchmark_child"]
    child = _benchmark_child.build_parser().parse_args(command[3:])
    for name in ("model", "batch", "image_size", "amp", "seed", "rounds", "steps", "energy"):
        assert getattr(child, name) == getattr(args, name), name
    default = _benchmark_child.build_parser().parse_args(_benchmark_child.child_arguments(tune_args()))
    assert default.model is None and default.energy is True


def test_child_environment_drops_what_pins_algorithms_or_applies_a_plan() -> None:
    env = {"PATH": "/bin", "TORCH_CUDNN_CONV_FWD_ALGO": "1", "TORCH_CUDNN_CONV_ALGO_STRICT": "1",
           "TORCH_CUDNN_ALGO_PLAN": "plan.json", "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT": "100"}
    assert _benchmark_child.child_environment(env) == {"PATH": "/bin", "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT": "100"}


GOOD_RESULT = {"first_step_s": 12.5, "second_step_s": 0.03, "wall_ms": [20.0, 21.0], "gpu_ms": [13.0, 13.1],
               "conv_ms": [5.0, 5.1], "energy_j": [4.0, None]}


def test_child_result_is_found_among_other_output() -> None:
    stdout = "\n".join(["a model printing to stdout", _benchmark_child.RESULT_PREFIX + json.dumps({"error": "old"}),
                        _benchmark_child.RESULT_PREFIX + json.dumps(GOOD_RESULT), "trailing noise"])
    assert _benchmark_child.parse_result(stdout) == GOOD_RESULT


@pytest.mark.parametrize("stdout, message", [
    ("", "printed no result line"),
    ("Segmentation fault\n", "printed no result line"),
    (_benchmark_child.RESULT_PREFIX + "{not json", "not JSON"),
    (_benchmark_child.RESULT_PREFIX + "[1, 2]", "a JSON list, not an object"),
    (_benchmark_child.RESULT_PREFIX + json.dumps({"error": "CUDA out of memory"}), "CUDA out of memory"),
    (_benchmark_child.RESULT_PREFIX + json.dumps({**GOOD_RESULT, "first_step_s": "slow"}), "'first_step_s'"),
    (_benchmark_child.RESULT_PREFIX + json.dumps({**GOOD_RESULT, "wall_ms": []}), "'wall_ms' is empty"),
    (_benchmark_child.RESULT_PREFIX + json.dumps({**GOOD_RESULT, "gpu_ms": [1.0, None]}), "not a number"),
    (_benchmark_child.RESULT_PREFIX + json.dumps({**GOOD_RESULT, "conv_ms": [float("nan")]}), "not a number"),
    (_benchmark_child.RESULT_PREFIX + json.dumps({k: v for k, v in GOOD_RESULT.items() if k != "energy_j"}),
     "no list 'energy_j'"),
])
def test_unusable_child_output_is_one_clear_error(stdout: str, message: str) -> None:
    with pytest.raises(_benchmark_child.BenchmarkChildError, match=re.escape(message)):
        _benchmark_child.parse_result(stdout)


def fake_child(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    monkeypatch.setattr(_benchmark_child, "child_command", lambda _args: [sys.executable, "-c", code])


def test_failing_child_reports_its_status_and_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_child(monkeypatch, "import sys; print('garbage'); sys.stderr.write('line 1\\nRuntimeError: boom\\n'); "
                            "sys.exit(3)")
    with pytest.raises(_benchmark_child.BenchmarkChildError) as info:
        _benchmark_child.run_child(tune_args(), 60)
    text = str(info.value)
    assert text.startswith("exit status 3; it printed no result line; its stderr ended:")
    assert "RuntimeError: boom" in text


def test_child_that_hangs_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_child(monkeypatch, "import time; time.sleep(60)")
    with pytest.raises(_benchmark_child.BenchmarkChildError, match=r"timed out after 1 s \(--benchmark-timeout\)"):
        _benchmark_child.run_child(tune_args(), 1)


def test_child_result_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    line = _benchmark_child.RESULT_PREFIX + json.dumps(GOOD_RESULT)
    fake_child(monkeypatch, f"print('hello'); print({line!r})")
    assert _benchmark_child.run_child(tune_args(), 60) == GOOD_RESULT


def test_benchmark_row_from_a_failed_child_lets_the_command_go_on(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    fake_child(monkeypatch, "print('not a result')")
    row = cli._benchmark_row(tune_args())
    assert row.times is None and row.failure == "failed: it printed no result line"
    assert "stock benchmark=True (fresh process): failed, the other rows stand: it printed no result line" in \
        capsys.readouterr().out
    skipped = cli._benchmark_row(tune_args("--no-benchmark-baseline"))
    assert skipped.times is None and "--no-benchmark-baseline" in skipped.failure


def test_benchmark_row_from_a_good_child(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fake_child(monkeypatch, f"print({_benchmark_child.RESULT_PREFIX + json.dumps(GOOD_RESULT)!r})")
    row = cli._benchmark_row(tune_args())
    assert row.failure is None and row.decide_s == 12.5 and row.times["wall_ms"] == [20.0, 21.0]
    assert "first step (the search) 12.5 s" in capsys.readouterr().out


def test_child_without_a_gpu_prints_an_error_result() -> None:
    result = subprocess.run([sys.executable, "-m", "torch_cudnn_algo._benchmark_child", "--rounds", "1"],
                            capture_output=True, text=True, timeout=300, env={**os.environ, **HIDDEN_GPU})
    assert result.returncode == 1
    with pytest.raises(_benchmark_child.BenchmarkChildError, match="needs a CUDA GPU"):
        _benchmark_child.parse_result(result.stdout)


def test_child_main_reports_an_exception_as_its_result(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    def fail(_args: argparse.Namespace) -> dict:
        raise RuntimeError("cuDNN said no")

    monkeypatch.setattr(_benchmark_child, "measure", fail)
    assert _benchmark_child.main(["--rounds", "1"]) == 1
    with pytest.raises(_benchmark_child.BenchmarkChildError, match="RuntimeError: cuDNN said no"):
        _benchmark_child.parse_result(capsys.readouterr().out)


def test_child_refuses_to_measure_with_an_algorithm_pinned() -> None:
    assert _benchmark_child._pinned() == []
    torch.backends.cudnn.conv_bwd_filter_algo = 1
    assert _benchmark_child._pinned() == ["torch.backends.cudnn.conv_bwd_filter_algo = 1"]


def test_stock_mode_sets_flags_and_plan_aside_and_restores_them() -> None:
    torch.backends.cudnn.conv_fwd_algo = 1
    plan = Plan({CONV: "eng0"}, policy="fastest")
    torch_cudnn_algo.use_plan(plan)
    with cli._stock():
        assert torch.backends.cudnn.conv_fwd_algo is None and torch_cudnn_algo.current_plan() is None
    assert torch.backends.cudnn.conv_fwd_algo == 1 and torch_cudnn_algo.current_plan() is plan


def summary_rows() -> tuple[cli.StepRow, cli.StepRow, cli.StepRow]:
    stock = cli.StepRow("stock heuristics", fake_times([22.0, 20.0, 21.0], [14.0, 14.0, 14.2], [5.0, 5.0, 5.0],
                                                       [4.4, 4.0, None]))
    bench = cli.StepRow(cli.BENCHMARK_LABEL, fake_times([21.0, 21.5, 20.5], [13.8, 13.8, 13.8], [4.8, 4.8, 4.8],
                                                        [4.2, 4.2, 4.2]), 16.0, "first step")
    tuned = cli.StepRow("tuned plan (fastest)", fake_times([20.0, 20.0, 20.0], [14.0, 12.5, 14.2], [4.0, 4.0, 4.0],
                                                           [4.0, 4.0, 4.0]), 2.0, "tune()")
    return stock, bench, tuned


def test_summary_table_with_fake_numbers() -> None:
    text = cli.format_summary(*summary_rows(), rounds=3, steps=20)
    lines = text.splitlines()
    assert lines[0] == "training step (forward + backward), 3 rounds per mode:"
    header = lines[1].split()
    assert header[:3] == ["mode", "wall", "ms/step"] and "J/step" in header and "decide" in header
    row = next(line for line in lines if line.startswith("  stock heuristics "))
    assert row.split()[2:] == ["21.00", "(20.00-22.00)", "14.00", "(14.00-14.20)", "5.00", "4.200",
                               "(4.000-4.400)", "-"]
    row = next(line for line in lines if line.startswith(f"  {cli.BENCHMARK_LABEL} "))
    assert row.split()[4:] == ["21.00", "(20.50-21.50)", "13.80", "(13.80-13.80)", "4.80", "4.200",
                               "(4.200-4.200)", "16.0", "(first", "step)"]
    row = next(line for line in lines if line.startswith("  tuned plan (fastest) "))
    assert row.split()[3:] == ["20.00", "(20.00-20.00)", "14.00", "(12.50-14.20)", "4.00", "4.000",
                               "(4.000-4.000)", "2.0", "(tune())"]
    # vs stock heuristics: per-round ratios (same rounds); vs benchmark=True: ratios of medians.
    row = next(line for line in lines if line.startswith("  stock heuristics (per round) "))
    assert row.split()[4:] == ["1.050", "(1.000-1.100)", "1.000", "(1.000-1.120)", "1.250", "(1.250-1.250)",
                               "1.050", "(1.000-1.100)", "-"]
    row = next(line for line in lines if line.startswith("  stock benchmark=True (medians) "))
    assert row.split()[3:] == ["1.050", "0.986", "1.200", "1.050", "8.0"]
    assert "benchmark=True row comes from another process" in " ".join(lines)
    assert "python -m torch_cudnn_algo._benchmark_child" in text
    # Rows line up: every cell of a full row ends in the same column as its header's.
    table = [line for line in lines[1:6]]
    assert len({len(line) for line in table[2:]}) == 1


def test_summary_shows_the_aa_control_beside_the_energy() -> None:
    stock, bench, tuned = summary_rows()
    aa = cli.StepRow("stock heuristics (A/A, energy only)", {"energy_j": [4.4, 4.1, 4.2]})
    text = cli.format_summary(stock, bench, tuned, rounds=3, steps=20, aa=aa,
                              energy_summary="NVML energy counter, 2.0 s windows x 3 rounds")
    lines = text.splitlines()
    row = next(line for line in lines if line.startswith("  stock heuristics (A/A, energy only) "))
    assert row.split()[5:] == ["-", "-", "-", "4.200", "(4.100-4.400)", "-"]
    row = next(line for line in lines if line.startswith("  stock heuristics A/A (per round) "))
    # stock / A/A per round: 4.4/4.4, 4.0/4.1 (the round where stock has None is left out)
    assert row.split()[5:] == ["-", "-", "-", "0.988", "(0.976-1.000)", "-"]
    assert "its own process, against its own A/A" in " ".join(lines)
    assert lines[-1] == "energy: NVML energy counter, 2.0 s windows x 3 rounds"


def test_summary_without_benchmark_or_energy() -> None:
    stock, _, tuned = summary_rows()
    stock = cli.StepRow(stock.label, {**stock.times, "energy_j": []})
    tuned = cli.StepRow(tuned.label, {**tuned.times, "energy_j": []}, 2.0, "tune()")
    failed = cli.StepRow(cli.BENCHMARK_LABEL, failure="failed: timed out after 900 s (--benchmark-timeout)")
    text = cli.format_summary(stock, failed, tuned, rounds=3, steps=20,
                              energy_note=" (n/a: this GPU or driver has no counter)")
    lines = text.splitlines()
    assert f"  {cli.BENCHMARK_LABEL}   failed: timed out after 900 s (--benchmark-timeout)" in lines
    assert "  stock benchmark=True (medians)   failed: timed out after 900 s (--benchmark-timeout)" in lines
    row = next(line for line in lines if line.startswith("  stock heuristics "))
    assert row.split()[-2:] == ["n/a", "-"]
    assert "(n/a: this GPU or driver has no counter)" in " ".join(lines)
    assert not any("A/A (per round)" in line for line in lines)


def test_energy_note_says_why_energy_is_missing() -> None:
    on, off = tune_args(), tune_args("--no-energy")
    assert cli._energy_note(on, {"stock": {"energy_j": [1.0]}, "tuned": {"energy_j": [None]}}) == ""
    assert cli._energy_note(on, {"stock": {"energy_j": []}, "tuned": {"energy_j": []}}) == \
        " (n/a: this GPU or driver has no counter)"
    assert "did not update often enough" in cli._energy_note(on, {"stock": {"energy_j": [None]}, "tuned": {"energy_j": [None]}})
    assert cli._energy_note(off, {"stock": {"energy_j": []}}) == " (n/a: --no-energy)"
    why = "GPU energy cannot be measured: this GPU or driver offers no total-energy counter"
    assert cli._energy_note(on, {"stock": {"energy_j": []}}, why) == f" (n/a: {why})"


def test_energy_options_of_profile_and_tune() -> None:
    parser = cli.build_parser()
    prof = parser.parse_args(["profile", CONV])
    assert (prof.energy, prof.energy_within, prof.energy_candidates, prof.energy_window_s, prof.energy_rounds,
            prof.energy_plot) == (False, 0.10, 6, 1.0, 3, None)
    prof = parser.parse_args(["profile", CONV, "--energy", "--energy-within", "0.05", "--energy-plot", "e.png"])
    assert (prof.energy, prof.energy_within, prof.energy_plot) == (True, 0.05, "e.png")
    args = tune_args()
    assert (args.time_guard, args.energy_budget_s, args.energy_window_s, args.energy_rounds) == (0.02, 300.0, 2.0, 5)
    child = _benchmark_child.child_arguments(tune_args("--energy-window-s", "3", "--energy-rounds", "4"))
    assert child[-4:] == ["--energy-window-s", "3.0", "--energy-rounds", "4"]


@pytest.mark.parametrize(("argv", "message"), [
    (["profile", CONV, "--energy-plot", "e.png"], "--energy-plot needs --energy"),
    (["profile", CONV, "--energy", "--energy-within", "-1"], "--energy-within must be >= 0"),
    (["tune", "--time-guard", "-0.1"], "--time-guard must be >= 0"),
    (["tune", "--energy-rounds", "0"], "--energy-rounds must be >= 1"),
])
def test_bad_energy_options_are_one_line_errors(argv: list[str], message: str, capsys) -> None:
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_the_tune_command_says_what_our_kernels_won():
    from torch_cudnn_algo.cli import own_kernel_summary

    log = [
        {"pick": "tca.direct", "pick_ms": 0.010, "stock_config_ms": 0.030,
         "configs": [{"config": "eng1", "runnable": True, "ms": 0.020}, {"config": "eng2", "runnable": False, "ms": 0.001},
                     {"config": "tca.direct", "runnable": True, "ms": 0.010}, {"config": "eng3", "runnable": True,
                                                                               "ms": None}]},
        {"pick": "eng9", "pick_ms": 0.5, "stock_config_ms": 0.6, "configs": []},
        {"pick": "tca.direct", "pick_ms": 0.020, "stock_config_ms": 0.040, "configs": []},  # none timed: stock's
    ]
    line = own_kernel_summary(log)
    assert line == ("our kernels (tca.direct): picked for 2 of 3 tuned configurations; there 0.030 ms against "
                    "0.060 ms for the best of cuDNN's candidates (2.00x), each configuration once")
    assert own_kernel_summary(log[1:2]) == "our kernels (tca.direct): picked for none of the 1 tuned configurations"
    assert "nothing was tuned" in own_kernel_summary([])
