"""What a build is made for, and whether this process matches it (standard library only).

``setup.py`` loads this file by path (it must not import the package, which
imports torch's autoload of a possibly stale installed copy) to choose the C++
compiler, name the wheel's version and write ``_build_info.py``; the extension's
loader (``_extension.load``) uses it at import to refuse, with one warning, an
extension built for another torch, CUDA, cuDNN or a newer libstdc++.

Two libstdc++ hazards:

1. A second, private libstdc++. A compiler wrapper whose ``-B`` directory holds
   ``libstdc++.a`` and a *dangling* ``libstdc++.so`` symlink (some images' default
   ``CXX``) makes the driver's implicit ``-lstdc++`` silently link the static
   archive: the extension then carries its own copy of libstdc++ (no
   ``libstdc++.so.6`` among its DT_NEEDED entries) and dies with SIGSEGV in
   ``std::ostream`` at its first log line. The build therefore
   links the libstdc++ this Python loads by soname (``-l:libstdc++.so.6``, from
   its directory), and refuses a linked extension whose DT_NEEDED lacks it
   (``elf_needed``).
2. Headers newer than the runtime. Code compiled with a GCC's headers needs
   that GCC's libstdc++ or newer at run time; the Python process loads one
   libstdc++.so.6 for everyone (torch's, usually the system's). A compiler's
   libstdc++ is the one ``$CXX -print-file-name=libstdc++.so.6`` names; versions
   are compared by the highest ``GLIBCXX_x.y.z`` symbol version each library
   defines, and a newer compiler is replaced by a matching one.

Why not link libstdc++ statically on purpose (``-static-libstdc++
-Wl,--exclude-libs,ALL``, as manylinux wheels of self-contained libraries do):
this extension is not self-contained. It exchanges C++ objects with libtorch,
which uses the process's shared libstdc++: ``std::string`` and ``std::vector``
in op schemas and ``c10::IValue``, ``c10::Error`` exceptions thrown in libtorch
and caught here (and ours unwinding through the dispatcher),
``std::shared_ptr``/``std::function`` whose control blocks one copy creates and
the other destroys, ``std::ostream&`` handed to c10's ``operator<<``. A second
libstdc++ (its own locale and facet ids, ``ios_base::Init``, type_info objects)
sharing those objects is what crashed in hazard 1.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import struct
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

Version = tuple[int, int, int]

_GLIBCXX = re.compile(rb"GLIBCXX_(\d+)\.(\d+)(?:\.(\d+))?")

# GCC release of each libstdc++ symbol version, for messages only.
_GCC_OF_GLIBCXX = {28: "GCC 9.3/10", 29: "GCC 11", 30: "GCC 12", 31: "GCC 13.1", 32: "GCC 13.2",
                   33: "GCC 14", 34: "GCC 15"}

SKIP_LIBSTDCXX_CHECK = "TORCH_CUDNN_ALGO_SKIP_LIBSTDCXX_CHECK"
SKIP_VERSION_CHECK = "TORCH_CUDNN_ALGO_SKIP_VERSION_CHECK"


class ToolchainError(Exception):
    """No usable C++ compiler; the message says what to do."""


def parse_version(text: str) -> Version:
    """``"3.4.32"`` -> ``(3, 4, 32)`` (missing parts are 0)."""
    parts = [int(p) for p in text.split(".")[:3]]
    return tuple(parts + [0] * (3 - len(parts)))  # type: ignore[return-value]


def _gcc_release(version: Version | None) -> str | None:
    return _GCC_OF_GLIBCXX.get(version[2]) if version is not None and version[:2] == (3, 4) else None


def format_glibcxx(version: Version | None) -> str:
    if version is None:
        return "GLIBCXX unknown"
    name = "GLIBCXX_" + ".".join(map(str, version))
    gcc = _gcc_release(version)
    return f"{name} ({gcc})" if gcc else name


def _read(library: str | os.PathLike | None) -> bytes | None:
    if not library:
        return None
    try:
        return Path(library).read_bytes()
    except OSError:
        return None


def _highest(data: bytes | None) -> Version | None:
    found = {(int(a), int(b), int(c or 0)) for a, b, c in _GLIBCXX.findall(data or b"")}
    return max(found, default=None)


def glibcxx_version(library: str | os.PathLike | None) -> Version | None:
    """Highest ``GLIBCXX_x.y.z`` symbol version a libstdc++ file defines, or None."""
    return _highest(_read(library))


def loaded_libstdcxx(maps: str = "/proc/self/maps") -> str | None:
    """Path of the libstdc++ mapped into this process (None if none or unknown)."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                fields = line.split(None, 5)
                if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith("libstdc++.so"):
                    return fields[5].strip()
    except OSError:
        pass
    return None


