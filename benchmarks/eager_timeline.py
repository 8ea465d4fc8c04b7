"""Where an eager training step spends its host time, stock vs our path, side by side.

    python benchmarks/eager_timeline.py --out DIR [--rounds 10] [--steps 15]

One process, torchvision ResNet-50 (AMP fp16, channels_last, batch 64, SGD with momentum and
GradScaler). Modes, interleaved per round (stock first in one round, last in the next):

- ``stock``: no flag, no plan (our overrides are not even registered);
- ``plan``: the plan ``tune()`` made for this step, in use;
- ``fastest``: all three flags ``"fastest"``;
- ``plan_all_stock``: a plan whose every entry is ``None`` (stock's own path): our overrides
  are registered and hand every call to ATen, so its cost is the pure cost of passing through
  them;
- ``plan_fwd`` / ``plan_bwd``: the tuned plan's forward entries only / backward entries only.

Writes ``DIR/eager_timeline.json``: wall ms per step per round and mode, per-round ratios
stock/mode; for stock and plan a torch.profiler timeline (CPU + CUDA activity, 5 steps) summarised
as CUDA runtime/driver API calls per step (count, µs), kernels per step, GPU busy time and idle
time per step, CPU µs per call of the convolution ops; the traces themselves as
``DIR/trace_<mode>.json.gz`` (open in chrome://tracing or Perfetto). Also the host time per call
of a small convolution in long loops (GPU idle-waiting), forward and forward+backward.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

import torch_cudnn_algo as tca
from torch_cudnn_algo._step_timing import wall_ms

CONV_OPS = ("aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::convolution_backward")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_step(batch: int) -> tuple[torch.nn.Module, torch.Tensor, Callable[[], None]]:
    import torchvision

    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    target = torch.randint(0, 1000, (batch,), device="cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), target)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return model, x, step


@contextmanager
def mode_active(mode: str, plans: dict[str, tca.Plan]) -> Iterator[None]:
    if mode == "stock":
        yield
    elif mode == "fastest":
        with tca.flags(conv_fwd_algo="fastest", conv_bwd_data_algo="fastest", conv_bwd_filter_algo="fastest"):
            yield
    else:
        with tca.use_plan(plans[mode]):
            yield


def summarize_profile(prof: torch.profiler.profile, steps: int) -> dict[str, object]:
    api: dict[str, list[float]] = {}
    kernels: list[tuple[float, float]] = []
    kernel_names: dict[str, int] = {}
    op_counts: dict[str, int] = {}
    conv_cpu: dict[str, list[float]] = {}
    for event in prof.events():
        name = event.name
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels.append((event.time_range.start, event.time_range.end))
            kernel_names[name[:90]] = kernel_names.get(name[:90], 0) + 1
            continue
        if name.startswith("aten::"):
            op_counts[name] = op_counts.get(name, 0) + 1
        if name.startswith(("cuda", "cu")) and not name.startswith("cudnn"):
            api.setdefault(name, []).append(event.time_range.elapsed_us())
        if name in CONV_OPS:
            conv_cpu.setdefault(name, []).append(event.time_range.elapsed_us())
    kernels.sort()
    busy = 0.0
    current_start, current_end = None, None
    for start, end in kernels:
        if current_end is None or start > current_end:
            if current_end is not None:
                busy += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        busy += current_end - current_start
    span = (kernels[-1][1] - kernels[0][0]) if kernels else 0.0
    return {
        "api_per_step": {name: {"count": len(v) / steps, "us": sum(v) / steps}
                         for name, v in sorted(api.items(), key=lambda kv: -sum(kv[1]))},
        "kernels_per_step": len(kernels) / steps,
        "gpu_busy_ms_per_step": busy / 1e3 / steps,
        "gpu_span_ms_per_step": span / 1e3 / steps,
        "gpu_idle_ms_per_step": (span - busy) / 1e3 / steps,
        "kernel_counts_per_step": {k: v / steps for k, v in kernel_names.items()},
        "op_counts_per_step": {k: v / steps for k, v in op_counts.items()},
        "conv_ops": {name: {"calls_per_step": len(v) / steps, "cpu_us_per_call": statistics.mean(v)}
                     for name, v in conv_cpu.items()},
    }


def profile_mode(step: Callable[[], None], mode: str, plans: dict[str, tca.Plan], out: str,
                 steps: int = 5) -> dict[str, object]:
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with mode_active(mode, plans):
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(steps):
                step()
            torch.cuda.synchronize()
    trace = os.path.join(tempfile.mkdtemp(), f"trace_{mode}.json")
    prof.export_chrome_trace(trace)
    with open(trace, "rb") as src, gzip.open(os.path.join(out, f"trace_{mode}.json.gz"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    return summarize_profile(prof, steps)


def host_loop(mode: str, plans_small: dict[str, tca.Plan], calls: int, rounds: int) -> dict[str, list[float]]:
    """µs per call of a small convolution in a long loop (the GPU waits on the host)."""
    x = torch.randn(8, 64, 14, 14, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    xg = x.clone().requires_grad_()
    wg = w.clone().requires_grad_()
    results: dict[str, list[float]] = {"fwd": [], "fwd_bwd": []}
    with mode_active(mode, plans_small):
        for _ in range(rounds):
            with torch.no_grad():
                for _ in range(50):
                    torch.nn.functional.conv2d(x, w, padding=1)
                torch.cuda.synchronize()
                start = time.perf_counter()
                for _ in range(calls):
                    torch.nn.functional.conv2d(x, w, padding=1)
                torch.cuda.synchronize()
                results["fwd"].append((time.perf_counter() - start) * 1e6 / calls)
            for _ in range(20):
                torch.nn.functional.conv2d(xg, wg, padding=1).sum().backward()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls // 4):
                torch.nn.functional.conv2d(xg, wg, padding=1).sum().backward()
            torch.cuda.synchronize()
            results["fwd_bwd"].append((time.perf_counter() - start) * 1e6 / (calls // 4))
    return results


def ratios(stock: list[float], ours: list[float]) -> dict[str, float]:
    per_round = [s / o for s, o in zip(stock, ours)]
    return {"min": min(per_round), "median": statistics.median(per_round), "max": max(per_round)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--host-calls", type=int, default=2000)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    model, x, step = build_step(args.batch)
    for _ in range(3):
        step()
    with torch.autocast("cuda", dtype=torch.float16):
        tuned = tca.tune(model, x, progress=False)
    plans = {
        "plan": tuned,
        "plan_all_stock": tca.Plan({conv: None for conv in tuned}, policy="manual"),
        "plan_fwd": tca.Plan({c: tuned[c] for c in tuned if c.direction == "fwd"}, policy="manual"),
        "plan_bwd": tca.Plan({c: tuned[c] for c in tuned if c.direction != "fwd"}, policy="manual"),
    }
    modes = ["stock", "plan", "fastest", "plan_all_stock", "plan_fwd", "plan_bwd"]
    for mode in modes:  # warm-up: the fastest policy tunes here, allocator pools fill
        with mode_active(mode, plans):
            wall_ms(step, 3)
    wall: dict[str, list[float]] = {mode: [] for mode in modes}
    for r in range(args.rounds):
        order = modes if r % 2 == 0 else list(reversed(modes))
        for mode in order:
            with mode_active(mode, plans):
                wall_ms(step, 2)
                wall[mode].append(wall_ms(step, args.steps))
        log(f"round {r}: " + "  ".join(f"{m} {wall[m][-1]:.2f}" for m in modes))
    result: dict[str, object] = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(), "rounds": args.rounds, "steps": args.steps,
        "wall_ms": wall,
        "wall_median_ms": {m: statistics.median(v) for m, v in wall.items()},
        "ratio_stock_over_mode": {m: ratios(wall["stock"], wall[m]) for m in modes if m != "stock"},
        "plan_choices": {"entries": len(tuned),
                         "stock_path": sum(1 for c in tuned if tuned[c].choice is None)},
    }
    result["profile"] = {mode: profile_mode(step, mode, plans, args.out) for mode in ("stock", "plan")}
    small_x = torch.randn(8, 64, 14, 14, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    small_w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16).to(
        memory_format=torch.channels_last).requires_grad_()
    small_model = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False).cuda().half().to(memory_format=torch.channels_last)
    small_model.weight.data.copy_(small_w.detach())
    small_tuned = tca.tune(small_model, small_x.clone().requires_grad_(), progress=False)
    small_plans = {"plan": small_tuned, "plan_all_stock": tca.Plan({c: None for c in small_tuned})}
    host: dict[str, dict[str, list[float]]] = {}
    for _ in range(2):
        for mode in ("stock", "plan", "plan_all_stock", "fastest"):
            for workload, values in host_loop(mode, small_plans, args.host_calls, 3).items():
                host.setdefault(mode, {}).setdefault(workload, []).extend(values)
    result["host_us_per_call"] = {m: {w: statistics.median(v) for w, v in d.items()} for m, d in host.items()}
    result["host_rounds_us"] = host
    with open(os.path.join(args.out, "eager_timeline.json"), "w") as file:
        json.dump(result, file, indent=1)
    summary = {k: result[k] for k in ("wall_median_ms", "ratio_stock_over_mode", "host_us_per_call", "plan_choices")}
    print(json.dumps(summary, indent=1))
    profiles = result["profile"]
    for mode, prof in profiles.items():
        scalars = {k: v for k, v in prof.items() if not isinstance(v, dict) or k == "conv_ops"}
        print(mode, json.dumps(scalars))
        print(mode, "api", json.dumps(dict(list(prof["api_per_step"].items())[:12])))
    for table in ("op_counts_per_step", "kernel_counts_per_step"):
        stock, plan = profiles["stock"][table], profiles["plan"][table]
        diff = {k: (stock.get(k, 0), plan.get(k, 0)) for k in set(stock) | set(plan)
                if abs(stock.get(k, 0) - plan.get(k, 0)) > 0.5}
        print(table, "stock vs plan where they differ:", json.dumps(dict(sorted(diff.items())), indent=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
