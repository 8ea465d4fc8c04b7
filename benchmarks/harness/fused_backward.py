"""A fused depthwise backward pass against cuDNN, layer by layer: on every depthwise layer of
MobileNetV3 and EfficientNet-B0 (fp16 channels_last, batch 64, as the zoo trains them), the
candidate kernel of ``depthwise_fused_backward.cu`` (input and filter gradient in one kernel,
dy read once) is checked against float64 and timed over a sweep of its launch choices, beside

* stock's ``convolution_backward`` under ``benchmark=True`` (both gradients, one call, as a
  training step runs it),
* the best pair: per direction the faster of cuDNN's best candidate within the tuner's accuracy
  rule and ``"tca.direct"`` (``torch_cudnn_algo.profile``), which is what a tuned plan runs.

    python benchmarks/fused_backward.py [--reps 11] [--out benchmarks/results]
    python benchmarks/fused_backward.py --render benchmarks/results/fused-backward-<gpu>-<date>.json

Needs nvcc (the kernel is built into a temporary folder, or ``--library`` names a built one).
Writes ``<out>/fused-backward-<gpu>-<date>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import results
from .internal import tuner_tolerance
from .roofline import Peaks, peaks_of
from .stats import gain_line, num

KERNEL_SOURCE = Path(__file__).resolve().parent / "depthwise_fused_backward.cu"
CSRC = Path(__file__).resolve().parents[2] / "csrc"
MOBILENET, EFFICIENTNET = "mobilenet_v3_large", "efficientnet_b0"
# (channels, input height = width, filter size, stride, {network: calls per training step}),
# batch 64, padding filter // 2: every depthwise layer of the two networks.
LAYERS: list[tuple[int, int, int, int, dict[str, int]]] = [
    (16, 112, 3, 1, {MOBILENET: 1}),
    (64, 112, 3, 2, {MOBILENET: 1}),
    (72, 56, 3, 1, {MOBILENET: 1}),
    (72, 56, 5, 2, {MOBILENET: 1}),
    (120, 28, 5, 1, {MOBILENET: 2}),
    (240, 28, 3, 2, {MOBILENET: 1, EFFICIENTNET: 1}),
    (200, 14, 3, 1, {MOBILENET: 1}),
    (184, 14, 3, 1, {MOBILENET: 2}),
    (480, 14, 3, 1, {MOBILENET: 1, EFFICIENTNET: 2}),
    (672, 14, 3, 1, {MOBILENET: 1}),
    (672, 14, 5, 2, {MOBILENET: 1, EFFICIENTNET: 1}),
    (960, 7, 5, 1, {MOBILENET: 2}),
    (32, 112, 3, 1, {EFFICIENTNET: 1}),
    (96, 112, 3, 2, {EFFICIENTNET: 1}),
    (144, 56, 3, 1, {EFFICIENTNET: 1}),
    (144, 56, 5, 2, {EFFICIENTNET: 1}),
    (240, 28, 5, 1, {EFFICIENTNET: 1}),
    (480, 14, 5, 1, {EFFICIENTNET: 1}),
    (672, 14, 5, 1, {EFFICIENTNET: 2}),
    (1152, 7, 5, 1, {EFFICIENTNET: 3}),
    (1152, 7, 3, 1, {EFFICIENTNET: 1}),
]
BATCH = 64
# The kernel's launch choices: dy tile rows and columns, channels a block takes, blocks per SM
# the grid is sized for, threads a block.
SWEEP = [(tp, tq, cw, blocks, threads) for tp in (4, 8) for tq in (8, 16, 32) for cw in (16, 32, 64)
         for blocks in (2, 4) for threads in (128, 256)]
DIRECTIONS = ("bwd_data", "bwd_filter")


def label_of(channels: int, size: int, filter_size: int, stride: int) -> str:
    return f"{BATCH}x{channels}x{size}x{size} {filter_size}x{filter_size} s{stride}"


def output_size(size: int, filter_size: int, stride: int) -> int:
    return (size + 2 * (filter_size // 2) - filter_size) // stride + 1


def bounds(channels: int, size: int, filter_size: int, stride: int, peaks: Peaks) -> dict:
    """The fused pass's least time: its bytes (x and dy read, dx written, the filter and its
    gradient) at the memory's peak, and its multiply-adds (both gradients) at the fp32 CUDA cores'
    peak, since the kernel accumulates in fp32 without tensor cores."""
    out = output_size(size, filter_size, stride)
    x_elements, dy_elements = BATCH * channels * size * size, BATCH * channels * out * out
    filter_elements = channels * filter_size * filter_size
    memory_bytes = 2 * (2 * x_elements + dy_elements + 2 * filter_elements)
    multiply_adds = 2 * dy_elements * filter_size * filter_size
    return {"memory_ms": memory_bytes / (peaks.tb_per_s * 1e12) * 1e3,
            "fma_ms": 2 * multiply_adds / (peaks.tflops["float32"] * 1e12) * 1e3}


def build(directory: Path, source: Path = KERNEL_SOURCE) -> Path:
    """``source`` compiled with nvcc into a shared library in ``directory``, for this GPU."""
    nvcc = shutil.which("nvcc") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    if not os.path.exists(nvcc):
        raise SystemExit(f"building {source.name} needs nvcc: put it on PATH or set CUDA_HOME, "
                         "or pass --library with a built one")
    library = directory / f"{source.stem}.so"
    import torch

    major, minor = torch.cuda.get_device_capability()
    # The kernels share the extension's element conversions and filter-gradient finish (csrc/kernels/).
    subprocess.run([nvcc, "-std=c++17", "-O3", "--expt-relaxed-constexpr", "-shared", "-Xcompiler", "-fPIC",
                    f"-I{CSRC}", f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}", str(source), "-o",
                    str(library)], check=True)
    return library


def timed(call, reps: int, inner: int = 10) -> float:
    """Median over ``reps`` CUDA-event windows of ``inner`` back-to-back calls, per call, in ms."""
    import torch

    for _ in range(3):
        call()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)


def relative_error(out, reference) -> float:
    """max |out - ref| / max |ref|, the profile table's measure; inf for NaN (an unwritten output)."""
    error = ((out.double() - reference).abs().max() / reference.abs().max()).item()
    return error if error == error else float("inf")


