"""The backward pass of a 1x1 convolution on one pixel an image in one kernel launch, against
stock's call, on the squeeze-and-excitation layers of MobileNetV3 and EfficientNet-B0 (fp16,
batch 64, with their bias): ``single_pixel_backward.cu`` computes the input, weight and bias
gradients in one launch where stock's ``convolution_backward`` (``benchmark=True``) launches three
kernels. Every launch choice (how many ways the reductions are split) is checked against float64
with NaN-prefilled outputs, run twice (the second must equal the first bit for bit: the split
tiles' counters reset themselves), and timed; both sides are captured ``INNER`` times in a CUDA
graph and replayed, interleaved.

    python benchmarks/single_pixel_backward.py [--reps 9] [--out benchmarks/results]
    python benchmarks/single_pixel_backward.py --render benchmarks/results/single-pixel-backward-<gpu>-<date>.json

Needs nvcc (the kernel is built into a temporary folder, or ``--library`` names a built one).
Writes ``<out>/single-pixel-backward-<gpu>-<date>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from . import results
from .backward_floor import BATCH, SQUEEZE_EXCITATION, graph_of, replay_us
from .fused_backward import build, relative_error
from .internal import tuner_tolerance
from .stats import gain_line, num

KERNEL_SOURCE = Path(__file__).resolve().parent / "single_pixel_backward.cu"
# The launch choices: ways the reduction over output channels (dx) and over images (dW, db) is split.
SWEEP = [(split_k, split_m) for split_k in (1, 2, 4, 8, 16, 32, 64) for split_m in (1, 2, 4)]


def declare(library) -> None:
    """The C signatures of the library's three functions."""
    shape = [ctypes.c_longlong] + [ctypes.c_int] * 5
    for name in ("spb_workspace", "spb_counter_bytes"):
        getattr(library, name).restype = ctypes.c_longlong
        getattr(library, name).argtypes = shape
    library.spb_backward.argtypes = [ctypes.c_int] + shape + [ctypes.c_void_p] * 8


