"""What each convolution's backward pass costs beyond one kernel launch, on MobileNetV3 and
EfficientNet-B0: stock's call in a CUDA graph, its kernels, and a one-launch floor.

    python benchmarks/backward_floor.py --help

The code is ``benchmarks/harness/backward_floor.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.backward_floor import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
