"""Warnings that never raise: what this package reports while ``import torch`` runs.

Under ``python -W error`` (or a filter that turns a warning into an error) a warning
raises, and torch turns an exception in a backend's autoload into a failed
``import torch``. What we report during that import (a bad environment variable, a plan
file that cannot be used, an extension that cannot load) is therefore written to stderr,
formatted as a warning, when the filters make it an error: the user still sees it, and
``import torch`` still succeeds.
"""

from __future__ import annotations

import sys
import warnings


def warn(message: str, category: type[Warning] = UserWarning, *, stacklevel: int = 1,
         location: tuple[str, int] | None = None, module: str | None = None, registry: dict | None = None) -> None:
    """``warnings.warn`` (``warnings.warn_explicit`` at ``location``, a (filename, line)
    pair) that prints the warning to stderr instead of raising it."""
    try:
        if location is None:
            warnings.warn(message, category, stacklevel=stacklevel + 1)
        else:
            warnings.warn_explicit(message, category, location[0], location[1], module=module, registry=registry)
    except Warning:
        filename, lineno = location or ("<torch_cudnn_algo>", 0)
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno))
