"""Which torch releases this package supports, and whether this process matches what its
extension was built for (standard library only).

The extension's loader (``_extension.load``) uses it at import to refuse, with one warning,
an extension built for another torch, CUDA or cuDNN release, or compiled against a newer
libstdc++ than the one this process loaded (code compiled with a GCC's headers needs that
GCC's libstdc++ or newer at run time; buildtools/toolchain.py says why the extension shares
the process's libstdc++ at all). ``TORCH_CUDNN_ALGO_SKIP_VERSION_CHECK=1`` loads it anyway.

The build (setup.py, buildtools/, scripts/) loads this file by path for the same rules and
the supported releases, which have their one home here: importing the package would run its
import-time initialization (and an installed copy's) during the build.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

Version = tuple[int, int, int]

_GLIBCXX = re.compile(rb"GLIBCXX_(\d+)\.(\d+)(?:\.(\d+))?")

# GCC release of each libstdc++ symbol version, for messages only.
_GCC_OF_GLIBCXX = {28: "GCC 9.3/10", 29: "GCC 11", 30: "GCC 12", 31: "GCC 13.1", 32: "GCC 13.2",
                   33: "GCC 14", 34: "GCC 15"}

SKIP_VERSION_CHECK = "TORCH_CUDNN_ALGO_SKIP_VERSION_CHECK"


# --- libstdc++ versions ----------------------------------------------------------------------


def parse_version(text: str) -> Version:
    """``"3.4.32"`` -> ``(3, 4, 32)`` (missing parts are 0)."""
    parts = [int(p) for p in text.split(".")[:3]]
    return tuple(parts + [0] * (3 - len(parts)))  # type: ignore[return-value]


def gcc_release(version: Version | None) -> str | None:
    """The GCC release of a libstdc++ version (``(3, 4, 32)`` -> ``"GCC 13.2"``), or None."""
    return _GCC_OF_GLIBCXX.get(version[2]) if version is not None and version[:2] == (3, 4) else None


def format_glibcxx(version: Version | None) -> str:
    if version is None:
        return "GLIBCXX unknown"
    name = "GLIBCXX_" + ".".join(map(str, version))
    gcc = gcc_release(version)
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


# --- which torch this package supports -------------------------------------------------------

# Torch minor releases this package builds against and whose CPU suite passes (README's
# compatibility table). The README's commands install `torch>=2.11,<2.16`.
SUPPORTED_TORCH = ("2.11", "2.12", "2.13", "2.14", "2.15")
SUPPORTED_TORCH_RANGE = ">=2.11,<2.16"  # the same releases as a pip specifier (a test checks they agree)
CUDA_WHEEL_INDEX = "https://download.pytorch.org/whl/cu{cuda}"


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


# --- the gate -------------------------------------------------------------------------------


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
