"""Builds the torch_cudnn_algo._C extension against the installed torch.

Headers are resolved from, in order: explicit environment variables, the pip
``nvidia-*`` packages next to torch, and ``CUDA_HOME``.  The resolved
configuration is printed so a failed cluster build says what it looked at.

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
PACKAGE = ROOT / "src" / "torch_cudnn_algo"


def _load_build_helpers():
    """src/torch_cudnn_algo/_build.py, by path: importing the package would run its
    initialization (and an installed copy's) during the build."""
    spec = importlib.util.spec_from_file_location("_torch_cudnn_algo_build", PACKAGE / "_build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


helpers = _load_build_helpers()
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


def make_extension() -> CppExtension:
    cudnn_include, cudnn_lib, cudnn_major, cudnn_version = find_cudnn()
    cuda_includes = find_cuda_includes()
    frontend_include = find_cudnn_frontend_include()
    toolchain = configure_toolchain()
    debug = os.environ.get("TORCH_CUDNN_ALGO_DEBUG_BUILD", "") not in ("", "0")
    write_build_info(cudnn_version, toolchain)
    print(
        "torch-cudnn-algo build configuration:\n"
        f"  version        {VERSION} (requires {TORCH_REQUIREMENT})\n"
        f"  torch          {torch.__version__} (CUDA {torch.version.cuda}) at {Path(torch.__file__).parent}\n"
        f"  cuDNN headers  {cudnn_include} (cuDNN {cudnn_version})\n"
        f"  cuDNN library  {cudnn_lib}/libcudnn.so.{cudnn_major}\n"
        f"  CUDA headers   {', '.join(map(str, cuda_includes))}\n"
        f"  cuDNN frontend {frontend_include}\n"
        f"  C++ compiler   {toolchain.describe()}\n"
        + (f"  own kernels    {find_nvcc()} for sm {os.environ.get(KERNEL_ARCHS_ENV, DEFAULT_KERNEL_ARCHS)}\n"
           if own_kernels_requested() else f"  own kernels    not built (set {OWN_KERNELS_ENV}=1 to build them)\n") +
        f"  python         {sys.version.split()[0]} (stable ABI, abi3)"
        + ("\n  debug build    symbols kept (TORCH_CUDNN_ALGO_DEBUG_BUILD)" if debug else ""),
        flush=True,
    )
    # csrc/ holds one folder per layer (base, store, run, decide, control);
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
                            + (["-DTORCH_CUDNN_ALGO_OWN_KERNELS"] if own_kernels_requested() else [])},
        # Link the soname torch itself loads, so the process keeps a single cuDNN.
        # The rpaths find it next to torch in site-packages, or where we built.
        extra_link_args=[
            f"-l:libcudnn.so.{cudnn_major}",
            "-Wl,-rpath,$ORIGIN/../nvidia/cudnn/lib",
            f"-Wl,-rpath,{cudnn_lib}",
        ] + (cudart_link_args() if own_kernels_requested() else []) + libstdcxx_link_args() + ([] if debug else ["-s"]),
        # Only libtorch and the dispatcher are used (no libtorch_python), so one
        # abi3 wheel serves every CPython >= 3.10 with this torch.
        py_limited_api=True,
    )


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


# Our own kernels (csrc/kernels/*.cu, the "tca.direct" candidate) are built only
# when asked: they need nvcc, and measured against cuDNN's best they do not win
# yet (benchmarks/results/kernels-*.md), so the default build leaves them out.
OWN_KERNELS_ENV = "TORCH_CUDNN_ALGO_OWN_KERNELS"


def own_kernels_requested() -> bool:
    return os.environ.get(OWN_KERNELS_ENV, "") not in ("", "0")


# GPU architectures our own kernels are compiled for: SASS
# for each (sm_80 also runs on sm_86/sm_89) and PTX of the newest, which the
# driver compiles once for a GPU none of them fits.
KERNEL_ARCHS_ENV = "TORCH_CUDNN_ALGO_CUDA_ARCHS"
DEFAULT_KERNEL_ARCHS = "80;90;100;120"


