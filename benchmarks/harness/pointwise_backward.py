"""A fused 1x1 backward pass, and a 1x1 forward pass, against cuDNN, layer by layer: on the 1x1
convolutions of MobileNetV3 and EfficientNet-B0 (fp16 channels_last, batch 64, as the zoo trains
them; the squeeze-and-excitation layers, one pixel an image, left out), the candidate kernels of
``pointwise_kernels.cu`` (input and filter gradient from one read of dy; the forward; both on
tensor cores) are checked against float64 and timed over their launch choices, beside

* stock's ``convolution_backward`` under ``benchmark=True`` (both gradients, one call, as a
  training step runs it),
* the best pair: per direction the faster of cuDNN's best candidate within the tuner's accuracy
  rule and ``"tca.direct"`` (``torch_cudnn_algo.profile``), which is what a tuned plan runs;
  for the forward, stock's ``convolution`` and the best of the forward direction the same way.

    python benchmarks/pointwise_backward.py [--reps 11] [--out benchmarks/results]
    python benchmarks/pointwise_backward.py --render benchmarks/results/pointwise-backward-<gpu>-<date>.json

Needs nvcc (the kernel is built into a temporary folder, or ``--library`` names a built one).
Writes ``<out>/pointwise-backward-<gpu>-<date>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import tempfile
import time
from pathlib import Path

from . import results
from .fused_backward import (EFFICIENTNET, MOBILENET, best_pair_ms, best_per_direction, build,
                             checked_run, fastest_passing, network_totals, relative_error, stock_backward,
                             timed)
from .internal import tuner_tolerance
from .roofline import Peaks, peaks_of
from .stats import gain_line, num

KERNEL_SOURCE = Path(__file__).resolve().parent / "pointwise_kernels.cu"
BATCH = 64
# (input channels, output channels, height = width, {network: calls per training step}): the
# 1x1 convolutions of the two networks with more than one pixel an image.
LAYERS: list[tuple[int, int, int, dict[str, int]]] = [
    (16, 16, 112, {MOBILENET: 1}),
    (16, 64, 112, {MOBILENET: 1}),
    (64, 24, 56, {MOBILENET: 1}),
    (24, 72, 56, {MOBILENET: 2}),
    (72, 24, 56, {MOBILENET: 1}),
    (72, 40, 28, {MOBILENET: 1}),
    (40, 120, 28, {MOBILENET: 2}),
    (120, 40, 28, {MOBILENET: 2}),
    (40, 240, 28, {MOBILENET: 1, EFFICIENTNET: 2}),
    (240, 80, 14, {MOBILENET: 1, EFFICIENTNET: 1}),
    (80, 200, 14, {MOBILENET: 1}),
    (200, 80, 14, {MOBILENET: 1}),
    (80, 184, 14, {MOBILENET: 2}),
    (184, 80, 14, {MOBILENET: 2}),
    (80, 480, 14, {MOBILENET: 1, EFFICIENTNET: 3}),
    (480, 112, 14, {MOBILENET: 1, EFFICIENTNET: 1}),
    (112, 672, 14, {MOBILENET: 2, EFFICIENTNET: 3}),
    (672, 112, 14, {MOBILENET: 1, EFFICIENTNET: 2}),
    (672, 160, 7, {MOBILENET: 1}),
    (160, 960, 7, {MOBILENET: 3}),
    (960, 160, 7, {MOBILENET: 2}),
    (32, 16, 112, {EFFICIENTNET: 1}),
    (16, 96, 112, {EFFICIENTNET: 1}),
    (96, 24, 56, {EFFICIENTNET: 1}),
    (24, 144, 56, {EFFICIENTNET: 2}),
    (144, 24, 56, {EFFICIENTNET: 1}),
    (144, 40, 28, {EFFICIENTNET: 1}),
    (240, 40, 28, {EFFICIENTNET: 1}),
    (480, 80, 14, {EFFICIENTNET: 2}),
    (672, 192, 7, {EFFICIENTNET: 1}),
    (192, 1152, 7, {EFFICIENTNET: 4}),
    (1152, 192, 7, {EFFICIENTNET: 3}),
    (1152, 320, 7, {EFFICIENTNET: 1}),
    (320, 1280, 7, {EFFICIENTNET: 1}),
]
# The kernel's launch choices: pixels a tile, and blocks per SM the grid is sized for (each block
# writes one slice of dw partials).
SWEEP = [(tile, blocks) for tile in (64, 128) for blocks in (1, 2, 3, 4)]


def label_of(c_in: int, c_out: int, size: int) -> str:
    return f"{BATCH}x{c_in}x{size}x{size} -> {c_out}"


def bounds(c_in: int, c_out: int, size: int, peaks: Peaks) -> dict:
    """The least time of the fused pass (x and dy read, dx written, the weight and its gradient),
    of the two separate calls (each reads dy) and of the forward (x read, y written), at the
    memory's peak."""
    pixels = BATCH * size * size
    weight = c_in * c_out
    fused = 2 * (2 * pixels * c_in + pixels * c_out + 2 * weight)
    separate = 2 * (2 * pixels * c_in + 2 * pixels * c_out + 2 * weight)
    forward = 2 * (pixels * c_in + pixels * c_out + weight)
    scale = 1e3 / (peaks.tb_per_s * 1e12)
    return {"memory_ms": fused * scale, "separate_memory_ms": separate * scale, "forward_memory_ms": forward * scale}


