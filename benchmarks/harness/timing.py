"""Timing a training step: wall and process CPU time of eager steps, host time per convolution
op call (torch.profiler), GPU time of a whole step by CUDA-graph replay (no host time in it), or by
CUDA events behind a spin kernel where capture fails, and energy per step."""

from __future__ import annotations

import contextlib
import functools
import gc
import time
from collections.abc import Callable, Iterator

import torch

from .config import GRAPH_WARMUP_STEPS
from .networks import Trainer
from .results import error_text, progress

DEVICE = "cuda"
CONV_OPS = ("aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::convolution_backward")
CONV_MODULES = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d,
                torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)

def _zoo_energy():
    from torch_cudnn_algo import energy

    # The zoo's GPU section: a short energy check beside the times (1 s windows, 3 rounds, a
    # warm-up of at most 20 s); benchmarks/energy.py measures energy in full.
    return energy.EnergySettings(window_s=1.0, rounds=3, warmup=energy.WarmupRule(max_s=20.0))



def capture_step(warm_up_step: Callable[[], None], body: Callable[[], None],
                 zero_grad: Callable[[], None], warmup_steps: int,
                 pool: object | None) -> torch.cuda.CUDAGraph:
    """One whole training step captured as in PyTorch's CUDA graphs docs: ``warmup_steps`` runs of
    ``warm_up_step`` on a side stream (lazy state such as momentum buffers is created outside
    capture), then ``zero_grad`` (gradients set to None, so the captured backward allocates them
    from the graph's pool) and ``body`` captured."""
    from torch_cudnn_algo import _graph_capture

    _graph_capture.warm_up(warm_up_step, warmup_steps)
    zero_grad()
    return _graph_capture.capture(body, pool)


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


def warm_up_cuda() -> None:
    """CUDA context, cuDNN and cuBLAS handles and their libraries, by a tiny unrelated convolution
    (forward and backward) and matmul: a first step then times the network's own work, as a real
    job's first step after start-up would."""
    x = torch.randn(1, 8, 8, 8, device=DEVICE, requires_grad=True)
    w = torch.randn(8, 8, 3, 3, device=DEVICE, requires_grad=True)
    torch.nn.functional.conv2d(x, w, padding=1).sum().backward()
    torch.randn(8, 8, device=DEVICE) @ torch.randn(8, 8, device=DEVICE)
    torch.cuda.synchronize()


def step_seconds(trainer: Trainer) -> float:
    """Wall seconds of one training step, the GPU drained before and after."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    trainer.step()
    torch.cuda.synchronize()
    return time.perf_counter() - started


def steps_wall_cpu_ms(trainer: Trainer, steps: int) -> tuple[float, float]:
    """(wall, process CPU) ms per step over ``steps`` eager steps, the GPU drained before and after,
    with the garbage collector off: a collection landing in one mode's segment is ms of noise in a
    host-bound step. Process CPU time counts the host work of every thread (the autograd worker
    too) and not the time the process waited or was preempted."""
    gc.collect()
    gc.disable()
    try:
        torch.cuda.synchronize()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            trainer.step()
        torch.cuda.synchronize()
        return (time.perf_counter() - wall) / steps * 1e3, (time.process_time() - cpu) / steps * 1e3
    finally:
        gc.enable()


def profile_conv_host(trainer: Trainer, steps: int) -> dict:
    """CPU time per convolution op call over ``steps`` profiled steps (CPU activity only): each
    outermost call of a CONV_OPS op counts with its self + children CPU time; a conv op nested
    inside another is part of the outer one's time, not a call of its own."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        started = time.perf_counter()
        for _ in range(steps):
            trainer.step()
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - started) / steps * 1e3
    per_op: dict[str, list[float]] = {name: [] for name in CONV_OPS}
    for event in profiler.events():
        if event.name not in per_op:
            continue
        parent = event.cpu_parent
        while parent is not None and parent.name not in per_op:
            parent = parent.cpu_parent
        if parent is None:
            per_op[event.name].append(event.cpu_time_total)
    calls = sum(len(times) for times in per_op.values())
    total_us = sum(sum(times) for times in per_op.values())
    return {"us_per_call": total_us / calls if calls else None, "calls_per_step": calls / steps,
            "profiled_step_ms": wall_ms,
            "ops": {name: {"calls_per_step": len(times) / steps,
                           "us_per_call": sum(times) / len(times) if times else None}
                    for name, times in per_op.items()}}


@contextlib.contextmanager
def gpu_drained_before_convs(model: torch.nn.Module) -> Iterator[None]:
    """Waits for the GPU before every convolution module's forward and backward: each conv op then
    launches into an empty queue, so its CPU time is its own work, never a wait for a free launch
    slot. In a GPU-bound step the host runs ahead until CUDA's launch queue is full, and from then
    on each launch blocks until the GPU retires older work: the profiler charges that wait to
    whichever op launches, more of it to an op that launches more kernels."""
    def drain(*_: object) -> None:
        torch.cuda.synchronize()

    def drain_before_backward(_module: torch.nn.Module, _inputs: object, output: object) -> None:
        # A hook on the output's gradient runs just before the conv's backward node. Not a module
        # backward hook: that wraps the output in a custom Function, and an in-place activation
        # on it (ReLU(inplace=True)) is then an error.
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(drain)

    handles = []
    for module in model.modules():
        if isinstance(module, CONV_MODULES):
            handles.append(module.register_forward_pre_hook(drain))
            handles.append(module.register_forward_hook(drain_before_backward))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def capture_trainer_step(trainer: Trainer, pool: object | None) -> torch.cuda.CUDAGraph:
    """The trainer's step without GradScaler's host check (``graph_body``), captured."""
    return capture_step(trainer.graph_step, trainer.graph_body,
                        lambda: trainer.optimizer.zero_grad(set_to_none=True), GRAPH_WARMUP_STEPS, pool)


@functools.cache
def spin_cycles_per_ms() -> float:
    """GPU clock cycles per ms of torch.cuda._sleep, measured once."""
    cycles = 20_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / max(start.elapsed_time(end), 1e-3)


def events_ms(trainer: Trainer, steps: int) -> float:
    """GPU ms per step from CUDA events around eager steps, where capture failed. A spin kernel
    queued first lasts as long as the host needs to queue the steps (measured just before), so
    the events time the GPU's work rather than the host's, as far as the steps do not synchronise."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        trainer.graph_step()
    torch.cuda.synchronize()
    host_ms = (time.perf_counter() - started) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(1.2 * host_ms * spin_cycles_per_ms()))
    start.record()
    for _ in range(steps):
        trainer.graph_step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def energy_j_per_step(graphs: dict[str, torch.cuda.CUDAGraph], labels: list[str]) -> dict[str, float | None]:
    """Joules per replayed step of each graph, the graphs alternated with an A/A control
    (``torch_cudnn_algo.energy.measure``, ``_zoo_energy()``); None for a label without a graph, or
    every label where energy cannot be measured. benchmarks/energy.py measures energy in full."""
    import torch_cudnn_algo

    if not graphs:
        return dict.fromkeys(labels)
    try:
        report = torch_cudnn_algo.energy.measure({label: graph.replay for label, graph in graphs.items()},
                                                 settings=_zoo_energy())
    except Exception as exc:  # noqa: BLE001 - energy is detail; the times stand without it
        progress(f"energy not measured: {error_text(exc)}")
        return dict.fromkeys(labels)
    progress(f"energy: {report.summary()}")
    return {label: report[label].j_per_call.median if label in graphs and report[label].j_per_call else None
            for label in labels}
