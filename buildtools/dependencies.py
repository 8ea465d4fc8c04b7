"""Where the build finds what it compiles and links against besides torch: cuDNN (its headers
and the library torch loads), the cuDNN frontend's headers, runtime headers of exactly torch's
CUDA release, the CUDA runtime library, and the nvcc candidates for our kernels.

Each is looked for, in order, where the environment says (CUDNN_INCLUDE_DIR, CUDNN_LIB_DIR,
CUDNN_FRONTEND_INCLUDE_DIR, CUDA_INCLUDE_DIR, CUDA_HOME, CUDA_PATH), in the pip ``nvidia-*``
packages next to torch, then in the toolkit torch finds (its ``CUDA_HOME``, which setup.py
hands in) and /usr/local/cuda. What is missing raises MissingDependency, naming where it looked.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .version_gate import gate


class MissingDependency(Exception):
    """Something the build needs is not there; the message says where it looked and what to do."""


def nvidia_package_dirs(name: str) -> list[Path]:
    """Directories of the pip package ``nvidia.<name>`` (a namespace package)."""
    try:
        spec = importlib.util.find_spec(f"nvidia.{name}")
    except ModuleNotFoundError:
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _first_dir_with(candidates: list[Path], filename: str) -> Path | None:
    for directory in candidates:
        if (directory / filename).is_file():
            return directory
    return None


def _installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class Cudnn:
    include: Path  # cudnn_version.h and the other headers
    lib: Path      # libcudnn.so.<major>
    major: int     # for the soname to link
    version: str   # "9.19.0"


@dataclass(frozen=True)
class Found:
    """What the extension compiles against besides torch."""

    cudnn: Cudnn
    cuda_includes: list[Path]  # torch's CUDA release's runtime headers first, then the pip packages'
    frontend_include: Path


def find(cuda: str, torch_version: str, cuda_home: str | None) -> Found:
    """cuDNN, CUDA's headers and the cuDNN frontend's, for a torch of CUDA ``cuda``."""
    cudnn = find_cudnn(cuda_home)
    cuda_includes = find_cuda_includes(cuda, torch_version, cuda_home)
    return Found(cudnn, cuda_includes, find_cudnn_frontend_include())


# --- cuDNN -----------------------------------------------------------------------------------


def cudnn_header_version(header_text: str) -> str:
    """``"9.19.0"`` from the text of cudnn_version.h."""
    parts = [re.search(rf"#define CUDNN_{part}\s+(\d+)", header_text) for part in ("MAJOR", "MINOR", "PATCHLEVEL")]
    return ".".join(m.group(1) if m else "0" for m in parts)


def find_cudnn(cuda_home: str | None) -> Cudnn:
    """cuDNN's include dir, lib dir, major version (for the soname to link) and full version."""
    include_candidates = []
    lib_candidates = []
    if os.environ.get("CUDNN_INCLUDE_DIR"):
        include_candidates.append(Path(os.environ["CUDNN_INCLUDE_DIR"]))
    if os.environ.get("CUDNN_LIB_DIR"):
        lib_candidates.append(Path(os.environ["CUDNN_LIB_DIR"]))
    for pkg in nvidia_package_dirs("cudnn"):
        include_candidates.append(pkg / "include")
        lib_candidates.append(pkg / "lib")
    if cuda_home:
        include_candidates.append(Path(cuda_home) / "include")
        lib_candidates += [Path(cuda_home) / "lib64", Path(cuda_home) / "lib"]

    include_dir = _first_dir_with(include_candidates, "cudnn_version.h")
    if include_dir is None:
        raise MissingDependency(
            "cudnn_version.h not found. Install the pip package "
            "nvidia-cudnn-cu13 (it comes with torch's CUDA wheels) or set CUDNN_INCLUDE_DIR. "
            f"Looked in: {[str(c) for c in include_candidates]}"
        )
    version_text = (include_dir / "cudnn_version.h").read_text()
    major = int(re.search(r"#define CUDNN_MAJOR\s+(\d+)", version_text).group(1))
    lib_dir = _first_dir_with(lib_candidates, f"libcudnn.so.{major}")
    if lib_dir is None:
        raise MissingDependency(
            f"libcudnn.so.{major} not found; set CUDNN_LIB_DIR. "
            f"Looked in: {[str(c) for c in lib_candidates]}"
        )
    return Cudnn(include_dir, lib_dir, major, cudnn_header_version(version_text))


def find_cudnn_frontend_include() -> Path:
    """Headers of the pip package nvidia-cudnn-frontend (header-only, build time only)."""
    candidates = []
    if os.environ.get("CUDNN_FRONTEND_INCLUDE_DIR"):
        candidates.append(Path(os.environ["CUDNN_FRONTEND_INCLUDE_DIR"]))
    try:
        for file in metadata.files("nvidia-cudnn-frontend") or []:
            if file.name == "cudnn_frontend.h":
                candidates.append(Path(file.locate()).resolve().parent)
    except metadata.PackageNotFoundError:
        pass
    found = _first_dir_with(candidates, "cudnn_frontend.h")
    if found is None:
        raise MissingDependency(
            "cudnn_frontend.h not found; `python3 -m pip install --no-deps nvidia-cudnn-frontend` "
            f"or set CUDNN_FRONTEND_INCLUDE_DIR. Looked in: {[str(c) for c in candidates]}"
        )
    return found


# --- CUDA ------------------------------------------------------------------------------------

