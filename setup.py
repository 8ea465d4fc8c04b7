"""Builds torch_cudnn_algo._C, the extension, against the installed torch: build without
isolation, ``pip install --no-build-isolation .`` (or ``pip wheel``, ``python -m build --wheel
--no-isolation``). The wheel's version carries what it was built for (``0.1.0+cu130torch2.11``),
it requires that torch minor release, and ``torch_cudnn_algo/_build_info.py`` records torch,
CUDA, cuDNN and the compiler's libstdc++ for the import-time check.

How headers, the compiler and our kernels' architectures are found and chosen: buildtools/
(build-only, never installed). The resolved configuration is printed, so that a failed
cluster build says what it looked at.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# Importing torch must not autoload an installed (possibly stale) copy of this
# package while we build its replacement.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

try:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension
except ImportError as exc:  # pragma: no cover - build-time guidance only
    sys.exit(
        "torch-cudnn-algo builds against the installed torch: install a CUDA build of torch 2.11-2.15 "
        "first (`python3 -m pip install \"torch>=2.11,<2.16\"`), then `python3 scripts/install-build-deps` "
        f"and `pip install --no-build-isolation .` ({exc})"
    )

ROOT = Path(__file__).resolve().parent
CSRC = ROOT / "csrc"  # one folder per layer (base, store, run, decide, overrides, ops); includes name files from here
KERNEL_SOURCES = CSRC / "kernels"  # our CUDA kernels (*.cu): nvcc compiles them into the extension (build_ext)
# The wheel's version is this plus what it is built for: 0.1.0+cu130torch2.11.
BASE_VERSION = re.search(r'^__version__ = "([^"]+)"', (ROOT / "src/torch_cudnn_algo/__init__.py").read_text(),
                         re.M).group(1)


def extension(found, kernels, debug: bool) -> CppExtension:
    """torch_cudnn_algo._C: csrc/'s C++ against torch, cuDNN and its frontend, with our kernels'
    objects when ``kernels`` (buildtools/cuda_kernels.py's KernelBuild) says how to compile them."""
    return CppExtension(
        name="torch_cudnn_algo._C",
        sources=sorted(str(p.relative_to(ROOT)) for p in CSRC.rglob("*.cpp")),
        include_dirs=[str(CSRC), str(found.cudnn.include), str(found.frontend_include)]
        + [str(d) for d in found.cuda_includes],
        library_dirs=[str(found.cudnn.lib)],
        libraries=["c10_cuda", "torch_cuda"],
        # The frontend dlopens cuDNN, NVRTC and the driver itself instead of linking
        # them: the process keeps torch's cuDNN and needs no NVRTC until an engine
        # compiles at run time.
        # Python's CFLAGS carry -g: without -g0 and the link's -s the library is 51 MB of
        # debug information instead of a few MB (TORCH_CUDNN_ALGO_DEBUG_BUILD=1 keeps it).
        extra_compile_args={"cxx": ["-O2", "-DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING"] + ([] if debug else ["-g0"])
                            + (["-DTORCH_CUDNN_ALGO_OWN_KERNELS"] if kernels else [])},
        # Link the soname torch itself loads, so the process keeps a single cuDNN (and, for our
        # kernels' launches, a single CUDA runtime). The rpaths find it next to torch in
        # site-packages, or where we built. The loaded libstdc++ by soname: buildtools/toolchain.py.
        extra_link_args=[
            f"-l:libcudnn.so.{found.cudnn.major}",
            "-Wl,-rpath,$ORIGIN/../nvidia/cudnn/lib",
            f"-Wl,-rpath,{found.cudnn.lib}",
        ] + (dependencies.cudart_link_args(torch.version.cuda, CUDA_HOME) if kernels else [])
        + toolchain.libstdcxx_link_args() + ([] if debug else ["-s"]),
        # Only libtorch and the dispatcher are used (no libtorch_python), so one
        # abi3 wheel serves every CPython >= 3.10 with this torch.
        py_limited_api=True,
    )


def _load_buildtools(*names: str) -> list:
    """buildtools/'s modules, by path as the package _torch_cudnn_algo_buildtools: it is
    build-only, neither installed nor on sys.path."""
    spec = importlib.util.spec_from_file_location("_torch_cudnn_algo_buildtools", ROOT / "buildtools" / "__init__.py",
                                                  submodule_search_locations=[str(ROOT / "buildtools")])
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    return [importlib.import_module(f"{spec.name}.{name}") for name in names]


build_info, cuda_kernels, dependencies, toolchain, torch_support = _load_buildtools(
    "build_info", "cuda_kernels", "dependencies", "toolchain", "torch_support")
# What stops the build; each says what to do.
BUILD_ERRORS = (dependencies.MissingDependency, toolchain.ToolchainError, cuda_kernels.KernelBuildError)


class BuildExtensionSharingLibstdcxx(BuildExtension):
    """BuildExtension that compiles our kernels with nvcc first, and refuses an
    extension not linked to the shared libstdc++.so.6."""

    kernels = None  # cuda_kernels.KernelBuild (None: built without them), set by main()

    def build_extension(self, ext) -> None:
        if self.kernels is not None:
            try:
                ext.extra_objects = cuda_kernels.compile_kernels(self.kernels, KERNEL_SOURCES, Path(self.build_temp))
            except BUILD_ERRORS as exc:
                sys.exit(f"torch-cudnn-algo: {exc}")
        super().build_extension(ext)
        problem = toolchain.static_libstdcxx_problem(self.get_ext_fullpath(ext.name))
        if problem is not None:
            sys.exit(f"torch-cudnn-algo: {problem}")


class BuildPy(build_py):
    """build_py that adds the generated torch_cudnn_algo/_build_info.py to the build (the
    wheel takes the whole build tree, the source tree never has it). An editable install
    has none: its gate is off."""

    info: dict[str, str | None] = {}  # build_info.record(), set by main()

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "torch_cudnn_algo" / "_build_info.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(build_info.render_build_info(self.info))


def main() -> None:
    cuda = torch.version.cuda
    unsupported = torch_support.torch_support_problem(torch.__version__, cuda)
    if unsupported is not None:
        if cuda is None or os.environ.get(torch_support.ALLOW_UNSUPPORTED_TORCH, "") in ("", "0"):
            sys.exit(f"torch-cudnn-algo: {unsupported}.")
        print(f"torch-cudnn-algo: {torch_support.ALLOW_UNSUPPORTED_TORCH} is set: building anyway, but {unsupported}",
              flush=True)
    # Requiring torch==2.11.*: the extension is compiled against torch's C++ ABI and loads
    # only into the torch minor release it was built with.
    version = torch_support.local_version(BASE_VERSION, torch.__version__, cuda)
    requirement = torch_support.torch_requirement(torch.__version__)
    debug = os.environ.get("TORCH_CUDNN_ALGO_DEBUG_BUILD", "") not in ("", "0")
    try:
        found = dependencies.find(cuda, torch.__version__, CUDA_HOME)
        compiler = toolchain.configure()
        kernels = cuda_kernels.configure(
            os.environ, cuda, dependencies.nvcc_candidates(CUDA_HOME),
            lambda: torch.utils.cpp_extension._get_cuda_arch_flags(),  # TORCH_CUDA_ARCH_LIST, else the GPUs'
            lambda: torch.cuda.device_count() if torch.cuda.is_available() else 0, torch._C._cuda_getArchFlags,
            CSRC, found.cuda_includes)
        info = build_info.record(version, torch.__version__, cuda, found, compiler, kernels)
        print(build_info.banner(requirement, info, Path(torch.__file__).parent, found, compiler, kernels, debug),
              flush=True)
        ext = extension(found, kernels, debug)
    except BUILD_ERRORS as exc:
        sys.exit(f"torch-cudnn-algo: {exc}")
    BuildExtensionSharingLibstdcxx.kernels, BuildPy.info = kernels, info
    setup(
        version=version,
        install_requires=[requirement, "tqdm"],  # tqdm: tune()'s progress bar
        ext_modules=[ext],
        cmdclass={"build_ext": BuildExtensionSharingLibstdcxx, "build_py": BuildPy},
        options={"bdist_wheel": {"py_limited_api": "cp310"}},
    )


main()
