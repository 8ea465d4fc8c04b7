"""CPU: the installed build is lean (issue 12): the extension is stripped, nothing of
libtorch, CUDA or cuDNN is bundled, and it is built for CPython's stable ABI."""

from __future__ import annotations

import json
import os
import zlib
from importlib import metadata
from pathlib import Path

import pytest
import torch

import torch_cudnn_algo
from build_helpers import buildtools

elf = buildtools("elf")


def kernel_targets() -> int:
    """The architectures our kernels were built for, machine code and PTX each one (0 without them)."""
    info = torch_cudnn_algo._extension.build_info()
    if info is not None:
        return len((info["KERNEL_ARCHS"] or "").split())
    # An editable or in-place build records nothing: at most torch's architectures and PTX.
    built = torch_cudnn_algo.is_available() and torch_cudnn_algo._ops.own_kernels_built()
    return len(torch._C._cuda_getArchFlags().split()) + 1 if built and torch.version.cuda else 0


def installed_extension() -> Path:
    found = sorted(Path(torch_cudnn_algo.__file__).parent.glob("_C*.so"))
    if not found:
        pytest.skip("the extension is not built")
    return found[0]


@pytest.mark.skipif(os.environ.get("TORCH_CUDNN_ALGO_DEBUG_BUILD", "") not in ("", "0"),
                    reason="a debug build keeps its symbols")
def test_extension_is_stripped_and_abi3():
    path = installed_extension()
    sections = elf.ElfFile(path).section_names()
    assert ".text" in sections and ".dynsym" in sections
    assert not [s for s in sections if s.startswith(".debug") or s == ".symtab"], sections
    assert path.name == "_C.abi3.so"
    # docs/wheels.md: 2.6 MB of host code, and about 1.0 MB of our kernels per architecture.
    bound = 3 * 2**20 + kernel_targets() * 1.3 * 2**20
    assert path.stat().st_size < bound, (path.stat().st_size, bound)


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
def test_wheel_stays_under_its_bound():
    # docs/wheels.md: without our kernels the wheel is about 1.1 MB, under 1.2 MB (the stripped
    # extension deflates to about 0.9 MB); our kernels add about 1.1 MB per architecture or PTX
    # (8.9 MB for the six architectures and PTX of a wheel). A wheel is a zip,
    # deflated: its size is about the deflated extension plus the deflated Python files and the
    # README (its METADATA). Estimated the same way here, from what is installed, without building one.
    package = Path(torch_cudnn_algo.__file__).parent
    files = [installed_extension(), *package.rglob("*.py")]
    readme = package.parent.parent / "README.md"  # beside src/ in an editable install; else an allowance
    estimate = sum(len(zlib.compress(f.read_bytes(), 6)) for f in files)
    estimate += len(zlib.compress(readme.read_bytes(), 6)) if readme.exists() else 40_000
    bound = 1_200_000 + kernel_targets() * 1_200_000
    assert estimate < bound, f"the wheel would be about {estimate:,} bytes, over {bound:,}: update docs/wheels.md"


def test_the_built_extension_loads_into_this_torch():
    # Without this, an extension that no longer links against a new torch (a changed
    # signature, a symbol gone) would only make the tests that need it skip.
    installed_extension()
    assert torch_cudnn_algo.is_available(), torch_cudnn_algo.load_error()
