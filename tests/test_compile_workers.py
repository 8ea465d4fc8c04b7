"""CPU: tune()'s compile workers (csrc/run/compile_workers.h) — how many, the
command a worker runs, that one loads the extension without importing torch and
speaks first or fails with a message (never hangs), and the pool's error paths.
Workers building real plans: tests/test_fastest_tuner_gpu.py."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys

import pytest
import torch

import torch_cudnn_algo
from torch_cudnn_algo import _compile_workers

needs_extension = pytest.mark.skipif(not torch_cudnn_algo.is_available(), reason="needs the C++ extension")
READY = 0x52414354  # what a worker writes once its CUDA context and cuDNN are up


@pytest.mark.parametrize(("text", "expected"), [("0", 0), ("2", 2), (" 5 ", 5)])
def test_worker_count_from_the_environment(text, expected):
    assert _compile_workers.worker_count({_compile_workers.ENV_VAR: text}) == expected


def test_default_worker_count_leaves_a_core_to_this_process(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert _compile_workers.worker_count({}) == 1
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert _compile_workers.worker_count({}) == _compile_workers.DEFAULT_WORKERS
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert _compile_workers.worker_count({}) == 0


@pytest.mark.parametrize("text", ["-1", "three", "1.5"])
def test_a_bad_worker_count_names_the_variable_and_what_is_valid(text):
    with pytest.raises(ValueError, match=r"TORCH_CUDNN_ALGO_COMPILE_WORKERS must be a whole number.*0 or more"):
        _compile_workers.worker_count({_compile_workers.ENV_VAR: text})


@needs_extension
def test_worker_command_is_this_python_with_torchs_libraries_and_the_extension():
    command = _compile_workers.worker_command()
    assert command[0] == sys.executable and command[1:3] == ["-S", "-c"]  # no site: its .pth files cost ~0.2 s
    assert os.path.isfile(os.path.join(command[4], "libtorch_cuda.so"))
    assert os.path.samefile(command[5], sys.modules["torch_cudnn_algo._C"].__file__)


@needs_extension
def test_a_worker_says_ready_and_exits_at_end_of_input_or_fails_with_a_message():
    requests_read, requests_write = os.pipe()
    answers_read, answers_write = os.pipe()

    def wire_fds() -> None:  # the worker's protocol runs on fds 3 and 4, as the extension spawns it
        requests, answers = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (requests_read, answers_write))
        os.dup2(requests, 3)
        os.dup2(answers, 4)

    worker = subprocess.Popen([*_compile_workers.worker_command(), "0"], preexec_fn=wire_fds, close_fds=False,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(requests_read)
    os.close(answers_write)
    hello = os.read(answers_read, 4)
    os.close(requests_write)  # end of input
    out, err = worker.communicate(timeout=120)
    os.close(answers_read)
    assert out == b""  # nothing of a worker's may land in its parent's stdout
    if torch.cuda.is_available():
        assert struct.unpack("=I", hello) == (READY,)
        assert worker.returncode == 0, err
    else:
        assert hello == b""
        assert worker.returncode == 1
        assert b"torch_cudnn_algo compile worker: " in err and b"CUDA" in err, err


@needs_extension
def test_enables_nest_and_bad_arguments_are_refused():
    ops = torch_cudnn_algo._ops
    with pytest.raises(ValueError, match="compile workers must be 0 or more, got -1"):
        ops.enable_compile_workers(["python"], -1)
    with pytest.raises(ValueError, match="a compile worker needs a command"):
        ops.enable_compile_workers([], 1)
    ops.enable_compile_workers(["/nonexistent/python"], 1)
    ops.enable_compile_workers(["/nonexistent/python"], 1)  # tune() in a second thread
    ops.disable_compile_workers()
    ops.disable_compile_workers()
    ops.disable_compile_workers()  # one stop too many is harmless
    assert set(ops.compile_worker_counts()) == {"started", "ready", "builds", "failed_builds"}


@needs_extension
def test_running_starts_nothing_when_disabled_or_set_to_none(monkeypatch):
    calls = []
    monkeypatch.setattr(torch_cudnn_algo._ops, "enable_compile_workers", lambda *args: calls.append(args))
    with _compile_workers.running(enabled=False):
        pass
    monkeypatch.setenv(_compile_workers.ENV_VAR, "0")
    with _compile_workers.running():
        pass
    assert calls == []
