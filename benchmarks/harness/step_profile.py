"""Where a zoo network's training step spends its GPU time, by kernel and by convolution, under
stock ``benchmark=True`` and under the tuned plan, and what a speed-up target over
``benchmark=True`` needs off the plan's convolutions.

    python benchmarks/step_profile.py [--networks mobilenet_v3_large,efficientnet_b0] [--steps 5]
                                      [--target 1.15] [--out benchmarks/results]
    python benchmarks/step_profile.py --render FILE.json      # no GPU

One process per run. Per network: warm-up steps and ``torch.profiler`` over ``--steps`` eager
steps with stock ``benchmark=True`` (its search runs in the warm-up, before anything of ours has
run), then ``tune()``, then the same with the plan in force (what the plan leaves to stock runs
``benchmark=True``'s picks, as in the zoo's ``benchmark=True`` process). Times are the sums of
the GPU kernels' durations per step (profiler annotations such as the optimizer's range are not
kernels and are left out): a CUDA-graph replay of the step (the zoo benchmark) also counts the
gaps between kernels, so these totals are lower than its step times; the shares are what this
benchmark is for.

*convolutions*: the GPU time of the ATen ``convolution`` (forward) and ``convolution_backward``
calls and everything they launch (cuDNN or our kernels, layout copies, bias). A convolution row
groups the calls of one ATen op by the shapes of its tensor arguments (torch.profiler records no
scalar arguments, so two convolutions of the same tensor shapes and different strides share a
row). *needs off the convolutions*: the plan's step time less ``benchmark=True``'s over the
target, the part of the plan's convolution time that would have to go for the target to be met
without touching anything else in the step.

Writes ``<out>/step-profile-<gpu>-<date>.json`` and ``.md``. The JSON keeps per mode the
``TOP_KERNELS`` costliest kernels (their names are long) and the convolution rows that either mode
ranks among its ``TOP_CONVOLUTIONS`` costliest, in both modes, beside the convolution time of all
rows by direction: what the render shows, and ``benchmark=True``'s costliest rows against the plan's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from .networks import ZOO
from .results import REPO_ROOT, device_slug, environment, error_text, now_iso, progress, publish, write_json
from .stats import num

if TYPE_CHECKING:
    import torch

DEFAULT_NETWORKS = ("mobilenet_v3_large", "efficientnet_b0", "conv_tasnet")
CONV_OPS = {"aten::convolution": "forward", "aten::convolution_backward": "backward"}
MODES = ("benchmark", "plan")
TOP_KERNELS = 8
KEPT_KERNELS = TOP_KERNELS  # of the costliest kernels per mode, in the JSON: those rendered (long names)
TOP_CONVOLUTIONS = 12  # rendered per network; the JSON keeps these rows of either mode, in both


class OpRow(NamedTuple):
    """One ATen convolution op with one set of argument shapes: calls and GPU microseconds per step."""

    op: str
    shapes: str
    calls: float
    gpu_us: float


def kernel_times(events: Iterable[object], steps: int) -> dict[str, float]:
    """GPU microseconds per step by kernel name, from torch.profiler's events: device events
    only, user annotations (record_function ranges mirrored on the GPU timeline) left out."""
    import torch

    times: dict[str, float] = {}
    for event in events:
        if event.device_type != torch.autograd.DeviceType.CUDA or getattr(event, "is_user_annotation", False):
            continue
        times[event.name] = times.get(event.name, 0.0) + event.device_time_total / steps
    return times


def conv_rows(averages: Iterable[object], steps: int) -> list[OpRow]:
    """The convolution ops of ``key_averages(group_by_input_shape=True)``, per step."""
    return [OpRow(a.key, str(a.input_shapes), a.count / steps, a.device_time_total / steps)
            for a in averages if a.key in CONV_OPS]


def profiled(step: Callable[[], None], steps: int, warm_up: int) -> torch.profiler.profile:
    """``step`` run ``warm_up`` times, then ``steps`` runs under torch.profiler (host and GPU
    activity, argument shapes recorded), the GPU drained before and after."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warm_up):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return prof


def convolution_us(rows: Iterable[dict]) -> dict[str, float]:
    """GPU microseconds per step of all ``rows`` by direction: the summary's convolution time,
    recorded before the JSON drops the rows the render does not show."""
    totals = {direction: 0.0 for direction in CONV_OPS.values()}
    for row in rows:
        totals[CONV_OPS[row["op"]]] += row["gpu_us"]
    return totals


