"""Both gradients of a small convolution at once on two streams (``conv_backward_overlap``)
against one after the other, on the zoo's networks with their tuned plans.

    python benchmarks/backward_overlap.py --help

The code is ``benchmarks/harness/backward_overlap.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.backward_overlap import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
