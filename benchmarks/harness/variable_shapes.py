"""Workloads whose shapes change from step to step, as detection and audio training run: stock
heuristics, stock ``benchmark=True`` (which searches again for every new shape), ``"fastest"`` with
an empty tuning database, and ``"fastest"`` again with the database the previous run filled.

    python benchmarks/variable_shapes.py [--workloads detection,audio] [--steps 200] [--out benchmarks/results]
    python benchmarks/variable_shapes.py --render FILE.json      # no GPU

Every mode runs in a fresh process over the same seeded schedule of shapes: ``--steps`` training
steps cycling through the workload's distinct shapes in a shuffled order. Measured per mode: the
total wall time of the run (every first-time cost included: searches, tunings, execution plan
builds), then the GPU time of one more pass over the distinct shapes (CUDA events around each step
behind a spin kernel, the median of three per shape, summed), and what the run tuned, borrowed
from a nearby size, took from the database and built.

- ``detection``: torchvision's Faster R-CNN (MobileNetV3-Large FPN backbone, untrained) on batches
  of two images whose sizes follow a detection loader's aspect ratios, resized by the model's own
  transform (shorter side 512) and padded to multiples of 32: ``SHAPES`` distinct batch shapes.
- ``audio``: torchaudio's ConvTasNet on batches of two clips of ``SHAPES`` distinct lengths between
  0.5 and 2 s at 16 kHz.

Writes ``<out>/variable-shapes-<gpu>-<date>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .cli import child_environment, parse_child_output
from .config import CHILD_RESULT_PREFIX, FASTEST_ENV
from .internal import decision_counts
from .results import REPO_ROOT, device_slug, environment, error_text, now_iso, progress, publish, write_json
from .stats import num

SCRIPT = REPO_ROOT / "benchmarks" / "variable_shapes.py"
WORKLOADS = ("detection", "audio")
MODES = ("stock", "benchmark", "fastest_empty", "fastest_second")
SHAPES = 24  # distinct shapes per workload: "tens", as a detection loader gives


def shapes(workload: str) -> list[tuple[int, ...]]:
    """The workload's distinct input sizes: (height, width) per image pair, or (clip length,)."""
    rng = random.Random(7)
    if workload == "detection":
        sizes = set()
        while len(sizes) < SHAPES:  # aspect ratios of a detection set's images, shorter side 512 after resize
            ratio = rng.choice([0.5, 0.56, 0.6, 0.67, 0.75, 0.8, 1.0, 1.25, 1.33, 1.5, 1.6, 1.78, 2.0]) * \
                rng.uniform(0.97, 1.03)
            long_side = min(int(512 * max(ratio, 1 / ratio)), 853)
            sizes.add((512, long_side) if ratio >= 1 else (long_side, 512))
        return sorted(sizes)
    if workload == "audio":
        return sorted((8000 + 500 * step,) for step in rng.sample(range(0, 32), SHAPES))
    raise ValueError(f"unknown workload {workload!r}; workloads are {', '.join(WORKLOADS)}")


def schedule(workload: str, steps: int) -> list[tuple[int, ...]]:
    """``steps`` shapes: every distinct shape in a shuffled order, again and again."""
    rng = random.Random(11)
    distinct = shapes(workload)
    order: list[tuple[int, ...]] = []
    while len(order) < steps:
        round_ = list(distinct)
        rng.shuffle(round_)
        order += round_
    return order[:steps]


# ------------------------------------------------------------------------------- child side