def profile_step(step: Callable[[], None], steps: int, warm_up: int) -> dict:
    """``step`` run ``warm_up`` times, then profiled over ``steps`` runs: GPU time per step by
    kernel and by convolution op, and of all convolutions by direction."""
    prof = profiled(step, steps, warm_up)
    kernels = kernel_times(prof.events(), steps)
    rows = [row._asdict() for row in conv_rows(prof.key_averages(group_by_input_shape=True), steps)]
    return {"total_us": sum(kernels.values()),
            "kernels_us": dict(sorted(kernels.items(), key=lambda item: -item[1])[:KEPT_KERNELS]),
            "convolution_us": convolution_us(rows), "convolutions": rows}


def costliest(rows: list[dict], count: int) -> list[dict]:
    return sorted(rows, key=lambda row: -row["gpu_us"])[:count]


def row_key(row: dict) -> tuple[str, str]:
    return row["op"], row["shapes"]


def with_kept_convolutions(record: dict) -> dict:
    """A network's record keeping, in both modes, only the convolution rows that either mode ranks
    among its costliest TOP_CONVOLUTIONS: every row the render shows (the plan's costliest, with
    benchmark=True's time of them), and benchmark=True's costliest with the plan's time of them.
    The kernels and the totals stay."""
    if "error" in record:
        return record
    kept = {row_key(row) for mode in MODES for row in costliest(record[mode]["convolutions"], TOP_CONVOLUTIONS)}
    return {**record, **{mode: {**record[mode], "convolutions": [
        row for row in record[mode]["convolutions"] if row_key(row) in kept]} for mode in MODES}}


def measure_network(network: str, steps: int, warm_up: int) -> dict:
    """The network's step profiled under ``benchmark=True``, then under its tuned plan."""
    import torch

    import torch_cudnn_algo

    from .measure import non_stock_entries, timed_tune
    from .networks import build_trainer
    from .timing import warm_up_cuda

    trainer, workload = build_trainer(network, "cuda")
    warm_up_cuda()
    torch.backends.cudnn.benchmark = True
    record = {"name": network, "workload": workload}
    progress(f"{network}: benchmark=True")
    record["benchmark"] = profile_step(trainer.step, steps, warm_up)
    progress(f"{network}: tune")
    torch.backends.cudnn.benchmark = False  # tuned as the zoo tunes: against stock's heuristics
    plan, record["tune_s"] = timed_tune(trainer)
    torch.backends.cudnn.benchmark = True
    record["plan_non_stock_entries"] = non_stock_entries(plan)
    progress(f"{network}: plan")
    with torch_cudnn_algo.use_plan(plan):
        record["plan"] = profile_step(trainer.step, steps, warm_up)
    return record


# ------------------------------------------------------------------------------- summaries


class Summary(NamedTuple):
    """One mode's step: GPU kernel ms in all, in forward and backward convolutions."""

    total_ms: float
    forward_ms: float
    backward_ms: float

    @property
    def conv_ms(self) -> float:
        return self.forward_ms + self.backward_ms


def summary(profile: dict) -> Summary:
    by_direction = profile["convolution_us"]
    return Summary(profile["total_us"] / 1e3, by_direction["forward"] / 1e3, by_direction["backward"] / 1e3)


def needed_off_ms(plan: Summary, benchmark: Summary, target: float) -> float:
    """What the plan's step must lose for ``benchmark / plan`` to reach ``target`` (0 if it does)."""
    return max(0.0, plan.total_ms - benchmark.total_ms / target)


def convolution_table(record: dict, top: int) -> list[tuple[str, str, float, float | None, float | None]]:
    """The plan's ``top`` costliest convolution rows: (direction, shapes, calls, plan ms,
    benchmark=True ms of the same op and shapes)."""
    stock = {row_key(row): row["gpu_us"] for row in record["benchmark"]["convolutions"]}
    return [(CONV_OPS[row["op"]], row["shapes"], row["calls"], row["gpu_us"] / 1e3,
             None if row_key(row) not in stock else stock[row_key(row)] / 1e3)
            for row in costliest(record["plan"]["convolutions"], top)]


def shapes_text(shapes: str) -> str:
    """``[[64, 16, 112, 112], [64, 3, 224, 224], [], ...]`` -> ``64x16x112x112, 64x3x224x224``."""
    tensors = [part for part in json.loads(shapes) if part]
    return ", ".join("x".join(str(size) for size in tensor) for tensor in tensors)


