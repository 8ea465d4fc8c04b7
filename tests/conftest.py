"""Shared pytest setup: the ``gpu`` marker skips cleanly where CUDA/cuDNN is absent,
every test starts and ends with every flag back at its default, and each test
has an empty compiled plan cache of its own (csrc/store/execution_plan_cache.h), so
that no test loads what an earlier one compiled."""

from __future__ import annotations

import pytest
import torch

import torch_cudnn_algo
from torch_cudnn_algo import _flags

HAS_GPU = torch.cuda.is_available() and torch.backends.cudnn.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU with cuDNN")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _default_flags(request: pytest.FixtureRequest):
    """Flags at their defaults, no plan in use and caches empty around every test."""
    if "gpu" in request.keywords:
        # Without the extension the flags are inert and GPU tests would test stock.
        assert torch_cudnn_algo.is_available(), torch_cudnn_algo.load_error()

    def reset() -> None:
        for name, flag in _flags.FLAGS.items():
            _flags.set_flag(name, flag.default)
        if torch_cudnn_algo.is_available():
            torch_cudnn_algo.use_plan(None)
            torch_cudnn_algo.clear_cache()

    reset()
    yield
    reset()


@pytest.fixture(autouse=True)
def _own_compiled_plan_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    monkeypatch.setenv("TORCH_CUDNN_ALGO_COMPILE_CACHE", str(tmp_path_factory.mktemp("compiled-plans")))
