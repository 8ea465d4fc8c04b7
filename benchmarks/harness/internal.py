"""Every use the benchmarks make of the package beyond its public API, in one place.

The benchmarks import ``torch_cudnn_algo`` (the public API) and, where a measurement needs more,
this module; it alone reaches into the package, so a change of the package's internals changes
one line here.
"""

from __future__ import annotations

__all__ = ["decision_counts", "energy_decisions", "own_kernels_built", "set_prepare_ahead", "tuner_tolerance"]


def decision_counts() -> dict[str, object]:
    """What this process's ``"fastest"`` decided so far: configurations it tuned, its decisions by
    origin (tuned, kept from the tuning database, borrowed, waited for), the execution plans it built
    and deserialized, and the entries the tuning database holds."""
    import torch_cudnn_algo
    from torch_cudnn_algo import _ops

    return {"tuned": len(torch_cudnn_algo.diagnostics.tuning_log()), "kept": _ops.kept_decision_counts(),
            "execution_plans": torch_cudnn_algo.diagnostics.execution_plan_counts(),
            "tuning_db_entries": len(torch_cudnn_algo.db.entries())}


def energy_decisions() -> list[dict[str, object]]:
    """How the last ``tune(policy="lowest_energy")`` decided each configuration (what was
    measured, the pick, its energy and time against stock's, the A/A spread), as dicts."""
    import dataclasses

    from torch_cudnn_algo._tune_energy import energy_decisions as decisions

    return [dataclasses.asdict(decision) for decision in decisions()]


def own_kernels_built() -> bool:
    """Whether the loaded extension was built with our own kernels ("tca.direct")."""
    import torch_cudnn_algo
    from torch_cudnn_algo import _ops

    return torch_cudnn_algo.is_available() and _ops.own_kernels_built()


def set_prepare_ahead(enabled: bool) -> None:
    """Whether ``tune()`` builds the next configurations' candidates while it times one (the
    default) or builds each configuration's only when it tunes it."""
    from torch_cudnn_algo import _tune

    _tune._PREPARE_AHEAD = enabled


def tuner_tolerance(dtype: str, allow_tf32: bool) -> float:
    """The max relative error against float64 the tuner accepts for a candidate of ``dtype``."""
    from torch_cudnn_algo._table import tolerance_for

    return tolerance_for(dtype, allow_tf32)
