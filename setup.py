"""Builds the torch_cudnn_algo._C extension against the installed torch.

Headers are resolved from, in order: explicit environment variables, the pip
``nvidia-*`` packages next to torch, and ``CUDA_HOME``. Our CUDA kernels
(csrc/kernels/*.cu) are compiled by nvcc into it in every build, for the GPU
architectures buildtools/cuda_kernels.py chooses (``TORCH_CUDNN_ALGO_OWN_KERNELS=0``
leaves them out). The resolved configuration is printed so a failed cluster build
says what it looked at.

Build without isolation so the extension is compiled against the torch you run:
``pip install --no-build-isolation .`` (or ``pip wheel``, ``python -m build --wheel
--no-isolation``). The wheel's version carries what it was built for
(``0.1.0+cu130torch2.11``), it requires that torch minor release, and
``torch_cudnn_algo/_build_info.py`` records torch, CUDA, cuDNN and the
compiler's libstdc++ for the import-time check.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

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
PACKAGE = ROOT / "src" / "torch_cudnn_algo"


def _load_by_path(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _load_build_helpers():
    """src/torch_cudnn_algo/_build.py, by path: importing the package would run its
    initialization (and an installed copy's) during the build."""
    return _load_by_path("_torch_cudnn_algo_build", PACKAGE / "_build.py")


helpers = _load_build_helpers()
kernel_build = _load_by_path("_torch_cudnn_algo_cuda_kernels", ROOT / "buildtools" / "cuda_kernels.py")
_unsupported = helpers.torch_support_problem(torch.__version__, torch.version.cuda)
if _unsupported is not None:
    if torch.version.cuda is None or os.environ.get(helpers.ALLOW_UNSUPPORTED_TORCH, "") in ("", "0"):
        sys.exit(f"torch-cudnn-algo: {_unsupported}.")
    print(f"torch-cudnn-algo: {helpers.ALLOW_UNSUPPORTED_TORCH} is set: building anyway, but {_unsupported}", flush=True)
BASE_VERSION = re.search(r'^__version__ = "([^"]+)"', (PACKAGE / "__init__.py").read_text(), re.M).group(1)
# 0.1.0+cu130torch2.11, requiring torch==2.11.*: the extension is compiled against
# torch's C++ ABI and loads only into the torch minor release it was built with.
VERSION = helpers.local_version(BASE_VERSION, torch.__version__, torch.version.cuda)
TORCH_REQUIREMENT = helpers.torch_requirement(torch.__version__)
BUILD_INFO: dict[str, str | None] = {}  # torch_cudnn_algo/_build_info.py, filled by make_extension


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


def find_cudnn() -> tuple[Path, Path, int, str]:
    """cuDNN include dir, lib dir, major version (for the soname to link) and full version."""
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
    return include_dir, lib_dir, major, helpers.cudnn_header_version(version_text)


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
            "torch-cudnn-algo: cudnn_frontend.h not found; `python3 -m pip install --no-deps nvidia-cudnn-frontend` "
            f"or set CUDNN_FRONTEND_INCLUDE_DIR. Looked in: {[str(c) for c in candidates]}"
        )
    return found


