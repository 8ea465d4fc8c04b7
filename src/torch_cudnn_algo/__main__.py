"""``python -m torch_cudnn_algo``: the ``torch-cudnn-algo`` command."""

import sys

from .cli import main

sys.exit(main())