class ElfFile:
    """The section table of a 64-bit little-endian ELF file (what stripping keeps)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.data = Path(path).read_bytes()
        if self.data[:4] != b"\x7fELF" or self.data[4] != 2 or self.data[5] != 1:
            raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
        shoff, = struct.unpack_from("<Q", self.data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", self.data, 0x3A)
        # Elf64_Shdr: name, type, flags, addr, offset, size, link, info, addralign, entsize
        self.sections = [struct.unpack_from("<IIQQQQIIQQ", self.data, shoff + i * shentsize)
                         for i in range(shnum)]
        self._names_at = self.sections[shstrndx][4]

    def string(self, offset: int) -> str:
        return self.data[offset:self.data.index(b"\0", offset)].decode()

    def section_names(self) -> list[str]:
        return [self.string(self._names_at + section[0]) for section in self.sections]

    def needed(self) -> list[str]:
        """The DT_NEEDED entries of the .dynamic section: the shared libraries it links."""
        needed = []
        for _, kind, _, _, offset, size, link, _, _, _ in self.sections:
            if kind != 6:  # SHT_DYNAMIC
                continue
            strings = self.sections[link][4]
            for entry in range(offset, offset + size, 16):
                tag, value = struct.unpack_from("<qQ", self.data, entry)
                if tag == 0:  # DT_NULL ends the table
                    break
                if tag == 1:  # DT_NEEDED: an offset into the linked string table
                    needed.append(self.string(strings + value))
        return needed


def elf_needed(path: str | os.PathLike) -> list[str]:
    """The shared libraries a 64-bit little-endian ELF file links (DT_NEEDED)."""
    return ElfFile(path).needed()


def compiler_libstdcxx(compiler: str) -> str | None:
    """The libstdc++.so.6 a compiler links (``-print-file-name``), or None if it names none."""
    try:
        result = subprocess.run(shlex.split(compiler) + ["-print-file-name=libstdc++.so.6"],
                                capture_output=True, text=True, timeout=60, check=False)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    path = result.stdout.strip()
    # A compiler that does not know the file echoes the bare name back.
    return path if result.returncode == 0 and os.path.isabs(path) and os.path.isfile(path) else None


def c_compiler_for(cxx: str) -> str | None:
    """The C driver beside a C++ driver (g++-13 -> gcc-13, c++ -> cc, clang++ -> clang)."""
    path = Path(shutil.which(cxx) or cxx)
    name = path.name
    for cpp, c in (("clang++", "clang"), ("g++", "gcc"), ("c++", "cc")):
        if cpp in name:
            sibling = path.with_name(name.replace(cpp, c))
            return str(sibling) if sibling.is_file() else None
    return None


def default_candidates() -> list[str]:
    """Compilers to fall back on, in order of preference: the PATH's, then the system's."""
    versioned = sorted(glob.glob("/usr/bin/g++-[0-9]*"),
                       key=lambda p: [int(n) for n in re.findall(r"\d+", os.path.basename(p))], reverse=True)
    return ["g++", "c++", "/usr/bin/g++", "/usr/bin/c++", *versioned]


@dataclass(frozen=True)
class Compiler:
    command: str  # as given (CXX may carry a launcher: "ccache g++")
    libstdcxx: str | None
    glibcxx: Version | None


def inspect_compiler(command: str) -> Compiler:
    library = compiler_libstdcxx(command)
    return Compiler(command, library, glibcxx_version(library))


@dataclass(frozen=True)
class ToolchainChoice:
    compiler: Compiler
    requested: Compiler
    runtime_libstdcxx: str | None
    runtime_glibcxx: Version | None

    @property
    def switched(self) -> bool:
        return self.compiler.command != self.requested.command

    def describe(self) -> str:
        c = self.compiler
        return (f"{c.command} (libstdc++ {format_glibcxx(c.glibcxx)}; this Python loads "
                f"{self.runtime_libstdcxx or 'no libstdc++ yet'}, {format_glibcxx(self.runtime_glibcxx)})")


def newer_than_runtime(compiler: Compiler, runtime: Version | None) -> bool:
    """True when the compiler's libstdc++ is known to be newer than ``runtime``."""
    return runtime is not None and compiler.glibcxx is not None and compiler.glibcxx > runtime


