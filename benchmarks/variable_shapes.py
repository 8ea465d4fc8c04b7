"""Workloads whose shapes change from step to step (detection, audio): stock heuristics, stock
benchmark=True, "fastest" with an empty tuning database and again with the database filled.

    python benchmarks/variable_shapes.py --help

The code is ``benchmarks/harness/variable_shapes.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.variable_shapes import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
