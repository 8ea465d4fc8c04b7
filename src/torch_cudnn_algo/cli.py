"""The ``torch-cudnn-algo`` command (also ``python -m torch_cudnn_algo``).

    torch-cudnn-algo info                      # versions, GPU, flags and plan in force (no GPU needed)
    torch-cudnn-algo list "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"
    torch-cudnn-algo profile "conv2d ..." [--plot time_vs_workspace.png]
    torch-cudnn-algo tune [module:callable] [--output plan.json]

Commands that need a GPU exit with status 2 and one line saying why when
there is none.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch

from . import _build

EXIT_NO_GPU = 2
DEFAULT_PLAN_PATH = "torch-cudnn-algo-plan.json"


class GpuUnavailable(Exception):
    """A command needs what this machine lacks (one line, exit status 2)."""


def _require_gpu(command: str) -> None:
    import torch_cudnn_algo

    if not torch.cuda.is_available():
        raise GpuUnavailable(f"torch-cudnn-algo {command}: needs a CUDA GPU, and torch.cuda.is_available() "
                             "is False here")
    if not torch_cudnn_algo.is_available():
        raise GpuUnavailable(f"torch-cudnn-algo {command}: the C++ extension is not loaded "
                             f"({torch_cudnn_algo.load_error()})")


def _conv_argument(text: str):
    from torch_cudnn_algo import ConvSpec

    try:
        return ConvSpec.parse(text)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _settings_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("conv", type=_conv_argument,
                        help='the convolution, e.g. "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"')
    parser.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=None,
                        help="allow TF32 for float32 (default: torch.backends.cudnn.allow_tf32)")
    parser.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=None,
                        help="require deterministic algorithms (default: torch's settings)")


# -- info ----------------------------------------------------------------------

def _info(_args: argparse.Namespace) -> int:
    import torch_cudnn_algo
    from torch_cudnn_algo import _flags, _plan

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    print(f"torch-cudnn-algo {torch_cudnn_algo.__version__}")
    print(f"torch            {torch.__version__}")
    print(f"CUDA             {torch.version.cuda or 'none (a CPU build of torch)'}")
    print(f"cuDNN            {_build.cudnn_version_string(cudnn) if cudnn is not None else 'not available'}")
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            print(f"GPU {index}            {torch.cuda.get_device_name(index)}")
    else:
        print("GPU              none (torch.cuda.is_available() is False)")
    loaded = torch_cudnn_algo.is_available()
    print(f"extension        {'loaded' if loaded else 'NOT loaded: ' + str(torch_cudnn_algo.load_error())}")
    print("flags in force (torch.backends.cudnn):")
    for name in _flags.FLAGS:
        print(f"  {name} = {_flags.get_flag(name)!r}")
    plan = _plan.current_plan()
    if plan is None:
        env = os.environ.get(_plan.ENV_VAR)
        print(f"plan in force    none{f' ({_plan.ENV_VAR}={env} was not applied)' if env else ''}")
    else:
        print(f"plan in force    {plan.source or 'set in this process'}: {len(plan)} configurations, "
              f"policy {plan.policy}, made {plan.created} with cuDNN {_build.cudnn_version_string(plan.cudnn)} "
              f"on {plan.gpu}")
    return 0


# -- list, profile ---------------------------------------------------------------

def _list(args: argparse.Namespace) -> int:
    import torch_cudnn_algo

    _require_gpu("list")
    candidates = torch_cudnn_algo.list_algorithms(args.conv, allow_tf32=args.tf32,
                                                  deterministic=args.deterministic)
    print(f"{args.conv}: {sum(c.ok for c in candidates)} of {len(candidates)} candidates can run it "
          "(nothing executed)")
    rows = [("value", "kind", "source", "workspace", "deterministic", "status", "notes")]
    for c in candidates:
        workspace = "-" if c.workspace is None else f"{c.workspace / 2**20:.2f} MiB"
        rows.append((repr(c.value), c.kind, c.label, workspace, "yes" if c.deterministic else "no", c.status,
                     ",".join(c.notes)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    return 0


def _profile(args: argparse.Namespace) -> int:
    import torch_cudnn_algo

    _require_gpu("profile")
    table = torch_cudnn_algo.profile(args.conv, allow_tf32=args.tf32, deterministic=args.deterministic,
                                     reps=args.reps, energy=args.energy)
    print(f"{args.conv}")
    print(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            file.write(table.to_json(indent=1) + "\n")
        print(f"table written to {args.json}")
    if args.plot:
        from torch_cudnn_algo._plot import plot_profile

        plot_profile(table, args.plot)
        print(f"time against workspace plotted to {args.plot}")
    return 0


# -- tune ------------------------------------------------------------------------

def _load_callable(spec: str) -> Callable[[], object]:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"model must be given as module:callable, got {spec!r}")
    sys.path.insert(0, os.getcwd())  # a module beside the user, as `python -m` would find it
    target: object = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{spec} is not callable")
    return target  # type: ignore[return-value]


def _user_model(spec: str) -> tuple[torch.nn.Module, tuple[object, ...]]:
    made = _load_callable(spec)()
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
        raise ValueError(f"{spec} must return (model, example_inputs), got {type(made).__name__}")
    model, inputs = made
    return model, (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)


def _default_model(args: argparse.Namespace) -> tuple[torch.nn.Module, tuple[object, ...]]:
    from torch_cudnn_algo._default_net import DefaultNet, default_example_inputs

    model = DefaultNet().cuda().to(memory_format=torch.channels_last)
    return model, (default_example_inputs(args.batch, args.image_size, "cuda"),)


_AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": None}


def _training_step(model: Callable[..., object], inputs: Sequence[object], amp: torch.dtype | None) -> None:
    from torch_cudnn_algo._tune import _default_loss

    with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
        loss = _default_loss(model(*inputs))
    loss.backward()


_CONV_OPS = ("aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::convolution_backward")


def _wall_ms(step: Callable[[], None], steps: int) -> float:
    """Wall time per step: what a host-bound eager step costs."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1e3 / steps


