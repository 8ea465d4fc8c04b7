"""GPU time of a whole training step by CUDA-graph replay: no host time in it. Shared by
``report.py`` and ``zoo.py``."""

from __future__ import annotations

from collections.abc import Callable

import torch


def capture_step(warm_up_step: Callable[[], None], body: Callable[[], None],
                 zero_grad: Callable[[], None], warmup_steps: int,
                 pool: object | None) -> torch.cuda.CUDAGraph:
    """One whole training step captured as in PyTorch's CUDA graphs docs: ``warmup_steps`` runs of
    ``warm_up_step`` on a side stream (lazy state such as momentum buffers is created outside
    capture), then ``zero_grad`` (gradients set to None, so the captured backward allocates them
    from the graph's pool) and ``body`` captured."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup_steps):
            warm_up_step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    zero_grad()
    with torch.cuda.graph(graph, pool=pool):
        body()
    torch.cuda.synchronize()
    return graph


def replay_ms(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    """GPU ms per replay of ``graph``, between two CUDA events."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / replays
