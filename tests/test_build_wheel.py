"""CPU: the installed build is lean (issue 12): the extension is stripped, nothing of
libtorch, CUDA or cuDNN is bundled, and it is built for CPython's stable ABI."""

from __future__ import annotations

import os
import struct
from importlib import metadata
from pathlib import Path

import pytest

import torch_cudnn_algo


def elf_sections(path: Path) -> list[str]:
    """Section names of a 64-bit little-endian ELF file."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "not a 64-bit little-endian ELF file"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    offsets = [struct.unpack_from("<Q", data, shoff + i * shentsize + 0x18)[0] for i in range(shnum)]
    names_at = offsets[shstrndx]
    names = []
    for i in range(shnum):
        start = names_at + struct.unpack_from("<I", data, shoff + i * shentsize)[0]
        names.append(data[start:data.index(b"\0", start)].decode())
    return names


def installed_extension() -> Path:
    found = sorted(Path(torch_cudnn_algo.__file__).parent.glob("_C*.so"))
    if not found:
        pytest.skip("the extension is not built")
    return found[0]


@pytest.mark.skipif(os.environ.get("TORCH_CUDNN_ALGO_DEBUG_BUILD", "") not in ("", "0"),
                    reason="a debug build keeps its symbols")
def test_extension_is_stripped_and_abi3():
    path = installed_extension()
    sections = elf_sections(path)
    assert ".text" in sections and ".dynsym" in sections
    assert not [s for s in sections if s.startswith(".debug") or s == ".symtab"], sections
    assert path.name == "_C.abi3.so"
    assert path.stat().st_size < 8 * 2**20, path.stat().st_size


def test_nothing_but_the_package_is_installed():
    try:
        files = metadata.files("torch-cudnn-algo") or []
    except metadata.PackageNotFoundError:
        pytest.skip("torch-cudnn-algo is not installed (running from the source tree)")
    libraries = [str(f) for f in files if ".so" in f.name]
    assert libraries == ["torch_cudnn_algo/_C.abi3.so"], libraries
    tops = {f.parts[0] for f in files if not f.parts[0].endswith((".dist-info", ".data")) and f.parts[0] != ".."}
    assert tops <= {"torch_cudnn_algo", "_torch_cudnn_algo_autoload.py", "__pycache__"}, tops
