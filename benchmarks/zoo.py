"""The zoo benchmark: stock PyTorch, a tuned plan and the "fastest" policy on real networks,
written as ``<out>/zoo-<gpu>-<date>.json`` (the shape the eager, tuning and start-up issues check)
and its markdown rendering ``zoo-<gpu>-<date>.md``.

    python benchmarks/zoo.py [--networks a,b] [--sections first_step,eager,host,gpu,benchmark]
                             [--rounds 16] [--steps 6] [--out benchmarks/results] [--quick]
                             [--child-timeout 240] [--budget-s 510] [--knob-search]
    python benchmarks/zoo.py --merge-only [--out benchmarks/results]      # no GPU needed

The training step of every network: ``zero_grad(set_to_none=True)``, forward under autocast (AMP
fp16 networks), ``loss = output.float().mean()`` (summed over tuple outputs), GradScaler-scaled
backward (AMP) or plain backward, SGD(lr=0.01, momentum=0.9) step, ``scaler.update()``.

Per network, fresh child processes (this script with ``--child``), because first steps and stock's
``benchmark=True`` are only meaningful in a process that ran nothing before:

- ``main``: the first step with stock heuristics (``first_step_s.stock``), ``tune()``
  (``tune_s``; the plan is saved to a temporary file), one untimed warm-up of every mode (where
  ``"fastest"`` tunes), then the ``eager``, ``host`` and ``gpu`` sections;
- ``plan_first_step``: ``TORCH_CUDNN_ALGO_PLAN=<that file>``, the first step (``first_step_s.plan``;
  ``first_step_plan_build_counts``: the plans built and deserialised in it, and the µs each took);
- ``names_first_step``: the same plan with its execution plans left out (choices only), the first
  step (``first_step_plan_names_s``): what the heuristics cost (stock - names) and what building the
  chosen plans, runtime compilation included, costs (names - plan), without instrumenting cuDNN;
- ``benchmark``: ``torch.backends.cudnn.benchmark = True`` from the start, the first step
  (``benchmark_search_s``), then the step's GPU time by CUDA-graph replay of stock's benchmark
  picks (``gpu_ms.benchmark``) and of the tuned plan, interleaved in the same process
  (``gpu_ms.plan_in_benchmark_process``): GPU clocks drift between processes by more than the
  difference measured. Stock's plan cache is shared between heuristic and benchmark mode, so this
  must be a process that never ran heuristics (the plan names every configuration's engine, so it
  runs none of stock's cached picks).

Sections: ``eager`` wall ms per step, modes stock / plan / fastest / control in rotated order per
round, ratios stock/X within each round; ``control`` is stock again, so stock/control is what the
host's noise alone gives (an A/A test: a ratio of ours inside its spread is no difference);
``host`` torch.profiler (CPU activity) self+children CPU time per convolution op call, as the step
runs and with the GPU drained before every conv module (no call then waits for a free launch slot,
which a GPU-bound step charges to whichever op launches); ``gpu`` the
step's GPU time by CUDA-graph replay (no host time in it), stock heuristics vs ``"fastest"``;
``first_step`` the plan children; ``benchmark`` the benchmark child. ``--knob-search`` turns
``conv_knob_search`` on in the main child, so the plan and the ``"fastest"`` mode search knobs.

Each measurement lands in ``<out>/raw/zoo/<network>.<part>.json`` as soon as it is measured
(parts: setup, eager, host, gpu, first_step, benchmark), so runs split over several commands
accumulate; a part that failed holds ``{"error": ...}`` and the other networks go on. Every run
ends by merging all raw files of the latest run's GPU; ``--merge-only`` only merges. Progress
goes to stderr; the markdown table also to stdout.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import functools
import gc
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import torch_cudnn_algo
from torch_cudnn_algo import _step_timing
from graph_timing import capture_step, replay_ms
from report_render import device_slug
from torch_cudnn_algo._build import cudnn_version_string as cudnn_text
from zoo_networks import ZOO, Trainer, build_trainer, loss_of

SCRIPT = Path(__file__).resolve()
REPO_ROOT = SCRIPT.parent.parent

SECTIONS = ("first_step", "eager", "host", "gpu", "benchmark")
MAIN_SECTIONS = ("eager", "host", "gpu")  # measured by the main child, in this order (gpu last: see measure_gpu)
EAGER_MODES = ("stock", "plan", "fastest", "control")  # control: stock again (A/A)
EAGER_COMPARED = EAGER_MODES[1:]
REPORTED_MODES = EAGER_MODES[:3]  # the report's eager_ms shape; control goes with the detail
CHILD_KINDS = ("main", "plan_first_step", "names_first_step", "benchmark")
CHILD_RESULT_PREFIX = "ZOO_CHILD_RESULT "
PLAN_ENV_VAR = "TORCH_CUDNN_ALGO_PLAN"
# Environment variables that would make a "stock" child run pinned algorithms or a plan.
STOCK_UNSAFE_ENV_PREFIXES = ("TORCH_CUDNN_CONV_", PLAN_ENV_VAR)
COMPILE_CACHE_ENV_VAR = "TORCH_CUDNN_ALGO_COMPILE_CACHE"  # csrc/compiled_plan_cache.h
DEVICE = "cuda"
CONV_OPS = ("aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::convolution_backward")
CONV_MODULES = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d,
                torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)

WARMUP_STEPS = 3  # after the first step, before tune(): the caching allocator and lazy state settle
MODE_WARMUP_STEPS = 3  # per mode before the rounds ("fastest" tunes in the first)
UNTIMED_STEPS_AFTER_SWITCH = 2
GRAPH_WARMUP_STEPS = 3  # side-stream iterations before capture, as in PyTorch's CUDA graphs docs
MIN_CHILD_S = 30.0  # with less of the budget left, a child is not started
ENERGY_COUNTER_UPDATES = 3  # NVML's counter moves every ~100 ms on an H100


@dataclass(frozen=True)
class Settings:
    """How long every loop runs, and what to run; the parent hands the loop settings to each child."""

    networks: tuple[str, ...]
    sections: tuple[str, ...]
    rounds: int
    steps: int
    host_rounds: int
    gpu_repeats: int
    gpu_replays: int
    out: Path
    quick: bool
    child_timeout_s: float
    budget_s: float | None
    knob_search: bool = False  # conv_knob_search on in the main child: tune() and "fastest" search knobs

    def loops(self) -> dict[str, object]:
        """The loop settings, as recorded in every raw file."""
        return {"rounds": self.rounds, "steps": self.steps, "host_rounds": self.host_rounds,
                "gpu_repeats": self.gpu_repeats, "gpu_replays": self.gpu_replays, "quick": self.quick,
                "warmup_steps": WARMUP_STEPS, "mode_warmup_steps": MODE_WARMUP_STEPS,
                "untimed_steps_after_switch": UNTIMED_STEPS_AFTER_SWITCH,
                "graph_warmup_steps": GRAPH_WARMUP_STEPS, "knob_search": self.knob_search}

    def child_argv(self) -> list[str]:
        return ["--out", str(self.out), "--sections", ",".join(self.sections), "--rounds", str(self.rounds),
                "--steps", str(self.steps), "--host-rounds", str(self.host_rounds),
                "--gpu-repeats", str(self.gpu_repeats), "--gpu-replays", str(self.gpu_replays),
                *(["--quick"] if self.quick else []), *(["--knob-search"] if self.knob_search else [])]


# Loop settings: (default, --quick). An explicit option wins over both. Host rounds: with 2,
# mobilenet_v3_large's per-round host ratio spread 0.74-1.15 (H100, 2026-11-24).
LOOP_DEFAULTS = {"rounds": (16, 3), "steps": (6, 3), "host_rounds": (4, 1), "gpu_repeats": (5, 2),
                 "gpu_replays": (20, 5)}


class _Log:
    """Where progress lines come from (a child names its kind and network) and since when."""

    label = "zoo"
    started = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{_Log.label} {time.perf_counter() - _Log.started:7.1f} s] {message}", file=sys.stderr, flush=True)


def error_text(exc: BaseException) -> str:
    """One line naming the exception: what a raw file and the report keep of a failure."""
    first = str(exc).strip().splitlines()[0][:400] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def _name_list(allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
        unknown = [name for name in names if name not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown) or 'empty list'}; "
                                             f"choose from {', '.join(allowed)} (comma-separated)")
        return names

    return parse


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Zoo benchmark: stock PyTorch vs a tuned plan vs the 'fastest' policy on real networks.",
        epilog=f"networks: {', '.join(ZOO)}")
    parser.add_argument("--networks", type=_name_list(list(ZOO)), default=tuple(ZOO),
                        help="comma-separated networks to measure (default: all)")
    parser.add_argument("--sections", type=_name_list(SECTIONS), default=SECTIONS,
                        help=f"comma-separated, of {','.join(SECTIONS)} (default: all)")
    for name, (default, quick) in LOOP_DEFAULTS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=_positive_int, default=None,
                            help=f"default {default}, with --quick {quick}")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results",
                        help="results folder; raw files go to <out>/raw/zoo (default: benchmarks/results)")
    parser.add_argument("--quick", action="store_true", help="short loops: a smoke run, not a measurement")
    parser.add_argument("--merge-only", action="store_true",
                        help="merge the raw files found into the json and md; measure nothing (no GPU needed)")
    parser.add_argument("--child-timeout", type=_positive_float, default=240.0,
                        help="seconds each child process may run (default 240)")
    parser.add_argument("--budget-s", type=_positive_float, default=None,
                        help="start no child once this many seconds have passed (and cut the last one's "
                             "timeout to fit); the networks left are named, and a later run can add them")
    parser.add_argument("--knob-search", action="store_true",
                        help="conv_knob_search on for tune() and the \"fastest\" mode (main child only)")
    parser.add_argument("--child", choices=CHILD_KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--network", choices=list(ZOO), help=argparse.SUPPRESS)
    parser.add_argument("--plan-path", type=Path, help=argparse.SUPPRESS)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    loops = {}
    for name, (default, quick) in LOOP_DEFAULTS.items():
        given = getattr(args, name)
        loops[name] = given if given is not None else quick if args.quick else default
    return Settings(networks=args.networks, sections=args.sections, out=args.out.resolve(), quick=args.quick,
                    child_timeout_s=args.child_timeout, budget_s=args.budget_s, knob_search=args.knob_search,
                    **loops)


# ---------------------------------------------------------------------------
# Raw files
# ---------------------------------------------------------------------------


def raw_dir(out: Path) -> Path:
    return out / "raw" / "zoo"


def raw_path(out: Path, network: str, part: str) -> Path:
    return raw_dir(out) / f"{network}.{part}.json"


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None: the files stay strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def write_json(path: Path, data: object) -> None:
    """Written aside, then renamed: a run cut short never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(finite(data), indent=1, default=str) + "\n")
    partial.replace(path)


