"""How ``torch-cudnn-algo tune`` times a training step, in its own process (stock
heuristics vs the tuned plan) and in the ``benchmark=True`` child process, with
one method so that the numbers compare:

- wall ms per step: ``steps`` eager steps between two synchronizations (what a
  host-bound eager step costs);
- GPU ms per step: the summed duration of every CUDA kernel of 2 steps under
  ``torch.profiler`` (GPU time without the host's launch gaps), and of the
  convolution ops' kernels alone;
- energy per step: ``_energy.measure`` over whole eager steps (the GPU's idle time
  between kernels included, as an eager training job pays it), the modes alternated within
  each round with an A/A control (the first mode measured twice); None where the GPU or driver
  has no counter, with the reason.

Each is measured in ``rounds`` rounds; where several modes are measured, they
alternate within each round, so a drift of clocks or temperature hits all alike.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence

import torch

from . import _energy
from ._energy_report import EnergyReport

__all__ = ["MEASURES", "STEP_ENERGY", "measure_modes", "step_energy", "training_step", "warm_up_cuda"]

MEASURES = ("wall_ms", "gpu_ms", "conv_ms", "energy_j")
_CONV_OPS = ("aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::convolution_backward")
_WARMUP_STEPS = 3
_PROFILED_STEPS = 2
# A training step's energy: 2 s windows, 5 rounds, warm-up to a steady temperature (at most 60 s).
STEP_ENERGY = _energy.EnergySettings(window_s=2.0, rounds=5)


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


def step_energy(
    step: Callable[[], None],
    modes: Mapping[str, Callable[[], contextlib.AbstractContextManager]],
    settings: _energy.EnergySettings = STEP_ENERGY,
) -> tuple[EnergyReport | None, str]:
    """J/step of each mode (``modes[mode]()`` entered around its windows), alternated, with the
    first mode's A/A control: (the report, ""), or (None, why not). Never raises: energy is
    detail beside the times."""
    try:
        report = _energy.measure({mode: _energy.EnergyMode(step, enter) for mode, enter in modes.items()},
                                        settings=settings)
    except _energy.EnergyUnavailable as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - energy is detail: without it, "n/a" and why
        return None, f"the energy measurement failed ({type(exc).__name__}: {exc})"
    return report, ""


def per_round_joules(report: EnergyReport | None, mode: str) -> list[float | None]:
    """A mode's J/step per round (None: a window that failed); empty without a report."""
    if report is None or mode not in report.modes:
        return []
    return [None if window is None else window.j_per_call for window in report[mode].windows]


def measure_modes(
    step: Callable[[], None],
    modes: Mapping[str, Callable[[], contextlib.AbstractContextManager]],
    rounds: int,
    steps: int,
) -> dict[str, dict[str, list[float | None]]]:
    """``{mode: {"wall_ms": [...], "gpu_ms": [...], "conv_ms": [...], "energy_j": [...]}}``,
    one value per round; each mode's steps run inside ``modes[mode]()``.

    Every mode is warmed first (execution plans built, caches filled), and the first step
    after entering a mode is never timed (it selects again). Wall rounds come
    first, then profiled rounds (so the profiler never runs between wall
    timings); ``energy_j`` is left empty for :func:`step_energy` to fill.
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
    return times