def _installed_version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def find_cuda_includes() -> list[Path]:
    """CUDA header directories: one with complete runtime headers of torch's CUDA
    release, then the pip CUDA packages' (torch's CUDA headers also want the cuBLAS,
    cuSPARSE and cuSOLVER headers that torch's CUDA wheels bring).

    Runtime headers come from, in order: CUDA_INCLUDE_DIR, CUDA_HOME or CUDA_PATH as set
    (the user's choice, used with a note when their release differs from torch's); the
    pip packages (``scripts/install-build-deps`` installs them at torch's release); the
    toolkit torch finds (nvcc on PATH) and /usr/local/cuda. Those of another release are
    passed over: headers of one CUDA release and libraries of another do not mix.
    """
    cuda = torch.version.cuda
    given = [Path(os.environ["CUDA_INCLUDE_DIR"])] if os.environ.get("CUDA_INCLUDE_DIR") else []
    given += [Path(os.environ[var]) / "include" for var in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(var)]
    pip_includes = [
        pkg / "include"
        for name in ("cu13", "cuda_runtime", "cublas", "cusparse", "cusolver")
        for pkg in _nvidia_package_dirs(name)
        if (pkg / "include").is_dir()
    ]
    toolkits = [Path(home) / "include" for home in (CUDA_HOME, "/usr/local/cuda") if home]
    header_packages = {name: _installed_version(name) for name in helpers.CUDA_HEADER_PACKAGES}
    passed_over = []
    for directory in given + pip_includes + toolkits:
        if directory in given:  # complete is enough: the user chose its release
            problem = helpers.cuda_header_problem(directory, None)
            other_release = helpers.cuda_header_problem(directory, cuda) if problem is None else None
            if other_release is not None:
                print(f"torch-cudnn-algo: note: {directory} is {other_release}; using it as set", flush=True)
        else:
            problem = helpers.cuda_header_problem(directory, cuda, header_packages if directory in pip_includes else None)
        if problem is None:
            return [directory] + [d for d in pip_includes if d != directory]
        passed_over.append(f"{directory} ({problem})")
    try:
        install = "python3 -m pip install " + " ".join(f"'{r}'" for r in helpers.cuda_header_requirements(cuda))
    except ValueError as exc:
        install = str(exc)
    sys.exit(
        f"torch-cudnn-algo: no complete CUDA {cuda} headers (torch {torch.__version__} is built with CUDA {cuda}). "
        f"Run `python3 scripts/install-build-deps` from the source tree, or `{install}`, or set CUDA_HOME "
        f"to a CUDA {cuda} toolkit. Looked in: {'; '.join(passed_over) or 'nothing'}"
    )


def configure_toolchain():
    """Makes the build use a C++ compiler whose libstdc++ is not newer than the one this
    Python process loads (the one the extension will share at run time; _build.py says
    why this rather than a static libstdc++). When $CXX (default c++) is newer, sets CXX,
    which torch's ninja build compiles and setuptools links with, to a matching g++; sets
    CC too when switching or when CC is newer (without ninja, setuptools compiles with CC).
    Exits naming a fix when no compiler fits.
    """
    requested = os.environ.get("CXX") or "c++"
    if os.environ.get(helpers.SKIP_LIBSTDCXX_CHECK, "") not in ("", "0"):
        compiler = helpers.inspect_compiler(requested)
        print(f"torch-cudnn-algo: {helpers.SKIP_LIBSTDCXX_CHECK} is set: building with {requested} "
              "without checking its libstdc++", flush=True)
        return helpers.ToolchainChoice(compiler, compiler, helpers.loaded_libstdcxx(), None)
    try:
        choice = helpers.choose_compiler(requested, helpers.loaded_libstdcxx())
    except helpers.ToolchainError as exc:
        sys.exit(f"torch-cudnn-algo: {exc}")
    if choice.switched:
        print(
            f"torch-cudnn-algo: CXX={requested} comes with libstdc++ "
            f"{helpers.format_glibcxx(choice.requested.glibcxx)}, newer than the "
            f"{helpers.format_glibcxx(choice.runtime_glibcxx)} this Python loads "
            f"({choice.runtime_libstdcxx}); an extension compiled with its headers can crash in it. "
            f"Building with {choice.compiler.command} ({helpers.format_glibcxx(choice.compiler.glibcxx)}) instead.",
            flush=True,
        )
        os.environ["CXX"] = choice.compiler.command
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC")
    if choice.switched or (cc and helpers.newer_than_runtime(helpers.inspect_compiler(cc), choice.runtime_glibcxx)):
        os.environ["CC"] = helpers.c_compiler_for(choice.compiler.command) or choice.compiler.command
    return choice


