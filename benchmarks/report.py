"""Every measurement of the performance issue, run on one GPU machine, written as
raw JSON per section and rendered as one markdown report.

    python benchmarks/report.py --out benchmarks/results [--sections tuning,host,network,layers] [--quick] [--report-only]

Sections (each compares against stock PyTorch in the same run, interleaved):

- ``tuning``: ResNet-50 training (batch 64, AMP fp16, channels_last), each mode in a fresh
  process: the first step's wall time with stock ``benchmark=True`` and with ``"fastest"``
  (plain, deterministic, knob search), and the tuner's own log per configuration.
- ``host``: host time per call of a tiny convolution (stock, stock's config pinned, "fastest").
- ``network``: the ResNet-50 training step per variant (amp_fp16, fp32_tf32, deterministic):
  eager wall, GPU kernel time, conv kernel time, CUDA graph replay, for stock, stock
  benchmark=True and "fastest" in one fresh process, and again with "fastest" + knob search.
- ``layers``: GPU time per call of every unique ResNet-50 convolution in each direction: stock,
  stock benchmark=True, stock's config pinned, the "fastest" and knob-search picks pinned.

Each section writes ``<out>/raw/<section>.json`` as it goes (so runs split over several
commands accumulate); then every raw file found is rendered into
``<out>/<device>-<date>.md`` and merged into ``<out>/<device>-<date>.json``
(``--report-only`` renders without measuring, and needs no GPU). Progress goes to stderr.

Raw file keys (times in ms unless named otherwise; lists hold one value per round):

- every file: ``section``, ``environment`` (gpu, driver, torch, cuda, cudnn, cudnn_torch,
  torchvision, torch_cudnn_algo, python, date, git_commit, git_dirty, command), ``quick``,
  ``complete`` (False while the section is still running or if it was cut short), ``seconds``.
- tuning: ``settings``; ``modes`` {stock, stock_benchmark, fastest, fastest_deterministic,
  fastest_knobs} -> {first_step_s, second_step_s, tuning_s (sum of tuning_log seconds; None for
  stock), configs_tuned, tuning_log [entries of torch_cudnn_algo.tuning_log()],
  pinned_runs_second_step {fwd, bwd_data, bwd_filter}, settings, child_seconds} or {error, child_seconds}.
- host: ``settings``; ``stock_configs`` {direction: name}; ``workloads`` {fwd, fwd_bwd} ->
  ``us_per_call`` {stock, pinned_stock_config, fastest} -> [µs per round].
- network: ``settings``; ``variants`` {amp_fp16, fp32_tf32, deterministic} -> {fastest,
  fastest_knobs} (one process each, since switching conv_knob_search re-tunes) -> {settings,
  modes {stock, stock_benchmark, <fastest or fastest_knobs>} -> {wall_ms, gpu_ms, conv_gpu_ms,
  graph_ms, first_step_s, warmup_s, configs_tuned_in_warmup, configs_tuned_in_rounds,
  pinned_runs_per_step, graph_error, top_kernels [{name, ms_per_step, conv}]}, child_seconds,
  measured} or {error, child_seconds, measured}.
- layers: ``settings``; ``tables`` {float16, float32} -> {dtype, memory_format, allow_tf32,
  variants, rows [{layer {name, input, weight, stride, padding, count}, direction, flops,
  stock_config, fastest_pick, fastest_log, knobs_pick, knobs_log, ms {variant: [per round]},
  errors {variant: text}}]}.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import torch_cudnn_algo
from graph_timing import capture_step, replay_ms
from host_overhead import per_call_us, stock_pick
from report_render import (
    H100_FP16_DENSE_TFLOPS,
    NETWORK_POLICIES,
    NETWORK_STOCK_MODES,
    SECTIONS,
    conv_flops,
    device_slug,
    render_markdown,
)
from resnet50_engines import direction_pass, resnet50_conv_layers

SCRIPT = Path(__file__).resolve()
REPO_ROOT = SCRIPT.parent.parent
CHILD_RESULT_PREFIX = "REPORT_CHILD_RESULT "
CHILD_TIMEOUT_S = 540  # under the 10 minutes one GPU command may take
STARTED = time.perf_counter()

BATCH = 64
TINY_INPUT, TINY_WEIGHT = (1, 8, 8, 8), (8, 8, 3, 3)
# torch.cuda._sleep cycles queued per timed call (~55 µs on an H100): longer than the host
# needs to queue one call, so the GPU never waits for the host inside the timed span.
SLEEP_CYCLES_PER_REP = 100_000
ALGO_FLAGS = tuple(spec.flag for spec in torch_cudnn_algo.DIRECTIONS.values())
TOP_KERNELS = 15


@dataclass(frozen=True)
class Loops:
    """How long every loop runs; ``--quick`` shrinks all of them for a smoke run."""

    host_calls: int = 2000
    host_warmup_calls: int = 200
    host_rounds: int = 9
    network_warmup_steps: int = 5
    network_rounds: int = 7
    eager_steps: int = 10
    profiled_steps: int = 3
    graph_warmup_steps: int = 3  # side-stream iterations before capture, as in PyTorch's docs
    graph_replays: int = 20
    layer_rounds: int = 5
    layer_reps: int = 20
    layer_limit: int | None = None  # measure only the first N unique layers
    quick: bool = False


QUICK_LOOPS = Loops(host_calls=200, host_warmup_calls=50, host_rounds=2, network_warmup_steps=2,
                    network_rounds=2, eager_steps=3, profiled_steps=1, graph_replays=5, layer_rounds=2,
                    layer_reps=5, layer_limit=3, quick=True)


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - STARTED:7.1f} s] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Environment and raw files
# ---------------------------------------------------------------------------


def _command_output(command: list[str]) -> str | None:
    """First line a command prints, or None where it is missing or fails."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, cwd=REPO_ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


