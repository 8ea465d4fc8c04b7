"""A fused 1x1 backward pass (input and filter gradient from one read of dy, on tensor cores)
against cuDNN's best, on the 1x1 convolutions of MobileNetV3 and EfficientNet-B0.

    python benchmarks/pointwise_backward.py --help

The code is ``benchmarks/harness/pointwise_backward.py``; the kernel ``benchmarks/harness/pointwise_kernels.cu``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.pointwise_backward import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