def choose_compiler(requested: str, runtime_libstdcxx: str | None,
                    candidates: Iterable[str] | None = None) -> ToolchainChoice:
    """The C++ compiler to build with for a process that loads ``runtime_libstdcxx``.

    ``requested`` (``$CXX``, else ``c++``) when its libstdc++ is not newer than the
    runtime's (or either is unknown); otherwise the candidate with the newest
    libstdc++ that is not newer than the runtime's. Raises ToolchainError naming
    what to do when there is none.
    """
    runtime = glibcxx_version(runtime_libstdcxx)
    wanted = inspect_compiler(requested)
    if not newer_than_runtime(wanted, runtime):
        return ToolchainChoice(wanted, wanted, runtime_libstdcxx, runtime)
    seen = {os.path.realpath(shutil.which(requested) or requested)}
    tried = []
    best: Compiler | None = None
    for name in default_candidates() if candidates is None else candidates:
        path = shutil.which(name)
        if path is None or os.path.realpath(path) in seen:
            continue
        seen.add(os.path.realpath(path))
        candidate = inspect_compiler(path)
        tried.append(f"{path} ({format_glibcxx(candidate.glibcxx)})")
        if candidate.glibcxx is not None and candidate.glibcxx <= runtime:
            if best is None or candidate.glibcxx > best.glibcxx:
                best = candidate
    if best is not None:
        return ToolchainChoice(best, wanted, runtime_libstdcxx, runtime)
    raise ToolchainError(
        f"the C++ compiler {requested} comes with libstdc++ {format_glibcxx(wanted.glibcxx)} "
        f"({wanted.libstdcxx}), newer than the libstdc++ this Python loads ({runtime_libstdcxx}, "
        f"{format_glibcxx(runtime)}): an extension compiled with its headers can crash at run time "
        f"(SIGSEGV in std::ostream). No compiler with a libstdc++ not newer than {format_glibcxx(runtime)} "
        f"was found (tried: {', '.join(tried) or 'none on PATH'}). Set CXX to one (a g++ of "
        f"{_gcc_release(runtime) or 'that release'} or older, e.g. the system's /usr/bin/g++), or make Python "
        f"load the compiler's libstdc++ here and wherever the extension runs (LD_LIBRARY_PATH="
        f"{os.path.dirname(wanted.libstdcxx or '') or '<its lib dir>'}), or set "
        f"{SKIP_LIBSTDCXX_CHECK}=1 to build anyway."
    )


# --- versions -------------------------------------------------------------------------------


def major_minor(version: str | None) -> str | None:
    """``"2.11.0+cu130"`` -> ``"2.11"``; ``"13.0"`` -> ``"13.0"``; None stays None."""
    if not version:
        return None
    match = re.match(r"(\d+)\.(\d+)", str(version))
    return f"{match.group(1)}.{match.group(2)}" if match else str(version)


def cudnn_version_string(version: int | str | None) -> str | None:
    """cuDNN's integer version (91900; 8 used 8907 = 8.9.7) -> ``"9.19.0"``."""
    if version is None or isinstance(version, str):
        return version
    if version >= 90000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"


def cudnn_header_version(header_text: str) -> str:
    """``"9.19.0"`` from the text of cudnn_version.h."""
    parts = [re.search(rf"#define CUDNN_{part}\s+(\d+)", header_text) for part in ("MAJOR", "MINOR", "PATCHLEVEL")]
    return ".".join(m.group(1) if m else "0" for m in parts)