def _torchvision_version() -> str | None:
    """torchvision's version, or None where it is not installed (rendering needs no torchvision)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("torchvision")
    except PackageNotFoundError:
        return None


def collect_environment(command: str) -> dict:
    """What the numbers depend on: hardware, versions, code, and the command."""
    try:
        cudnn = torch_cudnn_algo.cudnn_version()
    except Exception:  # noqa: BLE001 - the extension may not be loadable; the report still renders
        cudnn = None
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    commit = _command_output(["git", "rev-parse", "HEAD"])  # None where the tree is a copy without .git
    changes = _command_output(["git", "status", "--porcelain", "--untracked-files=no"]) if commit else None
    return {
        "gpu": gpu,
        "driver": _command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "cudnn_torch": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "torchvision": _torchvision_version(),
        "torch_cudnn_algo": torch_cudnn_algo.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "git_commit": commit,
        "git_dirty": bool(changes) if commit else None,
        "command": command,
    }


def raw_path(out: Path, section: str) -> Path:
    return out / "raw" / f"{section}.json"


class SectionRecorder:
    """Writes one section's raw file, at every checkpoint and at the end, so a run cut
    short (the GPU machine's time limit) still leaves what was measured."""

    def __init__(self, out: Path, section: str, loops: Loops, command: str) -> None:
        self.path = raw_path(out, section)
        self.header = {"section": section, "environment": collect_environment(command), "quick": loops.quick}
        self.started = time.perf_counter()

    def save(self, results: dict, complete: bool = False) -> None:
        payload = {**self.header, "complete": complete, "seconds": time.perf_counter() - self.started, **results}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(payload, indent=1, default=str))
        temporary.replace(self.path)  # never a half-written raw file


def load_raw_sections(out: Path) -> dict[str, dict]:
    sections = {}
    for name in SECTIONS:
        path = raw_path(out, name)
        if path.exists():
            sections[name] = json.loads(path.read_text())
    return sections


def merge_raw(sections: dict[str, dict], command: str) -> dict:
    """The merged raw dict render_markdown takes; its environment is the latest section's."""
    latest = max(sections.values(), key=lambda s: s.get("environment", {}).get("date", ""), default={})
    return {
        "environment": latest.get("environment", {}),
        "report": {"generated": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                   "command": command},
        "sections": sections,
    }


def write_report(out: Path, command: str) -> tuple[Path, Path]:
    merged = merge_raw(load_raw_sections(out), command)
    stem = f"{device_slug(merged['environment'].get('gpu'))}-{datetime.date.today().isoformat()}"
    markdown, merged_json = out / f"{stem}.md", out / f"{stem}.json"
    out.mkdir(parents=True, exist_ok=True)
    markdown.write_text(render_markdown(merged))
    merged_json.write_text(json.dumps(merged, indent=1, default=str))
    return markdown, merged_json


# ---------------------------------------------------------------------------
# Modes (what the flags say) and the ResNet-50 training step
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    name: str
    benchmark: bool = False  # torch.backends.cudnn.benchmark
    policy: bool = False  # "fastest" on all three directions
    # conv_knob_search is process-wide (see use_knob_search), not switched with the mode.
    knob_search: bool = False

    def flag_values(self) -> dict[str, object]:
        return dict.fromkeys(ALGO_FLAGS, "fastest" if self.policy else None)


MODES = {mode.name: mode for mode in (
    Mode("stock"),
    Mode("stock_benchmark", benchmark=True),
    Mode("fastest", policy=True),
    Mode("fastest_knobs", policy=True, knob_search=True),
)}


