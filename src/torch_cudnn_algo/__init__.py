"""torch_cudnn_algo: choose the cuDNN algorithm PyTorch's convolutions run.

``import torch`` registers the flags (through the ``torch.backends`` entry point),
so an unchanged training script only needs::

    torch.backends.cudnn.conv_fwd_algo = 1   # or "IMPLICIT_PRECOMP_GEMM"

Every cuDNN forward convolution then runs cuDNN's legacy algorithm 1; ``None``
restores stock PyTorch, with no override left registered.

Here is what a training script uses: the flags (:data:`flags`), convolutions
(:class:`ConvSpec`), profiling (:func:`profile`, :func:`list_algorithms`), tuning and
plans (:func:`tune`, :func:`use_plan`, :func:`load_plan`, :class:`Plan`). Four
namespaces hold the rest: :mod:`torch_cudnn_algo.db` (the tuning database),
:mod:`torch_cudnn_algo.distributed` (decisions shared by the ranks of a job),
:mod:`torch_cudnn_algo.energy` (GPU energy) and :mod:`torch_cudnn_algo.diagnostics`
(counters and what cuDNN offers).
"""

from __future__ import annotations

import logging
import os

from . import _db, _distributed, _extension, _flags, _plan, _profile, _warn, db, diagnostics, distributed, energy
from ._algorithms import DIRECTIONS
from ._conv_spec import ConvSpec, TensorSpec
from ._flags import flags
from ._plan import (Plan, PlanEntry, PlanError, PlanMismatchWarning, SerializedExecutionPlan, current_plan, load_plan,
                    use_plan)
from ._profile import Candidate, list_algorithms, profile
from ._queries import clear_cache, cudnn_version
from ._table import TOLERANCES, ProfileRow, ProfileTable, choose_fastest, tolerance_for
from ._tune import tune

__version__ = "0.1.0"

__all__ = [
    # flags and the extension
    "DIRECTIONS",
    "clear_cache",
    "cudnn_version",
    "flags",
    "is_available",
    "load_error",
    # convolutions
    "ConvSpec",
    "TensorSpec",
    # profiling
    "Candidate",
    "ProfileRow",
    "ProfileTable",
    "TOLERANCES",
    "choose_fastest",
    "list_algorithms",
    "profile",
    "tolerance_for",
    # tuning and plans
    "Plan",
    "PlanEntry",
    "PlanError",
    "PlanMismatchWarning",
    "SerializedExecutionPlan",
    "current_plan",
    "load_plan",
    "tune",
    "use_plan",
    # namespaces
    "db",
    "diagnostics",
    "distributed",
    "energy",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())


def _register_with_torch_logging() -> None:
    """Makes ``TORCH_LOGS="+torch_cudnn_algo"`` (DEBUG) and ``TORCH_LOGS="torch_cudnn_algo"``
    (INFO) name our logger. Best effort: torch's logging registry is private,
    and an older torch without it must not break ``import torch``."""
    try:
        from torch._logging import _internal

        if "torch_cudnn_algo" not in _internal.log_registry.log_alias_to_log_qnames:
            _internal.register_log("torch_cudnn_algo", __name__)
            if "torch_cudnn_algo" in os.environ.get("TORCH_LOGS", ""):
                _internal._init_logs()  # TORCH_LOGS was parsed before we registered
    except Exception:  # noqa: BLE001 - any failure leaves plain `logging` working
        pass


def is_available() -> bool:
    """True when the C++ extension is loaded (the flags then take effect)."""
    return _extension.is_loaded()


def load_error() -> str | None:
    """Why the C++ extension could not be loaded, or None."""
    return _extension.load_error()


def _initialize() -> None:
    """Loads the extension and installs the flags; any failure is one warning
    and leaves the flags inert, never an exception."""
    try:
        _flags.install()
    except Exception as exc:
        _warn.warn(
            f"torch_cudnn_algo: could not install the torch.backends.cudnn flags "
            f"({type(exc).__name__}: {exc})",
            stacklevel=3,
        )
        return
    _register_with_torch_logging()
    if _extension.is_loaded():
        try:
            _profile.install_profiler()
        except Exception as exc:  # conv_profile / "fastest" then run the stock path
            _warn.warn(f"torch_cudnn_algo: could not install the profiler ({type(exc).__name__}: {exc})",
                          stacklevel=3)
        try:
            _distributed.install()
        except Exception as exc:  # every rank then decides alone
            _warn.warn(f"torch_cudnn_algo: could not install the job coordinator ({type(exc).__name__}: {exc})",
                       stacklevel=3)
        _plan.apply_environment()  # TORCH_CUDNN_ALGO_PLAN; warns, never raises
        _db.check_environment()  # TORCH_CUDNN_ALGO_DB, TORCH_CUDNN_ALGO_DB_MAX_MB; warns, never raises
    else:
        _warn.warn(
            f"torch_cudnn_algo: the C++ extension could not be loaded ({_extension.load_error()}); "
            "the torch.backends.cudnn.conv_* flags are inert. Install the wheel built for this torch "
            "(scripts/build-wheels makes one per release), or build from the source against it: "
            "python3 scripts/install-build-deps && python3 -m pip install --no-build-isolation .",
            stacklevel=3,
        )
        if os.environ.get(_plan.ENV_VAR):
            _flags.warn_environment(_plan.ENV_VAR, os.environ[_plan.ENV_VAR], "the extension is not loaded")


# The public classes are named as users reach them (`torch_cudnn_algo.PlanError`,
# `torch_cudnn_algo.db.TuningDbEntry`, in reprs, tracebacks and pickles), not by the
# private module that defines them.
for _home in (globals(), vars(db), vars(diagnostics), vars(distributed), vars(energy)):
    for _public in _home["__all__"]:
        if isinstance(_home[_public], type):
            _home[_public].__module__ = _home["__name__"]
del _home, _public

_initialize()
_READY = True  # read by the autoload entry point (import-recursion guard)