class Trainer:
    """One workload's model, optimizer and a step on a given shape."""

    def __init__(self, workload: str) -> None:
        import torch

        torch.manual_seed(0)
        self.workload = workload
        if workload == "detection":
            import torchvision

            self.model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(
                weights=None, weights_backbone=None, num_classes=91, min_size=512, max_size=853).cuda().train()
        else:
            import torchaudio

            self.model = torchaudio.models.ConvTasNet().cuda().train()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3, momentum=0.9)

    def step(self, shape: tuple[int, ...]) -> None:
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        generator = torch.Generator(device="cuda").manual_seed(hash(shape) % 2**31)
        if self.workload == "detection":
            height, width = shape
            images = [torch.rand(3, height, width, device="cuda", generator=generator) for _ in range(2)]
            targets = [{"boxes": torch.tensor([[10.0, 20.0, 200.0, 240.0], [50.0, 60.0, 300.0, 400.0]], device="cuda"),
                        "labels": torch.tensor([1, 3], device="cuda")} for _ in range(2)]
            with torch.autocast("cuda", dtype=torch.float16):
                losses = self.model(images, targets)
            loss = sum(losses.values())
        else:
            (length,) = shape
            clips = torch.randn(2, 1, length, device="cuda", generator=generator)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(clips).float().pow(2).mean()
        loss.backward()
        self.optimizer.step()


GPU_REPEATS = 3  # timed steps per shape; their median is the shape's GPU time


def gpu_ms(trainer: Trainer, shape: tuple[int, ...]) -> float:
    """GPU ms of a step on ``shape``: the median of ``GPU_REPEATS`` steps, each timed by CUDA events
    behind a spin kernel as long as the host needs to queue the step, so host time stays out (as far
    as the step does not synchronise)."""
    import statistics

    import torch

    from .timing import spin_cycles_per_ms

    torch.cuda.synchronize()
    started = time.perf_counter()
    trainer.step(shape)
    torch.cuda.synchronize()
    host_ms = (time.perf_counter() - started) * 1e3
    times = []
    for _ in range(GPU_REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(1.2 * host_ms * spin_cycles_per_ms()))
        start.record()
        trainer.step(shape)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def child(workload: str, mode: str, steps: int) -> dict:
    import torch
    import torch_cudnn_algo

    if mode != "stock" and mode != "benchmark" and not torch_cudnn_algo.is_available():
        raise RuntimeError(f"the torch_cudnn_algo extension is not loaded: {torch_cudnn_algo.load_error()}")
    torch.backends.cudnn.benchmark = mode == "benchmark"
    trainer = Trainer(workload)
    plan = schedule(workload, steps)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for shape in plan:
        trainer.step(shape)
    torch.cuda.synchronize()
    wall_s = time.perf_counter() - started
    result: dict[str, object] = {"wall_s": wall_s, "steps": len(plan), "distinct_shapes": len(set(plan))}
    if torch_cudnn_algo.is_available():
        result.update(decision_counts())
    result["gpu_ms_per_pass"] = sum(gpu_ms(trainer, shape) for shape in shapes(workload))
    return result


# ------------------------------------------------------------------------------- parent side


def run_child(workload: str, mode: str, steps: int, db: str, timeout_s: float) -> dict:
    env = child_environment({"TORCH_CUDNN_ALGO_DB": db,
                             **(dict.fromkeys(FASTEST_ENV, "fastest") if mode.startswith("fastest") else {})})
    command = [sys.executable, str(SCRIPT), "--child", mode, "--workload", workload, "--steps", str(steps)]
    try:
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    result = parse_child_output(done.stdout)
    return result if result is not None else {
        "error": f"exit status {done.returncode} without a result line (its stderr is above)"}


def measure(workload: str, steps: int, timeout_s: float, modes: list[str]) -> dict:
    record: dict[str, object] = {"name": workload, "distinct_shapes": len(shapes(workload)), "modes": {}}
    with tempfile.TemporaryDirectory(prefix="variable-shapes-") as scratch:
        fastest_db = os.path.join(scratch, "fastest-db")  # filled by fastest_empty, read by fastest_second
        for mode in (mode for mode in MODES if mode in modes):
            db = fastest_db if mode.startswith("fastest") else os.path.join(scratch, f"{mode}-db")
            progress(f"{workload}: {mode}")
            result = run_child(workload, mode, steps, db, timeout_s)
            record["modes"][mode] = result
            progress(f"{workload}: {mode}: " + (result["error"] if "error" in result else
                                                  f"{result['wall_s']:.1f} s, GPU {result['gpu_ms_per_pass']:.1f} ms"))
    return record


