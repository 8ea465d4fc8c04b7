"""Loading of the C++ extension, which registers ``torch.ops.torch_cudnn_algo``
(called through :mod:`torch_cudnn_algo._ops`, the one module that calls them).

A failed load is remembered, not raised: the flags then stay inert (settable,
validated, without effect) and :func:`load_error` says why.

Before loading, the version gate compares what the build was made for
(``_build_info``, written by setup.py) with this process: another torch minor
release, CUDA or cuDNN release, or an older libstdc++ than the compiler's, and
the extension is not loaded (loading it could crash or misbehave); the reason,
naming what to rebuild against, becomes the load error that ``import torch``
warns about once. ``TORCH_CUDNN_ALGO_SKIP_VERSION_CHECK=1`` loads it anyway.
"""

from __future__ import annotations

import importlib
import os
from . import _version_gate

_loaded = False
_load_error: str | None = None


def build_info() -> dict[str, str | None] | None:
    """What the installed extension was built for (``_build_info``), or None when unknown
    (a build without it: an in-place or editable build, or an older setup.py)."""
    try:
        info = importlib.import_module("torch_cudnn_algo._build_info")
    except ImportError:
        return None
    return {key: getattr(info, key, None) for key in ("VERSION", "TORCH", "CUDA", "CUDNN", "CXX", "GLIBCXX",
                                                        "KERNEL_ARCHS")}


def runtime_versions() -> dict[str, str | None]:
    """torch, CUDA and cuDNN of this process, as strings (None when absent)."""
    import torch

    try:
        cudnn = _version_gate.cudnn_version_string(torch.backends.cudnn.version())
    except Exception:  # noqa: BLE001 - torch raises when its cuDNN is unusable
        cudnn = None
    return {"TORCH": torch.__version__, "CUDA": torch.version.cuda, "CUDNN": cudnn}


def version_gate() -> str | None:
    """Why the extension must not be loaded into this process, or None."""
    if os.environ.get(_version_gate.SKIP_VERSION_CHECK, "") not in ("", "0"):
        return None
    built = build_info()
    if built is None:
        return None
    return _version_gate.version_mismatch(built, runtime_versions()) or _version_gate.libstdcxx_mismatch(
        built.get("GLIBCXX"), _version_gate.loaded_libstdcxx()
    )


def load() -> None:
    """Imports ``torch_cudnn_algo._C`` once; records the failure reason if any."""
    global _loaded, _load_error
    if _loaded or _load_error is not None:
        return
    try:
        import torch  # noqa: F401 - the extension's library needs torch's loaded first

        mismatch = version_gate()
        if mismatch is not None:
            _load_error = f"version mismatch: {mismatch}"
            return
        importlib.import_module("torch_cudnn_algo._C")
        _loaded = True
    except Exception as exc:  # ImportError, OSError (missing libcudnn), ...
        _load_error = f"{type(exc).__name__}: {exc}"


def is_loaded() -> bool:
    load()
    return _loaded


def load_error() -> str | None:
    """Why the extension failed to load, or None."""
    load()
    return _load_error
