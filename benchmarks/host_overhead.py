"""Host overhead per convolution call: stock PyTorch vs a pinned legacy
algorithm vs the pinned engine configurations stock itself picks vs the
"fastest" policy (after its one profiling call), on a tiny convolution whose GPU
time is far below the host time (so the wall time per call in a long loop is
the host's); forward only, then forward + backward. The modes alternate in
rounds, so drift in the machine's speed hits them alike; each mode's number is
its median over rounds.

    python benchmarks/host_overhead.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import torch_cudnn_algo


def per_call_us(fn, calls: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def stock_pick(direction: str, x: torch.Tensor, w: torch.Tensor) -> str:
    """The engine configuration stock runs: the first usable one of heuristics mode A."""
    return next(c.name for c in torch_cudnn_algo.engine_configs(direction, x, w, padding=1)
                if c.source == "heuristics_a" and c.refusal is None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    x = torch.randn(1, 8, 8, 8, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    forward = lambda: torch.nn.functional.conv2d(x, w, padding=1)  # noqa: E731
    training = lambda: torch.nn.functional.conv2d(xg, wg, padding=1).sum().backward()  # noqa: E731
    picks = {d: stock_pick(d, x, w) for d in ("fwd", "bwd_data", "bwd_filter")}

    def everywhere(value):
        return dict(conv_fwd_algo=value, conv_bwd_data_algo=value, conv_bwd_filter_algo=value)

    modes = [
        ("stock PyTorch", everywhere(None)),
        ("legacy 1 / 1 / 1", everywhere(1)),
        ("engines stock picks", dict(conv_fwd_algo=picks["fwd"], conv_bwd_data_algo=picks["bwd_data"],
                                     conv_bwd_filter_algo=picks["bwd_filter"])),
        ("'fastest' policy", everywhere("fastest")),
    ]
    for workload_name, workload in (("forward", forward), ("forward + backward", training)):
        samples: dict[str, list[float]] = {label: [] for label, _ in modes}
        for round_index in range(args.rounds + 1):  # round 0 warms every path up (and profiles)
            for label, flags in modes:
                with torch_cudnn_algo.flags(**flags):
                    us = per_call_us(workload, args.calls if round_index else 200)
                if round_index:
                    samples[label].append(us)
        print(f"{torch.cuda.get_device_name()}: {workload_name}, conv2d [1,8,8,8] x [8,8,3,3], "
              f"{args.rounds} rounds of {args.calls} calls per mode")
        stock_us = statistics.median(samples["stock PyTorch"])
        for label, values in samples.items():
            us = statistics.median(values)
            print(f"  {label:<30}{us:>8.2f} us/call (min {min(values):.2f}, max {max(values):.2f})"
                  f"{us / stock_us:>8.2f}x stock")


if __name__ == "__main__":
    main()
