"""CPU: the torch-cudnn-algo command — parsing, info, the plan it reports, and
exit status 2 with one line for GPU commands on a machine without a GPU."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_cudnn_algo
from torch_cudnn_algo import Plan, cli

CONV = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"
NO_GPU = not torch.cuda.is_available()


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


@pytest.mark.skipif(not NO_GPU, reason="checks the behaviour without a GPU")
@pytest.mark.parametrize("argv", [["list", CONV], ["profile", CONV, "--plot", "x.png"], ["tune"]])
def test_gpu_commands_without_a_gpu_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"torch-cudnn-algo {argv[0]}: needs a CUDA GPU"), lines


@pytest.mark.skipif(not NO_GPU, reason="checks the behaviour without a GPU")
def test_module_entry_point_exit_status_without_a_gpu() -> None:
    result = run_module("tune")
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
        cli._user_model("user_models")
    with pytest.raises(ValueError, match="is not callable"):
        cli._user_model("user_models:value")
    with pytest.raises(ValueError, match=r"must return \(model, example_inputs\)"):
        cli._user_model("user_models:make")


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