def now_iso() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def write_raw(settings: Settings, network: str, part: str, data: dict, environment: dict | None) -> None:
    record = {"network": network, "part": part, "measured": now_iso(), "environment": environment,
              "settings": settings.loops(), **data}
    write_json(raw_path(settings.out, network, part), record)


def load_raw(out: Path) -> list[dict]:
    records = []
    for path in sorted(raw_dir(out).glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            progress(f"merge: skipping unreadable {path}: {exc}")
            continue
        if isinstance(record, dict) and isinstance(record.get("network"), str) and isinstance(record.get("part"), str):
            records.append(record)
        else:
            progress(f"merge: skipping {path}: not a zoo raw file")
    return records


# ---------------------------------------------------------------------------
# Numbers: medians and ratios
# ---------------------------------------------------------------------------


def median(values: Sequence[float | None] | None) -> float | None:
    """Median of the values measured (None entries are failed samples)."""
    present = [v for v in values or () if v is not None]
    return statistics.median(present) if present else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def ratio_summary(stock: Sequence[float | None] | None, ours: Sequence[float | None] | None) -> dict | None:
    """stock/ours per round (both measured in the same round), as min, median and max:
    above 1 means ours took less time. None where no round has both."""
    ratios = [r for r in (ratio(s, o) for s, o in zip(stock or (), ours or ())) if r is not None]
    if not ratios:
        return None
    return {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios), "rounds": len(ratios)}


def rotated(items: Sequence[str], index: int) -> list[str]:
    """The order of the modes in round ``index``: each mode leads in turn, so drift over a
    round (clocks, temperature) does not always favour the same mode."""
    shift = index % len(items)
    return [*items[shift:], *items[:shift]]


# ---------------------------------------------------------------------------
# Merge: raw files -> zoo-<gpu>-<date>.json
# ---------------------------------------------------------------------------


def _get(record: dict | None, *keys: str) -> Any:
    """A nested value of a raw record, None where the record, a key or the measurement is missing."""
    value: Any = record
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _ok(record: dict | None) -> dict | None:
    return record if record is not None and "error" not in record else None


