"""Loading of the C++ extension, which registers ``torch.ops.torch_cudnn_algo``.

A failed load is remembered, not raised: the flags then stay inert (settable,
validated, without effect) and :func:`load_error` says why.
"""

from __future__ import annotations

import importlib
from typing import Any

_ops: Any = None
_load_error: str | None = None


def load() -> None:
    """Imports ``torch_cudnn_algo._C`` once; records the failure reason if any."""
    global _ops, _load_error
    if _ops is not None or _load_error is not None:
        return
    try:
        import torch

        importlib.import_module("torch_cudnn_algo._C")
        _ops = torch.ops.torch_cudnn_algo
    except Exception as exc:  # ImportError, OSError (missing libcudnn), ...
        _load_error = f"{type(exc).__name__}: {exc}"


def ops() -> Any:
    """``torch.ops.torch_cudnn_algo``; raises RuntimeError naming the load failure."""
    load()
    if _ops is None:
        raise RuntimeError(f"torch_cudnn_algo: the C++ extension is not loaded ({_load_error})")
    return _ops


def is_loaded() -> bool:
    load()
    return _ops is not None


def load_error() -> str | None:
    """Why the extension failed to load, or None."""
    load()
    return _load_error