def _kernel_ms(step: Callable[[], None], steps: int) -> tuple[float, float]:
    """(all kernels, convolution ops' kernels) GPU ms per step, from torch.profiler:
    GPU time without the host's launch gaps, which wall time on a host-bound step hides."""
    from torch.autograd import DeviceType

    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels_us = sum(e.time_range.elapsed_us() for e in profiler.events() if e.device_type == DeviceType.CUDA)
    conv_us = sum(a.device_time_total for a in profiler.key_averages() if a.key in _CONV_OPS)
    return kernels_us / 1e3 / steps, conv_us / 1e3 / steps


def _compare_steps(step: Callable[[], None], plan, rounds: int, steps: int) -> dict[str, list[float]]:
    """Stock and the plan, interleaved round by round in this process on the same
    inputs: wall ms per step first, then (in rounds of their own, so the profiler
    never runs between wall timings) profiled GPU kernel ms per step."""
    import torch_cudnn_algo

    modes = (("stock", None), ("tuned", plan))
    times: dict[str, list[float]] = {f"{mode} {what}": [] for mode, _ in modes for what in ("wall", "gpu", "conv")}
    for _name, chosen in modes:  # warm both: plans built, caches filled
        with torch_cudnn_algo.use_plan(chosen):
            for _ in range(3):
                step()
    for _ in range(rounds):
        for name, chosen in modes:
            with torch_cudnn_algo.use_plan(chosen):
                step()  # the first call after switching selects again: not timed
                times[f"{name} wall"].append(_wall_ms(step, steps))
    _kernel_ms(step, 1)  # the profiler's first use initialises CUPTI: in no round
    for _ in range(rounds):
        for name, chosen in modes:
            with torch_cudnn_algo.use_plan(chosen):
                step()
                gpu, conv = _kernel_ms(step, 2)
            times[f"{name} gpu"].append(gpu)
            times[f"{name} conv"].append(conv)
    return times


def _ratio_line(label: str, stock: list[float], tuned: list[float]) -> str:
    ratios = [s / t for s, t in zip(stock, tuned)]
    return (f"  {label:<12} stock {statistics.median(stock):8.2f} ms   tuned {statistics.median(tuned):8.2f} ms   "
            f"speedup (stock/tuned, per round) min {min(ratios):.3f}  median {statistics.median(ratios):.3f}  "
            f"max {max(ratios):.3f}")


