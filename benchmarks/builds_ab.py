"""Builds of the package against each other through PyTorch's calls, alternated per round.

    python benchmarks/builds_ab.py --help

The code is ``benchmarks/harness/builds_ab.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.builds_ab import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