def render(report: dict) -> str:
    target = report["target"]
    lines = [
        "# Where the training step's GPU time goes: by kernel and by convolution", "",
        f"{report['device']}, torch {report['torch']}, cuDNN {report['cudnn']}, {report['date']}. "
        f"Command: `python benchmarks/step_profile.py {report['argv']}`.", "",
        "Sums of GPU kernel durations per eager training step (torch.profiler, "
        f"{report['steps']} steps after warm-up), stock `benchmark=True` first, then the tuned plan in the "
        "same process; a CUDA-graph replay of the step (the zoo benchmark) also counts the gaps between "
        "kernels, so its step times are higher. *conv*: the ATen `convolution` and `convolution_backward` "
        "calls and all they launch. *needs off the convolutions*: the plan's step less "
        f"`benchmark=True`'s / {target}, as a share of the plan's convolution time.", "",
        f"| network | step ms benchmark=True / plan | conv ms benchmark=True / plan (fwd + bwd) | conv share of the plan's step "
        f"| benchmark=True / plan | {target}x needs off the convolutions |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for record in report["networks"]:
        if "error" in record:
            lines.append(f"| {record['name']} | error: {record['error']} | | | | |")
            continue
        bench, plan = summary(record["benchmark"]), summary(record["plan"])
        needed = needed_off_ms(plan, bench, target)
        lines.append(
            f"| {record['name']} | {num(bench.total_ms, 2)} / {num(plan.total_ms, 2)} | {num(bench.conv_ms, 2)} / "
            f"{num(plan.conv_ms, 2)} ({num(plan.forward_ms, 2)} + {num(plan.backward_ms, 2)}) | "
            f"{plan.conv_ms / plan.total_ms:.0%} | {num(bench.total_ms / plan.total_ms, 3)} | "
            f"{num(needed, 2)} ms ({needed / plan.conv_ms:.0%})" + " |")
    for record in report["networks"]:
        if "error" in record:
            continue
        lines += ["", f"## {record['name']}", "", f"tune() {num(record['tune_s'], 1)} s, "
                  f"{record['plan_non_stock_entries']} plan entries that differ from stock's path.", "",
                  "Costliest kernels of the plan's step (ms per step):", "", "| kernel | plan ms | share |",
                  "|---|--:|--:|"]
        plan_total = summary(record["plan"]).total_ms
        for name, us in list(record["plan"]["kernels_us"].items())[:TOP_KERNELS]:
            lines.append(f"| `{name[:90]}` | {num(us / 1e3, 3)} | {us / 1e3 / plan_total:.1%} |")
        lines += ["", "Costliest convolutions of the plan's step (ms per step, all calls of the row):", "",
                  "| op | tensor shapes | calls | plan ms | benchmark=True ms |", "|---|---|--:|--:|--:|"]
        for direction, shapes, calls, plan_ms, bench_ms in convolution_table(record, TOP_CONVOLUTIONS):
            lines.append(f"| {direction} | {shapes_text(shapes)} | {calls:g} | {num(plan_ms, 3)} | "
                         f"{num(bench_ms, 3)} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--networks", default=",".join(DEFAULT_NETWORKS), help=f"comma-separated, of {', '.join(ZOO)}")
    parser.add_argument("--steps", type=int, default=5, help="profiled steps per mode")
    parser.add_argument("--warm-up", type=int, default=5, help="steps before profiling (benchmark=True searches here)")
    parser.add_argument("--target", type=float, default=1.15, help="speed-up over benchmark=True to report against")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results")
    parser.add_argument("--render", type=Path, metavar="JSON", help="print the markdown of a saved result; no GPU")
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())), end="")
        return 0
    networks = [name for name in args.networks.split(",") if name]
    unknown = [name for name in networks if name not in ZOO]
    if unknown or not networks or args.steps < 1 or args.warm_up < 1 or args.target <= 0:
        parser.error(f"unknown networks {unknown} (known: {', '.join(ZOO)}), or --steps/--warm-up below 1, "
                     "or --target not above 0")
    env = environment()
    report = {"device": env.get("device"), "torch": env.get("torch"), "cudnn": env.get("cudnn"),
              "date": now_iso()[:10], "argv": " ".join(argv if argv is not None else sys.argv[1:]),
              "steps": args.steps, "target": args.target, "networks": []}
    stem = args.out / f"step-profile-{device_slug(report['device'])}-{report['date']}"
    for network in networks:
        try:
            report["networks"].append(with_kept_convolutions(measure_network(network, args.steps, args.warm_up)))
        except Exception as exc:  # noqa: BLE001 - one network's failure is recorded, the others still run
            report["networks"].append({"name": network, "error": error_text(exc)})
        write_json(stem.with_suffix(".json"), report)
    markdown = render(report)
    publish(stem.with_suffix(".md"), markdown)
    return 0
