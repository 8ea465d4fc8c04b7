"""Entry point of the ``torch.backends`` group: ``import torch`` calls :func:`autoload`.

Kept outside the ``torch_cudnn_algo`` package and free of imports that can fail,
because torch turns any exception raised while loading or calling an entry point
into a failed ``import torch``. ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` makes torch
skip it.
"""

import sys
import warnings


def autoload() -> None:
    """Registers the ``torch.backends.cudnn.conv_*`` flags; never raises."""
    package = sys.modules.get("torch_cudnn_algo")
    if package is not None and not getattr(package, "_READY", False):
        # `import torch_cudnn_algo` is importing torch, which called us: the
        # package registers the flags itself once its import finishes.
        return
    try:
        import torch_cudnn_algo  # noqa: F401  (importing registers the flags)
    except Exception as exc:
        message = (
            f"torch_cudnn_algo: autoload failed ({type(exc).__name__}: {exc}); "
            "torch.backends.cudnn.conv_* flags are unavailable. Set "
            "TORCH_DEVICE_BACKEND_AUTOLOAD=0 to skip extension autoloading."
        )
        try:
            warnings.warn(message, stacklevel=2)
        except Warning:  # `-W error`: say it without failing `import torch`
            sys.stderr.write(warnings.formatwarning(message, UserWarning, "<torch_cudnn_algo autoload>", 0))
