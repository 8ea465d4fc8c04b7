"""Shared pytest setup.

What a test needs is said by its markers (registered in pyproject.toml) and by nothing else:

- ``gpu``: needs a CUDA GPU with cuDNN and the built extension. Skipped, with that reason,
  where CUDA or cuDNN is absent; on a GPU machine it runs, and a case the machine lacks
  (an engine, a runtime-compiled configuration, memory, an NVML counter) fails.
- ``multi_gpu`` (always together with ``gpu``): needs two CUDA GPUs of one host. Skipped,
  with that reason, on a machine with fewer.

A file is named ``*_gpu.py`` exactly when its tests are ``gpu``-marked, and no other file
holds ``gpu`` tests; collection stops with an error otherwise. Tooling and document tests live in ``tests/tooling/``.

Every test starts and ends with every flag back at its default, and has an empty
tuning database of its own (csrc/store/tuning_db.h), so that no test loads what an earlier
one tuned or compiled."""

from __future__ import annotations

import pytest
import torch

import torch_cudnn_algo
from torch_cudnn_algo import _flags

HAS_GPU = torch.cuda.is_available() and torch.backends.cudnn.is_available()
GPU_COUNT = torch.cuda.device_count() if HAS_GPU else 0


def _check_markers_and_file_names(items: list[pytest.Item]) -> None:
    problems = []
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.path.name, []).append(item)
        if item.get_closest_marker("multi_gpu") and not item.get_closest_marker("gpu"):
            problems.append(f"{item.nodeid}: marked multi_gpu but not gpu")
    for name, file_items in by_file.items():
        cpu = [item.nodeid for item in file_items if not item.get_closest_marker("gpu")]
        gpu = [item.nodeid for item in file_items if item.get_closest_marker("gpu")]
        if name.endswith("_gpu.py") and cpu:
            problems.append(f"{name} is named *_gpu.py but holds tests not marked gpu: {', '.join(cpu[:3])}")
        if not name.endswith("_gpu.py") and gpu:
            problems.append(f"{name} holds gpu tests but is not named *_gpu.py: {', '.join(gpu[:3])}")
    if problems:
        raise pytest.UsageError("tests/conftest.py: markers and file names disagree:\n  " + "\n  ".join(problems))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _check_markers_and_file_names(items)
    no_gpu = pytest.mark.skip(reason="needs a CUDA GPU with cuDNN (gpu marker)")
    one_gpu = pytest.mark.skip(reason=f"needs two CUDA GPUs of one host (multi_gpu marker); this machine has {GPU_COUNT}")
    for item in items:
        if item.get_closest_marker("gpu") and not HAS_GPU:
            item.add_marker(no_gpu)
        elif item.get_closest_marker("multi_gpu") and GPU_COUNT < 2:
            item.add_marker(one_gpu)


@pytest.fixture(autouse=True)
def _default_flags(request: pytest.FixtureRequest):
    """Flags at their defaults, no plan in use and caches empty around every test."""
    if request.node.get_closest_marker("gpu"):
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
def _own_tuning_db(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    monkeypatch.delenv("TORCH_CUDNN_ALGO_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(tmp_path_factory.mktemp("tuning-db")))