def measure_layer(library, c_in: int, c_out: int, size: int, reps: int) -> dict:
    import torch

    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(BATCH, c_in, size, size, device="cuda", generator=generator).half()
    x = x.to(memory_format=torch.channels_last)
    weight = torch.randn(c_out, c_in, 1, 1, device="cuda", generator=generator).half()
    dy = torch.randn(BATCH, c_out, size, size, device="cuda", generator=generator).half()
    dy = dy.to(memory_format=torch.channels_last)
    geometry = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, False])
    references = torch.ops.aten.convolution_backward(dy.double(), x.double(), weight.double(), None, *geometry)[:2]
    tolerance = tuner_tolerance("float16", False)
    record: dict = {"tolerance": tolerance, "stock": stock_backward(dy, x, weight, geometry, references, reps)}

    dx, dw = torch.empty_like(x), torch.empty_like(weight)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    sweep = []
    for tile, blocks in SWEEP:
        # The kernel's matrices: x [pixels][c_in], dy [pixels][c_out], the weight [c_out][c_in].
        shape = (BATCH * size * size, c_out, c_in, sms, blocks, tile)
        workspace_bytes = library.pw_backward_workspace(*shape)
        if workspace_bytes < 0:
            continue
        workspace = torch.empty(max(1, workspace_bytes // 4), device="cuda", dtype=torch.float32)
        pointers = [ctypes.c_void_p(t.data_ptr()) for t in (x, dy, weight, dx, dw, workspace)]
        call = lambda: library.pw_backward(0, *shape, *pointers, stream)  # noqa: E731
        sweep.append({"tile_pixels": tile, "blocks_per_sm": blocks, **checked_run(call, (dx, dw), references, reps)})
    record.update(fastest_passing(sweep, tolerance))
    spec = f"conv2d {BATCH}x{c_in}x{size}x{size} -> {c_out}x1x1 s1 p0 fp16 channels_last"
    record.update(best_per_direction(spec, reps, tolerance))
    record["forward"] = measure_forward(library, x, weight, spec, reps, tolerance)
    return record


def measure_forward(library, x, weight, spec: str, reps: int, tolerance: float) -> dict:
    """The forward pass: stock's convolution under ``benchmark=True``, the best of the forward
    direction, and the candidate forward kernel over its launch choices."""
    import torch

    geometry = (None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    reference = torch.ops.aten.convolution(x.double(), weight.double(), *geometry)
    stock_call = lambda: torch.ops.aten.convolution(x, weight, *geometry)  # noqa: E731
    stock = {"time_ms": timed(stock_call, reps), "max_rel_error": [relative_error(stock_call(), reference)]}
    y = torch.empty_like(reference, dtype=x.dtype).contiguous(memory_format=torch.channels_last)
    pixels, c_out, c_in = x.shape[0] * x.shape[2] * x.shape[3], weight.shape[0], weight.shape[1]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    pointers = [ctypes.c_void_p(t.data_ptr()) for t in (x, weight, y)]
    sweep = []
    for tile, blocks in SWEEP:
        shape = (pixels, c_out, c_in, sms, blocks, tile)
        call = lambda: library.pw_forward(0, *shape, *pointers, stream)  # noqa: E731
        sweep.append({"tile_pixels": tile, "blocks_per_sm": blocks, **checked_run(call, (y,), (reference,), reps)})
    return {"stock": stock, **fastest_passing(sweep, tolerance),
            **best_per_direction(spec, reps, tolerance, directions=("fwd",))}


def forward_best_ms(forward: dict) -> float | None:
    """The forward's best: the faster of cuDNN's best and ours (``tca.direct``), what a plan runs."""
    entry = forward.get("fwd") or {}
    times = [t for t in ((entry.get("cudnn_best") or {}).get("time_ms"), entry.get("ours_ms")) if t]
    return min(times) if times else None


def render(report: dict) -> str:
    env = report["environment"]
    peaks = peaks_of(env.get("device"))
    lines = results.heading("A fused 1x1 backward pass against cuDNN, layer by layer", report,
                            f"python benchmarks/pointwise_backward.py --reps {report['reps']}") + [
        "The 1x1 convolutions of MobileNetV3 and EfficientNet-B0 (fp16 channels_last, batch 64; not the "
        "squeeze-and-excitation layers), both gradients. Median GPU time per backward pass (CUDA events). "
        "*stock*: `convolution_backward` under `benchmark=True`, one call for both gradients; *best pair*: per "
        "direction the faster of cuDNN's best candidate within the tuner's accuracy rule and `tca.direct`, added "
        "(what a tuned plan runs); "
        "*fused*: `benchmarks/harness/pointwise_kernels.cu` at the fastest of its tile and grid sizes within that "
        "rule; - where it does not apply (dy^T x too large for its registers). "
        + (f"*memory bound*: x and dy read and dx written once at {peaks.tb_per_s} TB/s (the separate calls "
           "read dy twice)." if peaks else "No peaks are known for this GPU: no bounds."),
        "",
        "| layer | calls | stock ms | best pair ms | fused ms (tile, blocks/SM) | best pair / fused | memory bound ms "
        "(separate) | fused / memory bound | fused max rel err (dx, dw) |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    gains = []
    for record in report["layers"]:
        calls = ", ".join(f"{network.split('_')[0]} {count}" for network, count in record["calls"].items())
        if record.get("error"):
            lines.append(f"| {record['label']} | {calls} | error: {record['error']} | | | | | | |")
            continue
        fused, pair = record.get("fused"), best_pair_ms(record)
        fused_text, gain, against_bound, error = "-", None, "-", "-"
        if fused:
            fused_text = f"{num(fused['time_ms'], 3)} ({fused['tile_pixels']} px, {fused['blocks_per_sm']}/SM)"
            gain = pair / fused["time_ms"] if pair else None
            if record.get("memory_ms"):
                against_bound = num(fused["time_ms"] / record["memory_ms"], 1)
            error = ", ".join(f"{e:.1e}" for e in fused["max_rel_error"])
        if gain is not None:
            gains.append(gain)
        bound_text = (f"{num(record.get('memory_ms'), 4)} ({num(record.get('separate_memory_ms'), 4)})"
                      if record.get("memory_ms") else "-")
        lines.append(f"| {record['label']} | {calls} | {num(record['stock']['time_ms'], 3)} | {num(pair, 3)} | "
                     f"{fused_text} | {num(gain, 2)} | {bound_text} | {against_bound} | {error} |")
    if gains:
        lines += ["", gain_line("Fused against the best pair", gains, "layers it applies to")]
    totals = network_totals(report)
    if totals:
        lines += ["", "Per training step, the backward passes of these layers (ms):", "",
                  "| network | stock | best pair | best pair, fused where faster | saving |", "|---|--:|--:|--:|--:|"]
        for network, entry in totals.items():
            lines.append(f"| {network} | {num(entry['stock_ms'], 3)} | {num(entry['best_pair_ms'], 3)} | "
                         f"{num(entry['with_fused_ms'], 3)} | "
                         f"{num(entry['best_pair_ms'] - entry['with_fused_ms'], 3)} |")
    lines += forward_lines(report)
    return "\n".join(lines) + "\n"


def forward_lines(report: dict) -> list[str]:
    """The forward table and its per-network totals, for the layers whose forward was measured."""
    layers = [record for record in report["layers"] if record.get("forward")]
    if not layers:
        return []
    lines = ["", "## The forward pass", "",
             "*stock*: `convolution` under `benchmark=True`; *best*: the faster of cuDNN's best forward candidate "
             "and `tca.direct` (what a plan runs); *ours*: the forward kernel of the same file; *memory bound*: x "
             "read and y written once.", "",
             "| layer | calls | stock ms | best ms | ours ms (tile, blocks/SM) | best / ours | memory bound ms | "
             "ours / memory bound | ours max rel err |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    totals: dict[str, list[float]] = {}
    for record in layers:
        forward = record["forward"]
        calls = ", ".join(f"{network.split('_')[0]} {count}" for network, count in record["calls"].items())
        best, ours = forward_best_ms(forward), forward.get("fused")
        ours_text, gain, against_bound, error = "-", None, "-", "-"
        if ours:
            ours_text = f"{num(ours['time_ms'], 3)} ({ours['tile_pixels']} px, {ours['blocks_per_sm']}/SM)"
            gain = best / ours["time_ms"] if best else None
            if record.get("forward_memory_ms"):
                against_bound = num(ours["time_ms"] / record["forward_memory_ms"], 1)
            error = f"{ours['max_rel_error'][0]:.1e}"
        lines.append(f"| {record['label']} | {calls} | {num(forward['stock']['time_ms'], 3)} | {num(best, 3)} | "
                     f"{ours_text} | {num(gain, 2)} | {num(record.get('forward_memory_ms'), 4)} | {against_bound} | "
                     f"{error} |")
        if best is None:
            continue
        for network, count in record["calls"].items():
            entry = totals.setdefault(network, [0.0, 0.0, 0.0])
            entry[0] += count * forward["stock"]["time_ms"]
            entry[1] += count * best
            entry[2] += count * (min(best, ours["time_ms"]) if ours else best)
    if totals:
        lines += ["", "Per training step, the forward passes of these layers (ms):", "",
                  "| network | stock | best | best, ours where faster | saving |", "|---|--:|--:|--:|--:|"]
        for network, (stock, best, with_ours) in totals.items():
            lines.append(f"| {network} | {num(stock, 3)} | {num(best, 3)} | {num(with_ours, 3)} | "
                         f"{num(best - with_ours, 3)} |")
    return lines


def with_bounds(record: dict, peaks: Peaks | None) -> dict:
    if peaks is None:
        record.update(memory_ms=None, separate_memory_ms=None, forward_memory_ms=None)
    else:
        record.update(bounds(record["c_in"], record["c_out"], record["size"], peaks))
    return record


ORDER = {label_of(c_in, c_out, size): index for index, (c_in, c_out, size, _) in enumerate(LAYERS)}


def layer_range(parser: argparse.ArgumentParser, text: str) -> list:
    """The layers ``--layers FIRST:END`` names (all of them when empty)."""
    if not text:
        return list(LAYERS)
    try:
        first, end = (int(part) if part else None for part in text.split(":"))
    except ValueError:
        parser.error(f"--layers takes FIRST:END, two indices into the {len(LAYERS)} layers (either may be left "
                     f"out), got {text!r}")
    chosen = LAYERS[first:end]
    if not chosen:
        parser.error(f"--layers {text} names none of the {len(LAYERS)} layers")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    parser.add_argument("--library", type=Path, help="a built pointwise_kernels.so instead of building one")
    parser.add_argument("--render", type=Path, metavar="JSON", help="print a saved result's markdown; no GPU")
    parser.add_argument("--layers", default="", metavar="FIRST:END",
                        help=f"only LAYERS[FIRST:END] of the {len(LAYERS)} (a run of them all outlasts a 10-minute "
                             "GPU call); their records replace those of the day's file, the others are kept")
    args = parser.parse_args(argv)
    chosen = layer_range(parser, args.layers)
    if args.reps < 1:
        parser.error(f"--reps must be at least 1, got {args.reps}")
    if args.render:
        report = json.loads(args.render.read_text())
        peaks = peaks_of(report["environment"].get("device"))
        report["layers"] = [with_bounds(record, peaks) for record in report["layers"]]
        sys.stdout.write(render(report))
        return 0
    report = {"environment": results.environment(), "date": results.now_iso()[:10], "reps": args.reps, "layers": []}
    peaks = peaks_of(report["environment"].get("device"))
    stem = f"pointwise-backward-{results.device_slug(report['environment']['device'])}-{report['date']}"
    earlier = args.out / f"{stem}.json"
    if earlier.exists():  # an earlier part of the day's run: its other layers are kept
        labels = {label_of(c_in, c_out, size) for c_in, c_out, size, _ in chosen}
        report["layers"] = [record for record in json.loads(earlier.read_text())["layers"]
                            if record["label"] not in labels]
    with tempfile.TemporaryDirectory() as scratch:
        library = ctypes.CDLL(str(args.library or build(Path(scratch), KERNEL_SOURCE)))
        library.pw_backward_workspace.restype = ctypes.c_longlong
        library.pw_backward_workspace.argtypes = [ctypes.c_longlong] + [ctypes.c_int] * 5
        library.pw_backward.argtypes = [ctypes.c_int, ctypes.c_longlong] + [ctypes.c_int] * 5 + [ctypes.c_void_p] * 7
        library.pw_forward.argtypes = [ctypes.c_int, ctypes.c_longlong] + [ctypes.c_int] * 5 + [ctypes.c_void_p] * 4
        for c_in, c_out, size, calls in chosen:
            started = time.perf_counter()
            record = {"label": label_of(c_in, c_out, size), "c_in": c_in, "c_out": c_out, "size": size,
                      "calls": calls}
            try:
                record.update(measure_layer(library, c_in, c_out, size, args.reps))
            except Exception as exc:  # one failing layer must not lose the others
                record["error"] = results.error_text(exc)
            report["layers"].append(with_bounds(record, peaks))
            report["layers"].sort(key=lambda entry: ORDER[entry["label"]])
            results.progress(f"{record['label']}: fused {(record.get('fused') or {}).get('time_ms')} ms, best pair "
                             f"{best_pair_ms(record) if not record.get('error') else None} ms "
                             f"({time.perf_counter() - started:.1f} s)")
            results.write_json(args.out / f"{stem}.json", report)
    markdown = render(report)
    results.publish(args.out / f"{stem}.md", markdown)
    return 0
