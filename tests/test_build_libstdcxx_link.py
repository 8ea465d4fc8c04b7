"""The extension shares the process's libstdc++ (issue 12's SIGSEGV).

On the GPU machine's image, ``CXX=/opt/gcc/bin/g++`` is a wrapper whose ``-B``
directory holds ``libstdc++.a`` and a dangling ``libstdc++.so`` symlink: its implicit
``-lstdc++`` linked the static archive, the extension carried a second libstdc++,
and the demo died in ``std::ostream``. These tests rebuild that compiler from the
local one and check the link recipe setup.py uses, and that the installed extension
links ``libstdc++.so.6``. CPU only (a compiler, no GPU)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from build_helpers import buildtools
from torch_cudnn_algo import _version_gate

elf = buildtools("elf")

SOURCE = '#include <sstream>\n#include <string>\nstd::string f(int x) { std::ostringstream o; o << x; return o.str(); }\n'


def test_elf_needed_reads_the_linked_libraries():
    libc10 = Path(torch.__file__).parent / "lib" / "libc10.so"
    needed = elf.elf_needed(libc10)
    assert "libstdc++.so.6" in needed and "libc.so.6" in needed, needed


def test_elf_needed_refuses_what_is_not_elf(tmp_path):
    text = tmp_path / "not_elf.so"
    text.write_text("hello")
    with pytest.raises(ValueError, match="not a 64-bit little-endian ELF"):
        elf.elf_needed(text)


@pytest.fixture
def compiler_with_dangling_libstdcxx(tmp_path) -> str:
    """A g++ wrapper like the GPU image's /opt/gcc/bin/g++: its -B directory has
    libstdc++.a and a libstdc++.so pointing nowhere."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++")
    archive = subprocess.run([gxx, "-print-file-name=libstdc++.a"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(archive):
        pytest.skip("this g++ has no libstdc++.a")
    libdir = tmp_path / "gcc-lib"
    libdir.mkdir()
    os.symlink(archive, libdir / "libstdc++.a")
    os.symlink("../../missing/libstdc++.so.6", libdir / "libstdc++.so")
    wrapper = tmp_path / "g++"
    wrapper.write_text(f'#!/bin/sh\nexec {gxx} -B{libdir}/ "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return str(wrapper)


def link(compiler: str, directory: Path, extra: list[str]) -> list[str]:
    source = directory / "t.cpp"
    source.write_text(SOURCE)
    output = directory / f"t{len(extra)}.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", str(source), "-o", str(output), *extra], check=True)
    return elf.elf_needed(output)


def test_such_a_compiler_links_a_static_libstdcxx(compiler_with_dangling_libstdcxx, tmp_path):
    """The hazard itself: nothing says so, the library just lacks libstdc++.so.6."""
    assert "libstdc++.so.6" not in link(compiler_with_dangling_libstdcxx, tmp_path, [])


def test_setup_link_recipe_links_the_loaded_libstdcxx(compiler_with_dangling_libstdcxx, tmp_path):
    """buildtools/toolchain.py's libstdcxx_link_args (setup.py links with it): -L<dir of the loaded libstdc++> -l:libstdc++.so.6."""
    loaded = _version_gate.loaded_libstdcxx()
    assert loaded is not None, "this process maps no libstdc++"
    extra = [f"-L{os.path.dirname(loaded)}", "-l:libstdc++.so.6"]
    assert "libstdc++.so.6" in link(compiler_with_dangling_libstdcxx, tmp_path, extra)


def test_installed_extension_links_the_shared_libstdcxx():
    import torch_cudnn_algo

    found = sorted(Path(torch_cudnn_algo.__file__).parent.glob("_C*.so"))
    if not found:
        pytest.skip("the extension is not built")
    assert "libstdc++.so.6" in elf.elf_needed(found[0]), elf.elf_needed(found[0])
