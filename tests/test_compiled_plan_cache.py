"""CPU: where the compiled plan cache lives (csrc/store/execution_plan_cache.h) and
how it is turned off. Plans saved and loaded on the GPU:
tests/test_fastest_tuner_gpu.py."""

from __future__ import annotations

import pytest

import torch_cudnn_algo

pytestmark = pytest.mark.skipif(not torch_cudnn_algo.is_available(), reason="needs the C++ extension")
VAR = "TORCH_CUDNN_ALGO_COMPILE_CACHE"


def cache_dir() -> str:
    return torch_cudnn_algo._ops.execution_plan_cache_dir()


def test_the_variable_names_the_directory(monkeypatch, tmp_path):
    monkeypatch.setenv(VAR, str(tmp_path / "plans"))
    assert cache_dir() == str(tmp_path / "plans")


@pytest.mark.parametrize("off", ["0", ""])
def test_zero_or_empty_turns_it_off(monkeypatch, off):
    monkeypatch.setenv(VAR, off)
    assert cache_dir() == ""


def test_by_default_it_is_under_the_users_cache_directory(monkeypatch, tmp_path):
    monkeypatch.delenv(VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == str(tmp_path / "xdg" / "torch_cudnn_algo" / "compiled-plans")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == str(tmp_path / "home" / ".cache" / "torch_cudnn_algo" / "compiled-plans")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # not a path the XDG spec allows: ignored
    assert cache_dir() == str(tmp_path / "home" / ".cache" / "torch_cudnn_algo" / "compiled-plans")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "")
    assert cache_dir() == ""  # nowhere to keep it: off


def test_counts_are_there_without_a_gpu():
    counts = torch_cudnn_algo._ops.execution_plan_cache_counts()
    assert set(counts) == {"loaded", "saved", "rejected", "save_failed"}
    assert all(isinstance(v, int) and v >= 0 for v in counts.values())
