"""CUDA-graph capture as PyTorch's CUDA graphs docs do it: warm-up runs on a side stream first,
so that lazy state (cuDNN execution plans, optimizer buffers, autocast's casts) is made outside
capture, then the capture. The energy measurement's graph replays, the benchmarks' captured
training steps and the CUDA-graph tests all capture through here."""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["capture", "warm_up"]


def warm_up(run: Callable[[], object], times: int) -> None:
    """``times`` calls of ``run`` on a side stream, which the current stream then waits for."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(times):
            run()
    torch.cuda.current_stream().wait_stream(side)


def capture(body: Callable[[], object], pool: object | None = None) -> torch.cuda.CUDAGraph:
    """``body`` captured in a new CUDA graph (its memory from ``pool``, another graph's
    ``pool()``, when given), the GPU synchronised after."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        body()
    torch.cuda.synchronize()
    return graph
