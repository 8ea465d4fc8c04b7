"""Builds the torch_cudnn_algo._C extension against the installed torch.

Headers are resolved from, in order: explicit environment variables, the pip
``nvidia-*`` packages next to torch, and ``CUDA_HOME``.  The resolved
configuration is printed so a failed cluster build says what it looked at.

Build without isolation so the extension is compiled against the torch you run:
``pip install --no-build-isolation .``
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

from setuptools import setup

# Importing torch must not autoload an installed (possibly stale) copy of this
# package while we build its replacement.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

try:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension
except ImportError as exc:  # pragma: no cover - build-time guidance only
    sys.exit(
        "torch-cudnn-algo builds against the installed torch: install torch==2.11.* first "
        f"and build with `pip install --no-build-isolation .` ({exc})"
    )

ROOT = Path(__file__).resolve().parent


def _nvidia_package_dirs(name: str) -> list[Path]:
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


def find_cudnn() -> tuple[Path, Path, int]:
    """cuDNN include dir, lib dir and major version (for the soname to link)."""
    include_candidates = []
    lib_candidates = []
    if os.environ.get("CUDNN_INCLUDE_DIR"):
        include_candidates.append(Path(os.environ["CUDNN_INCLUDE_DIR"]))
    if os.environ.get("CUDNN_LIB_DIR"):
        lib_candidates.append(Path(os.environ["CUDNN_LIB_DIR"]))
    for pkg in _nvidia_package_dirs("cudnn"):
        include_candidates.append(pkg / "include")
        lib_candidates.append(pkg / "lib")
    if CUDA_HOME:
        include_candidates.append(Path(CUDA_HOME) / "include")
        lib_candidates += [Path(CUDA_HOME) / "lib64", Path(CUDA_HOME) / "lib"]

    include_dir = _first_dir_with(include_candidates, "cudnn_version.h")
    if include_dir is None:
        sys.exit(
            "torch-cudnn-algo: cudnn_version.h not found. Install the pip package "
            "nvidia-cudnn-cu13 (it comes with torch's CUDA wheels) or set CUDNN_INCLUDE_DIR. "
            f"Looked in: {[str(c) for c in include_candidates]}"
        )
    version_text = (include_dir / "cudnn_version.h").read_text()
    major = int(re.search(r"#define CUDNN_MAJOR\s+(\d+)", version_text).group(1))
    lib_dir = _first_dir_with(lib_candidates, f"libcudnn.so.{major}")
    if lib_dir is None:
        sys.exit(
            f"torch-cudnn-algo: libcudnn.so.{major} not found; set CUDNN_LIB_DIR. "
            f"Looked in: {[str(c) for c in lib_candidates]}"
        )
    return include_dir, lib_dir, major


def find_cudnn_frontend_include() -> Path:
    """Headers of the pip package nvidia-cudnn-frontend (header-only, build time only)."""
    candidates = []
    if os.environ.get("CUDNN_FRONTEND_INCLUDE_DIR"):
        candidates.append(Path(os.environ["CUDNN_FRONTEND_INCLUDE_DIR"]))
    try:
        from importlib import metadata

        for file in metadata.files("nvidia-cudnn-frontend") or []:
            if file.name == "cudnn_frontend.h":
                candidates.append(Path(file.locate()).resolve().parent)
    except metadata.PackageNotFoundError:
        pass
    found = _first_dir_with(candidates, "cudnn_frontend.h")
    if found is None:
        sys.exit(
            "torch-cudnn-algo: cudnn_frontend.h not found; `pip install nvidia-cudnn-frontend` "
            f"or set CUDNN_FRONTEND_INCLUDE_DIR. Looked in: {[str(c) for c in candidates]}"
        )
    return found


def find_cuda_includes() -> list[Path]:
    """CUDA header directories: one with complete runtime headers, then the pip
    CUDA packages' (torch's CUDA headers also want cuBLAS/cuSPARSE/cuSOLVER headers,
    which a minimal toolkit may lack).

    Runtime headers come from CUDA_HOME (or torch's guess from nvcc on PATH), the
    usual toolkit location, then the pip packages (which need nvidia-cuda-crt for crt/).
    """
    candidates = []
    for var in ("CUDA_INCLUDE_DIR",):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]))
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), CUDA_HOME, "/usr/local/cuda"):
        if home:
            candidates.append(Path(home) / "include")
    pip_includes = [
        pkg / "include"
        for name in ("cu13", "cuda_runtime", "cublas", "cusparse", "cusolver")
        for pkg in _nvidia_package_dirs(name)
        if (pkg / "include").is_dir()
    ]
    for directory in candidates + pip_includes:
        if (directory / "cuda_runtime_api.h").is_file() and (directory / "crt" / "host_defines.h").is_file():
            return [directory] + [d for d in pip_includes if d != directory]
    candidates += pip_includes
    sys.exit(
        "torch-cudnn-algo: no complete CUDA runtime headers (cuda_runtime_api.h and crt/host_defines.h); "
        "set CUDA_HOME, or `pip install nvidia-cuda-runtime nvidia-cuda-crt`. "
        f"Looked in: {[str(c) for c in candidates]}"
    )


def make_extension() -> CppExtension:
    cudnn_include, cudnn_lib, cudnn_major = find_cudnn()
    cuda_includes = find_cuda_includes()
    frontend_include = find_cudnn_frontend_include()
    print(
        "torch-cudnn-algo build configuration:\n"
        f"  torch          {torch.__version__} (CUDA {torch.version.cuda}) at {Path(torch.__file__).parent}\n"
        f"  cuDNN headers  {cudnn_include}\n"
        f"  cuDNN library  {cudnn_lib}/libcudnn.so.{cudnn_major}\n"
        f"  CUDA headers   {', '.join(map(str, cuda_includes))}\n"
        f"  cuDNN frontend {frontend_include}\n"
        f"  python         {sys.version.split()[0]} (stable ABI, abi3)",
        flush=True,
    )
    sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").glob("*.cpp"))
    return CppExtension(
        name="torch_cudnn_algo._C",
        sources=sources,
        include_dirs=[str(cudnn_include), str(frontend_include)] + [str(d) for d in cuda_includes],
        library_dirs=[str(cudnn_lib)],
        libraries=["c10_cuda", "torch_cuda"],
        # The frontend dlopens cuDNN, NVRTC and the driver itself instead of linking
        # them: the process keeps torch's cuDNN and needs no NVRTC until an engine
        # compiles at run time.
        extra_compile_args={"cxx": ["-O2", "-DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING"]},
        # Link the soname torch itself loads, so the process keeps a single cuDNN.
        # The rpaths find it next to torch in site-packages, or where we built.
        extra_link_args=[
            f"-l:libcudnn.so.{cudnn_major}",
            "-Wl,-rpath,$ORIGIN/../nvidia/cudnn/lib",
            f"-Wl,-rpath,{cudnn_lib}",
        ],
        # Only libtorch and the dispatcher are used (no libtorch_python), so one
        # abi3 wheel serves every CPython >= 3.10 with this torch.
        py_limited_api=True,
    )


setup(
    ext_modules=[make_extension()],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
