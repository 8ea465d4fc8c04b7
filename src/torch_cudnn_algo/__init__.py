"""torch_cudnn_algo: choose the cuDNN algorithm PyTorch's convolutions run.

``import torch`` registers the flags (through the ``torch.backends`` entry point),
so an unchanged training script only needs::

    torch.backends.cudnn.conv_fwd_algo = 1   # or "IMPLICIT_PRECOMP_GEMM"

Every cuDNN forward convolution then runs cuDNN's legacy algorithm 1; ``None``
restores stock PyTorch, with no override left registered.
"""

from __future__ import annotations

import logging
import warnings

from . import _extension, _flags
from ._algorithms import DIRECTIONS, NotAvailableYetError
from ._flags import flags
from ._queries import (
    EngineConfig,
    active_overrides,
    clear_cache,
    cudnn_version,
    engine_configs,
    legacy_algorithm_names,
    legacy_workspace_sizes,
)

__version__ = "0.1.0"

__all__ = [
    "DIRECTIONS",
    "EngineConfig",
    "NotAvailableYetError",
    "active_overrides",
    "clear_cache",
    "cudnn_version",
    "engine_configs",
    "flags",
    "is_available",
    "legacy_algorithm_names",
    "legacy_workspace_sizes",
    "load_error",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())


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
        warnings.warn(
            f"torch_cudnn_algo: could not install the torch.backends.cudnn flags "
            f"({type(exc).__name__}: {exc})",
            stacklevel=3,
        )
        return
    if not _extension.is_loaded():
        warnings.warn(
            f"torch_cudnn_algo: the C++ extension could not be loaded ({_extension.load_error()}); "
            "the torch.backends.cudnn.conv_* flags are inert. Rebuild the package against the "
            "installed torch (pip install --no-build-isolation torch-cudnn-algo).",
            stacklevel=3,
        )


_initialize()
_READY = True  # read by the autoload entry point (import-recursion guard)
