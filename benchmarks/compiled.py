"""torch.compile (default and max-autotune) against eager, each with stock's choices and with a
tuned plan: GPU time per training step, its convolutions' time against their roofline bound, wall
time per step and compile time on the zoo's networks.

    python benchmarks/compiled.py --help

The code is ``benchmarks/harness/compiled.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.compiled import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
