"""The zoo benchmark: stock PyTorch vs a tuned plan vs the "fastest" policy on real networks.

    python benchmarks/zoo.py --help

The harness is in ``benchmarks/harness`` (``harness/cli.py`` describes the command line).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
