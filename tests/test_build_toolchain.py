"""The build's libstdc++ version rule (issue 12): the extension is compiled by a C++
compiler whose libstdc++ is not newer than the one the Python process loads, because
code compiled with a GCC's headers needs that GCC's libstdc++ or newer at run time.
(The GPU image's SIGSEGV itself came from a static libstdc++ linked in:
test_build_libstdcxx_link.py.)

CPU: the detection with fake libraries and fake compilers (shell scripts that answer
``-print-file-name``), setup.py's switch to a matching compiler, and the installed
build's record. GPU (test_build_toolchain_gpu.py): a fresh process runs pinned convolutions
and the C++ messages (what crashed) with the installed extension."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from build_helpers import buildtools
from torch_cudnn_algo import _extension, _version_gate

toolchain = buildtools("toolchain")

ROOT = Path(__file__).resolve().parents[1]


def fake_libstdcxx(directory: Path, highest: str) -> Path:
    """A file with libstdc++'s version strings up to GLIBCXX_<highest> (and the usual noise)."""
    directory.mkdir(parents=True, exist_ok=True)
    major, minor, patch = _version_gate.parse_version(highest)
    names = [b"GLIBCXX_3.4"] + [f"GLIBCXX_3.4.{n}".encode() for n in range(1, patch + 1)]
    noise = [b"GLIBCXX_TUNABLES", b"_GLIBCXX_DEBUG_MESSAGE_LENGTH", b"CXXABI_1.3.15", b"GLIBC_2.34"]
    path = directory / "libstdc++.so.6"
    path.write_bytes(b"\x7fELF\x00" + b"\x00".join(noise[:2] + names[::-1] + noise[2:]) + b"\x00")
    return path


def fake_compiler(directory: Path, name: str, prints: str | Path, exit_code: int = 0) -> Path:
    """A compiler driver that answers -print-file-name=libstdc++.so.6 with ``prints``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$*" in
          *-print-file-name=libstdc++.so.6*) echo "{prints}"; exit {exit_code} ;;
        esac
        exit 1
    """))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# --- reading versions -----------------------------------------------------------------------


def test_glibcxx_version_is_the_highest_symbol_version(tmp_path):
    assert _version_gate.glibcxx_version(fake_libstdcxx(tmp_path, "3.4.32")) == (3, 4, 32)
    assert _version_gate.glibcxx_version(fake_libstdcxx(tmp_path / "b", "3.4.9")) == (3, 4, 9)  # numeric, not text, order
    assert _version_gate.glibcxx_version(tmp_path / "missing.so") is None
    (tmp_path / "empty.so").write_bytes(b"no versions here")
    assert _version_gate.glibcxx_version(tmp_path / "empty.so") is None
    assert _version_gate.glibcxx_version(None) is None


def test_format_names_the_gcc_release():
    assert _version_gate.format_glibcxx((3, 4, 32)) == "GLIBCXX_3.4.32 (GCC 13.2)"
    assert _version_gate.format_glibcxx((3, 4, 99)) == "GLIBCXX_3.4.99"
    assert _version_gate.format_glibcxx(None) == "GLIBCXX unknown"


