"""CPU: csrc/base/work_queue.h, the background job queue behind tune()'s prepare-ahead and a plan's
execution plans loaded ahead, compiled on its own (it needs neither torch nor CUDA) with the
checks of tests/cpp/work_queue_test.cpp: results handed out once, the thread limit, taking a
queued job back, waiting for a running one, failures, cancel waking waiters, stop, and stop in a
forked child returning at once."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMPILER = shutil.which("g++") or shutil.which("c++")


@pytest.mark.skipif(COMPILER is None, reason="needs a C++17 compiler (g++)")
def test_work_queue(tmp_path: Path) -> None:
    binary = tmp_path / "work_queue_test"
    build = subprocess.run([COMPILER, "-std=c++17", "-O1", "-pthread", "-Wall", "-Wextra", "-Werror",
                            f"-I{ROOT / 'csrc'}", str(ROOT / "tests" / "cpp" / "work_queue_test.cpp"),
                            "-o", str(binary)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    result = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.endswith("ALL PASSED\n"), result.stdout + result.stderr