def network_entry(name: str, parts: dict[str, dict]) -> dict:
    """One network of the report: the issue's fields first (None where not measured), then the detail."""
    setup, eager, host = _ok(parts.get("setup")), _ok(parts.get("eager")), _ok(parts.get("host"))
    gpu, first, bench = _ok(parts.get("gpu")), _ok(parts.get("first_step")), _ok(parts.get("benchmark"))
    gpu_ms = {"heuristics": _get(gpu, "median_ms", "heuristics"),
              "benchmark": _get(bench, "gpu", "median_ms", "benchmark"),
              "fastest": _get(gpu, "median_ms", "fastest")}
    names = _ok(parts.get("names_first_step"))
    first_step = {"stock": _get(setup, "first_step_s"), "plan": _get(first, "first_step_s")}
    entry: dict[str, Any] = {
        "name": name,
        "gpu_ms": gpu_ms,
        "eager_ms": {mode: _get(eager, "median_ms", mode) for mode in REPORTED_MODES},
        "host_us_per_conv_call": {mode: _get(host, "median_us_per_call", mode) for mode in ("stock", "plan")},
        "tune_s": _get(setup, "tune_s"),
        "benchmark_search_s": _get(bench, "benchmark_search_s"),
        "first_step_s": first_step,
    }
    notes: list[str] = []
    entry.update({
        "kinds": sorted(ZOO[name].kinds) if name in ZOO else None,
        "eager_control_ms": _get(eager, "median_ms", "control"),
        "eager_rounds_ms": _get(eager, "rounds_ms"),
        "eager_ratio": {mode: _get(eager, "ratio", mode) for mode in EAGER_COMPARED},
        "eager_cpu_ms": {mode: _get(eager, "cpu_median_ms", mode) for mode in EAGER_MODES},
        "eager_cpu_ratio": {mode: _get(eager, "cpu_ratio", mode) for mode in EAGER_COMPARED},
        "eager_orders": _get(eager, "orders"),
        "host_us_per_conv_call_fastest": _get(host, "median_us_per_call", "fastest"),
        "host_rounds_us": _get(host, "rounds_us"),
        "host_ratio": {mode: _get(host, "ratio", mode) for mode in EAGER_COMPARED},
        "host_conv_calls_per_step": _get(host, "conv_calls_per_step"),
        "host_ops": _get(host, "ops"),
        # The same calls with the GPU drained before every conv module: no call waits for a free
        # launch slot, which a GPU-bound step charges to whichever op launches.
        "host_us_per_conv_call_gpu_drained": {mode: _get(host, "drained_median_us_per_call", mode)
                                              for mode in ("stock", "plan", "fastest")},
        "host_ratio_gpu_drained": {mode: _get(host, "drained_ratio", mode) for mode in EAGER_COMPARED},
        "host_ops_gpu_drained": _get(host, "drained_ops"),
        "gpu_repeats_ms": {"heuristics": _get(gpu, "repeats_ms", "heuristics"),
                           "benchmark": _get(bench, "gpu", "repeats_ms", "benchmark"),
                           "fastest": _get(gpu, "repeats_ms", "fastest")},
        "gpu_speedup_fastest": {"vs_heuristics": ratio(gpu_ms["heuristics"], gpu_ms["fastest"]),
                                "vs_benchmark": ratio(gpu_ms["benchmark"], gpu_ms["fastest"]),
                                "vs_heuristics_per_repeat": _get(gpu, "ratio", "fastest")},
        # The tuned plan against stock's benchmark picks in the benchmark child, interleaved: the
        # comparison that cross-process clock drift does not blur (vs_benchmark above is across
        # processes).
        "gpu_ms_plan_in_benchmark_process": _get(bench, "gpu", "median_ms", "plan"),
        "gpu_speedup_plan_vs_benchmark_same_process": _get(bench, "gpu", "ratio", "plan"),
        "benchmark_process_plan_pinned_runs_per_step": _get(bench, "plan_pinned_runs_per_step"),
        "gpu_method": {"heuristics": _get(gpu, "method", "heuristics"),
                       "benchmark": _get(bench, "gpu", "method", "benchmark"),
                       "fastest": _get(gpu, "method", "fastest")},
        "energy_j_per_step": {"heuristics": _get(gpu, "energy_j_per_step", "heuristics"),
                              "benchmark": _get(bench, "gpu", "energy_j_per_step", "benchmark"),
                              "fastest": _get(gpu, "energy_j_per_step", "fastest")},
        "tune_over_benchmark_search": ratio(entry["tune_s"], entry["benchmark_search_s"]),
        "first_step_plan_over_stock": ratio(first_step["plan"], first_step["stock"]),
        # Choices without their execution plans: heuristics skipped, every plan built (compiled).
        "first_step_plan_names_s": _get(names, "first_step_s"),
        "first_step_plan_build_counts": {"plan": _get(first, "plan_build_counts"),
                                         "plan_names": _get(names, "plan_build_counts")},
        "benchmark_second_step_s": _get(bench, "second_step_s"),
        "fastest_policy_tuning_s": _get(setup, "modes", "fastest", "tuning_s"),
        "plan_file_bytes": _get(setup, "plan_file_bytes"),
        "plan_entries": _get(setup, "plan_entries"),
        "plan_non_stock_entries": _get(setup, "plan_non_stock_entries"),
        "plan_execution_plans": _get(setup, "plan_execution_plans"),
        "pinned_runs_per_step": {mode: _get(setup, "modes", mode, "pinned_runs_per_step") for mode in EAGER_MODES},
        "plan_first_step_runs": {key: _get(first, key) for key in ("plan_applied_by", "plan_entries_run",
                                                                   "plan_runs_first_step", "pinned_runs_first_step")},
        "workload": _get(setup, "workload") or _get(bench, "workload") or _get(first, "workload"),
        "loops": {part: record.get("settings") for part, record in parts.items()},
        "measured": {part: record.get("measured") for part, record in parts.items()},
        "errors": {part: record["error"] for part, record in parts.items() if "error" in record},
    })
    for part, record in parts.items():
        for label, text in (_get(record, "errors") or _get(record, "gpu", "errors") or {}).items():
            notes.append(f"{part} {label}: {text}")
    quick = [part for part, record in parts.items() if _get(record, "settings", "quick") and "error" not in record]
    if quick:
        notes.append(f"measured with --quick (a smoke run, not a measurement): {', '.join(quick)}")
    tuned_in_rounds = _get(eager, "configs_tuned_in_rounds")
    if tuned_in_rounds:
        notes.append(f'eager: "fastest" tuned {tuned_in_rounds} configurations during the timed rounds')
    entry["notes"] = notes
    return entry


def merge(out: Path) -> dict | None:
    """The report of every raw file under ``out`` measured on the latest run's GPU (another GPU's
    numbers are left out, named on stderr); None where there is none."""
    records = load_raw(out)
    measured = [r for r in records if _get(r, "environment", "device")]
    if not measured:
        return None
    latest = max(measured, key=lambda r: r.get("measured") or "")
    device = latest["environment"]["device"]
    parts: dict[str, dict[str, dict]] = {}
    for record in records:
        other = _get(record, "environment", "device")
        if other not in (None, device):
            progress(f"merge: leaving out {record['network']}.{record['part']}, measured on {other}, not {device}")
            continue
        parts.setdefault(record["network"], {})[record["part"]] = record
    order = [name for name in ZOO if name in parts] + sorted(name for name in parts if name not in ZOO)
    date = max(r.get("measured") or "" for r in measured if r["environment"]["device"] == device)[:10]
    environment = latest["environment"]
    return {"device": device, "torch": environment.get("torch"), "cudnn": environment.get("cudnn"), "date": date,
            "networks": [network_entry(name, parts[name]) for name in order]}


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------


