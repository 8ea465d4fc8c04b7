"""Both gradients at once against one after the other (``conv_backward_overlap``), on the zoo's
networks: each network's training step is tuned (``tune()``), then captured in a CUDA graph with
the plan three times, the flag off twice (an A/A control) and on once, and the graphs are
replayed in rotated order (``measure.measure_gpu``); GPU ms per step, and per repeat the ratio
"one after the other / both at once" (above 1: overlapping is faster).

    python benchmarks/backward_overlap.py [--networks a,b] [--gpu-repeats 7] [--out benchmarks/results]
    python benchmarks/backward_overlap.py --render benchmarks/results/backward-overlap-<gpu>-<date>.json

Writes ``<out>/backward-overlap-<gpu>-<date>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from . import results
from .stats import num

NETWORKS = ("mobilenet_v3_large", "resnext50_32x4d", "efficientnet_b0", "regnety_016", "conv_tasnet",
            "resnet50_amp")
SEQUENTIAL, CONTROL, OVERLAPPED = "one after the other", "one after the other, again", "both at once"


def measure_network(network: str, gpu_repeats: int, gpu_replays: int, out: Path) -> dict:
    import torch
    import torch_cudnn_algo

    from .config import Settings
    from .measure import measure_gpu, require_extension, timed_tune
    from .networks import build_trainer
    from .timing import warm_up_cuda

    require_extension()
    trainer, workload = build_trainer(network, "cuda")
    warm_up_cuda()
    trainer.step()
    plan, tune_s = timed_tune(trainer)

    def mode(overlap: bool):
        @contextlib.contextmanager
        def context():
            with torch_cudnn_algo.use_plan(plan), torch_cudnn_algo.flags(conv_backward_overlap=overlap):
                yield
        return context

    modes = {SEQUENTIAL: mode(False), CONTROL: mode(False), OVERLAPPED: mode(True)}
    with mode(True)():
        trainer.step()  # the plan's configurations built before any capture
    torch.cuda.synchronize()
    settings = Settings(networks=(network,), sections=("gpu",), rounds=1, steps=6, host_rounds=1,
                        gpu_repeats=gpu_repeats, gpu_replays=gpu_replays, out=out, quick=False,
                        child_timeout_s=0, budget_s=None)
    gpu = measure_gpu(trainer, modes, settings)
    return {"network": network, "workload": workload, "tune_s": tune_s, "plan_entries": len(plan), "gpu": gpu}


def render(report: dict) -> str:
    lines = results.heading("Both gradients at once against one after the other", report,
                            f"python benchmarks/backward_overlap.py --gpu-repeats {report['gpu_repeats']}") + [
        "Each network's training step with its tuned plan (`tune()`), captured in a CUDA graph three times: "
        "`conv_backward_overlap` off twice (the second an A/A control) and on once; the graphs replayed "
        f"{report['gpu_replays']} times between CUDA events, in rotated order, {report['gpu_repeats']} repeats. "
        "GPU ms per step (median); ratios per repeat, median (min-max): above 1, the second graph took less time.",
        "",
        f"| network | {SEQUENTIAL} ms | {OVERLAPPED} ms | A/A control | one after the other / both at once |",
        "|---|--:|--:|--:|--:|",
    ]
    for record in report["networks"]:
        if record.get("error"):
            lines.append(f"| {record['network']} | error: {record['error']} | | | |")
            continue
        gpu = record["gpu"]
        medians, ratios = gpu["median_ms"], gpu["ratio"]
        lines.append(f"| {record['network']} | {num(medians[SEQUENTIAL], 3)} | {num(medians[OVERLAPPED], 3)} | "
                     f"{summary_text(ratios.get(CONTROL))} | {summary_text(ratios.get(OVERLAPPED))} |")
    return "\n".join(lines) + "\n"


def summary_text(summary: dict | None) -> str:
    if not summary:
        return "—"
    return f"{summary['median']:.3f} ({summary['min']:.3f}-{summary['max']:.3f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--networks", default=",".join(NETWORKS), help=f"comma-separated (default {','.join(NETWORKS)})")
    parser.add_argument("--gpu-repeats", type=int, default=7)
    parser.add_argument("--gpu-replays", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    parser.add_argument("--render", type=Path, metavar="JSON", help="print a saved result's markdown; no GPU")
    args = parser.parse_args(argv)
    if args.render:
        sys.stdout.write(render(json.loads(args.render.read_text())))
        return 0
    networks = [name.strip() for name in args.networks.split(",") if name.strip()]
    from .networks import ZOO

    unknown = [name for name in networks if name not in ZOO]
    if unknown or not networks:
        parser.error(f"--networks takes names of {', '.join(ZOO)}; got {args.networks!r}")
    if args.gpu_repeats < 1 or args.gpu_replays < 1:
        parser.error("--gpu-repeats and --gpu-replays must be at least 1")
    report = {"environment": results.environment(), "date": results.now_iso()[:10], "gpu_repeats": args.gpu_repeats,
              "gpu_replays": args.gpu_replays, "networks": []}
    stem = f"backward-overlap-{results.device_slug(report['environment']['device'])}-{report['date']}"
    for network in networks:
        started = time.perf_counter()
        try:
            record = measure_network(network, args.gpu_repeats, args.gpu_replays, args.out)
        except Exception as exc:  # one failing network must not lose the others
            record = {"network": network, "error": results.error_text(exc)}
        report["networks"].append(record)
        results.progress(f"{network}: {time.perf_counter() - started:.1f} s")
        results.write_json(args.out / f"{stem}.json", report)
    results.publish(args.out / f"{stem}.md", render(report))
    return 0
