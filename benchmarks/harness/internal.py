"""Every use the benchmarks make of the package beyond its public API, in one place.

The benchmarks import ``torch_cudnn_algo`` (the public API) and, where a measurement needs more,
this module; it alone reaches into the package, so a change of the package's internals changes
one line here.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["energy_per_call", "set_prepare_ahead", "tuner_tolerance"]


def energy_per_call(run: Callable[[], None], device_index: int, call_ms: float, **options: object) -> float | None:
    """Joules per call of ``run`` from NVML's energy counter (None where the GPU has none)."""
    from torch_cudnn_algo import _nvml

    return _nvml.energy_per_call(run, device_index, call_ms, **options)


def set_prepare_ahead(enabled: bool) -> None:
    """Whether ``tune()`` builds the next configurations' candidates while it times one (the
    default) or builds each configuration's only when it tunes it."""
    from torch_cudnn_algo import _tune

    _tune._PREPARE_AHEAD = enabled


def tuner_tolerance(dtype: str, allow_tf32: bool) -> float:
    """The max relative error against float64 the tuner accepts for a candidate of ``dtype``."""
    from torch_cudnn_algo._table import tolerance_for

    return tolerance_for(dtype, allow_tf32)
