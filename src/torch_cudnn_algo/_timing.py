"""GPU timing used by the demo and the benchmarks: CUDA events around each call,
warm-up first, median of the repeats."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


def median_ms(fn: Callable[[], object], repeats: int = 20, warmup: int = 3) -> float:
    """Median GPU time of ``fn()`` in milliseconds, each call timed with CUDA events."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)
