"""The backward pass of a squeeze-and-excitation layer (a 1x1 convolution on one pixel an image)
in one kernel launch, against stock's three, on MobileNetV3 and EfficientNet-B0.

    python benchmarks/single_pixel_backward.py --help

The code is ``benchmarks/harness/single_pixel_backward.py``; the kernel
``benchmarks/harness/single_pixel_backward.cu``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.single_pixel_backward import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