@contextlib.contextmanager
def cudnn_benchmark(enabled: bool) -> Iterator[None]:
    # Not torch.backends.cudnn.flags(): it would also reset deterministic and allow_tf32.
    previous = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = previous


def use_knob_search(enabled: bool) -> None:
    """Sets conv_knob_search for the whole process. Changing it makes "fastest" forget its
    decisions (they were made under the other search), so a process that times "fastest"
    sets it once; that is also why "fastest" and "fastest_knobs" run in separate processes."""
    torch.backends.cudnn.conv_knob_search = enabled


@contextlib.contextmanager
def applied(mode: Mode) -> Iterator[None]:
    with cudnn_benchmark(mode.benchmark), torch_cudnn_algo.flags(**mode.flag_values()):
        yield


@dataclass(frozen=True)
class Variant:
    """Numerics of the ResNet-50 training step; set once per process (fresh child)."""

    name: str
    autocast_fp16: bool
    enable_tf32: bool = False  # TF32 for fp32 convolutions and matmuls; False leaves torch's defaults
    deterministic: bool = False

    def child_env(self) -> dict[str, str]:
        # cuBLAS reads this when its handle is created: it must be in the child's environment.
        return {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"} if self.deterministic else {}


VARIANTS = {variant.name: variant for variant in (
    Variant("amp_fp16", autocast_fp16=True),
    Variant("fp32_tf32", autocast_fp16=False, enable_tf32=True),
    Variant("deterministic", autocast_fp16=True, deterministic=True),
)}


def apply_variant(variant: Variant) -> dict:
    """Sets the process-wide torch settings of a variant; returns them as recorded."""
    if variant.enable_tf32:
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = True
    if variant.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    return {
        "variant": variant.name,
        "precision": "amp_fp16" if variant.autocast_fp16 else "fp32",
        "memory_format": "channels_last",
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    }


class Training:
    """ResNet-50 (torchvision, random weights), SGD with momentum, cross-entropy on random
    labels, channels_last model and input. No GradScaler, so the eager step and the CUDA
    graph capture run the same work."""

    def __init__(self, variant: Variant, batch: int = BATCH) -> None:
        import torchvision  # benchmark-only dependency: imported where a network is built

        self.autocast = variant.autocast_fp16
        self.model = torchvision.models.resnet50(weights=None).cuda().to(memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.images = torch.randn(batch, 3, 224, 224, device="cuda").contiguous(memory_format=torch.channels_last)
        labels = torch.randint(0, 1000, (batch,), device="cuda")
        # Class-probability targets give the same loss as the labels, but cross_entropy then
        # does not call nll_loss, whose CUDA kernel raises under use_deterministic_algorithms;
        # and one_hot (which synchronises) runs once here, not in a step a graph captures.
        self.targets = F.one_hot(labels, 1000).float()

    def step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.forward_backward_update()

    def forward_backward_update(self) -> None:
        # cache_enabled=False: autocast's weight-cast cache must be off under graph capture;
        # off everywhere so eager and graph steps do the same work.
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.autocast, cache_enabled=False):
            loss = F.cross_entropy(self.model(self.images), self.targets)
        loss.backward()
        self.optimizer.step()


def warm_up_cuda() -> None:
    """CUDA context, cuDNN handle and libraries loaded by one unrelated tiny convolution
    (forward and backward, stock), so the first timed step does not pay for process start."""
    torch.cuda.init()
    x = torch.randn(TINY_INPUT, device="cuda", requires_grad=True)
    w = torch.randn(TINY_WEIGHT, device="cuda", requires_grad=True)
    F.conv2d(x, w, padding=1).sum().backward()
    torch.cuda.synchronize()


def step_seconds(training: Training) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    training.step()
    torch.cuda.synchronize()
    return time.perf_counter() - started


def run_counts_delta(before: dict[str, int]) -> dict[str, int]:
    after = torch_cudnn_algo.pinned_run_counts()
    return {direction: after[direction] - before[direction] for direction in after}


# ---------------------------------------------------------------------------
# Child processes: a fresh process per tuning mode and per network variant
# ---------------------------------------------------------------------------


def run_child(spec: str, loops: Loops, env: dict[str, str]) -> dict:
    """Runs ``report.py --child spec`` and returns the JSON result it prints (or an
    error). The child's progress (stderr) goes straight to our log."""
    command = [sys.executable, str(SCRIPT), "--child", spec, *(["--quick"] if loops.quick else [])]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, env={**os.environ, **env}, stdout=subprocess.PIPE, text=True,
                              timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT_S} s", "child_seconds": time.perf_counter() - started}
    lines = done.stdout.splitlines()
    results = [line[len(CHILD_RESULT_PREFIX):] for line in lines if line.startswith(CHILD_RESULT_PREFIX)]
    if results:
        result = json.loads(results[-1])
    else:
        tail = " | ".join(lines[-5:])
        result = {"error": f"exit status {done.returncode} without a result line (the log shows its stderr)"
                           + (f"; stdout: {tail}" if tail else "")}
    result["child_seconds"] = time.perf_counter() - started
    return result