def test_loaded_libstdcxx_reads_the_process_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
        "7f02-7f03 r-xp 00000000 08:01 2 /opt/my lib/libstdc++.so.6.0.32\n"  # a path with a space
        "7f04-7f05 rw-p 00000000 00:00 0 [heap]\n"
    )
    assert _version_gate.loaded_libstdcxx(str(maps)) == "/opt/my lib/libstdc++.so.6.0.32"
    maps.write_text("7f00-7f01 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert _version_gate.loaded_libstdcxx(str(maps)) is None
    assert _version_gate.loaded_libstdcxx(str(tmp_path / "no-maps")) is None


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_this_process_loads_a_libstdcxx_with_a_version():
    # torch is imported (conftest): its libstdc++ is mapped.
    library = _version_gate.loaded_libstdcxx()
    assert library is not None and _version_gate.glibcxx_version(library) >= (3, 4, 21)


def test_compiler_libstdcxx_asks_the_driver(tmp_path):
    library = fake_libstdcxx(tmp_path / "gcc15" / "lib64", "3.4.34")
    good = fake_compiler(tmp_path / "bin", "g++", library)
    assert toolchain.compiler_libstdcxx(str(good)) == str(library)
    # With a launcher or flags in CXX (split like a shell would).
    assert toolchain.compiler_libstdcxx(f"env LC_ALL=C {good} -O2") == str(library)
    # A driver that does not know the file echoes the bare name: unknown.
    assert toolchain.compiler_libstdcxx(str(fake_compiler(tmp_path / "bin", "clang++", "libstdc++.so.6"))) is None
    assert toolchain.compiler_libstdcxx(str(fake_compiler(tmp_path / "bin", "bad++", library, exit_code=1))) is None
    assert toolchain.compiler_libstdcxx(str(tmp_path / "no-such-compiler")) is None
    assert toolchain.inspect_compiler(str(good)).glibcxx == (3, 4, 34)


def test_c_compiler_for_finds_the_sibling_driver(tmp_path):
    for name in ("g++-13", "gcc-13", "c++", "cc", "clang++", "clang", "x86_64-linux-gnu-g++"):
        fake_compiler(tmp_path, name, "x")
    assert toolchain.c_compiler_for(str(tmp_path / "g++-13")) == str(tmp_path / "gcc-13")
    assert toolchain.c_compiler_for(str(tmp_path / "c++")) == str(tmp_path / "cc")
    assert toolchain.c_compiler_for(str(tmp_path / "clang++")) == str(tmp_path / "clang")
    assert toolchain.c_compiler_for(str(tmp_path / "x86_64-linux-gnu-g++")) is None  # no x86_64-linux-gnu-gcc here


# --- choosing the compiler ------------------------------------------------------------------


@pytest.fixture
def toolchains(tmp_path):
    """A runtime libstdc++ of GCC 13 and compilers of GCC 12, 13 and 15."""
    runtime = fake_libstdcxx(tmp_path / "usr" / "lib", "3.4.32")
    return {
        "runtime": str(runtime),
        "gcc15": str(fake_compiler(tmp_path / "opt" / "gcc" / "bin", "g++",
                                   fake_libstdcxx(tmp_path / "opt" / "gcc" / "lib64", "3.4.34"))),
        "gcc13": str(fake_compiler(tmp_path / "usr" / "bin", "g++", runtime)),
        "gcc12": str(fake_compiler(tmp_path / "usr" / "bin", "g++-12",
                                   fake_libstdcxx(tmp_path / "usr" / "lib" / "gcc12", "3.4.30"))),
        "unknown": str(fake_compiler(tmp_path / "usr" / "bin", "clang++", "libstdc++.so.6")),
    }


def test_a_compiler_not_newer_than_the_runtime_is_kept(toolchains):
    for name in ("gcc13", "gcc12", "unknown"):
        choice = toolchain.choose_compiler(toolchains[name], toolchains["runtime"], candidates=[toolchains["gcc15"]])
        assert not choice.switched and choice.compiler.command == toolchains[name]
    # Nothing to compare with: keep what was asked for.
    assert not toolchain.choose_compiler(toolchains["gcc15"], None, candidates=[]).switched


def test_a_newer_compiler_is_replaced_by_the_closest_matching_one(toolchains):
    # The GPU machine's case: CXX=/opt/gcc/bin/g++ (GCC 15), Python loads GCC 13's libstdc++.
    choice = toolchain.choose_compiler(
        toolchains["gcc15"], toolchains["runtime"],
        candidates=[toolchains["unknown"], toolchains["gcc12"], toolchains["gcc15"], toolchains["gcc13"]],
    )
    assert choice.switched
    assert choice.compiler.command == toolchains["gcc13"] and choice.compiler.glibcxx == (3, 4, 32)
    assert choice.requested.glibcxx == (3, 4, 34) and choice.runtime_glibcxx == (3, 4, 32)
    assert "GLIBCXX_3.4.32" in choice.describe()
    # Only an older one: take it.
    choice = toolchain.choose_compiler(toolchains["gcc15"], toolchains["runtime"], candidates=[toolchains["gcc12"]])
    assert choice.compiler.command == toolchains["gcc12"]


def test_no_matching_compiler_is_a_clear_error(toolchains):
    with pytest.raises(toolchain.ToolchainError) as error:
        toolchain.choose_compiler(toolchains["gcc15"], toolchains["runtime"],
                               candidates=[toolchains["gcc15"], toolchains["unknown"], "no-such-g++"])
    message = str(error.value)
    assert toolchains["gcc15"] in message and toolchains["runtime"] in message
    assert "GLIBCXX_3.4.34" in message and "GLIBCXX_3.4.32" in message
    assert "GCC 13.2 or older" in message and "/usr/bin/g++" in message
    assert "LD_LIBRARY_PATH=" in message and toolchain.SKIP_LIBSTDCXX_CHECK in message


# --- setup.py uses it ---------------------------------------------------------------------------


@pytest.mark.skipif(not (ROOT / "setup.py").is_file(), reason="needs the source tree")
def test_setup_builds_with_a_matching_compiler_when_cxx_is_newer(tmp_path):
    """`CXX=<newer g++> pip install --no-build-isolation .` builds with a matching g++ instead."""
    runtime = subprocess.run(
        [sys.executable, "-c", "import torch; from torch_cudnn_algo import _version_gate; print(_version_gate.loaded_libstdcxx())"],
        capture_output=True, text=True, env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, check=True,
    ).stdout.strip()
    newer = fake_compiler(tmp_path / "opt" / "gcc" / "bin", "g++", fake_libstdcxx(tmp_path / "opt" / "lib64", "3.4.99"))
    matching = fake_compiler(tmp_path / "bin", "g++", runtime)
    env = {**os.environ, "CXX": str(newer), "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop(toolchain.SKIP_LIBSTDCXX_CHECK, None)
    result = subprocess.run([sys.executable, "setup.py", "--version"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"CXX={newer} comes with libstdc++ GLIBCXX_3.4.99" in result.stdout
    assert f"Building with {matching} (" in result.stdout
    assert f"C++ compiler   {matching} (" in result.stdout
    # With no matching compiler at all, setup.py stops with the message instead of building.
    env["PATH"] = str(tmp_path / "opt" / "gcc" / "bin")  # only the newer one (and python by absolute path)
    result = subprocess.run([sys.executable, "setup.py", "--version"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    if result.returncode == 0:  # the system's compiler, as a fallback
        assert "Building with /usr/bin/" in result.stdout, result.stdout
    else:
        assert "No compiler with a libstdc++" in result.stderr and "GLIBCXX_3.4.99" in result.stderr, result.stderr


# --- the installed build ------------------------------------------------------------------------


def _installed_build_info() -> dict:
    info = _extension.build_info()
    if info is None:
        pytest.skip("the installed torch_cudnn_algo has no _build_info (not built by this setup.py)")
    return info


def test_installed_extension_was_compiled_for_this_libstdcxx():
    info = _installed_build_info()
    if info["GLIBCXX"] is None:
        pytest.skip(f"the build could not read the libstdc++ of its compiler {info['CXX']}")
    runtime = _version_gate.glibcxx_version(_version_gate.loaded_libstdcxx())
    assert runtime is not None and _version_gate.parse_version(info["GLIBCXX"]) <= runtime, (info, runtime)
