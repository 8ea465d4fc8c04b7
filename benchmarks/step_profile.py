"""Where a zoo network's training step spends its GPU time, by kernel and by convolution, under
stock ``benchmark=True`` and under the tuned plan.

    python benchmarks/step_profile.py --help

The code is ``benchmarks/harness/step_profile.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.step_profile import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