def child_main(spec: str, loops: Loops) -> int:
    kind, _, name = spec.partition(":")
    try:
        result = CHILD_KINDS[kind](name, loops)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which records it
        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {exc}"}
    print(CHILD_RESULT_PREFIX + json.dumps(result, default=str), flush=True)
    return 1 if "error" in result else 0


# ---------------------------------------------------------------------------
# Section 1: tuning
# ---------------------------------------------------------------------------

TUNING_RUNS = {  # raw key -> (variant, mode)
    "stock": ("amp_fp16", "stock"),
    "stock_benchmark": ("amp_fp16", "stock_benchmark"),
    "fastest": ("amp_fp16", "fastest"),
    "fastest_deterministic": ("deterministic", "fastest"),
    "fastest_knobs": ("amp_fp16", "fastest_knobs"),
}


def tuning_child(run: str, _loops: Loops) -> dict:
    """First and second training step of one mode in this fresh process."""
    variant, mode = VARIANTS[TUNING_RUNS[run][0]], MODES[TUNING_RUNS[run][1]]
    settings = apply_variant(variant)
    use_knob_search(mode.knob_search)
    warm_up_cuda()
    training = Training(variant)
    torch_cudnn_algo.clear_cache()  # the tuning log then holds ResNet-50's configurations only
    with applied(mode):
        first = step_seconds(training)
        progress(f"tuning {run}: first step {first:.2f} s")
        before = torch_cudnn_algo.pinned_run_counts()
        second = step_seconds(training)
        runs = run_counts_delta(before)
        log = torch_cudnn_algo.tuning_log() if mode.policy else []
    return {
        "first_step_s": first,
        "second_step_s": second,
        "tuning_s": sum(entry["seconds"] for entry in log) if mode.policy else None,
        "configs_tuned": len(log) if mode.policy else None,
        "tuning_log": log,
        "pinned_runs_second_step": runs,
        "settings": settings,
    }


def run_tuning(loops: Loops, recorder: SectionRecorder, _args: argparse.Namespace) -> dict:
    results: dict = {"settings": {"model": "resnet50", "batch": BATCH, "resolution": 224,
                                  "precision": "amp_fp16", "memory_format": "channels_last"},
                     "modes": {}}
    for run, (variant, _mode) in TUNING_RUNS.items():
        progress(f"tuning: {run} (fresh process)")
        results["modes"][run] = run_child(f"tuning:{run}", loops, VARIANTS[variant].child_env())
        outcome = results["modes"][run]
        if "error" in outcome:
            progress(f"tuning: {run} failed: {outcome['error']}")
        else:
            tuned = f", tuning {outcome['tuning_s']:.2f} s" if outcome["tuning_s"] is not None else ""
            progress(f"tuning: {run} done: first step {outcome['first_step_s']:.2f} s{tuned}")
        recorder.save(results)
    return results


# ---------------------------------------------------------------------------
# Section 2: host
# ---------------------------------------------------------------------------


def run_host(loops: Loops, recorder: SectionRecorder, _args: argparse.Namespace) -> dict:
    x = torch.randn(TINY_INPUT, device="cuda")
    w = torch.randn(TINY_WEIGHT, device="cuda")
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    workloads: dict[str, Callable[[], object]] = {
        "fwd": lambda: F.conv2d(x, w, padding=1),
        "fwd_bwd": lambda: F.conv2d(xg, wg, padding=1).sum().backward(),
    }
    stock_configs = {direction: stock_pick(direction, x, w) for direction in torch_cudnn_algo.DIRECTIONS}
    modes: dict[str, dict[str, object]] = {
        "stock": dict.fromkeys(ALGO_FLAGS, None),
        "pinned_stock_config": {spec.flag: stock_configs[d] for d, spec in torch_cudnn_algo.DIRECTIONS.items()},
        "fastest": dict.fromkeys(ALGO_FLAGS, "fastest"),
    }
    results: dict = {
        "settings": {"input": list(TINY_INPUT), "weight": list(TINY_WEIGHT), "padding": 1, "dtype": "float32",
                     "calls": loops.host_calls, "rounds": loops.host_rounds},
        "stock_configs": stock_configs,
        "workloads": {},
    }
    for workload, call in workloads.items():
        samples: dict[str, list[float]] = {mode: [] for mode in modes}
        results["workloads"][workload] = {"us_per_call": samples}
        for round_index in range(loops.host_rounds + 1):  # round 0 warms up (and tunes "fastest")
            for mode, flag_values in modes.items():
                with torch_cudnn_algo.flags(**flag_values):
                    us = per_call_us(call, loops.host_calls if round_index else loops.host_warmup_calls)
                if round_index:
                    samples[mode].append(us)
            if round_index:
                progress(f"host {workload} round {round_index}/{loops.host_rounds}: "
                         + ", ".join(f"{m} {s[-1]:.2f} µs" for m, s in samples.items()))
        recorder.save(results)
    return results


