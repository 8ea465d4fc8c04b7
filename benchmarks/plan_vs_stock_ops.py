"""What a zoo network's training step runs with a tuned plan vs stock, counted by the profiler.

    python benchmarks/plan_vs_stock_ops.py mobilenet_v3_large [regnety_016 ...]

For each network (see ``zoo_networks.py``): a plan from ``tune()``, then 5 profiled steps of
stock and 5 with the plan (CPU + CUDA activity). Prints, per step, the ATen ops and CUDA API calls
whose counts differ by 1 or more, the GPU kernels whose counts differ, the CPU-time difference per
op (plan - stock, inclusive µs), and the convolution ops' CPU µs per call grouped by input shapes,
largest plan - stock difference first. This is how the tuner's launch-expensive picks on
ConvTasNet's 1x1 backward calls (366 vs 141 µs per call) were found.
"""

from __future__ import annotations

import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import torch_cudnn_algo as tca  # noqa: E402
from zoo_networks import build_trainer  # noqa: E402

STEPS = 5
CONV_OPS = ("aten::convolution_backward", "aten::cudnn_convolution", "aten::cudnn_convolution_transpose")


def profiled(trainer, plan: tca.Plan | None) -> profile:
    with tca.use_plan(plan):
        for _ in range(3):
            trainer.step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            for _ in range(STEPS):
                trainer.step()
            torch.cuda.synchronize()
    return prof


def counts(prof: profile) -> tuple[collections.Counter, collections.Counter, collections.Counter]:
    ops, kernels, cpu_us = collections.Counter(), collections.Counter(), collections.Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels[event.name[:80]] += 1
        elif event.name.startswith(("aten::", "cuda")):
            ops[event.name] += 1
            cpu_us[event.name] += event.cpu_time_total
    return ops, kernels, cpu_us


def conv_by_shape(prof: profile) -> dict[tuple[str, str], tuple[int, float]]:
    return {(e.key, str(e.input_shapes)[:160]): (e.count, e.cpu_time_total / e.count)
            for e in prof.key_averages(group_by_input_shape=True) if e.key in CONV_OPS}


def differing(stock: collections.Counter, plan: collections.Counter) -> dict[str, tuple[float, float]]:
    rows = {k: (stock[k] / STEPS, plan[k] / STEPS) for k in set(stock) | set(plan) if stock[k] != plan[k]}
    return dict(sorted(rows.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1]))[:15])


def main() -> int:
    for name in sys.argv[1:] or ["conv_tasnet"]:
        trainer, _ = build_trainer(name, "cuda")
        for _ in range(3):
            trainer.step()
        with trainer.autocast():
            plan = tca.tune(trainer.model, trainer.inputs, progress=False)
        stock_prof, plan_prof = profiled(trainer, None), profiled(trainer, plan)
        (so, sk, sc), (po, pk, pc) = counts(stock_prof), counts(plan_prof)
        print(f"===== {name}: kernels per step stock {sum(sk.values()) / STEPS:.0f}, plan {sum(pk.values()) / STEPS:.0f}")
        print("ops and CUDA calls per step (stock, plan):", json.dumps(differing(so, po)))
        print("kernels per step (stock, plan):", json.dumps(differing(sk, pk)))
        cpu = {k: round((pc[k] - sc[k]) / STEPS) for k in set(sc) | set(pc)}
        print("CPU µs per step, plan - stock:", json.dumps(dict(sorted(cpu.items(), key=lambda kv: -abs(kv[1]))[:12])))
        stock_shapes, plan_shapes = conv_by_shape(stock_prof), conv_by_shape(plan_prof)
        rows = sorted(((plan_shapes[k][1] - s[1], k, s, plan_shapes[k]) for k, s in stock_shapes.items()
                       if k in plan_shapes), reverse=True)
        for extra, (op, shapes), s, p in rows[:10]:
            print(f"  {extra:+8.1f} µs/call  stock {s[1]:7.1f}  plan {p[1]:7.1f}  calls {s[0]}  {op} {shapes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
