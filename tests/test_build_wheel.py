"""CPU: the installed build is lean (issue 12): the extension is stripped, nothing of
libtorch, CUDA or cuDNN is bundled, and it is built for CPython's stable ABI."""

from __future__ import annotations

import json
import os
import zlib
from importlib import metadata
from pathlib import Path

import pytest

import torch_cudnn_algo
from torch_cudnn_algo import _build


def installed_extension() -> Path:
    found = sorted(Path(torch_cudnn_algo.__file__).parent.glob("_C*.so"))
    if not found:
        pytest.skip("the extension is not built")
    return found[0]


@pytest.mark.skipif(os.environ.get("TORCH_CUDNN_ALGO_DEBUG_BUILD", "") not in ("", "0"),
                    reason="a debug build keeps its symbols")
def test_extension_is_stripped_and_abi3():
    path = installed_extension()
    sections = _build.ElfFile(path).section_names()
    assert ".text" in sections and ".dynsym" in sections
    assert not [s for s in sections if s.startswith(".debug") or s == ".symtab"], sections
    assert path.name == "_C.abi3.so"
    assert path.stat().st_size < 8 * 2**20, path.stat().st_size


def test_nothing_but_the_package_is_installed():
    try:
        distribution = metadata.distribution("torch-cudnn-algo")
    except metadata.PackageNotFoundError:
        pytest.skip("torch-cudnn-algo is not installed (running from the source tree)")
    if json.loads(distribution.read_text("direct_url.json") or "{}").get("dir_info", {}).get("editable"):
        pytest.skip("an editable install (pip install -e) lists no package files; the README's pip install . does")
    files = distribution.files or []
    libraries = [str(f) for f in files if ".so" in f.name]
    assert libraries == ["torch_cudnn_algo/_C.abi3.so"], libraries
    tops = {f.parts[0] for f in files if not f.parts[0].endswith((".dist-info", ".data")) and f.parts[0] != ".."}
    assert tops <= {"torch_cudnn_algo", "_torch_cudnn_algo_autoload.py", "__pycache__"}, tops


@pytest.mark.skipif(os.environ.get("TORCH_CUDNN_ALGO_DEBUG_BUILD", "") not in ("", "0"),
                    reason="a debug build keeps its symbols")
def test_wheel_stays_under_1_2_mb():
    # docs/wheels.md: the wheel is about 1 MB, under 1.2 MB (the stripped extension deflates to
    # about 0.9 MB). A wheel is a zip, deflated: its size is about the deflated extension plus the
    # deflated Python files and the README (its METADATA). Estimated the same way here,
    # from what is installed, without building one.
    package = Path(torch_cudnn_algo.__file__).parent
    files = [installed_extension(), *package.rglob("*.py")]
    readme = package.parent.parent / "README.md"  # beside src/ in an editable install; else an allowance
    estimate = sum(len(zlib.compress(f.read_bytes(), 6)) for f in files)
    estimate += len(zlib.compress(readme.read_bytes(), 6)) if readme.exists() else 40_000
    assert estimate < 1_200_000, f"the wheel would be about {estimate:,} bytes: update docs/wheels.md's 'under 1.2 MB'"


def test_the_built_extension_loads_into_this_torch():
    # Without this, an extension that no longer links against a new torch (a changed
    # signature, a symbol gone) would only make the tests that need it skip.
    installed_extension()
    assert torch_cudnn_algo.is_available(), torch_cudnn_algo.load_error()
