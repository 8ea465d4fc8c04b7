"""Worker processes that compile cuDNN's runtime-compiled engines while tune() runs.

NVRTC compiles one kernel at a time per process, so a network whose tuning
builds dozens of runtime-compiled execution plans (depthwise convolutions) waits
on that chain; workers compile beside this process and send the execution plans
back serialized (``csrc/run/compile_workers.h``). A worker loads torch's libraries
and the extension without importing torch, nor ``site`` (its ``.pth`` files
would add to every worker's start), and starts only when the first
runtime-compiled build asks for one.

``TORCH_CUDNN_ALGO_COMPILE_WORKERS`` sets how many (0: none); by default
:data:`DEFAULT_WORKERS`, at most one fewer than the host's cores.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from . import _ops

__all__ = ["DEFAULT_WORKERS", "ENV_VAR", "running", "worker_command", "worker_count"]

ENV_VAR = "TORCH_CUDNN_ALGO_COMPILE_WORKERS"
DEFAULT_WORKERS = 3

# argv: torch's library folder, the extension's library, the device index.
# torch's libraries go first, globally, since the extension's library names
# them without a path to find them by.
_LAUNCHER = """\
import ctypes, os, sys
for name in ("libc10.so", "libtorch_cpu.so", "libc10_cuda.so", "libtorch_cuda.so", "libtorch.so"):
    ctypes.CDLL(os.path.join(sys.argv[1], name), mode=ctypes.RTLD_GLOBAL)
library = ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_GLOBAL)
sys.exit(library.torch_cudnn_algo_compile_worker(3, 4, int(sys.argv[3])))
"""


def worker_count(environ: dict[str, str] | None = None) -> int:
    """Workers tune() may start: ``TORCH_CUDNN_ALGO_COMPILE_WORKERS``, else the default."""
    environ = os.environ if environ is None else environ
    text = environ.get(ENV_VAR, "").strip()
    if not text:
        return max(0, min(DEFAULT_WORKERS, (os.cpu_count() or 1) - 1))
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise ValueError(f"{ENV_VAR} must be a whole number of worker processes, 0 or more (0: none), "
                         f"got {text!r}")
    return count


def worker_command() -> list[str]:
    """The command a worker runs, less the device index the extension appends."""
    import torch

    torch_lib = Path(torch.__file__).resolve().parent / "lib"
    library = importlib.import_module("torch_cudnn_algo._C").__file__
    return [sys.executable, "-S", "-c", _LAUNCHER, str(torch_lib), str(library)]


@contextlib.contextmanager
def running(enabled: bool = True) -> Iterator[None]:
    """Compile workers allowed inside the block (none when ``enabled`` is false or the count is
    0); on exit, builds in flight finish and every worker started is stopped."""
    count = worker_count() if enabled else 0
    if count == 0 or not sys.executable:
        yield
        return
    _ops.enable_compile_workers(worker_command(), count)
    try:
        yield
    finally:
        _ops.disable_compile_workers()
