"""Where the "fastest" tuner's time goes, per zoo network, from ``tuning_log()``.

    python benchmarks/tuner_breakdown.py --help

The code is ``benchmarks/harness/tuner.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.tuner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
