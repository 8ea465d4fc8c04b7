"""Our own kernels against cuDNN's best candidate, layer by layer, on the zoo's convolutions
furthest from their roofline bound.

    python benchmarks/kernels.py --help

The code is ``benchmarks/harness/kernels.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.kernels import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
