"""What a layer's backward pass costs beyond one kernel launch, on every convolution of
MobileNetV3 and EfficientNet-B0 (fp16 channels_last, batch 64, as the zoo trains them; the
squeeze-and-excitation layers with their bias included): stock's ``convolution_backward`` under
``benchmark=True`` (every gradient the training step asks for, one call), captured ``INNER`` times
in a CUDA graph and replayed, against a *one-launch floor*: one elementwise kernel that reads and
writes as many elements as the call's gradients have (what any single kernel producing them must
at least move), captured and replayed the same way. The profiler gives the kernels stock's call
launches and their summed durations.

    python benchmarks/backward_floor.py [--reps 9] [--out benchmarks/results]
    python benchmarks/backward_floor.py --render benchmarks/results/backward-floor-<gpu>-<date>.json

Writes ``<out>/backward-floor-<gpu>-<date>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from . import results
from .fused_backward import EFFICIENTNET, LAYERS as DEPTHWISE, MOBILENET
from .pointwise_backward import LAYERS as POINTWISE
from .stats import num

BATCH = 64
INNER = 20  # calls per captured graph
# (input channels, output channels, {network: calls per training step}): the squeeze-and-excitation
# layers, 1x1 convolutions with a bias on one pixel an image.
SQUEEZE_EXCITATION: list[tuple[int, int, dict[str, int]]] = [
    (72, 24, {MOBILENET: 1}), (24, 72, {MOBILENET: 1}),
    (120, 32, {MOBILENET: 2}), (32, 120, {MOBILENET: 2}),
    (480, 120, {MOBILENET: 1}), (120, 480, {MOBILENET: 1}),
    (672, 168, {MOBILENET: 2}), (168, 672, {MOBILENET: 2}),
    (960, 240, {MOBILENET: 2}), (240, 960, {MOBILENET: 2}),
    (32, 8, {EFFICIENTNET: 1}), (8, 32, {EFFICIENTNET: 1}),
    (96, 4, {EFFICIENTNET: 1}), (4, 96, {EFFICIENTNET: 1}),
    (144, 6, {EFFICIENTNET: 2}), (6, 144, {EFFICIENTNET: 2}),
    (240, 10, {EFFICIENTNET: 2}), (10, 240, {EFFICIENTNET: 2}),
    (480, 20, {EFFICIENTNET: 3}), (20, 480, {EFFICIENTNET: 3}),
    (672, 28, {EFFICIENTNET: 3}), (28, 672, {EFFICIENTNET: 3}),
    (1152, 48, {EFFICIENTNET: 4}), (48, 1152, {EFFICIENTNET: 4}),
]


def layers() -> list[dict]:
    """Every layer measured: its kind, label, shapes, geometry and calls per step."""
    out = []
    for c_in, c_out, calls in SQUEEZE_EXCITATION:
        out.append({"kind": "squeeze-excitation", "label": f"se {c_in} -> {c_out}", "input": [BATCH, c_in, 1, 1],
                    "weight": [c_out, c_in, 1, 1], "stride": 1, "padding": 0, "groups": 1, "bias": True,
                    "calls": calls})
    for c_in, c_out, size, calls in POINTWISE:
        out.append({"kind": "1x1", "label": f"1x1 {c_in} -> {c_out}, {size}x{size}",
                    "input": [BATCH, c_in, size, size], "weight": [c_out, c_in, 1, 1], "stride": 1, "padding": 0,
                    "groups": 1, "bias": False, "calls": calls})
    for channels, size, filter_size, stride, calls in DEPTHWISE:
        out.append({"kind": "depthwise", "label": f"dw {channels}, {size}x{size}, {filter_size}x{filter_size} s{stride}",
                    "input": [BATCH, channels, size, size], "weight": [channels, 1, filter_size, filter_size],
                    "stride": stride, "padding": filter_size // 2, "groups": channels, "bias": False,
                    "calls": calls})
    return out


def graph_of(call):
    """``INNER`` calls captured in one CUDA graph, after three warm-up calls on a side stream."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(INNER):
            call()
    torch.cuda.synchronize()
    return graph


def replay_us(graph, reps: int) -> list[float]:
    """Per call, in microseconds, for each of ``reps`` replays between CUDA events."""
    import torch

    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / INNER)
    return times


