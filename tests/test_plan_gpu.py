"""GPU: plans end to end, against what we did not write — stock PyTorch's and
a float64 step's outputs — and across processes.

``torch-cudnn-algo tune`` on the default network writes a plan; fresh
processes loading it (TORCH_CUDNN_ALGO_PLAN) run every planned choice (the
per-entry run counters) with outputs as close to float64 as stock's, and two
of them run the same algorithms; tune()'s policies; ``profile --plot``."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_cudnn_algo
from torch_cudnn_algo import ConvSpec, Plan
from torch_cudnn_algo._tune import collect_configurations

from plan_checks import check_mismatch_warns_and_strict_refuses

pytestmark = pytest.mark.gpu

JOBS = Path(__file__).parent / "jobs"
BATCH, IMAGE = 8, 64  # the default network, small enough for a test


def run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env={**os.environ, **env}, timeout=600)


@pytest.fixture(scope="module")
def tuned_plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    result = run([sys.executable, "-m", "torch_cudnn_algo", "tune", "--batch", str(BATCH), "--image-size", str(IMAGE),
                  "--rounds", "2", "--steps", "3", "--no-progress", "-o", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    return path, result.stdout


def test_tune_command_prints_choices_and_step_times_and_writes_the_plan(tuned_plan) -> None:
    path, out = tuned_plan
    plan = torch_cudnn_algo.load_plan(path)
    assert plan.policy == "fastest" and plan.gpu == torch.cuda.get_device_name()
    directions = {conv.direction for conv in plan}
    assert directions == {"fwd", "bwd_data", "bwd_filter"}
    # The default network's 41 convolutions are 26 distinct configurations per direction (fewer for bwd_data).
    assert len([c for c in plan if c.direction == "fwd"]) >= 15
    for conv in plan:
        assert f"{conv}" in out
    assert "plan written to" in out
    # The summary: stock heuristics, stock benchmark=True from a fresh child process, the tuned plan,
    # then the plan's ratios to each; every row has numbers (the child did not fail).
    lines = out.splitlines()
    for label in ("stock heuristics", "stock benchmark=True (fresh process)", "tuned plan (fastest)",
                  "stock heuristics (per round)", "stock benchmark=True (medians)"):
        (row,) = [line for line in lines if line.startswith(f"  {label}   ")]
        assert re.match(r"\d+\.\d+ ", row[len(label) + 2:].lstrip()), row
    assert "benchmark=True row comes from another process" in out


def probe(path: Path) -> dict:
    result = run([sys.executable, str(JOBS / "plan_run_check.py"), str(BATCH), str(IMAGE)],
                 TORCH_CUDNN_ALGO_PLAN=str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cannot run this convolution" not in result.stderr, result.stderr  # no entry refused
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_fresh_process_runs_every_planned_choice_with_outputs_matching_stock(tuned_plan) -> None:
    path, _ = tuned_plan
    report = probe(path)
    assert report["plan"] == str(path)
    planned = [e for e in report["entries"] if e["choice"]]
    assert planned and len(planned) == len(report["entries"])  # "fastest" always names a configuration
    never_ran = [e for e in planned if e["runs"] == 0]
    assert not never_ran, never_ran
    assert len(report["announced"]) == len(planned)
    # As close to float64 as stock PyTorch's own step is (AMP fp16 both).
    for what in ("logits", "grads"):
        assert report["error_plan"][what] <= max(2 * report["error_stock"][what], 1e-3), report


def test_two_processes_loading_one_plan_run_the_same_algorithms(tuned_plan) -> None:
    path, _ = tuned_plan
    first, second = probe(path), probe(path)
    assert first["entries"] == second["entries"]
    assert first["announced"] == second["announced"]


def small_model() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 3, padding=1, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
    ).cuda().to(memory_format=torch.channels_last)
    x = torch.randn(8, 16, 32, 32, device="cuda").to(memory_format=torch.channels_last)
    return model, x


def test_tune_leaves_the_model_as_it_was_and_plans_what_training_runs() -> None:
    model, x = small_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.autocast("cuda", dtype=torch.float16):
        plan = torch_cudnn_algo.tune(model, x, progress=False)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert all(p.grad is None for p in model.parameters())
    # The first layer's input needs no gradient: training never runs its bwd_data.
    assert sorted(str(c) for c in plan) == sorted([
        "conv2d 8x16x32x32 -> 32x3x3 s1 p1 fp16 channels_last fwd",
        "conv2d 8x16x32x32 -> 32x3x3 s1 p1 fp16 channels_last bwd_filter",
        "conv2d 8x32x32x32 -> 32x3x3 s2 p1 fp16 channels_last fwd",
        "conv2d 8x32x32x32 -> 32x3x3 s2 p1 fp16 channels_last bwd_data",
        "conv2d 8x32x32x32 -> 32x3x3 s2 p1 fp16 channels_last bwd_filter",
    ])
    before_runs = torch_cudnn_algo.diagnostics.pinned_run_counts()
    with torch_cudnn_algo.use_plan(plan), torch.autocast("cuda", dtype=torch.float16):
        model(x).float().sum().backward()
        counts = torch_cudnn_algo.diagnostics.plan_entry_run_counts()
    assert set(counts) == {str(c) for c in plan} and min(counts.values()) == 1, counts
    after = torch_cudnn_algo.diagnostics.pinned_run_counts()
    assert sum(after.values()) - sum(before_runs.values()) == 5


def test_plan_entries_win_over_the_flags_and_other_configurations_follow_them() -> None:
    x = torch.randn(4, 8, 16, 16, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    planned = ConvSpec.of("fwd", x, w, padding=1)
    other = torch.randn(4, 8, 20, 20, device="cuda")
    legacy = torch_cudnn_algo.diagnostics.legacy_workspace_sizes(planned, allow_tf32=False)
    algos = [a for a, size in legacy.items() if size is not None]
    assert len(algos) >= 2
    torch.backends.cudnn.conv_fwd_algo = algos[0]
    with torch_cudnn_algo.use_plan(Plan({planned: algos[1]})), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        torch.nn.functional.conv2d(x, w, padding=1)
        torch.nn.functional.conv2d(other, w, padding=1)
        counts = torch_cudnn_algo.diagnostics.plan_entry_run_counts()
        reference = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
        out = torch.nn.functional.conv2d(x, w, padding=1)
    assert counts == {str(planned): 1}
    assert ((out.double() - reference).abs().max() / reference.abs().max()).item() < 1e-5


def test_a_refused_plan_entry_warns_naming_the_entry_and_stock_runs() -> None:
    x = torch.randn(4, 8, 16, 16, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    conv = ConvSpec.of("bwd_filter", x, w, padding=1)
    nondeterministic = 0  # backward-filter algorithm 0 is non-deterministic
    x.requires_grad_()
    with torch_cudnn_algo.use_plan(Plan({conv: nondeterministic})), torch.backends.cudnn.flags(enabled=True, deterministic=True):
        with pytest.warns(UserWarning, match=f"the plan entry '{conv}'"):
            torch.nn.functional.conv2d(x, w.requires_grad_(), padding=1).sum().backward()
        assert torch_cudnn_algo.diagnostics.plan_entry_run_counts() == {str(conv): 0}


def test_a_plan_made_on_another_gpu_warns_and_strict_refuses(tmp_path: Path) -> None:
    data = Plan({"conv1d 4x16x100 -> 32x5 s1 p2 fp32 contiguous fwd": "eng0"}, policy="fastest").to_dict()
    data["gpu"] = "Imaginary GPU 9000"
    path = tmp_path / "other.json"
    path.write_text(json.dumps(data))
    expected = "made on a Imaginary GPU 9000"
    check_mismatch_warns_and_strict_refuses(path, expected, entries=1)


@pytest.mark.parametrize("policy", ["least_workspace", "lowest_energy"])
def test_profile_table_policies(policy: str) -> None:
    model = torch.nn.Conv2d(32, 32, 3, padding=1, bias=False).cuda().half().to(memory_format=torch.channels_last)
    x = torch.randn(16, 32, 28, 28, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    energy = torch_cudnn_algo.energy.EnergySettings(window_s=0.5, rounds=2, warmup=None)
    plan = torch_cudnn_algo.tune(model, x, policy=policy, directions=("fwd",), progress=False,
                                 energy_settings=energy)
    (conv,) = plan
    entry = plan[conv]
    assert entry.time_ms is not None
    if policy == "least_workspace":
        assert entry.choice is not None
        table = torch_cudnn_algo.profile(conv, energy=False, reps=10)
        fastest = table.fastest(deterministic=False, allow_tf32=True)
        # Its workspace is no larger than the fastest's, its time within the policy's 5% (plus timing noise).
        assert entry.workspace <= fastest.workspace
        assert entry.time_ms <= fastest.time_ms * 1.05 * 1.15
    else:
        # Stock's path unless a candidate within the time guard saves energy beyond the A/A spread
        # (tests/test_energy_gpu.py checks the guard); either way its energy was measured.
        assert entry.choice is None or entry.time_ms <= entry.stock_ms * 1.02
        assert entry.energy_j is None or entry.energy_j > 0


def test_profile_command_plots_a_valid_png(tmp_path: Path) -> None:
    path = tmp_path / "time_vs_workspace.png"
    result = run([sys.executable, "-m", "torch_cudnn_algo", "profile",
                  "conv2d 16x64x28x28 -> 64x3x3 s1 p1 fp16 channels_last fwd", "--reps", "5", "--no-energy",
                  "--plot", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    image = importlib.import_module("matplotlib.image").imread(path)  # matplotlib: the [test] extra
    assert image.shape[0] > 100 and image.shape[1] > 100


def test_list_command_on_the_gpu() -> None:
    result = run([sys.executable, "-m", "torch_cudnn_algo", "list",
                  "conv2d 16x64x28x28 -> 64x3x3 s1 p1 fp16 channels_last fwd"])
    assert result.returncode == 0, result.stderr
    assert "candidates can run it" in result.stdout and "heuristics_a" in result.stdout


def test_torchvision_network_under_its_plan_is_as_close_to_float64_as_stock() -> None:
    torchvision = importlib.import_module("torchvision")
    from jobs.plan_run_check import rel, step

    torch.manual_seed(0)
    model = torchvision.models.resnet18().cuda().to(memory_format=torch.channels_last).eval()
    x = torch.randn(8, 3, 96, 96, device="cuda").to(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.float16):
        plan = torch_cudnn_algo.tune(model, x, progress=False)
    with torch_cudnn_algo.use_plan(plan):
        planned = step(model, x, amp=True)
        counts = torch_cudnn_algo.diagnostics.plan_entry_run_counts()
    stock = step(model, x, amp=True)
    reference = step(model.double(), x.double(), amp=False)
    assert len(counts) >= 20 and min(counts.values()) >= 1, counts
    for index, what in enumerate(("logits", "grads")):
        error_plan, error_stock = rel(planned[index], reference[index]), rel(stock[index], reference[index])
        assert error_plan <= max(2 * error_stock, 1e-3), (what, error_plan, error_stock)


def inverted_residual_net() -> torch.nn.Module:
    """The convolutions of the zoo's depthwise and grouped networks in one small model: a
    stride-2 stem, 1x1 expansion and projection, depthwise 3x3 and stride-2 5x5, a grouped 3x3
    with 8 channels per group."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 64, 3, 1, 1, groups=64, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 64, 5, 2, 2, groups=64, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 24, 1, bias=False), nn.BatchNorm2d(24),
        nn.Conv2d(24, 64, 3, 1, 1, groups=8, bias=False), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def test_a_plan_tuned_in_eager_covers_every_convolution_of_the_compiled_step() -> None:
    """torch.compile (default mode, Inductor's layout choices as users get them) calls ATen's
    convolutions with the eager step's configurations: the plan tune() made on the eager model
    has an entry for each, and every one of them runs its entry in the compiled step."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = inverted_residual_net().cuda().to(memory_format=torch.channels_last)
    x = torch.randn(16, 3, 64, 64, device="cuda").to(memory_format=torch.channels_last)
    try:
        with torch.autocast("cuda", dtype=torch.float16):
            plan = torch_cudnn_algo.tune(model, x, progress=False)
            compiled = torch.compile(model)
            compiled(x).float().sum().backward()  # compiles forward and backward
            met = collect_configurations(compiled, x)  # what the compiled step meets
        missing = [str(spec) for spec, *_ in met if spec not in plan]
        assert len(met) >= 12 and not missing, (len(met), missing)
        with torch_cudnn_algo.use_plan(plan), torch.autocast("cuda", dtype=torch.float16):
            compiled(x).float().sum().backward()
            counts = torch_cudnn_algo.diagnostics.plan_entry_run_counts()
        ran = {label for label, runs in counts.items() if runs > 0}
        assert {str(spec) for spec, *_ in met} <= ran, sorted({str(spec) for spec, *_ in met} - ran)
    finally:
        torch._dynamo.reset()
