"""Host overhead per convolution call: stock PyTorch vs a pinned legacy
algorithm vs the pinned engine configuration stock itself picks, on a tiny
convolution whose GPU time is far below the host time (so the wall time per call
in a long loop is the host's). Median of several loops of --calls calls.

    python benchmarks/host_overhead.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import torch_cudnn_algo


def per_call_us(fn, calls: int, loops: int = 7) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(loops):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    x = torch.randn(1, 8, 8, 8, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    conv = lambda: torch.nn.functional.conv2d(x, w, padding=1)  # noqa: E731
    stock_pick = next(c.name for c in torch_cudnn_algo.engine_configs("fwd", x, w, padding=1)
                      if c.source == "heuristics_a" and c.refusal is None)
    rows = [("stock PyTorch", None)]
    rows += [("legacy 1 (IMPLICIT_PRECOMP_GEMM)", 1), (f"engine {stock_pick}", stock_pick)]
    stock_us = None
    print(f"{torch.cuda.get_device_name()}: conv2d [1,8,8,8] x [8,8,3,3], {args.calls} calls per loop")
    for label, choice in rows:
        with torch_cudnn_algo.flags(conv_fwd_algo=choice, conv_algo_strict=choice is not None):
            us = per_call_us(conv, args.calls)
        stock_us = stock_us or us
        print(f"  {label:<60}{us:>8.2f} us/call{us / stock_us:>8.2f}x stock")


if __name__ == "__main__":
    main()
