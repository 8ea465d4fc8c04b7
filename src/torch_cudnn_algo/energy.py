"""GPU energy per call, measured so that it holds up: NVML's energy counter over windows of
seconds, the modes alternated round by round, after a warm-up, with an A/A control beside
every comparison (docs/energy.md describes the method).

:func:`measure` is the one measurement behind ``profile(energy=...)``,
``tune(policy="lowest_energy")`` and the ``tune`` command's J/step; :class:`EnergySettings`
says how it measures, and :func:`unavailable` asks whether it can, without raising::

    import torch_cudnn_algo
    from torch_cudnn_algo import energy

    if energy.unavailable() is None:
        report = energy.measure({"stock": stock_graph.replay, "tuned": tuned_graph.replay},
                                settings=energy.EnergySettings(window_s=2.0, rounds=5))
        print(report)
"""

from __future__ import annotations

from ._energy import EnergyMode, EnergySettings, EnergyUnavailable, WarmupRule, measure, unavailable
from ._energy_report import EnergyReport

__all__ = [
    "EnergyMode",
    "EnergyReport",
    "EnergySettings",
    "EnergyUnavailable",
    "WarmupRule",
    "measure",
    "unavailable",
]