def render(report: dict) -> str:
    lines = ["# Workloads with changing shapes: stock, benchmark=True and \"fastest\" with its tuning database", "",
             f"{report['device']}, torch {report['torch']}, cuDNN {report['cudnn']}, {report['date']}. Command: "
             f"`python benchmarks/variable_shapes.py {report['argv']}`.", "",
             "*wall s*: the whole run, every first-time cost included. *GPU ms*: one more pass over the distinct "
             "shapes, summed. *tuned / borrowed / kept / built*: configurations the run tuned, decisions it "
             "borrowed from the same convolution at a nearby size, decisions it took from the database, execution "
             "plans it built. Ratios: the mode's wall time over stock heuristics' (below 1: "
             "faster) and stock's GPU time over the mode's (above 1: faster).", "",
             "| workload | mode | wall s | vs stock | GPU ms | GPU vs stock | tuned / borrowed / kept / built |",
             "|---|---|--:|--:|--:|--:|--:|"]
    for record in report["workloads"]:
        modes = record["modes"]
        stock = modes.get("stock", {})
        for mode in MODES:
            result = modes.get(mode, {})
            if "error" in result or not result:
                lines.append(f"| {record['name']} | {mode} | — | — | — | — | {result.get('error', 'not run')} |")
                continue
            wall, gpu = result["wall_s"], result["gpu_ms_per_pass"]
            wall_ratio = wall / stock["wall_s"] if stock.get("wall_s") else None
            gpu_ratio = stock["gpu_ms_per_pass"] / gpu if stock.get("gpu_ms_per_pass") and gpu else None
            counts = "—"
            if "tuned" in result and mode.startswith("fastest"):
                counts = (f"{result['tuned']} / {result['kept'].get('borrowed', 0)} / {result['kept']['kept']} / "
                          f"{result['execution_plans']['built']}")
            lines.append(f"| {record['name']} ({record['distinct_shapes']} shapes) | {mode} | {num(wall, 1)} | "
                         f"{num(wall_ratio, 3)} | {num(gpu, 1)} | {num(gpu_ratio, 3)} | {counts} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated, of {', '.join(MODES)} (fastest_second needs fastest_empty)")
    parser.add_argument("--child-timeout", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results")
    parser.add_argument("--render", type=Path, metavar="JSON", help="print the markdown of a saved result; no GPU")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())), end="")
        return 0
    if args.child:
        try:
            result = child(args.workload, args.child, args.steps)
        except Exception as exc:  # noqa: BLE001 - the parent records it
            result = {"error": error_text(exc)}
        print(CHILD_RESULT_PREFIX + json.dumps(result), flush=True)
        return 0
    workloads = [name for name in args.workloads.split(",") if name]
    unknown = [name for name in workloads if name not in WORKLOADS]
    if unknown or args.steps < SHAPES:
        parser.error(f"unknown workloads {unknown} (workloads are {', '.join(WORKLOADS)}), or --steps below "
                     f"{SHAPES} (every shape at least once)")
    modes = [name for name in args.modes.split(",") if name]
    if not modes or set(modes) - set(MODES) or ("fastest_second" in modes and "fastest_empty" not in modes):
        parser.error(f"--modes {args.modes!r}: modes are {', '.join(MODES)}, and fastest_second needs fastest_empty")
    env = environment()
    report = {"device": env.get("device"), "torch": env.get("torch"), "cudnn": env.get("cudnn"),
              "date": now_iso()[:10], "argv": " ".join(argv if argv is not None else sys.argv[1:]), "workloads": []}
    for workload in workloads:
        report["workloads"].append(measure(workload, args.steps, args.child_timeout, modes))
    stem = args.out / f"variable-shapes-{device_slug(report['device'])}-{report['date']}"
    write_json(stem.with_suffix(".json"), report)
    markdown = render(report)
    publish(stem.with_suffix(".md"), markdown)
    return 0
