"""ResNet-50's convolutions one by one: GPU time per call of every layer and direction, for stock,
stock benchmark=True, stock's configuration pinned and the "fastest" picks.

    python benchmarks/layers.py --help

The code is ``benchmarks/harness/layers.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.layers import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