# ---------------------------------------------------------------------------
# Section 3: network
# ---------------------------------------------------------------------------

# The ops whose GPU time is convolution: every kernel either path (stock or ours)
# launches for a cuDNN convolution runs inside one of them. Attributing kernels by
# op, not by name, counts cuDNN's GEMM-based engines (nvjet / cuBLASLt kernels for
# 1x1 convolutions) as the convolutions they are.
CONV_OPS = ("aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::convolution_backward")


def kernel_times_us(training: Training, steps: int) -> tuple[dict[str, float], float]:
    """Total GPU time per kernel name (µs) over ``steps`` training steps, and the part
    spent inside convolution ops (µs), from torch.profiler."""
    from torch.autograd import DeviceType

    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(steps):
            training.step()
        torch.cuda.synchronize()
    totals: dict[str, float] = {}
    for event in profiler.events():
        if event.device_type == DeviceType.CUDA:  # kernels, memcpy, memset; not runtime API calls
            totals[event.name] = totals.get(event.name, 0.0) + event.time_range.elapsed_us()
    conv_us = sum(average.device_time_total for average in profiler.key_averages() if average.key in CONV_OPS)
    return totals, conv_us


def eager_ms_per_step(training: Training, steps: int) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        training.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / steps * 1e3


def capture_step_graph(training: Training, warmup_steps: int, pool: object | None) -> torch.cuda.CUDAGraph:
    return capture_step(training.step, training.forward_backward_update,
                        lambda: training.optimizer.zero_grad(set_to_none=True), warmup_steps, pool)


def warm_up_mode(training: Training, mode: Mode, loops: Loops) -> dict:
    """The mode's first steps (where "fastest" tunes and benchmark=True searches)."""
    tuned_before = len(torch_cudnn_algo.tuning_log())
    started = time.perf_counter()
    with applied(mode):
        first = step_seconds(training)
        for _ in range(loops.network_warmup_steps - 1):
            training.step()
        torch.cuda.synchronize()
        warmup_s = time.perf_counter() - started
        before = torch_cudnn_algo.pinned_run_counts()
        training.step()
        runs = run_counts_delta(before)
    return {"first_step_s": first, "warmup_s": warmup_s,
            "configs_tuned_in_warmup": len(torch_cudnn_algo.tuning_log()) - tuned_before,
            "pinned_runs_per_step": runs}


def capture_graphs(training: Training, modes: dict[str, Mode], loops: Loops,
                   results: dict) -> dict[str, torch.cuda.CUDAGraph]:
    """One graph per mode. They share one memory pool, which is safe here because each replay
    writes every pool tensor before reading it (the state carried between steps, parameters,
    momentum and BatchNorm statistics, lives outside the pool) and replays never overlap; it
    keeps several captures of a batch-64 step within the GPU's memory."""
    graphs: dict[str, torch.cuda.CUDAGraph] = {}
    pool = None
    for name, mode in modes.items():
        try:
            with applied(mode):
                graphs[name] = capture_step_graph(training, loops.graph_warmup_steps, pool)
            pool = pool or graphs[name].pool()
            results[name]["graph_error"] = None
        except Exception as exc:  # noqa: BLE001 - the eager numbers are still worth having
            results[name]["graph_error"] = f"{type(exc).__name__}: {exc}"
            progress(f"network: capture failed for {name}: {exc}")
    return graphs


def measure_mode_round(training: Training, mode: Mode, graph: torch.cuda.CUDAGraph | None, loops: Loops,
                       result: dict, kernels: dict[str, float]) -> None:
    """One round of one mode: eager wall, profiled GPU time, graph replay; appends to result."""
    tuned_before = len(torch_cudnn_algo.tuning_log())
    with applied(mode):
        result["wall_ms"].append(eager_ms_per_step(training, loops.eager_steps))
        times, conv_us = kernel_times_us(training, loops.profiled_steps)
        per_step = 1e-3 / loops.profiled_steps
        result["gpu_ms"].append(sum(times.values()) * per_step)
        result["conv_gpu_ms"].append(conv_us * per_step)
        for name, us in times.items():
            kernels[name] = kernels.get(name, 0.0) + us * per_step
        result["graph_ms"].append(replay_ms(graph, loops.graph_replays) if graph else None)
    # "fastest" must not tune again here; if it does, the report flags these numbers.
    result["configs_tuned_in_rounds"] += len(torch_cudnn_algo.tuning_log()) - tuned_before


