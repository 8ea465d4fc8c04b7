"""Host overhead per convolution call: stock PyTorch vs a pinned legacy
algorithm vs the pinned engine configuration stock itself picks, on a tiny
convolution whose GPU time is far below the host time (so the wall time per call
in a long loop is the host's). The modes alternate in rounds, so drift in the
machine's speed hits them alike; each mode's number is its median over rounds.

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    x = torch.randn(1, 8, 8, 8, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    conv = lambda: torch.nn.functional.conv2d(x, w, padding=1)  # noqa: E731
    stock_pick = next(c.name for c in torch_cudnn_algo.engine_configs("fwd", x, w, padding=1)
                      if c.source == "heuristics_a" and c.refusal is None)
    modes = [("stock PyTorch", None), ("legacy 1 (IMPLICIT_PRECOMP_GEMM)", 1), (f"engine {stock_pick}", stock_pick)]
    samples: dict[str, list[float]] = {label: [] for label, _ in modes}
    for round_index in range(args.rounds + 1):  # round 0 warms every path up
        for label, choice in modes:
            with torch_cudnn_algo.flags(conv_fwd_algo=choice, conv_algo_strict=choice is not None):
                us = per_call_us(conv, args.calls if round_index else 200)
            if round_index:
                samples[label].append(us)
    print(f"{torch.cuda.get_device_name()}: conv2d [1,8,8,8] x [8,8,3,3], {args.rounds} rounds of "
          f"{args.calls} calls per mode")
    stock_us = statistics.median(samples["stock PyTorch"])
    for label, values in samples.items():
        us = statistics.median(values)
        print(f"  {label:<50}{us:>8.2f} us/call (min {min(values):.2f}, max {max(values):.2f})"
              f"{us / stock_us:>8.2f}x stock")


if __name__ == "__main__":
    main()