def make_extension() -> tuple[CppExtension, KernelBuild | None]:
    """The extension, and how its kernels are compiled (None when they are left out)."""
    cudnn_include, cudnn_lib, cudnn_major, cudnn_version = find_cudnn()
    cuda_includes = find_cuda_includes()
    frontend_include = find_cudnn_frontend_include()
    toolchain = configure_toolchain()
    debug = os.environ.get("TORCH_CUDNN_ALGO_DEBUG_BUILD", "") not in ("", "0")
    kernels = configure_kernels(cuda_includes)
    write_build_info(cudnn_version, toolchain, kernels)
    print(
        "torch-cudnn-algo build configuration:\n"
        f"  version        {VERSION} (requires {TORCH_REQUIREMENT})\n"
        f"  torch          {torch.__version__} (CUDA {torch.version.cuda}) at {Path(torch.__file__).parent}\n"
        f"  cuDNN headers  {cudnn_include} (cuDNN {cudnn_version})\n"
        f"  cuDNN library  {cudnn_lib}/libcudnn.so.{cudnn_major}\n"
        f"  CUDA headers   {', '.join(map(str, cuda_includes))}\n"
        f"  cuDNN frontend {frontend_include}\n"
        f"  C++ compiler   {toolchain.describe()}\n"
        + (f"  own kernels    {kernels.nvcc.path} (CUDA {kernels.nvcc.release}) for {kernels.architectures.describe()}"
           + (f"; this nvcc cannot build {' '.join(kernels.dropped)}" if kernels.dropped else "") + "\n"
           if kernels else f"  own kernels    left out ({kernel_build.OWN_KERNELS_ENV}=0): {kernel_build.WITHOUT_KERNELS}\n") +
        f"  python         {sys.version.split()[0]} (stable ABI, abi3)"
        + ("\n  debug build    symbols kept (TORCH_CUDNN_ALGO_DEBUG_BUILD)" if debug else ""),
        flush=True,
    )
    # csrc/ holds one folder per layer (base, store, run, decide, overrides, ops);
    # includes name files from csrc/: "run/graph_runner.h".
    sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.cpp"))
    return CppExtension(
        name="torch_cudnn_algo._C",
        sources=sources,
        include_dirs=[str(ROOT / "csrc"), str(cudnn_include), str(frontend_include)] + [str(d) for d in cuda_includes],
        library_dirs=[str(cudnn_lib)],
        libraries=["c10_cuda", "torch_cuda"],
        # The frontend dlopens cuDNN, NVRTC and the driver itself instead of linking
        # them: the process keeps torch's cuDNN and needs no NVRTC until an engine
        # compiles at run time.
        # Python's CFLAGS carry -g: without -g0 and the link's -s the library is 51 MB of
        # debug information instead of a few MB (TORCH_CUDNN_ALGO_DEBUG_BUILD=1 keeps it).
        extra_compile_args={"cxx": ["-O2", "-DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING"] + ([] if debug else ["-g0"])
                            + (["-DTORCH_CUDNN_ALGO_OWN_KERNELS"] if kernels else [])},
        # Link the soname torch itself loads, so the process keeps a single cuDNN.
        # The rpaths find it next to torch in site-packages, or where we built.
        extra_link_args=[
            f"-l:libcudnn.so.{cudnn_major}",
            "-Wl,-rpath,$ORIGIN/../nvidia/cudnn/lib",
            f"-Wl,-rpath,{cudnn_lib}",
        ] + (cudart_link_args() if kernels else []) + libstdcxx_link_args() + ([] if debug else ["-s"]),
        # Only libtorch and the dispatcher are used (no libtorch_python), so one
        # abi3 wheel serves every CPython >= 3.10 with this torch.
        py_limited_api=True,
    ), kernels


