"""The pytest processes of a job: started, watched for hangs, and killed.

Each child runs in its own session, so that a kill reaches the processes it
started too, and so that Ctrl-C in the terminal reaches only the runner, which
kills them first (worker threads, and the pool's exit, would wait for them).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path


class ChildProcesses:
    def __init__(self, timeout: float | None, test_timeout: float | None) -> None:
        self.timeout = timeout
        self.test_timeout = test_timeout
        self.stopping = False  # set by kill_all: no new process is to start
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen] = set()

    def run(self, cmd: list[str], cwd: Path, env: Mapping[str, str], log: Path) -> tuple[int, str | None, float]:
        """Runs one process, its output into ``log`` after the command line; returns
        its exit status, why it was killed (``timeout``, or no new output in ``log`` for
        ``test_timeout``: the test it was running hangs), and its duration."""
        start = time.monotonic()
        with open(log, "wb") as fh:
            fh.write(("$ " + shlex.join(cmd) + "\n").encode())
            fh.flush()
            proc = subprocess.Popen(
                cmd, cwd=cwd, env=dict(env), stdout=fh, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
            with self._lock:
                self._live.add(proc)
            killed: str | None = None
            last_size, last_change = -1, start
            try:
                while True:
                    try:
                        rc = proc.wait(timeout=1.0)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    now = time.monotonic()
                    size = log.stat().st_size
                    if size != last_size:
                        last_size, last_change = size, now
                    if self.timeout and now - start > self.timeout:
                        killed = f"the run passed --timeout {self.timeout:g} s"
                    elif self.test_timeout and now - last_change > self.test_timeout:
                        killed = f"no progress for {self.test_timeout:g} s (--test-timeout)"
                    if killed:
                        _kill(proc)
                        rc = proc.wait()
                        break
            finally:
                with self._lock:
                    self._live.discard(proc)
        return rc, killed, time.monotonic() - start

    def kill_all(self) -> None:
        """Kills every running process group; no new one starts afterwards."""
        self.stopping = True
        with self._lock:
            live = list(self._live)
        for proc in live:
            _kill(proc)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
