"""CPU: the extension's C++ parts that need neither torch nor CUDA, each compiled on its own with
the checks of a program in tests/cpp/ and run.

- csrc/base/work_queue.h (work_queue_test.cpp), the background job queue behind tune()'s
  prepare-ahead and a plan's execution plans loaded ahead: results handed out once, the thread
  limit, taking a queued job back, waiting for a running one, failures, cancel waking waiters,
  stop, and stop in a forked child returning at once.
- csrc/decide/tuner/interleaved_timing.h (interleaved_timing_test.cpp), the tuner's timed rounds apart
  from CUDA, on a simulated GPU timeline: a host that keeps up times once and exactly; a call
  whose enqueue outlasts the spin is timed again alone, behind 1.5x its host time; a host held up
  by builds is waited for before a last attempt with twice the spin; empty batches queue nothing;
  the probe rule."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMPILER = shutil.which("g++") or shutil.which("c++")


@pytest.mark.skipif(COMPILER is None, reason="needs a C++17 compiler (g++)")
@pytest.mark.parametrize("program", ["work_queue_test", "interleaved_timing_test"])
def test_cpp_checks(tmp_path: Path, program: str) -> None:
    binary = tmp_path / program
    build = subprocess.run([COMPILER, "-std=c++17", "-O1", "-pthread", "-Wall", "-Wextra", "-Werror",
                            f"-I{ROOT / 'csrc'}", str(ROOT / "tests" / "cpp" / f"{program}.cpp"),
                            "-o", str(binary)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    result = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.endswith("ALL PASSED\n"), result.stdout + result.stderr
