"""What the extension did and what cuDNN offers, for checking a run rather than steering it:
counters of the calls that ran a pinned choice or a plan's entry, the execution plans built
or deserialized, the ``"fastest"`` policy's decisions, the operators overridden, and cuDNN's
engine configurations and legacy algorithms for a convolution.

The counters only grow; their difference around a call tells "the pinned algorithm ran" from
"PyTorch never sent this convolution to cuDNN" or "the choice was refused"::

    from torch_cudnn_algo import diagnostics

    before = diagnostics.pinned_run_counts()
    y = model(x)
    ran = diagnostics.pinned_run_counts()["fwd"] - before["fwd"]
"""

from __future__ import annotations

from ._plan import execution_plan_counts, plan_entry_run_counts
from ._queries import (
    EngineConfig,
    active_overrides,
    engine_configs,
    legacy_algorithm_names,
    legacy_workspace_sizes,
    pinned_run_counts,
    tuning_log,
)

__all__ = [
    "EngineConfig",
    "active_overrides",
    "engine_configs",
    "execution_plan_counts",
    "legacy_algorithm_names",
    "legacy_workspace_sizes",
    "pinned_run_counts",
    "plan_entry_run_counts",
    "tuning_log",
]