def cudart_link_args() -> list[str]:
    """Our kernels' launches go through the CUDA runtime: link the soname torch
    itself loads (libcudart.so.<major>), found next to torch or in the toolkit."""
    soname = f"libcudart.so.{torch.version.cuda.split('.')[0]}"
    candidates = [pkg / "lib" for name in ("cu13", "cuda_runtime") for pkg in _nvidia_package_dirs(name)]
    candidates += [Path(home) / lib for home in (CUDA_HOME, "/usr/local/cuda") if home for lib in ("lib64", "lib")]
    directory = _first_dir_with(candidates, soname)
    if directory is None:
        sys.exit(f"torch-cudnn-algo: {soname} not found (torch's CUDA runtime). "
                 f"Looked in: {[str(c) for c in candidates]}")
    return [f"-L{directory}", f"-l:{soname}"]


def libstdcxx_link_args() -> list[str]:
    """Link the libstdc++ this Python loads, by soname, ahead of the driver's implicit
    -lstdc++: a compiler whose libstdc++.so cannot be found (the GPU image's
    /opt/gcc/bin/g++ has a dangling one) otherwise links libstdc++.a into the extension,
    a second libstdc++ in the process that crashed in std::ostream (see _build.py)."""
    loaded = helpers.loaded_libstdcxx()
    directory = [f"-L{os.path.dirname(loaded)}"] if loaded else []
    return directory + ["-l:libstdc++.so.6"]


@dataclass(frozen=True)
class KernelBuild:
    """How our kernels (csrc/kernels/*.cu, the "tca.direct" candidate) are compiled:
    buildtools/cuda_kernels.py decides, this build runs it."""

    nvcc: object  # kernel_build.Nvcc
    architectures: object  # kernel_build.Architectures
    dropped: list[str]
    flags: list[str]
    jobs: int


def _kernel_build_exit(exc: Exception) -> NoReturn:
    sys.exit(f"torch-cudnn-algo: {exc}")