def top_kernels(kernels: dict[str, float], rounds: int) -> list[dict]:
    ranked = sorted(kernels.items(), key=lambda item: item[1], reverse=True)[:TOP_KERNELS]
    return [{"name": name[:300], "ms_per_step": total / rounds}
            for name, total in ranked]


def network_child(run: str, loops: Loops) -> dict:
    """One variant's stock modes and one policy ("fastest" or "fastest_knobs", given as
    "variant:policy") in this fresh process: warm-up, graph capture, then interleaved rounds."""
    variant_name, _, policy = run.partition(":")
    variant = VARIANTS[variant_name]
    modes = {name: MODES[name] for name in (*NETWORK_STOCK_MODES, policy)}
    settings = apply_variant(variant)
    use_knob_search(MODES[policy].knob_search)
    warm_up_cuda()
    training = Training(variant)
    kernel_times_us(training, 1)  # the profiler's first use initialises CUPTI: not in any round
    results = {name: warm_up_mode(training, mode, loops) for name, mode in modes.items()}
    for name, result in results.items():
        progress(f"network {variant_name} warm-up {name}: first step {result['first_step_s']:.2f} s, "
                 f"{result['configs_tuned_in_warmup']} configurations tuned")
        result.update(wall_ms=[], gpu_ms=[], conv_gpu_ms=[], graph_ms=[], configs_tuned_in_rounds=0)
    graphs = capture_graphs(training, modes, loops, results)
    kernels: dict[str, dict[str, float]] = {name: {} for name in modes}
    for round_index in range(loops.network_rounds):
        for name, mode in modes.items():
            result = results[name]
            measure_mode_round(training, mode, graphs.get(name), loops, result, kernels[name])
            graph_text = f"{result['graph_ms'][-1]:.2f}" if result["graph_ms"][-1] else "-"
            progress(f"network {variant_name} round {round_index + 1}/{loops.network_rounds} {name}: "
                     f"wall {result['wall_ms'][-1]:.2f} ms, GPU {result['gpu_ms'][-1]:.2f} ms, "
                     f"conv {result['conv_gpu_ms'][-1]:.2f} ms, graph {graph_text} ms")
    for name, result in results.items():
        result["top_kernels"] = top_kernels(kernels[name], loops.network_rounds)
    return {"settings": settings, "modes": results}