def local_version(base: str, torch_version: str, cuda: str | None) -> str:
    """``("0.1.0", "2.11.0+cu130", "13.0")`` -> ``"0.1.0+cu130torch2.11"``."""
    accelerator = "cu" + cuda.replace(".", "") if cuda else "cpu"
    return f"{base}+{accelerator}torch{major_minor(torch_version)}"


def torch_requirement(torch_version: str) -> str:
    """``"2.11.0+cu130"`` -> ``"torch==2.11.*"`` (the extension is tied to torch's minor release)."""
    return f"torch=={major_minor(torch_version)}.*"


# --- which torch a build supports, and the CUDA headers it needs -----------------------------------

# Torch minor releases this package builds against and whose CPU suite passes (README's
# compatibility table). The README's commands install `torch>=2.11,<2.16`.
SUPPORTED_TORCH = ("2.11", "2.12", "2.13", "2.14", "2.15")
SUPPORTED_TORCH_RANGE = ">=2.11,<2.16"  # the same releases as a pip specifier (a test checks they agree)
ALLOW_UNSUPPORTED_TORCH = "TORCH_CUDNN_ALGO_ALLOW_UNSUPPORTED_TORCH"
CUDA_WHEEL_INDEX = "https://download.pytorch.org/whl/cu{cuda}"


def _minor_key(version: str) -> tuple[int, int]:
    major, minor = major_minor(version).split(".")
    return int(major), int(minor)


def cpu_only_torch_message(torch_version: str) -> str:
    """What to tell someone whose torch has no CUDA (``torch.version.cuda is None``)."""
    release = torch_version.split("+")[0]
    return (
        f"the installed torch {torch_version} is a CPU-only build (torch.version.cuda is None); "
        "torch-cudnn-algo patches torch's cuDNN convolutions and needs a CUDA build of torch. "
        f"Install one of the same release, e.g. `python3 -m pip install --force-reinstall torch=={release} "
        f"--index-url {CUDA_WHEEL_INDEX.format(cuda='130')}` (PyPI's plain `torch` on Linux x86_64 is a "
        "CUDA build too), then build this package again"
    )


def torch_support_problem(torch_version: str, cuda: str | None) -> str | None:
    """Why this package cannot be built against ``torch_version`` (None when it can):
    a CPU-only torch, or a minor release outside SUPPORTED_TORCH."""
    if not cuda:
        return cpu_only_torch_message(torch_version)
    minor = major_minor(torch_version)
    if minor in SUPPORTED_TORCH:
        return None
    side = "older" if _minor_key(minor) < _minor_key(SUPPORTED_TORCH[0]) else "newer"
    return (
        f"torch {torch_version} is {side} than the releases this package supports "
        f"({', '.join(SUPPORTED_TORCH)}): it patches torch's private convolution path, which changes "
        f"between minor releases. Install a supported one (`python3 -m pip install \"torch{SUPPORTED_TORCH_RANGE}\"`), "
        f"or set {ALLOW_UNSUPPORTED_TORCH}=1 to build against this one anyway (untested)"
    )


# The pip packages whose headers, with those torch's CUDA wheels already bring (cuBLAS,
# cuSPARSE, ...), compile the extension on a machine without a CUDA toolkit. All of one
# CUDA major.minor, torch's: a newer crt or cccl beside an older runtime does not compile.
CUDA_HEADER_PACKAGES = ("nvidia-cuda-runtime", "nvidia-cuda-crt", "nvidia-cuda-cccl")


def cuda_header_requirements(cuda: str) -> list[str]:
    """pip requirements for CUDA ``cuda``'s headers (``"13.0"`` -> ``nvidia-cuda-runtime==13.0.*``, ...).

    Only CUDA 13 has these as one set of packages installing into ``nvidia/cu13/include``
    (torch 2.11-2.15's PyPI wheels are CUDA 13 builds); raises ValueError for others.
    """
    version = major_minor(cuda)
    if version is None or not version.startswith("13."):
        raise ValueError(
            f"CUDA {cuda}: headers from pip packages are set up for CUDA 13 builds of torch only; "
            "install a CUDA toolkit of this release and set CUDA_HOME to it"
        )
    return [f"{name}=={version}.*" for name in CUDA_HEADER_PACKAGES]