def stock_backward(dy, x, weight, geometry: tuple, references: tuple, reps: int) -> dict:
    """Stock's ``convolution_backward`` under ``benchmark=True``, both gradients in one call as a
    training step makes it: its time and its errors against the float64 ``references``."""
    import torch

    torch.backends.cudnn.benchmark = True
    call = lambda: torch.ops.aten.convolution_backward(dy, x, weight, None, *geometry)  # noqa: E731
    dx, dw, _ = call()
    return {"time_ms": timed(call, reps), "max_rel_error": [relative_error(dx, references[0]),
                                                            relative_error(dw, references[1])]}


def checked_run(call, outputs: tuple, references: tuple, reps: int) -> dict:
    """One launch choice of a candidate kernel: its outputs, filled with NaN first (an element it
    does not write shows), checked against the float64 ``references``, then timed. ``call``
    returns the kernel's status (0: launched)."""
    import torch

    for out in outputs:
        out.fill_(float("nan"))
    status = call()
    torch.cuda.synchronize()
    if status != 0:
        return {"status": f"CUDA error {status}" if status > 0 else "does not apply"}
    errors = [relative_error(out, reference) for out, reference in zip(outputs, references)]
    return {"status": "ok", "time_ms": timed(call, reps), "max_rel_error": errors}


def fastest_passing(sweep: list[dict], tolerance: float) -> dict:
    """The fastest run of a sweep within ``tolerance``, how many ran, and those that failed."""
    passing = [row for row in sweep if row["status"] == "ok" and max(row["max_rel_error"]) <= tolerance]
    return {"fused": min(passing, key=lambda row: row["time_ms"]) if passing else None,
            "fused_choices": len(sweep), "fused_failures": [row for row in sweep if row not in passing]}


