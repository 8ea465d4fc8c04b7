"""How ``torch-cudnn-algo tune`` times a training step, in its own process (stock
heuristics vs the tuned plan) and in the ``benchmark=True`` child process, with
one method so that the numbers compare:

- wall ms per step: ``steps`` eager steps between two synchronizations (what a
  host-bound eager step costs);
- GPU ms per step: the summed duration of every CUDA kernel of 2 steps under
  ``torch.profiler`` (GPU time without the host's launch gaps), and of the
  convolution ops' kernels alone;
- energy per step: NVML's energy counter across whole eager steps (the GPU's
  idle time between kernels included, as a training job pays it); None where
  the GPU or driver has no counter.

Each is measured in ``rounds`` rounds; where several modes are measured, they
alternate within each round, so a drift of clocks or temperature hits all alike.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence

import torch

from . import _nvml

__all__ = ["MEASURES", "measure_modes", "training_step", "warm_up_cuda"]

MEASURES = ("wall_ms", "gpu_ms", "conv_ms", "energy_j")
_CONV_OPS = ("aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::convolution_backward")
_WARMUP_STEPS = 3
_PROFILED_STEPS = 2
# NVML's counter moves only every ~100 ms. energy_per_call's window can be off by one chunk
# of calls at each end: one step per chunk and 8 counter updates keep that error small, where
# fewer updates with several steps per chunk vary widely between rounds of one mode.
_ENERGY_COUNTER_UPDATES = 8
_ENERGY_TIMEOUT_S = 3.0


def training_step(model: Callable[..., object], inputs: Sequence[object], amp: torch.dtype | None) -> None:
    """Forward under autocast (``amp`` None: none), the default loss, backward."""
    from ._tune import _default_loss

    with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
        loss = _default_loss(model(*inputs))
    loss.backward()


def warm_up_cuda() -> None:
    """CUDA context, cuDNN and cuBLAS handles and their libraries, by a tiny unrelated
    convolution (forward and backward) and matmul: what comes next (the tuning, or
    ``benchmark=True``'s first step) then times the network's own work."""
    x = torch.randn(1, 8, 8, 8, device="cuda", requires_grad=True)
    w = torch.randn(8, 8, 3, 3, device="cuda", requires_grad=True)
    torch.nn.functional.conv2d(x, w, padding=1).sum().backward()
    torch.randn(8, 8, device="cuda") @ torch.randn(8, 8, device="cuda")
    torch.cuda.synchronize()


def step_seconds(step: Callable[[], None]) -> float:
    """Wall seconds of one step, the GPU drained before and after."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    step()
    torch.cuda.synchronize()
    return time.perf_counter() - started


def wall_ms(step: Callable[[], None], steps: int) -> float:
    """Wall ms per step over ``steps`` eager steps."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1e3 / steps


def kernel_ms(step: Callable[[], None], steps: int) -> tuple[float, float]:
    """(all kernels, convolution ops' kernels) GPU ms per step, from torch.profiler."""
    from torch.autograd import DeviceType

    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels_us = sum(e.time_range.elapsed_us() for e in profiler.events() if e.device_type == DeviceType.CUDA)
    conv_us = sum(a.device_time_total for a in profiler.key_averages() if a.key in _CONV_OPS)
    return kernels_us / 1e3 / steps, conv_us / 1e3 / steps


def energy_available() -> bool:
    try:
        return _nvml.energy_counter(torch.cuda.current_device()) is not None
    except Exception:  # noqa: BLE001 - energy is detail: without it, "n/a"
        return False


def energy_j(step: Callable[[], None], step_ms: float) -> float | None:
    """Joules per eager step over whole NVML counter updates, or None."""
    try:
        return _nvml.energy_per_call(step, torch.cuda.current_device(), step_ms,
                                     counter_updates=_ENERGY_COUNTER_UPDATES, chunk_ms=step_ms,
                                     timeout_s=_ENERGY_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - energy is detail: without it, "n/a"
        return None


def measure_modes(
    step: Callable[[], None],
    modes: Mapping[str, Callable[[], contextlib.AbstractContextManager]],
    rounds: int,
    steps: int,
    energy: bool = True,
) -> dict[str, dict[str, list[float | None]]]:
    """``{mode: {"wall_ms": [...], "gpu_ms": [...], "conv_ms": [...], "energy_j": [...]}}``,
    one value per round; each mode's steps run inside ``modes[mode]()``.

    Every mode is warmed first (execution plans built, caches filled), and the first step
    after entering a mode is never timed (it selects again). Wall rounds come
    first, then profiled rounds (so the profiler never runs between wall
    timings), then energy rounds; ``energy_j`` is empty where NVML has no counter
    (or ``energy`` is False) and holds None for a round whose counter did not update in time.
    """
    times: dict[str, dict[str, list[float | None]]] = {mode: {m: [] for m in MEASURES} for mode in modes}
    for enter in modes.values():
        with enter():
            for _ in range(_WARMUP_STEPS):
                step()
    for _ in range(rounds):
        for mode, enter in modes.items():
            with enter():
                step()
                times[mode]["wall_ms"].append(wall_ms(step, steps))
    kernel_ms(step, 1)  # the profiler's first use initialises CUPTI: in no round
    for _ in range(rounds):
        for mode, enter in modes.items():
            with enter():
                step()
                gpu, conv = kernel_ms(step, _PROFILED_STEPS)
            times[mode]["gpu_ms"].append(gpu)
            times[mode]["conv_ms"].append(conv)
    if energy and energy_available():
        for _ in range(rounds):
            for mode, enter in modes.items():
                walls = [t for t in times[mode]["wall_ms"] if t is not None]
                with enter():
                    step()
                    times[mode]["energy_j"].append(energy_j(step, sorted(walls)[len(walls) // 2]))
    return times