def cudart_header_version(header_text: str) -> str | None:
    """``"13.0"`` from cuda_runtime_api.h's ``#define CUDART_VERSION 13000``, or None."""
    match = re.search(r"#define CUDART_VERSION\s+(\d+)", header_text)
    if match is None:
        return None
    number = int(match.group(1))
    return f"{number // 1000}.{number % 1000 // 10}"


def cuda_header_problem(directory: Path, cuda: str | None,
                        package_versions: Mapping[str, str | None] | None = None) -> str | None:
    """Why ``directory`` cannot serve as the CUDA ``cuda`` (major.minor; None: any release)
    runtime headers, or None.

    It must hold the runtime API, ``crt/`` and ``nv/target`` (cccl) of that release.
    ``package_versions`` (for a directory the pip packages fill) maps each of
    CUDA_HEADER_PACKAGES to its installed version: the headers of one CUDA release come
    from three packages that pip may upgrade independently, into the same directory.
    """
    missing = [name for name in ("cuda_runtime_api.h", "crt/host_defines.h", "nv/target")
               if not (directory / name).is_file()]
    if missing:
        return f"lacks {', '.join(missing)}"
    if cuda is None:
        return None
    found = cudart_header_version((directory / "cuda_runtime_api.h").read_text(errors="replace"))
    if found != major_minor(cuda):
        return f"CUDA {found or 'of unknown release'}, not torch's {major_minor(cuda)}"
    mixed = [f"{name} {version}" for name, version in (package_versions or {}).items()
             if version is not None and major_minor(version) != major_minor(cuda)]
    if mixed:
        return f"mixes in {', '.join(mixed)}"
    return None


def render_build_info(info: Mapping[str, str | None]) -> str:
    lines = ['"""What this build of torch_cudnn_algo was made for; written by setup.py, do not edit."""', ""]
    lines += [f"{key} = {value!r}" for key, value in info.items()]
    return "\n".join(lines) + "\n"


def _describe(versions: Mapping[str, str | None]) -> str:
    return ", ".join(f"{name} {major_minor(versions.get(key)) or 'none'}"
                     for key, name in (("TORCH", "torch"), ("CUDA", "CUDA"), ("CUDNN", "cuDNN")))


def version_mismatch(built: Mapping[str, str | None], running: Mapping[str, str | None]) -> str | None:
    """Why an extension built for ``built`` must not load under ``running`` (None if it may).

    Both map TORCH, CUDA and CUDNN to version strings; torch, CUDA and cuDNN must
    agree in major.minor. A key the build did not record is not compared.
    """
    differing = [name for key, name in (("TORCH", "torch"), ("CUDA", "CUDA"), ("CUDNN", "cuDNN"))
                 if built.get(key) is not None and major_minor(built.get(key)) != major_minor(running.get(key))]
    if not differing:
        return None
    mismatch = (f"it was built for {_describe(built)} and this process runs {_describe(running)} "
                f"({', '.join(differing)} differ{'s' if len(differing) == 1 else ''})")
    if built.get("CUDA") is not None and running.get("CUDA") is None:  # nothing to rebuild against
        return f"{mismatch}: {cpu_only_torch_message(running.get('TORCH') or 'torch')}"
    return f"{mismatch}; rebuild it against {_describe(running)}"


def libstdcxx_mismatch(built_glibcxx: str | None, runtime_libstdcxx: str | None) -> str | None:
    """Why an extension compiled against libstdc++ ``built_glibcxx`` must not load into a
    process that loaded ``runtime_libstdcxx`` (None if it may, or either is unknown)."""
    data = _read(runtime_libstdcxx) if built_glibcxx else None
    if data is None:
        return None
    built = parse_version(built_glibcxx)
    name = ".".join(map(str, built[:2] if built[2] == 0 else built))
    if f"GLIBCXX_{name}\0".encode() in data:  # fast path: the runtime defines the build's version
        return None
    runtime = _highest(data)
    if runtime is None or runtime >= built:
        return None
    return (f"it was compiled against libstdc++ {format_glibcxx(built)}, newer than the libstdc++ this "
            f"process loaded ({runtime_libstdcxx}, {format_glibcxx(runtime)}), and could crash in it; "
            f"rebuild it where it runs (the build picks a compiler whose libstdc++ is not newer)")