def measure_layer(library, c_in: int, c_out: int, reps: int) -> dict:
    import torch

    torch.backends.cudnn.benchmark = True
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(BATCH, c_in, 1, 1, device="cuda", generator=generator).half()
    weight = torch.randn(c_out, c_in, 1, 1, device="cuda", generator=generator).half()
    dy = torch.randn(BATCH, c_out, 1, 1, device="cuda", generator=generator).half()
    geometry = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, True])
    references = torch.ops.aten.convolution_backward(dy.double(), x.double(), weight.double(), [c_out], *geometry)
    tolerance = tuner_tolerance("float16", False)
    stock_call = lambda: torch.ops.aten.convolution_backward(dy, x, weight, [c_out], *geometry)  # noqa: E731
    stock_errors = [relative_error(out, reference) for out, reference in zip(stock_call(), references)]
    stock_graph = graph_of(stock_call)

    dx, dw, db = torch.empty_like(x), torch.empty_like(weight), torch.empty(c_out, device="cuda", dtype=x.dtype)
    outputs = (dx, dw, db)
    runs = []
    for split_k, split_m in SWEEP:
        shape = (BATCH, c_out, c_in, split_k, split_m, 1)
        workspace_bytes = library.spb_workspace(*shape)
        if workspace_bytes < 0:
            continue
        workspace = torch.zeros(workspace_bytes // 4, device="cuda", dtype=torch.int32)  # the counters start at 0
        pointers = [ctypes.c_void_p(t.data_ptr()) for t in (x, dy, weight, dx, dw, db, workspace)]
        call = lambda: library.spb_backward(  # noqa: E731
            0, *shape, *pointers, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        run = {"split_k": split_k, "split_m": split_m, "workspace_bytes": workspace_bytes}
        for out in outputs:
            out.fill_(float("nan"))
        status = call()
        torch.cuda.synchronize()
        if status != 0:
            runs.append({**run, "status": f"CUDA error {status}"})
            continue
        first = [out.clone() for out in outputs]
        run["max_rel_error"] = [relative_error(out, reference) for out, reference in zip(first, references)]
        for out in outputs:
            out.fill_(float("nan"))
        call()
        torch.cuda.synchronize()
        run["repeats_bitwise"] = all(torch.equal(a, b) for a, b in zip(first, outputs))
        ours_graph = graph_of(call)
        stock_us, ours_us = [], []
        for _ in range(reps):  # interleaved
            stock_us += replay_us(stock_graph, 1)
            ours_us += replay_us(ours_graph, 1)
        run.update(status="ok", time_us=statistics.median(ours_us), stock_us=statistics.median(stock_us))
        runs.append(run)
    passing = [run for run in runs if run["status"] == "ok" and run["repeats_bitwise"]
               and max(run["max_rel_error"]) <= tolerance]
    best = min(passing, key=lambda run: run["time_us"]) if passing else None
    stock_us = [run["stock_us"] for run in runs if "stock_us" in run]  # timed beside every launch that ran
    return {"tolerance": tolerance, "stock_max_rel_error": stock_errors,
            "stock_us": statistics.median(stock_us) if stock_us else None,
            "ours": best, "choices": len(runs), "failures": [run for run in runs if run not in passing]}


def network_totals(report: dict) -> dict[str, list[float]]:
    """Per network: [stock us, ours (stock where ours fails) us] summed over its calls per step."""
    totals: dict[str, list[float]] = {}
    for record in report["layers"]:
        if record.get("error") or record.get("stock_us") is None:
            continue
        ours = record["ours"]["time_us"] if record.get("ours") else record["stock_us"]
        for network, count in record["calls"].items():
            entry = totals.setdefault(network, [0.0, 0.0])
            entry[0] += count * record["stock_us"]
            entry[1] += count * min(ours, record["stock_us"])
    return totals


def render(report: dict) -> str:
    lines = results.heading("A single-pixel 1x1 backward pass in one launch", report,
                            f"python benchmarks/single_pixel_backward.py --reps {report['reps']}") + [
        "The squeeze-and-excitation layers of MobileNetV3 and EfficientNet-B0 (1x1 convolutions on one pixel an "
        "image, fp16, batch 64, with their bias): input, weight and bias gradient. *stock*: `convolution_backward` "
        "under `benchmark=True` (three kernels); *ours*: `benchmarks/harness/single_pixel_backward.cu` in one "
        "launch, at the fastest of its splits (k: of dx's reduction, m: of dW's and db's) whose outputs are within "
        "the tuner's accuracy rule against float64 and equal bit for bit when run again. Both captured "
        f"{report['inner']} times in a CUDA graph and replayed, interleaved; median GPU us per call.",
        "",
        "| layer | calls | stock us | ours us (splits k, m) | stock / ours | ours max rel err (dx, dW, db) | "
        "stock max rel err |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    gains = []
    for record in report["layers"]:
        calls = ", ".join(f"{network.split('_')[0]} {count}" for network, count in record["calls"].items())
        if record.get("error"):
            lines.append(f"| {record['label']} | {calls} | error: {record['error']} | | | | |")
            continue
        ours = record.get("ours")
        ours_text, gain, error = "-", None, "-"
        if ours:
            ours_text = f"{num(ours['time_us'], 1)} ({ours['split_k']}, {ours['split_m']})"
            gain = record["stock_us"] / ours["time_us"]
            gains.append(gain)
            error = ", ".join(f"{e:.1e}" for e in ours["max_rel_error"])
        stock_error = ", ".join(f"{e:.1e}" for e in record["stock_max_rel_error"])
        lines.append(f"| {record['label']} | {calls} | {num(record['stock_us'], 1)} | {ours_text} | {num(gain, 2)} | "
                     f"{error} | {stock_error} |")
    if gains:
        lines += ["", gain_line("Ours against stock", gains)]
    totals = network_totals(report)
    if totals:
        lines += ["", "Per training step, the backward passes of these layers (ms):", "",
                  "| network | stock | ours where faster | saving |", "|---|--:|--:|--:|"]
        for network, (stock, ours) in totals.items():
            lines.append(f"| {network} | {num(stock / 1e3, 3)} | {num(ours / 1e3, 3)} | {num((stock - ours) / 1e3, 3)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=9, help="replays of each graph, interleaved (default 9)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    parser.add_argument("--library", type=Path, help="a built single_pixel_backward.so instead of building one")
    parser.add_argument("--render", type=Path, metavar="JSON", help="print a saved result's markdown; no GPU")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be at least 1, got {args.reps}")
    if args.render:
        sys.stdout.write(render(json.loads(args.render.read_text())))
        return 0
    from .backward_floor import INNER

    report = {"environment": results.environment(), "date": results.now_iso()[:10], "reps": args.reps,
              "inner": INNER, "layers": []}
    stem = f"single-pixel-backward-{results.device_slug(report['environment']['device'])}-{report['date']}"
    with tempfile.TemporaryDirectory() as scratch:
        library = ctypes.CDLL(str(args.library or build(Path(scratch), KERNEL_SOURCE)))
        declare(library)
        for c_in, c_out, calls in SQUEEZE_EXCITATION:
            started = time.perf_counter()
            record = {"label": f"se {c_in} -> {c_out}", "c_in": c_in, "c_out": c_out, "calls": calls}
            try:
                record.update(measure_layer(library, c_in, c_out, args.reps))
            except Exception as exc:  # one failing layer must not lose the others
                record["error"] = results.error_text(exc)
            report["layers"].append(record)
            results.progress(f"{record['label']}: stock {record.get('stock_us')} us, ours "
                             f"{(record.get('ours') or {}).get('time_us')} us ({time.perf_counter() - started:.1f} s)")
    results.write_json(args.out / f"{stem}.json", report)
    results.publish(args.out / f"{stem}.md", render(report))
    return 0
