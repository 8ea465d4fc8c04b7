"""Tuning through torch.distributed on several GPUs of one host: tune() on N ranks against one
rank alone, "fastest" on the fly in a DDP loop, a second job on the same databases, a rank killed
while tuning.

    python benchmarks/distributed.py --help

The code is ``benchmarks/harness/distributed.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.distributed import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
