"""Energy per training step on the zoo: stock heuristics, the "fastest" plan and the "lowest_energy"
plan, measured alternately in one process with an A/A control.

    python benchmarks/energy.py --help

The code is ``benchmarks/harness/energy.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.energy import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