def configure_kernels(cuda_includes: list[Path]) -> KernelBuild | None:
    """Our kernels' nvcc, architectures and flags; None when TORCH_CUDNN_ALGO_OWN_KERNELS=0
    leaves them out. Exits naming the fix when they cannot be built."""
    import subprocess

    from torch.utils.cpp_extension import _get_cuda_arch_flags

    try:
        if not kernel_build.kernels_wanted(os.environ):
            return None
        cuda = torch.version.cuda
        given = [Path(os.environ[v]) / "bin" / "nvcc" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
        pip = [pkg / "bin" / "nvcc" for name in ("cu13", "cuda_nvcc") for pkg in _nvidia_package_dirs(name)]
        toolkits = [Path(home) / "bin" / "nvcc" for home in (CUDA_HOME, "/usr/local/cuda") if home]
        nvcc = kernel_build.choose_nvcc(cuda, given, pip, toolkits)

        def torch_rules() -> list[str]:
            try:
                return _get_cuda_arch_flags()
            except (ValueError, IndexError) as exc:
                raise kernel_build.KernelBuildError(
                    f"{kernel_build.ARCH_LIST_ENV}={os.environ.get(kernel_build.ARCH_LIST_ENV, '')!r}: {exc} "
                    "(valid: e.g. \"8.0;9.0+PTX\", or names such as \"Ampere;Hopper\")") from None

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        wanted = kernel_build.choose_architectures(os.environ, gpus, torch_rules, torch._C._cuda_getArchFlags())
        listed = subprocess.run([str(nvcc.path), "--list-gpu-arch"], capture_output=True, text=True, check=False)
        architectures, dropped = kernel_build.supported_by(wanted, listed.stdout.split())
        jobs = kernel_build.jobs(os.environ, os.cpu_count())
    except kernel_build.KernelBuildError as exc:
        _kernel_build_exit(exc)
    # The runtime headers of torch's CUDA release (the pip packages' have no nvcc.profile of their
    # own), and their cccl (cuda/std, nv/target) as system headers, as a toolkit's nvcc has them.
    includes = [f"-I{d}" for d in cuda_includes[:1]]
    includes += [arg for d in cuda_includes[:1] if (d / "cccl").is_dir() for arg in ("-isystem", str(d / "cccl"))]
    # --compress-mode=size: the kernel objects for six architectures and PTX take 8 MB instead of
    # 50 (decompressed once, when the driver loads a kernel file).
    flags = ["-std=c++17", "-O3", "-Xcompiler", "-fPIC", f"-I{ROOT / 'csrc'}", *includes, "--expt-relaxed-constexpr",
             "--compress-mode=size",
             # The kernels report what they were built for (a GPU they cannot run on is told why);
             # "/" between the names, since nvcc splits an option's value at commas.
             f"-DTORCH_CUDNN_ALGO_KERNEL_ARCHS={'/'.join(architectures.names())}", *architectures.flags]
    if os.environ.get("CXX"):
        flags += ["-ccbin", os.environ["CXX"]]
    return KernelBuild(nvcc, architectures, dropped, flags, jobs)


def compile_kernels(kernels: KernelBuild, build_temp: str) -> list[str]:
    """Compiles csrc/kernels/*.cu with nvcc alone (they include no torch header, so only
    CUDA's own headers are seen), one process per file in parallel, into objects for the
    extension; an object newer than its sources and built with the same command is kept."""
    directory = ROOT / "csrc" / "kernels"
    sources = sorted(directory.glob("*.cu"))
    headers = [*directory.glob("*.h"), *directory.glob("*.cuh")]
    threads = max(1, kernels.jobs // max(1, len(sources)))
    work = kernel_build.compilations(kernels.nvcc.path, sources, kernels.flags, Path(build_temp) / "kernels", threads)
    try:
        return [str(o) for o in kernel_build.compile_all(work, headers, min(kernels.jobs, len(sources)),
                                                           log=lambda line: print(line, flush=True))]
    except kernel_build.KernelBuildError as exc:
        _kernel_build_exit(exc)


class BuildExtensionSharingLibstdcxx(BuildExtension):
    """BuildExtension that compiles our kernels with nvcc first, and refuses an
    extension not linked to the shared libstdc++.so.6."""

    def build_extension(self, ext) -> None:
        if KERNELS is not None:
            ext.extra_objects = compile_kernels(KERNELS, self.build_temp)
        super().build_extension(ext)
        path = self.get_ext_fullpath(ext.name)
        if "libstdc++.so.6" not in helpers.elf_needed(path):
            sys.exit(
                f"torch-cudnn-algo: {path} does not link libstdc++.so.6: the compiler "
                f"({os.environ.get('CXX') or 'c++'}) linked a static libstdc++ into it, a second "
                "copy beside the one torch uses, which crashes. Build with a compiler whose "
                "shared libstdc++ the linker finds (e.g. CXX=/usr/bin/g++)."
            )


def write_build_info(cudnn_version: str, toolchain, kernels: KernelBuild | None) -> None:
    """What this build is for, read at import by the version gate; BuildPy writes it as
    torch_cudnn_algo/_build_info.py into the build, never into the source tree."""
    BUILD_INFO.update({
        "VERSION": VERSION,
        "TORCH": torch.__version__,
        "CUDA": torch.version.cuda,
        "CUDNN": cudnn_version,
        "CXX": toolchain.compiler.command,
        # The compiler's libstdc++ (its headers' release): the oldest one the extension runs with.
        "GLIBCXX": ".".join(map(str, toolchain.compiler.glibcxx)) if toolchain.compiler.glibcxx else None,
        # Our kernels' architectures ("sm_80 sm_90 compute_90"), None in a build without them.
        "KERNEL_ARCHS": " ".join(kernels.architectures.names()) if kernels else None,
    })


class BuildPy(build_py):
    """build_py that adds the generated torch_cudnn_algo/_build_info.py to the build (the
    wheel takes the whole build tree). An editable install has none: its gate is off."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "torch_cudnn_algo" / "_build_info.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(helpers.render_build_info(BUILD_INFO))


EXTENSION, KERNELS = make_extension()
setup(
    version=VERSION,
    # tqdm: tune()'s progress bar.
    install_requires=[TORCH_REQUIREMENT, "tqdm"],
    ext_modules=[EXTENSION],
    cmdclass={"build_ext": BuildExtensionSharingLibstdcxx, "build_py": BuildPy},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
