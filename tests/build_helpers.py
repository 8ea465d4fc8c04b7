"""The build-only modules (buildtools/) for tests, loaded by path as setup.py loads them: they
are neither installed nor on sys.path."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_PACKAGE = "_torch_cudnn_algo_buildtools"


def buildtools(name: str):
    """buildtools/<name>.py, as a module of the package setup.py loads."""
    if _PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(_PACKAGE, ROOT / "buildtools" / "__init__.py",
                                                      submodule_search_locations=[str(ROOT / "buildtools")])
        package = importlib.util.module_from_spec(spec)
        sys.modules[_PACKAGE] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"{_PACKAGE}.{name}")
