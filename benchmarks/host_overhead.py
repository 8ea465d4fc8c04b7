"""Host time per convolution call: stock PyTorch vs our pinned path, same process, interleaved.

    python benchmarks/host_overhead.py [--calls 3000] [--rounds 15] [--json out.json]

Each workload is one ATen call, made directly in a long loop with the garbage collector off,
on a small fp16 channels_last ResNet-50-style convolution (3x3, 64 channels, batch 8, 14x14)
whose GPU time is below the host time, so the loop's wall time per call is the host's:

- ``forward``: ``aten.convolution`` (what ``F.conv2d`` runs, down to ``cudnn_convolution``);
- ``backward``: ``aten.convolution_backward`` for grad_input and grad_weight, called directly
  (no autograd engine hand-off between threads, which costs tens of µs and varies).

Modes, rotated within each round so drift in the machine's speed hits them alike:
``stock`` (nothing set: our overrides are not registered), ``stock_config_pinned`` (the engine
configurations stock itself runs, pinned by flag), ``plan`` (a plan from ``tune()``), and
``fastest`` (all three flags). Reported per mode: median µs per call (wall and process CPU time),
and per-round ratios stock/mode (min/median/max): above 1 means less host time than stock.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch

import torch_cudnn_algo as tca

MODES = ("stock", "stock_config_pinned", "plan", "fastest")


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    """Wall µs per call of ``fn`` over ``calls`` calls."""
    return per_call_times(fn, calls)[0]


def per_call_times(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """(wall, process CPU) µs per call of ``fn`` over ``calls`` calls."""
    torch.cuda.synchronize()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - wall) / calls * 1e6, (time.process_time() - cpu) / calls * 1e6


def stock_pick(direction: str, x: torch.Tensor, w: torch.Tensor) -> str:
    """The engine configuration stock runs: the first usable one of heuristics mode A."""
    return next(c.name for c in tca.engine_configs(direction, x, w, padding=1)
                if c.source == "heuristics_a" and c.refusal is None)


def ratio_stats(stock: list[float], ours: list[float]) -> dict[str, float]:
    per_round = [s / o for s, o in zip(stock, ours)]
    return {"min": min(per_round), "median": statistics.median(per_round), "max": max(per_round)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", help="write the numbers here")
    args = parser.parse_args()

    def fp16_cl(*shape: int) -> torch.Tensor:
        return torch.randn(shape, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)

    x, w, go = fp16_cl(8, 64, 14, 14), fp16_cl(64, 64, 3, 3), fp16_cl(8, 64, 14, 14)
    one, pad = [1, 1], [1, 1]
    workloads: dict[str, Callable[[], object]] = {
        "forward": lambda: torch.ops.aten.convolution(x, w, None, one, pad, one, False, [0, 0], 1),
        "backward": lambda: torch.ops.aten.convolution_backward(
            go, x, w, None, one, pad, one, False, [0, 0], 1, [True, True, False]),
    }
    picks = {d: stock_pick(d, x, w) for d in ("fwd", "bwd_data", "bwd_filter")}
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False).cuda().half().to(memory_format=torch.channels_last)
    plan = tca.tune(conv, x.clone().requires_grad_(), progress=False)
    contexts: dict[str, Callable[[], AbstractContextManager[object]]] = {
        "stock": nullcontext,
        "stock_config_pinned": lambda: tca.flags(conv_fwd_algo=picks["fwd"], conv_bwd_data_algo=picks["bwd_data"],
                                                 conv_bwd_filter_algo=picks["bwd_filter"]),
        "plan": lambda: tca.use_plan(plan),
        "fastest": lambda: tca.flags(conv_fwd_algo="fastest", conv_bwd_data_algo="fastest",
                                     conv_bwd_filter_algo="fastest"),
    }
    wall = {w_: {m: [] for m in MODES} for w_ in workloads}
    cpu = {w_: {m: [] for m in MODES} for w_ in workloads}
    gc.collect()
    gc.disable()
    try:
        for round_index in range(args.rounds + 1):  # round 0 warms every path up (and tunes)
            order = MODES[round_index % len(MODES):] + MODES[:round_index % len(MODES)]
            for mode in order:
                with contexts[mode]():
                    for name, fn in workloads.items():
                        wall_us, cpu_us = per_call_times(fn, args.calls if round_index else 300)
                        if round_index:
                            wall[name][mode].append(wall_us)
                            cpu[name][mode].append(cpu_us)
    finally:
        gc.enable()
    result = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(), "calls": args.calls, "rounds": args.rounds,
        "stock_configs": picks,
        "us_per_call": {n: {m: statistics.median(v) for m, v in d.items()} for n, d in wall.items()},
        "cpu_us_per_call": {n: {m: statistics.median(v) for m, v in d.items()} for n, d in cpu.items()},
        "ratio_stock_over_mode": {n: {m: ratio_stats(d["stock"], d[m]) for m in MODES[1:]} for n, d in wall.items()},
        "rounds_us": wall,
    }
    for name in workloads:
        print(f"{result['device']}: {name}, fp16 channels_last conv 3x3 [8,64,14,14] x [64,64,3,3], "
              f"{args.rounds} rounds x {args.calls} calls")
        for mode in MODES:
            line = (f"  {mode:<20} {result['us_per_call'][name][mode]:7.2f} us/call wall, "
                    f"{result['cpu_us_per_call'][name][mode]:7.2f} us CPU")
            if mode != "stock":
                r = result["ratio_stock_over_mode"][name][mode]
                line += f"   stock/ours per round: min {r['min']:.3f} median {r['median']:.3f} max {r['max']:.3f}"
            print(line)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(result, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
