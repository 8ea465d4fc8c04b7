"""The runtime's version gate (src/torch_cudnn_algo/_version_gate.py) for the build, loaded by
path: importing the package would run its import-time initialization (and an installed copy's)
during the build that replaces it. The supported torch releases and the version rules the
build shares with the gate have their one home there.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parent.parent / "src" / "torch_cudnn_algo" / "_version_gate.py"
_spec = importlib.util.spec_from_file_location("_torch_cudnn_algo_version_gate", _PATH)
gate = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gate  # dataclasses look their module up
_spec.loader.exec_module(gate)