def _num(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _trio(values: Sequence[float | None], digits: int) -> str:
    return " / ".join(_num(v, digits) for v in values)


def _spread(summary: dict | None) -> str:
    if not summary:
        return "—"
    return f"{summary['median']:.3f} ({summary['min']:.2f}–{summary['max']:.2f})"


TABLE_HEADER = ("network", "eager ms stock / plan / fastest", "eager stock/plan", "eager stock/fastest",
                "eager stock/control (A/A)", "eager CPU stock/plan", "eager CPU stock/fastest",
                "host µs per conv call stock / plan", "host stock/plan", "host, GPU drained: stock/plan",
                "GPU ms heuristics / benchmark / fastest",
                "fastest vs heuristics", "fastest vs benchmark", "plan vs benchmark, same process",
                "tune s / benchmark search s", "first step s stock / names / plan")


def table_row(net: dict) -> list[str]:
    eager, host, gpu = net["eager_ms"], net["host_us_per_conv_call"], net["gpu_ms"]
    speedup = net["gpu_speedup_fastest"]
    return [
        f"{net['name']}" + (f" ({', '.join(k for k in net['kinds'] if k != 'timm')})" if net.get("kinds") else ""),
        _trio([eager["stock"], eager["plan"], eager["fastest"]], 2),
        _spread(net["eager_ratio"]["plan"]),
        _spread(net["eager_ratio"]["fastest"]),
        _spread(net["eager_ratio"].get("control")),
        _spread((net.get("eager_cpu_ratio") or {}).get("plan")),
        _spread((net.get("eager_cpu_ratio") or {}).get("fastest")),
        _trio([host["stock"], host["plan"]], 1),
        _spread(net["host_ratio"]["plan"]),
        _spread((net.get("host_ratio_gpu_drained") or {}).get("plan")),
        _trio([gpu["heuristics"], gpu["benchmark"], gpu["fastest"]], 2),
        _num(speedup["vs_heuristics"], 3),
        _num(speedup["vs_benchmark"], 3),
        _spread(net.get("gpu_speedup_plan_vs_benchmark_same_process")),
        _trio([net["tune_s"], net["benchmark_search_s"]], 2),
        _trio([net["first_step_s"]["stock"], net.get("first_step_plan_names_s"), net["first_step_s"]["plan"]], 2),
    ]


def render_markdown(report: dict) -> str:
    lines = [
        f"# Zoo: stock PyTorch vs a tuned plan vs `\"fastest\"` — {report['device']}",
        "",
        f"torch {report['torch']}, cuDNN {report['cudnn']}, {report['date']}. "
        "Generated by `python benchmarks/zoo.py` from the raw files in `raw/zoo/`; "
        "numbers are medians, `—` not measured.",
        "",
        "- **eager**: wall ms per training step (fwd + bwd + SGD, GradScaler under AMP), the modes "
        "interleaved in rotated order per round; `stock/ours` is the per-round ratio, median (min–max); "
        "above 1 ours is faster. `control` is stock measured again as a fourth mode: `stock/control` "
        "is the spread the host's noise alone gives. `CPU`: the same rounds' process CPU time per step "
        "(every thread's host work, not time spent waiting or preempted), garbage collector off while timed.",
        "- **host**: torch.profiler CPU time (self + children) per call of `aten::cudnn_convolution`, "
        "`aten::cudnn_convolution_transpose` and `aten::convolution_backward`; `GPU drained`: the same with "
        "`torch.cuda.synchronize()` before every conv module's forward and backward, so that no call waits "
        "for a free launch slot (a GPU-bound step charges that wait to whichever op launches).",
        "- **GPU**: the step captured in a CUDA graph and replayed (no host time); `benchmark` is stock "
        "`benchmark=True` in a fresh process; `fastest vs X` = X's time / fastest's (above 1 fastest is faster); "
        "`plan vs benchmark, same process`: stock's benchmark picks / the tuned plan's, both replayed "
        "interleaved in the benchmark process, per repeat, median (min–max).",
        "- **tune s**: `tune()`; **benchmark search s**: the first step of a fresh `benchmark=True` process; "
        "**first step**: a fresh process's first step: stock heuristics, `TORCH_CUDNN_ALGO_PLAN` with the "
        "plan's choices alone (`names`: no heuristics, every plan built) and with its execution plans (`plan`).",
        "",
        "| " + " | ".join(TABLE_HEADER) + " |",
        "|" + "|".join("---" for _ in TABLE_HEADER) + "|",
    ]
    lines += ["| " + " | ".join(table_row(net)) + " |" for net in report["networks"]]
    notes = [(net["name"], text) for net in report["networks"]
             for text in [*(f"{part} failed: {error}" for part, error in net["errors"].items()), *net["notes"]]]
    if notes:
        lines += ["", "Errors and notes:", ""]
        lines += [f"- {name}: {text}" for name, text in notes]
    return "\n".join(lines) + "\n"


def write_report(out: Path) -> bool:
    """Merges the raw files into ``zoo-<gpu>-<date>.json`` and ``.md`` and prints the markdown;
    False where there is nothing to merge."""
    report = merge(out)
    if report is None:
        progress(f"merge: no raw files with measurements under {raw_dir(out)}")
        return False
    stem = out / f"zoo-{device_slug(report['device'])}-{report['date']}"
    markdown = render_markdown(report)
    write_json(stem.with_suffix(".json"), report)
    stem.with_suffix(".md").write_text(markdown)
    progress(f"wrote {stem}.json and {stem}.md")
    print(markdown, flush=True)
    return True


# ---------------------------------------------------------------------------
# Parent: one network after another, each in fresh child processes
# ---------------------------------------------------------------------------


def child_environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without what would pin algorithms or apply a plan (so a stock
    child is stock), plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(STOCK_UNSAFE_ENV_PREFIXES)}
    return {**env, **extra}


