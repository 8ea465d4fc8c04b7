"""A fused depthwise backward pass (input and filter gradient in one kernel) against cuDNN's best
and our separate kernels, on every depthwise layer of MobileNetV3 and EfficientNet-B0.

    python benchmarks/fused_backward.py --help

The code is ``benchmarks/harness/fused_backward.py``; the kernel ``benchmarks/harness/depthwise_fused_backward.cu``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.fused_backward import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