def measure_layer(library, channels: int, size: int, filter_size: int, stride: int, reps: int) -> dict:
    import torch

    pad, out = filter_size // 2, output_size(size, filter_size, stride)
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(BATCH, channels, size, size, device="cuda", generator=generator).half()
    x = x.to(memory_format=torch.channels_last)
    weight = torch.randn(channels, 1, filter_size, filter_size, device="cuda", generator=generator).half()
    dy = torch.randn(BATCH, channels, out, out, device="cuda", generator=generator).half()
    dy = dy.to(memory_format=torch.channels_last)
    geometry = ([stride, stride], [pad, pad], [1, 1], False, [0, 0], channels, [True, True, False])
    references = torch.ops.aten.convolution_backward(dy.double(), x.double(), weight.double(), None, *geometry)[:2]
    tolerance = tuner_tolerance("float16", False)
    record: dict = {"tolerance": tolerance, "stock": stock_backward(dy, x, weight, geometry, references, reps)}

    dx, dw = torch.empty_like(x), torch.empty_like(weight)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    sweep = []
    for tp, tq, cw, blocks, threads in SWEEP:
        shape = (BATCH, channels, size, size, out, out, filter_size, stride, pad, pad, tp, tq, cw, sms, blocks, threads)
        workspace_bytes = library.dw_fused_workspace(*shape)
        if workspace_bytes < 0:
            continue
        workspace = torch.empty(max(1, workspace_bytes // 4), device="cuda", dtype=torch.float32)
        pointers = [ctypes.c_void_p(t.data_ptr()) for t in (x, dy, weight, dx, dw, workspace)]
        call = lambda: library.dw_fused_backward(0, *shape, *pointers, stream)  # noqa: E731
        choice = {"tile_rows": tp, "tile_columns": tq, "block_channels": cw, "blocks_per_sm": blocks,
                  "threads": threads}
        sweep.append({**choice, **checked_run(call, (dx, dw), references, reps)})
    record.update(fastest_passing(sweep, tolerance))

    spec = f"conv2d {BATCH}x{channels}x{size}x{size} -> {channels}x{filter_size}x{filter_size} s{stride} p{pad} " \
           f"g{channels} fp16 channels_last"
    record.update(best_per_direction(spec, reps, tolerance))
    return record


def best_per_direction(spec: str, reps: int, tolerance: float, directions: tuple[str, ...] = DIRECTIONS) -> dict:
    """For each of ``directions`` (the backward ones unless told) of the convolution ``spec`` (a
    ConvSpec string without its direction), cuDNN's fastest candidate within ``tolerance`` of
    float64 and ``"tca.direct"``'s time where it runs within it (``torch_cudnn_algo.profile``)."""
    import torch_cudnn_algo as tca

    record = {}
    for direction in directions:
        table = tca.profile(f"{spec} {direction}", energy=False, reps=reps, warmup=3)
        cudnn = [row for row in table if row.ok and row.value not in (None, "tca.direct") and row.time_ms
                 and row.max_rel_error is not None and row.max_rel_error <= tolerance]
        best = min(cudnn, key=lambda row: row.time_ms) if cudnn else None
        ours = table.row("tca.direct")
        record[direction] = {
            "cudnn_best": None if best is None else {"value": str(best.value), "time_ms": best.time_ms},
            "ours_ms": ours.time_ms if ours.ok and ours.max_rel_error is not None
            and ours.max_rel_error <= tolerance else None}
    return record


def best_pair_ms(record: dict) -> float | None:
    """Per direction the faster of cuDNN's best and ours, added: what a tuned plan runs."""
    total = 0.0
    for direction in DIRECTIONS:
        entry = record.get(direction) or {}
        times = [t for t in ((entry.get("cudnn_best") or {}).get("time_ms"), entry.get("ours_ms")) if t]
        if not times:
            return None
        total += min(times)
    return total


def network_totals(report: dict) -> dict[str, dict[str, float]]:
    """Per network, the depthwise backward time of a step (calls counted): stock, the best pair,
    and the best pair with the fused kernel wherever it is faster."""
    totals: dict[str, dict[str, float]] = {}
    for record in report["layers"]:
        pair, fused = best_pair_ms(record), (record.get("fused") or {}).get("time_ms")
        if pair is None or not record.get("stock"):
            continue
        for network, calls in record["calls"].items():
            entry = totals.setdefault(network, {"stock_ms": 0.0, "best_pair_ms": 0.0, "with_fused_ms": 0.0})
            entry["stock_ms"] += calls * record["stock"]["time_ms"]
            entry["best_pair_ms"] += calls * pair
            entry["with_fused_ms"] += calls * (min(pair, fused) if fused else pair)
    return totals


def render(report: dict) -> str:
    env = report["environment"]
    peaks = peaks_of(env.get("device"))
    lines = results.heading("A fused depthwise backward pass against cuDNN, layer by layer", report,
                            f"python benchmarks/fused_backward.py --reps {report['reps']}") + [
        "Every depthwise layer of MobileNetV3 and EfficientNet-B0 (fp16 channels_last, batch 64), both "
        "gradients. Median GPU time per backward pass (CUDA events). *stock*: `convolution_backward` under "
        "`benchmark=True`, one call for both gradients; *best pair*: per direction the faster of cuDNN's best "
        "candidate within the tuner's accuracy rule and `tca.direct`, added (what a tuned plan runs); *fused*: "
        "`benchmarks/harness/depthwise_fused_backward.cu`, the fastest of its "
        f"{len(SWEEP)} launch choices within that rule (tile rows x columns, channels a block, blocks per SM, "
        "threads). "
        + (f"*memory bound*: x and dy read and dx written once at {peaks.tb_per_s} TB/s; *FMA bound*: both "
           f"gradients' multiply-adds at the fp32 peak ({peaks.tflops['float32']} TFLOPS), since the kernels "
           "accumulate in fp32 on CUDA cores." if peaks else "No peaks are known for this GPU: no bounds."),
        "",
        "| layer | calls | stock ms | best pair ms | fused ms (choice) | best pair / fused | memory bound ms | "
        "fused / memory bound | FMA bound ms | fused max rel err (dx, dw) |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    gains = []
    for record in report["layers"]:
        fused, pair = record.get("fused"), best_pair_ms(record)
        calls = ", ".join(f"{network.split('_')[0]} {count}" for network, count in record["calls"].items())
        if record.get("error"):
            lines.append(f"| {record['label']} | {calls} | error: {record['error']} | | | | | | | |")
            continue
        fused_text, gain, against_bound, error = "-", None, "-", "-"
        if fused:
            fused_text = (f"{num(fused['time_ms'], 3)} ({fused['tile_rows']}x{fused['tile_columns']}, "
                          f"{fused['block_channels']} ch, {fused['blocks_per_sm']}/SM, {fused['threads']} thr)")
            gain = pair / fused["time_ms"] if pair else None
            if record.get("memory_ms"):
                against_bound = num(fused["time_ms"] / record["memory_ms"], 1)
            error = ", ".join(f"{e:.1e}" for e in fused["max_rel_error"])
        if gain is not None:
            gains.append(gain)
        lines.append(f"| {record['label']} | {calls} | {num(record['stock']['time_ms'], 3)} | {num(pair, 3)} | "
                     f"{fused_text} | {num(gain, 2)} | {num(record.get('memory_ms'), 4)} | {against_bound} | "
                     f"{num(record.get('fma_ms'), 4)} | {error} |")
    if gains:
        lines += ["", gain_line("Fused against the best pair", gains)]
    totals = network_totals(report)
    if totals:
        lines += ["", "Per training step, all depthwise backward passes of the network (ms):", "",
                  "| network | stock | best pair | best pair, fused where faster | saving |", "|---|--:|--:|--:|--:|"]
        for network, entry in totals.items():
            lines.append(f"| {network} | {num(entry['stock_ms'], 3)} | {num(entry['best_pair_ms'], 3)} | "
                         f"{num(entry['with_fused_ms'], 3)} | "
                         f"{num(entry['best_pair_ms'] - entry['with_fused_ms'], 3)} |")
    return "\n".join(lines) + "\n"


def with_bounds(record: dict, peaks: Peaks | None) -> dict:
    if peaks is None:
        record.update(memory_ms=None, fma_ms=None)
    else:
        record.update(bounds(record["channels"], record["size"], record["filter_size"], record["stride"], peaks))
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    parser.add_argument("--library", type=Path, help="a built depthwise_fused_backward.so instead of building one")
    parser.add_argument("--render", type=Path, metavar="JSON", help="print a saved result's markdown; no GPU")
    args = parser.parse_args(argv)
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
    stem = f"fused-backward-{results.device_slug(report['environment']['device'])}-{report['date']}"
    with tempfile.TemporaryDirectory() as scratch:
        library = ctypes.CDLL(str(args.library or build(Path(scratch))))
        library.dw_fused_workspace.restype = ctypes.c_longlong
        for channels, size, filter_size, stride, calls in LAYERS:
            started = time.perf_counter()
            record = {"label": label_of(channels, size, filter_size, stride), "channels": channels, "size": size,
                      "filter_size": filter_size, "stride": stride, "calls": calls}
            try:
                record.update(measure_layer(library, channels, size, filter_size, stride, args.reps))
            except Exception as exc:  # one failing layer must not lose the others
                record["error"] = results.error_text(exc)
            report["layers"].append(with_bounds(record, peaks))
            results.progress(f"{record['label']}: fused {(record.get('fused') or {}).get('time_ms')} ms, best pair "
                             f"{best_pair_ms(record) if not record.get('error') else None} ms "
                             f"({time.perf_counter() - started:.1f} s)")
            results.write_json(args.out / f"{stem}.json", report)
    markdown = render(report)
    results.publish(args.out / f"{stem}.md", markdown)
    return 0