def parse_child_output(stdout: str) -> dict | None:
    """The JSON result line a child printed last, or None. Other lines (a library printing to
    stdout) are ignored."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(CHILD_RESULT_PREFIX):
            try:
                result = json.loads(line[len(CHILD_RESULT_PREFIX):])
            except json.JSONDecodeError:
                return None
            return result if isinstance(result, dict) else None
    return None


class Budget:
    """The time left for children under ``--budget-s``; without one, every child runs."""

    def __init__(self, budget_s: float | None) -> None:
        self.budget_s = budget_s
        self.started = time.perf_counter()

    def child_timeout(self, child_timeout_s: float) -> float | None:
        """The timeout for the next child, or None where the budget leaves too little to start one."""
        if self.budget_s is None:
            return child_timeout_s
        left = self.budget_s - (time.perf_counter() - self.started)
        return min(child_timeout_s, left) if left >= MIN_CHILD_S else None


def run_child(kind: str, network: str, parts: Sequence[str], settings: Settings, timeout_s: float,
              plan_path: Path, extra_env: dict[str, str] | None = None) -> dict:
    """Runs one child process and returns its result. The raw files of ``parts`` are removed first,
    so that any the child did not write afterwards get its error (a crash, a timeout)."""
    for part in parts:
        raw_path(settings.out, network, part).unlink(missing_ok=True)
    command = [sys.executable, str(SCRIPT), "--child", kind, "--network", network, "--plan-path", str(plan_path),
               *settings.child_argv()]
    started = time.perf_counter()
    progress(f"{network}: {kind} child (fresh process, timeout {timeout_s:.0f} s)")
    try:
        done = subprocess.run(command, env=child_environment(extra_env or {}), stdout=subprocess.PIPE, text=True,
                              timeout=timeout_s, check=False)
        result = parse_child_output(done.stdout) or {
            "error": f"{kind} child: exit status {done.returncode} without a result line (its stderr is above)"}
        for line in done.stdout.splitlines():
            if not line.startswith(CHILD_RESULT_PREFIX):
                print(f"[{network} {kind} stdout] {line}", file=sys.stderr, flush=True)
    except subprocess.TimeoutExpired:
        result = {"error": f"{kind} child timed out after {timeout_s:.0f} s"}
    seconds = time.perf_counter() - started
    for part in parts:
        if not raw_path(settings.out, network, part).exists():
            write_raw(settings, network, part, {"error": result.get("error") or f"{kind} child did not write it",
                                                "child": kind, "child_seconds": seconds}, None)
    progress(f"{network}: {kind} child {'failed: ' + result['error'] if 'error' in result else 'done'} "
             f"in {seconds:.1f} s")
    return result


def run_network(network: str, settings: Settings, budget: Budget, plans: Path) -> bool:
    """The children of one network; False where the budget stopped it before it was done."""
    plan_path = plans / f"{network}.plan.json"
    children: list[tuple[str, list[str], dict[str, str]]] = []
    main_parts = [s for s in MAIN_SECTIONS if s in settings.sections]
    # The main child tunes the plan that the first-step and benchmark children load.
    if main_parts or "first_step" in settings.sections or "benchmark" in settings.sections:
        children.append(("main", ["setup", *main_parts], {}))
    if "first_step" in settings.sections:
        children.append(("plan_first_step", ["first_step"], {PLAN_ENV_VAR: str(plan_path)}))
        children.append(("names_first_step", ["names_first_step"], {PLAN_ENV_VAR: str(names_plan_path(plan_path))}))
    if "benchmark" in settings.sections:
        children.append(("benchmark", ["benchmark"], {}))
    for kind, parts, env in children:
        timeout = budget.child_timeout(settings.child_timeout_s)
        if timeout is None:
            progress(f"{network}: time budget spent; {kind} and later children not started")
            return False
        if kind in ("plan_first_step", "names_first_step") and not plan_path.exists():
            write_raw(settings, network, parts[0],
                      {"error": "no plan file: the main child did not save one (see the setup part)"}, None)
            continue
        run_child(kind, network, parts, settings, timeout, plan_path, env)
    return True


def run_parent(settings: Settings) -> int:
    progress(f"networks {', '.join(settings.networks)}; sections {', '.join(settings.sections)}; "
             f"loops {settings.loops()}; raw files in {raw_dir(settings.out)}")
    unfinished: list[str] = []
    budget = Budget(settings.budget_s)
    plans = Path(tempfile.mkdtemp(prefix="zoo-plans-"))
    # tune() measured as on a machine that never tuned these networks: an empty compiled
    # plan cache for this run, unless the caller names one (to measure a warm cache).
    os.environ.setdefault(COMPILE_CACHE_ENV_VAR, str(plans / "compiled-plans"))
    try:
        for network in settings.networks:
            try:
                if not run_network(network, settings, budget, plans):
                    unfinished.append(network)
            except Exception:  # noqa: BLE001 - a bug around one network must not cost the others
                traceback.print_exc()
                unfinished.append(network)
    finally:
        shutil.rmtree(plans, ignore_errors=True)
    written = write_report(settings.out)
    if unfinished:
        progress(f"not finished (run again with --networks {','.join(unfinished)}): {', '.join(unfinished)}")
    return 0 if written and not unfinished else 1


# ---------------------------------------------------------------------------
# Children: the training step and the measurements (GPU)
# ---------------------------------------------------------------------------


def warm_up_cuda() -> None:
    """CUDA context, cuDNN and cuBLAS handles and their libraries, by a tiny unrelated convolution
    (forward and backward) and matmul: a first step then times the network's own work, as a real
    job's first step after start-up would."""
    x = torch.randn(1, 8, 8, 8, device=DEVICE, requires_grad=True)
    w = torch.randn(8, 8, 3, 3, device=DEVICE, requires_grad=True)
    torch.nn.functional.conv2d(x, w, padding=1).sum().backward()
    torch.randn(8, 8, device=DEVICE) @ torch.randn(8, 8, device=DEVICE)
    torch.cuda.synchronize()


def step_seconds(trainer: Trainer) -> float:
    """Wall seconds of one training step, the GPU drained before and after."""
    return _step_timing.step_seconds(trainer.step)


def steps_ms(trainer: Trainer, steps: int) -> float:
    """Wall ms per step over ``steps`` eager steps, the GPU drained before and after."""
    return steps_wall_cpu_ms(trainer, steps)[0]


def steps_wall_cpu_ms(trainer: Trainer, steps: int) -> tuple[float, float]:
    """(wall, process CPU) ms per step over ``steps`` eager steps, the GPU drained before and after,
    with the garbage collector off: a collection landing in one mode's segment is ms of noise in a
    host-bound step. Process CPU time counts the host work of every thread (the autograd worker
    too) and not the time the process waited or was preempted."""
    gc.collect()
    gc.disable()
    try:
        torch.cuda.synchronize()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            trainer.step()
        torch.cuda.synchronize()
        return (time.perf_counter() - wall) / steps * 1e3, (time.process_time() - cpu) / steps * 1e3
    finally:
        gc.enable()


def environment() -> dict[str, object]:
    """What the numbers depend on, recorded in every raw file a child writes."""

    def version_of(module: str) -> str | None:
        return getattr(sys.modules.get(module), "__version__", None)

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=REPO_ROOT)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cudnn": cudnn_text(torch.backends.cudnn.version()), "cuda": torch.version.cuda,
            "torch_cudnn_algo": torch_cudnn_algo.__version__, "extension_loaded": torch_cudnn_algo.is_available(),
            "torchvision": version_of("torchvision"), "timm": version_of("timm"),
            "torchaudio": version_of("torchaudio"), "python": platform.python_version(), "git_commit": commit,
            "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None}


@contextlib.contextmanager
def applied(mode: str, plan: torch_cudnn_algo.Plan | None) -> Iterator[None]:
    """A mode: "stock" and "control" (no plan, flags None), "plan" (the tuned plan in use, flags
    None) or "fastest" (no plan, all three flags "fastest"); the previous state comes back on exit."""
    policy = "fastest" if mode == "fastest" else None  # "control" is stock again
    flags = dict.fromkeys((d.flag for d in torch_cudnn_algo.DIRECTIONS.values()), policy)
    with torch_cudnn_algo.use_plan(plan if mode == "plan" else None), torch_cudnn_algo.flags(**flags):
        yield


def pinned_runs_since(before: dict[str, int]) -> dict[str, int]:
    """How many calls per direction ran one of our plans since ``before`` (an earlier
    ``pinned_run_counts()``): tells "the plan ran" from "stock ran" (refused or never met)."""
    after = torch_cudnn_algo.pinned_run_counts()
    return {direction: after[direction] - before[direction] for direction in after}