def run_network(loops: Loops, recorder: SectionRecorder, args: argparse.Namespace) -> dict:
    results: dict = {
        "settings": {"batch": BATCH, "warmup_steps": loops.network_warmup_steps, "rounds": loops.network_rounds,
                     "eager_steps": loops.eager_steps, "profiled_steps": loops.profiled_steps,
                     "graph_replays": loops.graph_replays},
        "variants": previous_network_variants(recorder.path, args.network_variants),
    }
    for variant in args.network_variants:
        processes = results["variants"][variant] = {}
        for policy in NETWORK_POLICIES:
            progress(f"network: {variant}, stock modes and {policy} (fresh process)")
            processes[policy] = run_child(f"network:{variant}:{policy}", loops, VARIANTS[variant].child_env())
            processes[policy]["measured"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
            if "error" in processes[policy]:
                progress(f"network: {variant} {policy} failed: {processes[policy]['error']}")
            recorder.save(results)
    return results


def previous_network_variants(path: Path, rerun: list[str]) -> dict:
    """Variants an earlier run measured and this one does not re-run (``--network-variants``),
    so a section split over two commands accumulates."""
    if not path.exists() or set(rerun) == set(VARIANTS):
        return {}
    previous = json.loads(path.read_text()).get("variants", {})
    return {name: data for name, data in previous.items() if name not in rerun}


# ---------------------------------------------------------------------------
# Section 4: layers
# ---------------------------------------------------------------------------

LAYER_TABLES = {  # dtype -> variants measured
    "float16": ("stock", "stock_benchmark", "stock_config", "fastest", "fastest_knobs"),
    "float32": ("stock", "stock_config"),
}


@dataclass(frozen=True)
class LayerChoice:
    """How one variant runs a (layer, direction): stock (with or without benchmark) or a
    configuration pinned by name (strict, so a refusal is an error rather than stock's time)."""

    benchmark: bool = False
    pinned: str | None = None


@contextlib.contextmanager
def layer_choice(direction: str, choice: LayerChoice) -> Iterator[None]:
    flag = torch_cudnn_algo.DIRECTIONS[direction].flag
    with cudnn_benchmark(choice.benchmark), \
            torch_cudnn_algo.flags(**{flag: choice.pinned, "conv_algo_strict": choice.pinned is not None}):
        yield


def stock_config_name(direction: str, x: torch.Tensor, w: torch.Tensor, stride: int, padding: int) -> str | None:
    """The configuration stock runs with benchmark=False: the first usable one of heuristics mode A."""
    configs = torch_cudnn_algo.engine_configs(direction, x, w, stride=stride, padding=padding)
    return next((c.name for c in configs if c.source == "heuristics_a" and c.refusal is None), None)


def tuned_pick(direction: str, run: Callable[[], object], knob_search: bool) -> dict:
    """The "fastest" policy's tuning-log entry for this convolution, tuned afresh."""
    torch_cudnn_algo.clear_cache()
    flag = torch_cudnn_algo.DIRECTIONS[direction].flag
    with torch_cudnn_algo.flags(**{flag: "fastest", "conv_knob_search": knob_search}):
        run()
        torch.cuda.synchronize()
        log = torch_cudnn_algo.tuning_log()  # read before the flags change back
    entries = [entry for entry in log if entry["direction"] == direction]
    if not entries:
        raise RuntimeError(f'"fastest" logged no tuning for {direction}')
    return entries[-1]


def resolve_choice(variant: str, direction: str, run: Callable[[], object], row: dict) -> LayerChoice:
    """The choice a variant stands for; tunes the picks (and records them in the row)."""
    if variant == "stock":
        return LayerChoice()
    if variant == "stock_benchmark":
        return LayerChoice(benchmark=True)
    if variant == "stock_config":
        if row["stock_config"] is None:
            raise RuntimeError("no usable heuristics_a configuration")
        return LayerChoice(pinned=row["stock_config"])
    prefix = "fastest" if variant == "fastest" else "knobs"
    entry = tuned_pick(direction, run, knob_search=variant == "fastest_knobs")
    row[f"{prefix}_pick"], row[f"{prefix}_log"] = entry["pick"], entry
    return LayerChoice(pinned=entry["pick"])  # pick None: the policy runs stock's path


def gpu_ms_per_call(run: Callable[[], object], reps: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    # The spin kernel holds the GPU while the host queues the calls, so the events time the
    # GPU's work only: host time per call cannot leak into the measurement.
    torch.cuda._sleep(reps * SLEEP_CYCLES_PER_REP)
    start.record()
    for _ in range(reps):
        run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"


def measure_layer_row(layer: dict, direction: str, tensors: tuple, variants: tuple[str, ...],
                      loops: Loops) -> dict:
    x, w, grad = tensors
    stride, padding = layer["stride"], layer["padding"]
    run = direction_pass(direction, x, w, grad, stride, padding)
    row: dict = {"layer": layer, "direction": direction, "flops": conv_flops(layer),
                 "stock_config": stock_config_name(direction, x, w, stride, padding), "ms": {}, "errors": {}}
    choices: dict[str, LayerChoice] = {}
    for variant in variants:
        try:
            choices[variant] = resolve_choice(variant, direction, run, row)
        except (RuntimeError, torch.OutOfMemoryError) as exc:
            row["errors"][variant] = _error_text(exc)
    # Warm-up only after all the tuning: tuned_pick's clear_cache() forgets the plans built before it.
    for variant, choice in list(choices.items()):
        try:
            with layer_choice(direction, choice):  # plans built, stock's benchmark search done
                for _ in range(3):
                    run()
                torch.cuda.synchronize()
        except (RuntimeError, torch.OutOfMemoryError) as exc:
            row["errors"][variant] = _error_text(exc)
            del choices[variant]
    for _ in range(loops.layer_rounds):
        for variant, choice in choices.items():
            with layer_choice(direction, choice):
                run()  # untimed: the first call after the flags change (override re-registered)
                row["ms"].setdefault(variant, []).append(gpu_ms_per_call(run, loops.layer_reps))
    return row


def layer_tensors(layer: dict, dtype: torch.dtype, memory_format: torch.memory_format) -> tuple:
    x = torch.randn(layer["input"], device="cuda", dtype=dtype).contiguous(memory_format=memory_format)
    w = torch.randn(layer["weight"], device="cuda", dtype=dtype).contiguous(memory_format=memory_format)
    grad = torch.randn_like(F.conv2d(x, w, stride=layer["stride"], padding=layer["padding"]))
    return x, w, grad


def new_layer_table(dtype_name: str) -> dict:
    fp16 = dtype_name == "float16"
    return {"dtype": dtype_name, "memory_format": "channels_last" if fp16 else "contiguous", "allow_tf32": True,
            "variants": list(LAYER_TABLES[dtype_name]), "rows": []}


def measure_layer_table(table: dict, loops: Loops, on_row: Callable[[dict], None]) -> None:
    """Appends one row per (layer, direction) to ``table``, calling ``on_row`` after each."""
    dtype = getattr(torch, table["dtype"])
    # fp16 as AMP training runs it (channels_last); fp32 as plain fp32 models do (NCHW, TF32 on).
    memory_format = torch.channels_last if table["memory_format"] == "channels_last" else torch.contiguous_format
    previous_tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = table["allow_tf32"]
    try:
        for layer in resnet50_conv_layers(BATCH)[:loops.layer_limit]:
            layer = {**layer, "input": list(layer["input"]), "weight": list(layer["weight"])}
            tensors = layer_tensors(layer, dtype, memory_format)
            for direction in torch_cudnn_algo.DIRECTIONS:
                row = measure_layer_row(layer, direction, tensors, tuple(table["variants"]), loops)
                table["rows"].append(row)
                on_row(row)
    finally:
        torch.backends.cudnn.allow_tf32 = previous_tf32


def _row_progress(dtype_name: str, row: dict) -> None:
    medians = {variant: statistics.median(samples) for variant, samples in row["ms"].items()}
    progress(f"layers {dtype_name} {row['layer']['name']} {row['direction']}: "
             + ", ".join(f"{v} {ms:.4f} ms" for v, ms in medians.items())
             + (f"; errors: {row['errors']}" if row["errors"] else ""))


def run_layers(loops: Loops, recorder: SectionRecorder, _args: argparse.Namespace) -> dict:
    settings = {"batch": BATCH, "reps": loops.layer_reps, "rounds": loops.layer_rounds,
                "sleep_cycles_per_rep": SLEEP_CYCLES_PER_REP, "roofline_tflops": H100_FP16_DENSE_TFLOPS}
    results: dict = {"settings": settings, "tables": {}}
    for dtype_name in LAYER_TABLES:
        table = results["tables"][dtype_name] = new_layer_table(dtype_name)

        def on_row(row: dict, dtype_name: str = dtype_name) -> None:
            _row_progress(dtype_name, row)
            recorder.save(results)  # a checkpoint per row: the section is the longest

        measure_layer_table(table, loops, on_row)
    return results


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

SECTION_RUNNERS: dict[str, Callable[[Loops, SectionRecorder, argparse.Namespace], dict]] = {
    "tuning": run_tuning,
    "host": run_host,
    "network": run_network,
    "layers": run_layers,
}
CHILD_KINDS: dict[str, Callable[[str, Loops], dict]] = {"tuning": tuning_child, "network": network_child}


def _name_list(allowed: tuple[str, ...] | list[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(allowed)} (comma-separated)")
        return names

    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--sections", type=_name_list(SECTIONS), default=list(SECTIONS),
                        help=f"comma-separated, of {','.join(SECTIONS)} (default: all)")
    parser.add_argument("--network-variants", type=_name_list(list(VARIANTS)), default=list(VARIANTS),
                        help="network variants to (re-)measure; the others are kept from an earlier raw file")
    parser.add_argument("--quick", action="store_true", help="shrink every loop (smoke run)")
    parser.add_argument("--report-only", action="store_true", help="render the raw files found; run nothing")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: one measurement in a fresh process
    args = parser.parse_args(argv)
    script = os.path.relpath(SCRIPT) if SCRIPT.is_relative_to(Path.cwd()) else str(SCRIPT)
    args.command = shlex.join(["python", script, *(sys.argv[1:] if argv is None else argv)])
    return args


def run_sections(args: argparse.Namespace, loops: Loops) -> int:
    """Runs the requested sections in order; a failing section is reported and the rest run."""
    failures = 0
    for name in SECTIONS:
        if name not in args.sections:
            continue
        progress(f"== section {name}: start")
        recorder = SectionRecorder(args.out, name, loops, args.command)
        started = time.perf_counter()
        try:
            recorder.save(SECTION_RUNNERS[name](loops, recorder, args), complete=True)
            outcome = "done"
        except Exception:  # noqa: BLE001 - keep the other sections' measurements
            traceback.print_exc()
            failures += 1
            outcome = "FAILED (its last checkpoint stays, marked incomplete)"
        progress(f"== section {name}: {outcome} in {time.perf_counter() - started:.1f} s; raw file {recorder.path}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loops = QUICK_LOOPS if args.quick else Loops()
    if (args.child or not args.report_only) and not torch.cuda.is_available():
        print("report.py: no CUDA GPU available: sections need one (--report-only renders existing raw files)",
              file=sys.stderr, flush=True)
        return 2
    if args.child:
        return child_main(args.child, loops)
    status = 0 if args.report_only else run_sections(args, loops)
    markdown, merged = write_report(args.out, args.command)
    progress(f"wrote {markdown} and {merged}")
    return status


if __name__ == "__main__":
    sys.exit(main())