# The pip packages whose headers, with those torch's CUDA wheels already bring (cuBLAS,
# cuSPARSE, ...), compile the extension on a machine without a CUDA toolkit. All of one
# CUDA major.minor, torch's: a newer crt or cccl beside an older runtime does not compile.
CUDA_HEADER_PACKAGES = ("nvidia-cuda-runtime", "nvidia-cuda-crt", "nvidia-cuda-cccl")


def cuda_header_requirements(cuda: str) -> list[str]:
    """pip requirements for CUDA ``cuda``'s headers (``"13.0"`` -> ``nvidia-cuda-runtime==13.0.*``, ...).

    Only CUDA 13 has these as one set of packages installing into ``nvidia/cu13/include``
    (torch 2.11-2.15's PyPI wheels are CUDA 13 builds); raises ValueError for others.
    """
    version = gate.major_minor(cuda)
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
    if found != gate.major_minor(cuda):
        return f"CUDA {found or 'of unknown release'}, not torch's {gate.major_minor(cuda)}"
    mixed = [f"{name} {version}" for name, version in (package_versions or {}).items()
             if version is not None and gate.major_minor(version) != gate.major_minor(cuda)]
    if mixed:
        return f"mixes in {', '.join(mixed)}"
    return None


def find_cuda_includes(cuda: str, torch_version: str, cuda_home: str | None) -> list[Path]:
    """CUDA header directories: one with complete runtime headers of torch's CUDA
    release, then the pip CUDA packages' (torch's CUDA headers also want the cuBLAS,
    cuSPARSE and cuSOLVER headers that torch's CUDA wheels bring).

    Runtime headers come from, in order: CUDA_INCLUDE_DIR, CUDA_HOME or CUDA_PATH as set
    (the user's choice, used with a note when their release differs from torch's); the
    pip packages (``scripts/install-build-deps`` installs them at torch's release); the
    toolkit torch finds (nvcc on PATH) and /usr/local/cuda. Those of another release are
    passed over: headers of one CUDA release and libraries of another do not mix.
    """
    given = [Path(os.environ["CUDA_INCLUDE_DIR"])] if os.environ.get("CUDA_INCLUDE_DIR") else []
    given += [Path(os.environ[var]) / "include" for var in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(var)]
    pip_includes = [
        pkg / "include"
        for name in ("cu13", "cuda_runtime", "cublas", "cusparse", "cusolver")
        for pkg in nvidia_package_dirs(name)
        if (pkg / "include").is_dir()
    ]
    toolkits = [Path(home) / "include" for home in (cuda_home, "/usr/local/cuda") if home]
    header_packages = {name: _installed_version(name) for name in CUDA_HEADER_PACKAGES}
    passed_over = []
    for directory in given + pip_includes + toolkits:
        if directory in given:  # complete is enough: the user chose its release
            problem = cuda_header_problem(directory, None)
            other_release = cuda_header_problem(directory, cuda) if problem is None else None
            if other_release is not None:
                print(f"torch-cudnn-algo: note: {directory} is {other_release}; using it as set", flush=True)
        else:
            problem = cuda_header_problem(directory, cuda, header_packages if directory in pip_includes else None)
        if problem is None:
            return [directory] + [d for d in pip_includes if d != directory]
        passed_over.append(f"{directory} ({problem})")
    try:
        install = "python3 -m pip install " + " ".join(f"'{r}'" for r in cuda_header_requirements(cuda))
    except ValueError as exc:
        install = str(exc)
    raise MissingDependency(
        f"no complete CUDA {cuda} headers (torch {torch_version} is built with CUDA {cuda}). "
        f"Run `python3 scripts/install-build-deps` from the source tree, or `{install}`, or set CUDA_HOME "
        f"to a CUDA {cuda} toolkit. Looked in: {'; '.join(passed_over) or 'nothing'}"
    )


def cudart_link_args(cuda: str, cuda_home: str | None) -> list[str]:
    """Our kernels' launches go through the CUDA runtime: link the soname torch
    itself loads (libcudart.so.<major>), found next to torch or in the toolkit."""
    soname = f"libcudart.so.{cuda.split('.')[0]}"
    candidates = [pkg / "lib" for name in ("cu13", "cuda_runtime") for pkg in nvidia_package_dirs(name)]
    candidates += [Path(home) / lib for home in (cuda_home, "/usr/local/cuda") if home for lib in ("lib64", "lib")]
    directory = _first_dir_with(candidates, soname)
    if directory is None:
        raise MissingDependency(f"{soname} not found (torch's CUDA runtime). "
                                f"Looked in: {[str(c) for c in candidates]}")
    return [f"-L{directory}", f"-l:{soname}"]


def nvcc_candidates(cuda_home: str | None) -> tuple[list[Path], list[Path], list[Path]]:
    """Where our kernels' nvcc may be (buildtools/cuda_kernels.py's choose_nvcc picks one):
    the toolkits the user names (CUDA_HOME, CUDA_PATH), pip's, and the toolkit torch finds
    and /usr/local/cuda."""
    given = [Path(os.environ[v]) / "bin" / "nvcc" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    pip = [pkg / "bin" / "nvcc" for name in ("cu13", "cuda_nvcc") for pkg in nvidia_package_dirs(name)]
    toolkits = [Path(home) / "bin" / "nvcc" for home in (cuda_home, "/usr/local/cuda") if home]
    return given, pip, toolkits