def warm_up_modes(trainer: Trainer, plan: torch_cudnn_algo.Plan) -> dict:
    """One untimed pass of every mode before any timing: "fastest" tunes on its first step here,
    and every mode's plans are built."""
    results = {}
    for mode in EAGER_MODES:
        tuned_before = len(torch_cudnn_algo.tuning_log())
        started = time.perf_counter()
        with applied(mode, plan):
            for _ in range(MODE_WARMUP_STEPS - 1):
                trainer.step()
            torch.cuda.synchronize()
            before = torch_cudnn_algo.pinned_run_counts()
            trainer.step()
            torch.cuda.synchronize()
            runs = pinned_runs_since(before)
        log = torch_cudnn_algo.tuning_log()[tuned_before:]
        results[mode] = {"warmup_s": time.perf_counter() - started, "pinned_runs_per_step": runs,
                         "configs_tuned": len(log),
                         "tuning_s": sum(float(entry.get("seconds") or 0.0) for entry in log) if log else None}
        progress(f"warm-up {mode}: {results[mode]['warmup_s']:.2f} s, {len(log)} configurations tuned, "
                 f"pinned runs per step {runs}")
    return results


def measure_eager(trainer: Trainer, plan: torch_cudnn_algo.Plan, settings: Settings) -> dict:
    """Wall ms per step, modes in rotated order per round, ``UNTIMED_STEPS_AFTER_SWITCH`` untimed
    steps after each switch (a switch re-registers the overrides and the plan)."""
    tuned_before = len(torch_cudnn_algo.tuning_log())
    rounds: dict[str, list[float]] = {mode: [] for mode in EAGER_MODES}
    cpu_rounds: dict[str, list[float]] = {mode: [] for mode in EAGER_MODES}
    orders = []
    for index in range(settings.rounds):
        order = rotated(EAGER_MODES, index)
        orders.append(order)
        for mode in order:
            with applied(mode, plan):
                for _ in range(UNTIMED_STEPS_AFTER_SWITCH):
                    trainer.step()
                wall_ms, cpu_ms = steps_wall_cpu_ms(trainer, settings.steps)
                rounds[mode].append(wall_ms)
                cpu_rounds[mode].append(cpu_ms)
        progress(f"eager round {index + 1}/{settings.rounds}: "
                 + ", ".join(f"{mode} {rounds[mode][-1]:.2f} ms" for mode in EAGER_MODES))
    return {"rounds_ms": rounds, "orders": orders,
            "median_ms": {mode: median(values) for mode, values in rounds.items()},
            "ratio": {mode: ratio_summary(rounds["stock"], rounds[mode]) for mode in EAGER_COMPARED},
            "cpu_rounds_ms": cpu_rounds,
            "cpu_median_ms": {mode: median(values) for mode, values in cpu_rounds.items()},
            "cpu_ratio": {mode: ratio_summary(cpu_rounds["stock"], cpu_rounds[mode]) for mode in EAGER_COMPARED},
            "configs_tuned_in_rounds": len(torch_cudnn_algo.tuning_log()) - tuned_before}


def profile_conv_host(trainer: Trainer, steps: int) -> dict:
    """CPU time per convolution op call over ``steps`` profiled steps (CPU activity only): each
    outermost call of a CONV_OPS op counts with its self + children CPU time; a conv op nested
    inside another is part of the outer one's time, not a call of its own."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        started = time.perf_counter()
        for _ in range(steps):
            trainer.step()
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - started) / steps * 1e3
    per_op: dict[str, list[float]] = {name: [] for name in CONV_OPS}
    for event in profiler.events():
        if event.name not in per_op:
            continue
        parent = event.cpu_parent
        while parent is not None and parent.name not in per_op:
            parent = parent.cpu_parent
        if parent is None:
            per_op[event.name].append(event.cpu_time_total)
    calls = sum(len(times) for times in per_op.values())
    total_us = sum(sum(times) for times in per_op.values())
    return {"us_per_call": total_us / calls if calls else None, "calls_per_step": calls / steps,
            "profiled_step_ms": wall_ms,
            "ops": {name: {"calls_per_step": len(times) / steps,
                           "us_per_call": sum(times) / len(times) if times else None}
                    for name, times in per_op.items()}}


@contextlib.contextmanager
def gpu_drained_before_convs(model: torch.nn.Module) -> Iterator[None]:
    """Waits for the GPU before every convolution module's forward and backward: each conv op then
    launches into an empty queue, so its CPU time is its own work, never a wait for a free launch
    slot. In a GPU-bound step the host runs ahead until CUDA's launch queue is full, and from then
    on each launch blocks until the GPU retires older work: the profiler charges that wait to
    whichever op launches, more of it to an op that launches more kernels."""
    def drain(*_: object) -> None:
        torch.cuda.synchronize()

    def drain_before_backward(_module: torch.nn.Module, _inputs: object, output: object) -> None:
        # A hook on the output's gradient runs just before the conv's backward node. Not a module
        # backward hook: that wraps the output in a custom Function, and an in-place activation
        # on it (ReLU(inplace=True)) is then an error.
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(drain)

    handles = []
    for module in model.modules():
        if isinstance(module, CONV_MODULES):
            handles.append(module.register_forward_pre_hook(drain))
            handles.append(module.register_forward_hook(drain_before_backward))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def measure_host(trainer: Trainer, plan: torch_cudnn_algo.Plan, settings: Settings) -> dict:
    """Host CPU time per conv op call, modes rotated per round, as the step runs (``rounds_us``)
    and with the GPU drained before every conv module (``drained_rounds_us``)."""
    modes = EAGER_MODES
    with applied("stock", plan):
        profile_conv_host(trainer, 1)  # the profiler's first use pays for its set-up: in no round
    rounds: dict[str, list[float | None]] = {mode: [] for mode in modes}
    drained: dict[str, list[float | None]] = {mode: [] for mode in modes}
    calls: dict[str, list[float]] = {mode: [] for mode in modes}
    ops: dict[str, dict] = {}
    drained_ops: dict[str, dict] = {}
    for index in range(settings.host_rounds):
        for mode in rotated(modes, index):
            with applied(mode, plan):
                for _ in range(UNTIMED_STEPS_AFTER_SWITCH):
                    trainer.step()
                result = profile_conv_host(trainer, settings.steps)
                with gpu_drained_before_convs(trainer.model):
                    trainer.step()  # untimed: the hooks' first run
                    drained_result = profile_conv_host(trainer, settings.steps)
            rounds[mode].append(result["us_per_call"])
            drained[mode].append(drained_result["us_per_call"])
            calls[mode].append(result["calls_per_step"])
            ops[mode] = result["ops"]
            drained_ops[mode] = drained_result["ops"]
        progress(f"host round {index + 1}/{settings.host_rounds}: "
                 + ", ".join(f"{mode} {_num(rounds[mode][-1], 1)} (drained {_num(drained[mode][-1], 1)}) µs/call"
                             for mode in modes))
    return {"rounds_us": rounds, "median_us_per_call": {mode: median(values) for mode, values in rounds.items()},
            "ratio": {mode: ratio_summary(rounds["stock"], rounds[mode]) for mode in EAGER_COMPARED},
            "drained_rounds_us": drained,
            "drained_median_us_per_call": {mode: median(values) for mode, values in drained.items()},
            "drained_ratio": {mode: ratio_summary(drained["stock"], drained[mode]) for mode in EAGER_COMPARED},
            "conv_calls_per_step": {mode: median(values) for mode, values in calls.items()},
            "ops": ops, "drained_ops": drained_ops}


def capture_trainer_step(trainer: Trainer, pool: object | None) -> torch.cuda.CUDAGraph:
    """The trainer's step without GradScaler's host check (``graph_body``), captured."""
    return capture_step(trainer.graph_step, trainer.graph_body,
                        lambda: trainer.optimizer.zero_grad(set_to_none=True), GRAPH_WARMUP_STEPS, pool)


@functools.cache
def spin_cycles_per_ms() -> float:
    """GPU clock cycles per ms of torch.cuda._sleep, measured once."""
    cycles = 20_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / max(start.elapsed_time(end), 1e-3)


def events_ms(trainer: Trainer, steps: int) -> float:
    """GPU ms per step from CUDA events around eager steps, where capture failed. A spin kernel
    queued first lasts as long as the host needs to queue the steps (measured just before), so
    the events time the GPU's work rather than the host's, as far as the steps do not synchronise."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        trainer.graph_step()
    torch.cuda.synchronize()
    host_ms = (time.perf_counter() - started) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(1.2 * host_ms * spin_cycles_per_ms()))
    start.record()
    for _ in range(steps):
        trainer.graph_step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def energy_j_per_step(graph: torch.cuda.CUDAGraph, step_ms: float | None) -> float | None:
    """Joules per replayed step from NVML's energy counter; None where it is not offered."""
    if step_ms is None:
        return None
    try:
        from torch_cudnn_algo import _nvml

        return _nvml.energy_per_call(graph.replay, torch.cuda.current_device(), step_ms,
                                     counter_updates=ENERGY_COUNTER_UPDATES, chunk_ms=100.0, timeout_s=3.0)
    except Exception as exc:  # noqa: BLE001 - energy is detail; the times stand without it
        progress(f"energy not measured: {error_text(exc)}")
        return None