def find_nvcc() -> Path:
    """nvcc of the CUDA toolkit torch finds (CUDA_HOME, nvcc on PATH, /usr/local/cuda)."""
    nvcc = Path(CUDA_HOME) / "bin" / "nvcc" if CUDA_HOME else None
    if nvcc is None or not nvcc.is_file():
        sys.exit(
            "torch-cudnn-algo: nvcc not found; the own kernels (csrc/kernels/) need a CUDA toolkit "
            f"of torch's CUDA major release ({torch.version.cuda}): set CUDA_HOME to it or put its "
            f"nvcc on PATH. Looked for: {nvcc or 'CUDA_HOME unset and no nvcc on PATH'}"
        )
    return nvcc


def kernel_gencode_flags(nvcc: Path) -> list[str]:
    import subprocess

    supported = set(subprocess.run([str(nvcc), "--list-gpu-arch"], capture_output=True, text=True,
                                   check=True).stdout.split())
    archs = [a.strip() for a in os.environ.get(KERNEL_ARCHS_ENV, DEFAULT_KERNEL_ARCHS).split(";") if a.strip()]
    wanted = [a for a in archs if f"compute_{a}" in supported]
    if not wanted:
        sys.exit(f"torch-cudnn-algo: {nvcc} supports none of the architectures {archs} "
                 f"({KERNEL_ARCHS_ENV}); it offers {sorted(supported)}")
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in wanted]
    return flags + [f"-gencode=arch=compute_{wanted[-1]},code=compute_{wanted[-1]}"]


def compile_kernels(build_temp: str) -> list[str]:
    """Compiles csrc/kernels/*.cu with nvcc alone (they include no torch header,
    so only the toolkit's own headers are seen) into objects for the extension;
    an object newer than its sources and built with the same flags is kept."""
    import subprocess

    nvcc = find_nvcc()
    flags = ["-std=c++17", "-O3", "-Xcompiler", "-fPIC", f"-I{ROOT / 'csrc'}", "--expt-relaxed-constexpr"]
    flags += kernel_gencode_flags(nvcc)
    if os.environ.get("CXX"):
        flags += ["-ccbin", os.environ["CXX"]]
    out_dir = Path(build_temp) / "kernels"
    out_dir.mkdir(parents=True, exist_ok=True)
    headers = [*(ROOT / "csrc" / "kernels").glob("*.h"), *(ROOT / "csrc" / "kernels").glob("*.cuh")]
    objects = []
    for source in sorted((ROOT / "csrc" / "kernels").glob("*.cu")):
        target = out_dir / (source.stem + ".o")
        stamp = out_dir / (source.stem + ".flags")
        newest = max(p.stat().st_mtime for p in [source, *headers])
        if not (target.exists() and target.stat().st_mtime >= newest and stamp.exists()
                and stamp.read_text() == " ".join(flags)):
            command = [str(nvcc), *flags, "-c", str(source), "-o", str(target)]
            print("torch-cudnn-algo: " + " ".join(command), flush=True)
            subprocess.run(command, check=True)
            stamp.write_text(" ".join(flags))
        objects.append(str(target))
    return objects


class BuildExtensionSharingLibstdcxx(BuildExtension):
    """BuildExtension that compiles our kernels with nvcc first, and refuses an
    extension not linked to the shared libstdc++.so.6."""

    def build_extension(self, ext) -> None:
        if own_kernels_requested():
            ext.extra_objects = compile_kernels(self.build_temp)
        super().build_extension(ext)
        path = self.get_ext_fullpath(ext.name)
        if "libstdc++.so.6" not in helpers.elf_needed(path):
            sys.exit(
                f"torch-cudnn-algo: {path} does not link libstdc++.so.6: the compiler "
                f"({os.environ.get('CXX') or 'c++'}) linked a static libstdc++ into it, a second "
                "copy beside the one torch uses, which crashes. Build with a compiler whose "
                "shared libstdc++ the linker finds (e.g. CXX=/usr/bin/g++)."
            )


def write_build_info(cudnn_version: str, toolchain) -> None:
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
    })


class BuildPy(build_py):
    """build_py that adds the generated torch_cudnn_algo/_build_info.py to the build (the
    wheel takes the whole build tree). An editable install has none: its gate is off."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "torch_cudnn_algo" / "_build_info.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(helpers.render_build_info(BUILD_INFO))


setup(
    version=VERSION,
    # tqdm: tune()'s progress bar.
    install_requires=[TORCH_REQUIREMENT, "tqdm"],
    ext_modules=[make_extension()],
    cmdclass={"build_ext": BuildExtensionSharingLibstdcxx, "build_py": BuildPy},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