def _tune(args: argparse.Namespace) -> int:
    import torch_cudnn_algo

    _require_gpu("tune")
    directions = tuple(args.directions.split(","))
    model, inputs = _user_model(args.model) if args.model else _default_model(args)
    amp = _AMP_DTYPES[args.amp]
    what = args.model or (f"default ResNet-50-style network, batch {args.batch}, "
                          f"{args.image_size}x{args.image_size}, channels_last")
    print(f"model: {what}; autocast {args.amp}; policy {args.policy}; directions {', '.join(directions)}")
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cuDNN {_build.cudnn_version_string(torch.backends.cudnn.version())}")
    with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
        started = time.perf_counter()
        plan = torch_cudnn_algo.tune(model, inputs, policy=args.policy, directions=directions,
                                     progress=not args.no_progress, execution_plans=args.execution_plans)
    tune_seconds = time.perf_counter() - started
    print(f"tuned {len(plan)} configurations in {tune_seconds:.1f} s")
    print(plan.format())
    changed = sum(1 for e in plan.entries.values() if e.time_ms and e.stock_ms and e.time_ms < e.stock_ms * 0.99)
    print(f"{changed} of {len(plan)} configurations run something faster than stock's own configuration")

    def step() -> None:
        _training_step(model, inputs, amp)
        for parameter in model.parameters():
            parameter.grad = None

    times = _compare_steps(step, plan, args.rounds, args.steps)
    print(f"training step (forward + backward) per step, medians of {args.rounds} interleaved rounds "
          f"(wall: {args.steps} steps per round; GPU time: 2 profiled steps per round, in separate rounds):")
    print(_ratio_line("wall", times["stock wall"], times["tuned wall"]))
    print(_ratio_line("GPU kernels", times["stock gpu"], times["tuned gpu"]))
    print(_ratio_line("conv kernels", times["stock conv"], times["tuned conv"]))
    plan.save(args.output)
    engines = [e for e in plan.entries.values() if isinstance(e.choice, str)]
    built = sum(1 for e in engines if e.execution_plan is not None)
    print(f"plan written to {args.output} ({os.path.getsize(args.output) / 1024:.0f} KiB; {built} of "
          f"{len(engines)} engine configurations with their built execution plans)")
    print(f"use it with TORCH_CUDNN_ALGO_PLAN={args.output} python train.py "
          "or torch_cudnn_algo.use_plan(torch_cudnn_algo.load_plan(path))")
    return 0


# -- parser ---------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torch-cudnn-algo",
        description="Choose, profile and plan the cuDNN convolution algorithms PyTorch runs.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    info = commands.add_parser("info", help="torch, CUDA, cuDNN, GPU, flags and plan in force (no GPU needed)")
    info.set_defaults(run=_info)

    listing = commands.add_parser("list", help="candidates that can run a convolution (nothing executed)")
    _settings_arguments(listing)
    listing.set_defaults(run=_list)

    prof = commands.add_parser("profile", help="run and time every candidate of a convolution")
    _settings_arguments(prof)
    prof.add_argument("--reps", type=int, default=20, help="timed calls per candidate (median reported)")
    prof.add_argument("--energy", action=argparse.BooleanOptionalAction, default=True,
                      help="NVML energy per call (about 0.3 s more per candidate)")
    prof.add_argument("--plot", metavar="FILE.png", help="draw time against workspace per candidate "
                      "(needs matplotlib: pip install 'torch-cudnn-algo[plot]')")
    prof.add_argument("--json", metavar="FILE.json", help="also write the table as JSON")
    prof.set_defaults(run=_profile)

    tune = commands.add_parser("tune", help="tune a model's convolutions, compare step time, write a plan")
    tune.add_argument("model", nargs="?", help="module:callable returning (model, example_inputs) on the GPU; "
                      "default: an embedded ResNet-50-style network")
    tune.add_argument("--batch", type=int, default=64, help="batch of the default network (default 64)")
    tune.add_argument("--image-size", type=int, default=224, help="image size of the default network")
    tune.add_argument("--amp", choices=tuple(_AMP_DTYPES), default="fp16",
                      help="autocast dtype of the training step (fp32: no autocast); default fp16")
    tune.add_argument("--policy", choices=("fastest", "least_workspace", "lowest_energy"), default="fastest")
    tune.add_argument("--directions", default="fwd,bwd_data,bwd_filter",
                      type=_directions_argument, help="comma-separated cuDNN directions to plan")
    tune.add_argument("--output", "-o", default=DEFAULT_PLAN_PATH, help=f"plan file (default {DEFAULT_PLAN_PATH})")
    tune.add_argument("--rounds", type=int, default=7, help="interleaved stock/tuned timing rounds")
    tune.add_argument("--steps", type=int, default=20, help="training steps per wall-time round")
    tune.add_argument("--no-progress", action="store_true", help="no progress bar")
    tune.add_argument("--execution-plans", action=argparse.BooleanOptionalAction, default=True,
                      help="keep each engine configuration's built execution plan in the plan, so that "
                           "loading it compiles nothing (default: on)")
    tune.set_defaults(run=_tune)
    return parser


def _directions_argument(text: str) -> str:
    from torch_cudnn_algo._conv_spec import DIRECTION_NAMES

    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if name not in DIRECTION_NAMES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"directions are a comma-separated subset of {','.join(DIRECTION_NAMES)}, "
                                         f"got {text!r}")
    return ",".join(names)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("reps", "batch", "image_size", "rounds", "steps"):
        if getattr(args, name, 1) < 1:
            print(f"torch-cudnn-algo {args.command}: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    try:
        return args.run(args)
    except GpuUnavailable as exc:
        print(exc, file=sys.stderr)
        return EXIT_NO_GPU


if __name__ == "__main__":
    sys.exit(main())