def measure_gpu(trainer: Trainer, modes: dict[str, Callable[[], contextlib.AbstractContextManager]],
                settings: Settings) -> dict:
    """GPU ms per step of each mode: a CUDA graph of the step per mode, replayed ``gpu_replays``
    times between CUDA events, ``gpu_repeats`` times in rotated order; median. A mode whose capture
    fails is timed by CUDA events around eager steps instead (its method says "events").

    The graphs share one memory pool: safe here because each replay writes every pool tensor before
    reading it (parameters, momentum, BatchNorm statistics and the loss scale live outside the pool)
    and replays never overlap. Run last in a process: after capture the parameters' gradients live
    in the pool, and the unconditional optimizer step may have driven the weights to inf/NaN over
    the replays (which changes no kernel's time, but is no state to go on training from)."""
    graphs: dict[str, torch.cuda.CUDAGraph] = {}
    errors: dict[str, str] = {}
    pool = None
    for label, mode in modes.items():
        try:
            with mode():
                graphs[label] = capture_trainer_step(trainer, pool)
            pool = pool or graphs[label].pool()
        except Exception as exc:  # noqa: BLE001 - recorded; timed by events instead
            errors[label] = f"CUDA graph capture failed, timed by CUDA events around eager steps: {error_text(exc)}"
            progress(f"gpu: capture failed for {label}: {errors[label]}")
            with contextlib.suppress(Exception):
                torch.cuda.synchronize()
    repeats: dict[str, list[float | None]] = {label: [] for label in modes}
    for index in range(settings.gpu_repeats):
        for label in rotated(list(modes), index):
            try:
                if label in graphs:
                    ms = replay_ms(graphs[label], settings.gpu_replays)
                else:
                    with modes[label]():
                        ms = events_ms(trainer, settings.steps)
            except Exception as exc:  # noqa: BLE001 - a failed repeat is a missing sample
                errors.setdefault(label, f"timing: {error_text(exc)}")
                ms = None
            repeats[label].append(ms)
        progress(f"gpu repeat {index + 1}/{settings.gpu_repeats}: "
                 + ", ".join(f"{label} {_num(repeats[label][-1], 3)} ms" for label in modes))
    medians = {label: median(values) for label, values in repeats.items()}
    labels = list(modes)
    return {"method": {label: "graph" if label in graphs else "events" for label in modes},
            "repeats_ms": repeats, "median_ms": medians,
            "ratio": {label: ratio_summary(repeats[labels[0]], repeats[label]) for label in labels[1:]},
            "energy_j_per_step": {label: energy_j_per_step(graphs[label], medians[label]) if label in graphs
                                  else None for label in modes},
            "errors": errors,
            "step": "fwd + bwd + GradScaler unscale_/update + SGD step (the optimizer step unconditional: "
                    "GradScaler's inf check on the host cannot be captured)"}


def require_extension() -> None:
    """Without the extension the flags and plans are inert: "ours" would silently be stock."""
    if not torch_cudnn_algo.is_available():
        raise RuntimeError(f"the torch_cudnn_algo extension is not loaded: {torch_cudnn_algo.load_error()}")


def child_main(network: str, settings: Settings, plan_path: Path) -> dict:
    """First step (stock), tune() and the plan file, every mode's warm-up, then the main sections;
    each part's raw file is written as soon as it is measured."""
    require_extension()
    if settings.knob_search:
        torch.backends.cudnn.conv_knob_search = True
    trainer, workload = build_trainer(network, DEVICE)
    env = environment()
    warm_up_cuda()
    first = step_seconds(trainer)
    progress(f"first step (stock heuristics) {first:.2f} s")
    for _ in range(WARMUP_STEPS):
        trainer.step()
    torch.cuda.synchronize()
    started = time.perf_counter()
    with trainer.autocast():
        plan = torch_cudnn_algo.tune(trainer.model, trainer.inputs, loss_fn=loss_of, progress=False)
    torch.cuda.synchronize()
    tune_s = time.perf_counter() - started
    plan.save(plan_path)
    without_execution_plans(plan).save(names_plan_path(plan_path))
    setup = {"workload": workload, "first_step_s": first, "tune_s": tune_s,
             "plan_file_bytes": plan_path.stat().st_size, "plan_entries": len(plan),
             "plan_non_stock_entries": sum(1 for entry in plan.entries.values() if entry.choice is not None),
             "plan_execution_plans": execution_plan_census(plan)}
    progress(f"tune() {tune_s:.2f} s: {len(plan)} configurations, {setup['plan_non_stock_entries']} not stock's; "
             f"plan file {setup['plan_file_bytes']} bytes")
    write_raw(settings, network, "setup", setup, env)
    sections = [section for section in MAIN_SECTIONS if section in settings.sections]
    if not sections:  # --sections first_step: the plan file was all the plan child needs
        return {"written": ["setup"]}
    setup["modes"] = warm_up_modes(trainer, plan)
    write_raw(settings, network, "setup", setup, env)
    gc.collect()
    gc.freeze()  # what exists now is never collected again: collections during timing stay short
    measures: dict[str, Callable[[], dict]] = {
        "eager": lambda: measure_eager(trainer, plan, settings),
        "host": lambda: measure_host(trainer, plan, settings),
        "gpu": lambda: measure_gpu(trainer, {"heuristics": lambda: applied("stock", plan),
                                             "fastest": lambda: applied("fastest", plan)}, settings),
    }
    for section in sections:
        progress(f"section {section}")
        try:
            data = measures[section]()
        except Exception as exc:  # noqa: BLE001 - the other sections still run
            traceback.print_exc()
            data = {"error": error_text(exc)}
        write_raw(settings, network, section, data, env)
    return {"written": ["setup", *sections]}


