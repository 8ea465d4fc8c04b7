"""Our own kernels against cuDNN, layer by layer: for the convolutions of the zoo furthest from
their roofline bound (depthwise, grouped with few channels per group, the MBConv and RegNetY 1x1
convolutions with few channels on large planes, ConvTasNet's one-channel transposed decoder, the
three-channel stems of MobileNetV3, EfficientNet/RegNetY and ResNeXt),
every direction is profiled with ``torch_cudnn_algo.profile``: each cuDNN
candidate (legacy algorithms and engine configurations), stock's own choice and ``"tca.direct"``,
timed on the same operands (median CUDA-event time) and checked against float64.

    python benchmarks/kernels.py [--only SUBSTRING] [--reps 20] [--out benchmarks/results]
    python benchmarks/kernels.py --render benchmarks/results/kernels-<gpu>-<date>.json   (no GPU)

Writes ``<out>/kernels-<gpu>-<date>.json`` and ``.md``. *cuDNN best* is the fastest candidate of
cuDNN's list within the accuracy rule the tuner applies (``tolerance_for``); *ours/best* above 1
means our kernel is faster; *bound* is the roofline bound (``roofline.conv_bound``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import results
from .internal import tuner_tolerance
from .roofline import Peaks, conv_bound, peaks_of
from .stats import num

# The convolutions of the spike: where each comes from, and its ConvSpec string (the direction
# is appended). AMP fp16 channels_last as the zoo's image networks run; ConvTasNet contiguous.
LAYERS: list[tuple[str, str]] = [
    ("efficientnet_b0 dw 5x5 s2", "conv2d 64x672x14x14 -> 672x5x5 s2 p2 g672 fp16 channels_last"),
    ("efficientnet_b0 dw 5x5 s2", "conv2d 64x144x56x56 -> 144x5x5 s2 p2 g144 fp16 channels_last"),
    ("efficientnet_b0 dw 3x3 s2", "conv2d 64x96x112x112 -> 96x3x3 s2 p1 g96 fp16 channels_last"),
    ("mobilenet_v3_large dw 3x3 s1", "conv2d 64x72x56x56 -> 72x3x3 s1 p1 g72 fp16 channels_last"),
    ("mobilenet_v3_large dw 5x5 s1", "conv2d 64x960x7x7 -> 960x5x5 s1 p2 g960 fp16 channels_last"),
    ("efficientnet_b0 dw 5x5 s1", "conv2d 64x240x28x28 -> 240x5x5 s1 p2 g240 fp16 channels_last"),
    ("convnext_tiny dw 7x7 s1", "conv2d 64x96x56x56 -> 96x7x7 s1 p3 g96 fp16 channels_last"),
    ("convnext_tiny dw 7x7 s1", "conv2d 64x192x28x28 -> 192x7x7 s1 p3 g192 fp16 channels_last"),
    ("convnext-style dw 7x7 s1", "conv2d 64x384x14x14 -> 384x7x7 s1 p3 g384 fp16 channels_last"),
    ("convnext_tiny dw 7x7 s1", "conv2d 64x768x7x7 -> 768x7x7 s1 p3 g768 fp16 channels_last"),
    ("regnety_016 g37 (24/group) s2", "conv2d 64x888x14x14 -> 888x3x3 s2 p1 g37 fp16 channels_last"),
    ("regnety_016 g2 (24/group) s2", "conv2d 64x48x112x112 -> 48x3x3 s2 p1 g2 fp16 channels_last"),
    ("regnety_016 g5 (24/group) s1", "conv2d 64x120x28x28 -> 120x3x3 s1 p1 g5 fp16 channels_last"),
    ("regnety_016 g14 (24/group) s1", "conv2d 64x336x14x14 -> 336x3x3 s1 p1 g14 fp16 channels_last"),
    ("resnext50_32x4d g32 (4/group) s1", "conv2d 64x128x56x56 -> 128x3x3 s1 p1 g32 fp16 channels_last"),
    ("resnext50_32x4d g32 (8/group) s1", "conv2d 64x256x28x28 -> 256x3x3 s1 p1 g32 fp16 channels_last"),
    ("resnext50_32x4d g32 (16/group) s1", "conv2d 64x512x14x14 -> 512x3x3 s1 p1 g32 fp16 channels_last"),
    ("resnext50_32x4d g32 (32/group) s1", "conv2d 64x1024x7x7 -> 1024x3x3 s1 p1 g32 fp16 channels_last"),
    ("mobilenet_v3_large 1x1 16->16 at 112x112", "conv2d 64x16x112x112 -> 16x1x1 s1 p0 fp16 channels_last"),
    ("mobilenet_v3_large 1x1 16->64 at 112x112", "conv2d 64x16x112x112 -> 64x1x1 s1 p0 fp16 channels_last"),
    ("mobilenet_v3_large 1x1 64->24 at 56x56", "conv2d 64x64x56x56 -> 24x1x1 s1 p0 fp16 channels_last"),
    ("mobilenet_v3_large 1x1 24->72 at 56x56", "conv2d 64x24x56x56 -> 72x1x1 s1 p0 fp16 channels_last"),
    ("mobilenet_v3_large 1x1 72->24 at 56x56", "conv2d 64x72x56x56 -> 24x1x1 s1 p0 fp16 channels_last"),
    ("efficientnet_b0 1x1 32->16 at 112x112", "conv2d 64x32x112x112 -> 16x1x1 s1 p0 fp16 channels_last"),
    ("efficientnet_b0 1x1 16->96 at 112x112", "conv2d 64x16x112x112 -> 96x1x1 s1 p0 fp16 channels_last"),
    ("efficientnet_b0 1x1 96->24 at 56x56", "conv2d 64x96x56x56 -> 24x1x1 s1 p0 fp16 channels_last"),
    ("efficientnet_b0 1x1 24->144 at 56x56", "conv2d 64x24x56x56 -> 144x1x1 s1 p0 fp16 channels_last"),
    ("efficientnet_b0 1x1 144->24 at 56x56", "conv2d 64x144x56x56 -> 24x1x1 s1 p0 fp16 channels_last"),
    ("regnety_016 1x1 32->48 at 112x112", "conv2d 64x32x112x112 -> 48x1x1 s1 p0 fp16 channels_last"),
    ("regnety_016 1x1 48->48 at 56x56", "conv2d 64x48x56x56 -> 48x1x1 s1 p0 fp16 channels_last"),
    ("regnety_016 1x1 48->120 at 56x56", "conv2d 64x48x56x56 -> 120x1x1 s1 p0 fp16 channels_last"),
    ("conv_tasnet decoder (transposed, 1 channel)", "conv_transpose1d 8x512x4001 -> 1x16 s8 p8 fp16 contiguous"),
    ("conv_tasnet dw 1-d k3", "conv1d 4x512x4001 -> 512x3 s1 p1 g512 fp16 contiguous"),
    ("mobilenet_v3_large stem (3 channels) s2", "conv2d 64x3x224x224 -> 16x3x3 s2 p1 fp16 channels_last"),
    ("efficientnet_b0 and regnety_016 stem (3 channels) s2", "conv2d 64x3x224x224 -> 32x3x3 s2 p1 fp16 channels_last"),
    ("resnext50_32x4d stem (3 channels) 7x7 s2", "conv2d 64x3x224x224 -> 64x7x7 s2 p3 fp16 channels_last"),
]
DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
OURS = "tca.direct"


def measure_layer(spec_text: str, reps: int, peaks: Peaks | None) -> dict:
    import torch_cudnn_algo as tca

    table = tca.profile(spec_text, energy=False, reps=reps, warmup=3)
    tolerance = tuner_tolerance(table.dtype, False)
    cudnn = [row for row in table if row.ok and row.value is not None and row.value != OURS
             and row.time_ms is not None and row.max_rel_error is not None and row.max_rel_error <= tolerance]
    best = min(cudnn, key=lambda row: row.time_ms) if cudnn else None
    ours = table.row(OURS)
    stock = table.stock
    record = {
        "convolution": table.convolution,
        "candidates_timed": len(cudnn),
        "cudnn_best": None if best is None else {"value": best.value, "time_ms": best.time_ms,
                                                   "max_rel_error": best.max_rel_error},
        "stock_ms": None if stock is None else stock.time_ms,
        "ours": {"status": ours.status, "time_ms": ours.time_ms, "max_rel_error": ours.max_rel_error,
                 "workspace": ours.workspace},
        "tolerance": tolerance,
        "profile_seconds": table.environment.get("profile_seconds"),
    }
    return with_bound(record, peaks)


def with_bound(record: dict, peaks: Peaks | None) -> dict:
    """The record with its roofline bound on the GPU of ``peaks``, and what its times achieve
    against it; left as it is without peaks (a GPU without figures) or without a convolution
    description (a layer that failed to measure)."""
    if peaks is None:
        record.update(bound_ms=None, memory_bound=None)
        return record
    try:
        bound = conv_bound(record["convolution"], peaks)
    except ValueError:
        return record
    record.update(bound_ms=bound.bound_ms, memory_bound=bound.memory_bound)
    ours, best = record["ours"], record["cudnn_best"]
    if ours["time_ms"]:
        ours["tb_per_s"] = bound.tb_per_s(ours["time_ms"])
        ours["percent_of_peak_bandwidth"] = 100 * bound.tb_per_s(ours["time_ms"]) / peaks.tb_per_s
    if best is not None:
        best["tb_per_s"] = bound.tb_per_s(best["time_ms"])
    return record


def speedup(record: dict) -> float | None:
    best, ours = record["cudnn_best"], record["ours"]
    if best is None or not ours["time_ms"] or ours["max_rel_error"] is None or ours["max_rel_error"] > record["tolerance"]:
        return None
    return best["time_ms"] / ours["time_ms"]


def render(report: dict) -> str:
    env = report["environment"]
    peaks = peaks_of(env.get("device"))
    only = f" --only {report['only']}" if report.get("only") else ""
    lines = results.heading("Our direct kernels against cuDNN's best, layer by layer", report,
                            f"python benchmarks/kernels.py --reps {report['reps']}{only}") + [
        "Median GPU time per call (CUDA events) on the same operands; *cuDNN best* is the fastest of "
        "cuDNN's candidates within the tuner's accuracy rule against float64; *ours/best* > 1 means "
        "`tca.direct` is faster. "
        + (f"*bound* is the roofline bound ({peaks.name} peaks: {peaks.tb_per_s} TB/s, "
           f"{peaks.tflops['float16']} fp16 TFLOPS); *TB/s* is the bound's bytes over our time."
           if peaks else "No roofline peaks are known for this GPU: no bound."),
        "",
        f"| layer | direction | stock ms | cuDNN best ms (value) | tca.direct ms | best/ours | bound ms | ours/bound | "
        f"TB/s (% of {peaks.tb_per_s if peaks else '-'}) | max rel err |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for record in report["layers"]:
        best, ours = record["cudnn_best"], record["ours"]
        gain = speedup(record)
        ours_ms = num(ours["time_ms"], 3) if ours["time_ms"] else ours["status"]
        best_text = f"{num(best['time_ms'], 3)} ({best['value']})" if best else "-"
        if ours["time_ms"] and record["bound_ms"]:
            against_bound = (f"{num(ours['time_ms'] / record['bound_ms'], 1)} | {num(ours.get('tb_per_s'), 2)} "
                             f"({num(ours.get('percent_of_peak_bandwidth'), 0)}%)")
        else:
            against_bound = "- | -"
        error = f"{ours['max_rel_error']:.1e}" if ours["max_rel_error"] is not None else "-"
        lines.append(f"| {record['label']} | {record['direction']} | {num(record['stock_ms'], 3)} | {best_text} | "
                     f"{ours_ms} | {num(gain, 2)} | {num(record['bound_ms'], 3)} | {against_bound} | {error} |")
    gains = [g for g in (speedup(r) for r in report["layers"]) if g is not None]
    if gains:
        wins = sum(g >= 1.5 for g in gains)
        lines += ["", f"{wins} of {len(gains)} layer directions at least 1.5x cuDNN's best; "
                      f"median {sorted(gains)[len(gains) // 2]:.2f}x, min {min(gains):.2f}x, max {max(gains):.2f}x."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="run only layers whose label or spec contains this")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="rewrite a saved result's bounds for its GPU and print its markdown; no GPU")
    args = parser.parse_args(argv)
    if args.render:
        report = json.loads(args.render.read_text())
        peaks = peaks_of(report["environment"].get("device"))
        report["layers"] = [with_bound(record, peaks) for record in report["layers"]]
        results.write_json(args.render, report)
        sys.stdout.write(render(report))
        return 0
    report = {"environment": results.environment(), "date": results.now_iso()[:10], "reps": args.reps,
              "only": args.only, "layers": []}
    peaks = peaks_of(report["environment"].get("device"))
    stem = f"kernels-{results.device_slug(report['environment']['device'])}-{report['date']}"
    for label, spec in LAYERS:
        if args.only and args.only not in label and args.only not in spec:
            continue
        for direction in DIRECTIONS:
            started = time.perf_counter()
            try:
                record = measure_layer(f"{spec} {direction}", args.reps, peaks)
            except Exception as exc:  # one failing layer must not lose the others
                record = {"convolution": spec, "error": results.error_text(exc), "cudnn_best": None,
                          "ours": {"status": "error", "time_ms": None, "max_rel_error": None},
                          "stock_ms": None, "bound_ms": None, "tolerance": 0.0}
            record.update(label=label, direction=direction, spec=spec)
            report["layers"].append(record)
            results.progress(f"{label} {direction}: ours {record['ours']['time_ms']} ms, best "
                             f"{(record['cudnn_best'] or {}).get('time_ms')} ms ({time.perf_counter() - started:.1f} s)")
            results.write_json(args.out / f"{stem}.json", report)
    markdown = render(report)
    results.publish(args.out / f"{stem}.md", markdown)
    return 0