def stock_kernels(graph) -> dict:
    """The kernels one replay of ``graph`` runs, per call: how many and their summed duration."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kernels = [event for event in prof.events() if event.device_type == torch.autograd.DeviceType.CUDA]
    return {"kernels_per_call": len(kernels) / INNER,
            "kernel_us_per_call": sum(event.time_range.elapsed_us() for event in kernels) / INNER}


def measure_layer(layer: dict, reps: int) -> dict:
    import torch

    torch.backends.cudnn.benchmark = True
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(layer["input"], device="cuda", generator=generator).half().to(memory_format=torch.channels_last)
    weight = torch.randn(layer["weight"], device="cuda", generator=generator).half()
    stride, padding = [layer["stride"]] * 2, [layer["padding"]] * 2
    y = torch.nn.functional.conv2d(x, weight, stride=stride, padding=padding, groups=layer["groups"])
    dy = torch.randn(y.shape, device="cuda", generator=generator).half().to(memory_format=torch.channels_last)
    bias_sizes = [layer["weight"][0]] if layer["bias"] else None
    geometry = (stride, padding, [1, 1], False, [0, 0], layer["groups"], [True, True, layer["bias"]])
    stock = graph_of(lambda: torch.ops.aten.convolution_backward(dy, x, weight, bias_sizes, *geometry))
    gradient_elements = x.numel() + weight.numel() + (layer["weight"][0] if layer["bias"] else 0)
    source = torch.randn(gradient_elements, device="cuda", generator=generator).half()
    target = torch.empty_like(source)
    floor = graph_of(lambda: torch.mul(source, 1.0, out=target))
    stock_us, floor_us = [], []
    for _ in range(reps):  # interleaved, so drift touches both alike
        stock_us += replay_us(stock, 1)
        floor_us += replay_us(floor, 1)
    return {"stock_us": statistics.median(stock_us), "floor_us": statistics.median(floor_us), **stock_kernels(stock)}


def network_totals(report: dict) -> dict[str, dict[str, float]]:
    """Per network, summed over its calls per step: stock's time, its kernels, the floor."""
    totals: dict[str, dict[str, float]] = {}
    for record in report["layers"]:
        if record.get("error"):
            continue
        for network, count in record["calls"].items():
            entry = totals.setdefault(network, {"calls": 0, "stock_us": 0.0, "floor_us": 0.0, "kernels": 0.0})
            entry["calls"] += count
            entry["stock_us"] += count * record["stock_us"]
            entry["floor_us"] += count * record["floor_us"]
            entry["kernels"] += count * record["kernels_per_call"]
    return totals


def render(report: dict) -> str:
    lines = results.heading("A layer's backward pass against one kernel launch", report,
                            f"python benchmarks/backward_floor.py --reps {report['reps']}") + [
        "Every convolution of MobileNetV3 and EfficientNet-B0 (fp16 channels_last, batch 64; the "
        "squeeze-and-excitation layers with their bias), its backward pass as a training step asks for it: "
        f"stock's `convolution_backward` under `benchmark=True`, {INNER} calls captured in a CUDA graph, median "
        "GPU time per call over the replays; *kernels*: what one call launches (the profiler), and their summed "
        "duration; *one-launch floor*: one elementwise kernel reading and writing as many elements as the "
        "call's gradients have, captured and timed the same way.",
        "",
        "| layer | kind | calls | stock us | kernels | kernel us | one-launch floor us | stock - floor us |",
        "|---|---|---|--:|--:|--:|--:|--:|",
    ]
    for record in report["layers"]:
        calls = ", ".join(f"{network.split('_')[0]} {count}" for network, count in record["calls"].items())
        if record.get("error"):
            lines.append(f"| {record['label']} | {record['kind']} | {calls} | error: {record['error']} | | | | |")
            continue
        lines.append(f"| {record['label']} | {record['kind']} | {calls} | {num(record['stock_us'], 1)} | "
                     f"{record['kernels_per_call']:g} | {num(record['kernel_us_per_call'], 1)} | "
                     f"{num(record['floor_us'], 1)} | {num(record['stock_us'] - record['floor_us'], 1)} |")
    totals = network_totals(report)
    if totals:
        lines += ["", "Per training step, summed over every backward call of the network's convolutions:", "",
                  "| network | backward calls | kernels | stock ms | one-launch floor ms | stock - floor ms |",
                  "|---|--:|--:|--:|--:|--:|"]
        for network, entry in totals.items():
            lines.append(f"| {network} | {entry['calls']} | {entry['kernels']:g} | {num(entry['stock_us'] / 1e3, 3)} | "
                         f"{num(entry['floor_us'] / 1e3, 3)} | "
                         f"{num((entry['stock_us'] - entry['floor_us']) / 1e3, 3)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=9, help="replays of each graph, interleaved (default 9)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    parser.add_argument("--render", type=Path, metavar="JSON", help="print a saved result's markdown; no GPU")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be at least 1, got {args.reps}")
    if args.render:
        sys.stdout.write(render(json.loads(args.render.read_text())))
        return 0
    report = {"environment": results.environment(), "date": results.now_iso()[:10], "reps": args.reps, "layers": []}
    stem = f"backward-floor-{results.device_slug(report['environment']['device'])}-{report['date']}"
    started = time.perf_counter()
    for layer in layers():
        record = dict(layer)
        try:
            record.update(measure_layer(layer, args.reps))
        except Exception as exc:  # one failing layer must not lose the others
            record["error"] = results.error_text(exc)
        report["layers"].append(record)
        results.progress(f"{record['label']}: stock {record.get('stock_us')} us, floor {record.get('floor_us')} us "
                         f"({time.perf_counter() - started:.0f} s)")
    results.write_json(args.out / f"{stem}.json", report)
    results.publish(args.out / f"{stem}.md", render(report))
    return 0