def execution_plan_census(plan: torch_cudnn_algo.Plan) -> dict:
    """How many of the plan's entries carry their built execution plan, and why the others
    do not (reason -> count): what cuDNN would not serialise."""
    unavailable = collections.Counter(entry.execution_plan_unavailable for entry in plan.entries.values()
                                      if entry.execution_plan is None and entry.execution_plan_unavailable)
    return {"carried": sum(1 for entry in plan.entries.values() if entry.execution_plan is not None),
            "unavailable": dict(unavailable.most_common())}


def names_plan_path(plan_path: Path) -> Path:
    return plan_path.with_name(plan_path.name.replace(".plan.json", ".names.plan.json"))


def without_execution_plans(plan: torch_cudnn_algo.Plan) -> torch_cudnn_algo.Plan:
    """``plan``'s choices alone, as a plan saved without execution plans would hold them."""
    data = plan.to_dict()
    for entry in data["entries"].values():
        entry.pop("execution_plan", None)
        entry["execution_plan_unavailable"] = "left out by the zoo benchmark (choices-only first step)"
    return torch_cudnn_algo.Plan.from_json(json.dumps(data))


def child_names_first_step(network: str, settings: Settings, plan_path: Path) -> dict:
    """The first step with the tuned plan's choices alone (TORCH_CUDNN_ALGO_PLAN names the
    choices-only file): no heuristics query, every chosen plan built."""
    return plan_first_step(network, settings, names_plan_path(plan_path), "names_first_step")


def child_plan_first_step(network: str, settings: Settings, plan_path: Path) -> dict:
    """The first step of a fresh process whose plan came from TORCH_CUDNN_ALGO_PLAN at import."""
    return plan_first_step(network, settings, plan_path, "first_step")


def plan_first_step(network: str, settings: Settings, plan_path: Path, part: str) -> dict:
    require_extension()
    applied_by = "environment"
    if torch_cudnn_algo.current_plan() is None:  # the autoload did not apply it: say so, then apply it
        applied_by = f"use_plan (the autoload did not apply {PLAN_ENV_VAR})"
        torch_cudnn_algo.use_plan(plan_path)
    trainer, workload = build_trainer(network, DEVICE)
    env = environment()
    warm_up_cuda()
    before = torch_cudnn_algo.pinned_run_counts()
    first = step_seconds(trainer)
    runs = pinned_runs_since(before)
    counts = torch_cudnn_algo.plan_run_counts()
    builds = torch_cudnn_algo.plan_build_counts()
    second = step_seconds(trainer)
    progress(f"first step with the plan {first:.2f} s (second {second:.3f} s); plan applied by {applied_by}")
    write_raw(settings, network, part, {
        "workload": workload, "first_step_s": first, "second_step_s": second, "plan_build_counts": builds,
        "plan_applied_by": applied_by, "plan_entries": len(counts),
        "plan_entries_run": sum(1 for runs_of_entry in counts.values() if runs_of_entry > 0),
        "plan_runs_first_step": sum(counts.values()), "pinned_runs_first_step": runs, "plan_run_counts": counts,
    }, env)
    return {"written": [part]}


def child_benchmark(network: str, settings: Settings, plan_path: Path) -> dict:
    """Stock ``benchmark=True`` in a process that never ran the heuristics on this network:
    the first step (the search), then the step's GPU time with stock's benchmark picks and, where
    the main child saved one, with the tuned plan, interleaved."""
    trainer, workload = build_trainer(network, DEVICE)
    env = environment()
    warm_up_cuda()
    torch.backends.cudnn.benchmark = True
    first = step_seconds(trainer)
    second = step_seconds(trainer)
    progress(f"benchmark=True: first step {first:.2f} s, second {second:.3f} s")
    for _ in range(WARMUP_STEPS):
        trainer.step()
    gc.collect()
    gc.freeze()
    modes: dict[str, Callable[[], contextlib.AbstractContextManager]] = {"benchmark": contextlib.nullcontext}
    plan_runs = None
    if plan_path.exists():
        plan = torch_cudnn_algo.load_plan(plan_path)
        modes["plan"] = lambda: torch_cudnn_algo.use_plan(plan)
        with torch_cudnn_algo.use_plan(plan):
            trainer.step()  # the plan's configurations built (or rebuilt) before any timing
            torch.cuda.synchronize()
            before = torch_cudnn_algo.pinned_run_counts()
            trainer.step()
            torch.cuda.synchronize()
            plan_runs = pinned_runs_since(before)
        progress(f"plan in the benchmark process: pinned runs per step {plan_runs}")
    gpu = measure_gpu(trainer, modes, settings)
    write_raw(settings, network, "benchmark", {"workload": {**workload, "cudnn_benchmark": True},
                                               "benchmark_search_s": first, "second_step_s": second, "gpu": gpu,
                                               "plan_pinned_runs_per_step": plan_runs},
              env)
    return {"written": ["benchmark"]}


CHILDREN: dict[str, Callable[[str, Settings, Path], dict]] = {
    "main": child_main, "plan_first_step": child_plan_first_step, "names_first_step": child_names_first_step,
    "benchmark": child_benchmark}


def run_as_child(args: argparse.Namespace, settings: Settings) -> int:
    """One child: its raw files, then one result line on the real stdout. Everything else printed
    to stdout goes to stderr, so the result line is never mixed with a library's output."""
    result_stream, sys.stdout = sys.stdout, sys.stderr
    _Log.label, _Log.started = f"zoo {args.network} {args.child}", time.perf_counter()
    try:
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA GPU available")
        progress(f"on {torch.cuda.get_device_name()}")
        result = CHILDREN[args.child](args.network, settings, args.plan_path)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which records it
        traceback.print_exc()
        result = {"error": error_text(exc)}
    print(CHILD_RESULT_PREFIX + json.dumps(finite(result), default=str), file=result_stream, flush=True)
    return 1 if "error" in result else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = settings_from(args)
    if args.child:
        if args.network is None or args.plan_path is None:
            print("zoo.py: --child needs --network and --plan-path", file=sys.stderr)
            return 2
        return run_as_child(args, settings)
    if args.merge_only:
        return 0 if write_report(settings.out) else 1
    progress(f"command: {shlex.join([sys.executable, *sys.argv])}")
    return run_parent(settings)


if __name__ == "__main__":
    sys.exit(main())
