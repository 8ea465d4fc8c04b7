"""How our CUDA kernels (csrc/kernels/*.cu, the candidate "tca.direct") are built: whether, with
which nvcc, for which GPU architectures, and compiled in parallel.

Build-only, as all of buildtools/: nothing at run time imports it. It imports no other build
module, so tests may load it by path on its own. Standard library only, so that tests can check
every rule on a machine without a GPU or a CUDA toolkit.

Every build compiles the kernels (``TORCH_CUDNN_ALGO_OWN_KERNELS=0`` leaves them out, for a
toolchain that cannot build them). The architectures follow PyTorch's own extension builds:

- ``TORCH_CUDA_ARCH_LIST`` when set (``"8.0;9.0+PTX"``, names such as ``"Hopper"``), parsed by
  torch's own ``torch.utils.cpp_extension`` rules;
- else, on a machine with a GPU, the visible GPUs' architectures, as torch's rules choose them
  (a build from source is then fast: one architecture);
- else (wheels, a machine without a GPU) machine code for every architecture the installed torch
  is built for (``torch._C._cuda_getArchFlags()``, sm_75 to sm_120 for the cu130 wheels) plus PTX
  of the newest, which the driver compiles once for a newer GPU none of them fits.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

OWN_KERNELS_ENV = "TORCH_CUDNN_ALGO_OWN_KERNELS"
ARCH_LIST_ENV = "TORCH_CUDA_ARCH_LIST"
JOBS_ENV = "MAX_JOBS"  # torch's own extension builds read it too

# What a build without our kernels gives up (docs/performance.md has the measurements).
WITHOUT_KERNELS = ("the tuner, \"fastest\" and plans choose among cuDNN's candidates only, without "
                   "\"tca.direct\", which makes a tuned step about 1.07x faster than stock benchmark=True "
                   "on depthwise and grouped networks (up to 1.17x on an H200)")

_ON = ("", "1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


class KernelBuildError(Exception):
    """The kernels cannot be built as asked; the message says what to do."""


def kernels_wanted(environ: Mapping[str, str]) -> bool:
    """Whether to build our kernels: yes unless TORCH_CUDNN_ALGO_OWN_KERNELS is 0 (or false, no, off)."""
    value = environ.get(OWN_KERNELS_ENV, "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise KernelBuildError(f"{OWN_KERNELS_ENV}={environ[OWN_KERNELS_ENV]!r} is not valid: set it to 0 to leave "
                           "our kernels out of the build, or leave it unset (or 1) to build them")


# --- nvcc ------------------------------------------------------------------------------------

_RELEASE = re.compile(r"release (\d+)\.(\d+)")


def nvcc_release(nvcc: Path, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str | None:
    """``"13.0"`` from ``nvcc --version``, or None when it does not run."""
    try:
        result = run([str(nvcc), "--version"], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    match = _RELEASE.search(result.stdout or "")
    return f"{match.group(1)}.{match.group(2)}" if result.returncode == 0 and match else None


def nvcc_problem(nvcc: Path, cuda: str, release: str | None) -> str | None:
    """Why ``nvcc`` cannot build kernels for a torch of CUDA ``cuda`` (major.minor), or None."""
    if not nvcc.is_file():
        return "not there"
    if release is None:
        return "does not run"
    if release.split(".")[0] != cuda.split(".")[0]:
        return f"CUDA {release}, not torch's CUDA {cuda} major release"
    # pip's nvidia-cuda-nvcc has no cicc (the device compiler): nvidia-nvvm brings it.
    if not (nvcc.parent.parent / "nvvm" / "bin" / "cicc").is_file():
        return f"lacks {nvcc.parent.parent / 'nvvm' / 'bin' / 'cicc'} (the pip package nvidia-nvvm brings it)"
    return None


@dataclass(frozen=True)
class Nvcc:
    path: Path
    release: str


def choose_nvcc(cuda: str, given: Sequence[Path], pip: Sequence[Path], toolkits: Sequence[Path],
                release_of: Callable[[Path], str | None] = nvcc_release) -> Nvcc:
    """The nvcc that compiles our kernels for a torch of CUDA ``cuda``: one of the toolkit the user
    names (CUDA_HOME, CUDA_PATH), else pip's (``scripts/install-build-deps`` installs it at torch's
    release), else a toolkit on PATH or in /usr/local/cuda. Of the same CUDA major release as torch;
    the pip and system ones of exactly torch's major.minor first. Raises KernelBuildError naming
    where it looked and what to install."""
    looked = []
    fallback: Nvcc | None = None
    for path in [*given, *pip, *toolkits]:
        release = release_of(path) if path.is_file() else None
        problem = nvcc_problem(path, cuda, release)
        if problem is None:
            if path in given or release == cuda:
                return Nvcc(path, release)
            fallback = fallback or Nvcc(path, release)
            problem = f"CUDA {release}, not torch's {cuda}"
        looked.append(f"{path} ({problem})")
    if fallback is not None:
        return fallback
    raise KernelBuildError(
        f"no nvcc of CUDA {cuda} to compile our kernels (csrc/kernels/). Run `python3 scripts/install-build-deps` "
        f"(it installs nvidia-cuda-nvcc and nvidia-nvvm of torch's CUDA release), or set CUDA_HOME to a CUDA "
        f"{cuda.split('.')[0]}.x toolkit, or set {OWN_KERNELS_ENV}=0 to build without them ({WITHOUT_KERNELS}). "
        f"Looked at: {'; '.join(looked) or 'nothing'}")


# nvcc and its device compiler as pip packages, for a machine without a CUDA toolkit
# (scripts/install-build-deps installs them): of exactly torch's CUDA major.minor.
NVCC_PACKAGES = ("nvidia-cuda-nvcc", "nvidia-nvvm")


def nvcc_requirements(cuda: str) -> list[str]:
    """``"13.0"`` -> ``["nvidia-cuda-nvcc==13.0.*", "nvidia-nvvm==13.0.*"]``. Only CUDA 13 ships
    them as these packages (nvidia/cu13/bin/nvcc, nvidia/cu13/nvvm); raises KernelBuildError for others."""
    match = re.match(r"(\d+)\.(\d+)", cuda or "")
    if match is None or match.group(1) != "13":
        raise KernelBuildError(f"CUDA {cuda}: nvcc from pip packages is set up for CUDA 13 builds of torch only; "
                               "install a CUDA toolkit of this release and set CUDA_HOME to it, or set "
                               f"{OWN_KERNELS_ENV}=0 to build without our kernels")
    return [f"{name}=={match.group(1)}.{match.group(2)}.*" for name in NVCC_PACKAGES]


# --- architectures ---------------------------------------------------------------------------

_GENCODE = re.compile(r"-gencode=arch=compute_(\w+),code=(sm|compute)_(\w+)")


@dataclass(frozen=True)
class Architectures:
    flags: tuple[str, ...]  # nvcc -gencode flags
    source: str             # why these: "TORCH_CUDA_ARCH_LIST", "the visible GPUs", "torch's build"

    def names(self) -> list[str]:
        """``["sm_80", "sm_90", "compute_90"]``: machine code per architecture, then PTX."""
        sass = [f"sm_{m.group(3)}" for f in self.flags if (m := _GENCODE.fullmatch(f)) and m.group(2) == "sm"]
        ptx = [f"compute_{m.group(3)}" for f in self.flags if (m := _GENCODE.fullmatch(f)) and m.group(2) == "compute"]
        return sass + ptx

    def describe(self) -> str:
        return f"{' '.join(self.names())} ({self.source})"


def _number(arch: str) -> tuple[int, str]:
    digits = re.match(r"\d+", arch).group(0)
    return int(digits), arch[len(digits):]


def torch_build_flags(arch_flags: str) -> list[str]:
    """Gencode flags from torch's own build (``torch._C._cuda_getArchFlags()``: ``"sm_75 sm_80 ... sm_120"``):
    machine code for each, PTX of the newest."""
    archs = sorted({a[3:] for a in arch_flags.split() if a.startswith("sm_")}, key=_number)
    if not archs:
        return []
    return [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs] + [
        f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}"]


def choose_architectures(environ: Mapping[str, str], gpu_count: int, torch_rules: Callable[[], list[str]],
                         torch_arch_flags: str) -> Architectures:
    """The architectures to compile for (see the module's docstring). ``torch_rules`` is torch's
    ``torch.utils.cpp_extension._get_cuda_arch_flags`` (TORCH_CUDA_ARCH_LIST, else the visible GPUs)."""
    if environ.get(ARCH_LIST_ENV, "").strip():
        flags, source = torch_rules(), f"{ARCH_LIST_ENV}={environ[ARCH_LIST_ENV]}"
    elif gpu_count > 0:
        flags, source = torch_rules(), "the visible GPUs"
    else:
        flags, source = torch_build_flags(torch_arch_flags), "every architecture the installed torch is built for"
        if not flags:
            raise KernelBuildError(f"the installed torch names no GPU architecture it is built for "
                                   f"({torch_arch_flags!r}) and no GPU is visible: set {ARCH_LIST_ENV} "
                                   "(e.g. \"8.0;9.0+PTX\")")
    flags = [f for f in dict.fromkeys(flags) if _GENCODE.fullmatch(f)]
    if not flags:
        raise KernelBuildError(f"no GPU architecture to build for ({source}); set {ARCH_LIST_ENV}, e.g. \"9.0+PTX\"")
    return Architectures(tuple(flags), source)


def supported_by(architectures: Architectures, nvcc_archs: Sequence[str]) -> tuple[Architectures, list[str]]:
    """The architectures this nvcc can compile (``nvcc --list-gpu-arch``: ``compute_90`` ...), and
    the names of those it cannot. Raises KernelBuildError when none is left."""
    offered = set(nvcc_archs)
    kept, dropped = [], []
    for flag in architectures.flags:
        arch = _GENCODE.fullmatch(flag).group(1)
        (kept if f"compute_{arch}" in offered else dropped).append(flag)
    names = Architectures(tuple(dropped), "").names()
    if not kept:
        raise KernelBuildError(f"this nvcc compiles none of the architectures asked for ({architectures.describe()}); "
                               f"it offers {' '.join(sorted(offered, key=lambda a: _number(a.split('_')[1])))}")
    return Architectures(tuple(kept), architectures.source), names


# --- compiling -------------------------------------------------------------------------------


def jobs(environ: Mapping[str, str], cpu_count: int | None) -> int:
    """Parallel nvcc processes: MAX_JOBS (as torch's builds read it) or every CPU."""
    value = environ.get(JOBS_ENV, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise KernelBuildError(f"{JOBS_ENV}={value!r} is not a positive whole number")
        return int(value)
    return max(1, cpu_count or 1)


@dataclass(frozen=True)
class Compilation:
    source: Path
    target: Path
    command: tuple[str, ...]

    @property
    def stamp(self) -> Path:
        return self.target.with_suffix(".flags")

    def up_to_date(self, headers: Sequence[Path]) -> bool:
        """Built from these sources with this command: a rebuild may keep it."""
        if not (self.target.exists() and self.stamp.exists()):
            return False
        newest = max(p.stat().st_mtime for p in [self.source, *headers])
        return self.target.stat().st_mtime >= newest and self.stamp.read_text() == " ".join(self.command)


def compilations(nvcc: Path, sources: Sequence[Path], flags: Sequence[str], out_dir: Path,
                 threads: int) -> list[Compilation]:
    """One nvcc command per kernel file; ``threads`` (nvcc's --threads) compiles a file's
    architectures in parallel when there are more CPUs than files."""
    extra = ["--threads", str(threads)] if threads > 1 else []
    return [Compilation(s, out_dir / (s.stem + ".o"),
                        (str(nvcc), *flags, *extra, "-c", str(s), "-o", str(out_dir / (s.stem + ".o"))))
            for s in sources]


def compile_all(work: Sequence[Compilation], headers: Sequence[Path], parallel: int,
                log: Callable[[str], None] = print) -> list[Path]:
    """Runs the compilations not up to date, ``parallel`` at a time; returns the objects in order.
    Raises KernelBuildError with nvcc's output when one fails."""
    pending = [c for c in work if not c.up_to_date(headers)]

    def one(c: Compilation) -> None:
        log("torch-cudnn-algo: " + " ".join(c.command))
        c.target.parent.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(c.command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise KernelBuildError(f"nvcc failed on {c.source.name} (exit {result.returncode}):\n"
                                   f"{result.stdout[-4000:]}{result.stderr[-4000:]}\nTo build without our kernels: "
                                   f"{OWN_KERNELS_ENV}=0 ({WITHOUT_KERNELS})")
        c.stamp.write_text(" ".join(c.command))

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        for future in [pool.submit(one, c) for c in pending]:
            future.result()
    return [c.target for c in work]


# --- the build's steps -----------------------------------------------------------------------


@dataclass(frozen=True)
class KernelBuild:
    """How this build compiles our kernels, as configure() decided."""

    nvcc: Nvcc
    architectures: Architectures
    dropped: list[str]  # the architectures asked for that this nvcc cannot build
    flags: list[str]
    jobs: int


def configure(environ: Mapping[str, str], cuda: str, nvccs: tuple[Sequence[Path], Sequence[Path], Sequence[Path]],
              torch_rules: Callable[[], list[str]], gpu_count: Callable[[], int],
              torch_arch_flags: Callable[[], str], csrc: Path, cuda_includes: Sequence[Path]) -> KernelBuild | None:
    """Our kernels' nvcc, architectures and flags; None when TORCH_CUDNN_ALGO_OWN_KERNELS=0 leaves
    them out. ``nvccs`` are choose_nvcc's candidates; ``torch_rules``, ``gpu_count`` and
    ``torch_arch_flags`` are torch's (as choose_architectures takes them), asked only when needed.
    Raises KernelBuildError naming the fix when they cannot be built."""
    if not kernels_wanted(environ):
        return None
    nvcc = choose_nvcc(cuda, *nvccs)

    def rules() -> list[str]:
        try:
            return torch_rules()
        except (ValueError, IndexError) as exc:
            raise KernelBuildError(
                f"{ARCH_LIST_ENV}={environ.get(ARCH_LIST_ENV, '')!r}: {exc} "
                "(valid: e.g. \"8.0;9.0+PTX\", or names such as \"Ampere;Hopper\")") from None

    wanted = choose_architectures(environ, gpu_count(), rules, torch_arch_flags())
    listed = subprocess.run([str(nvcc.path), "--list-gpu-arch"], capture_output=True, text=True, check=False)
    architectures, dropped = supported_by(wanted, listed.stdout.split())
    parallel = jobs(environ, os.cpu_count())
    # The runtime headers of torch's CUDA release (the pip packages' have no nvcc.profile of their
    # own), and their cccl (cuda/std, nv/target) as system headers, as a toolkit's nvcc has them.
    includes = [f"-I{d}" for d in cuda_includes[:1]]
    includes += [arg for d in cuda_includes[:1] if (d / "cccl").is_dir() for arg in ("-isystem", str(d / "cccl"))]
    # --compress-mode=size: the kernel objects for six architectures and PTX take 8 MB instead of
    # 50 (decompressed once, when the driver loads a kernel file).
    flags = ["-std=c++17", "-O3", "-Xcompiler", "-fPIC", f"-I{csrc}", *includes, "--expt-relaxed-constexpr",
             "--compress-mode=size",
             # The kernels report what they were built for (a GPU they cannot run on is told why);
             # "/" between the names, since nvcc splits an option's value at commas.
             f"-DTORCH_CUDNN_ALGO_KERNEL_ARCHS={'/'.join(architectures.names())}", *architectures.flags]
    if environ.get("CXX"):
        flags += ["-ccbin", environ["CXX"]]
    return KernelBuild(nvcc, architectures, dropped, flags, parallel)


def compile_kernels(kernels: KernelBuild, directory: Path, build_temp: Path) -> list[str]:
    """Compiles ``directory``'s *.cu (csrc/kernels/) with nvcc alone (they include no torch header,
    so only CUDA's own headers are seen), one process per file in parallel, into objects for the
    extension; an object newer than its sources and built with the same command is kept."""
    sources = sorted(directory.glob("*.cu"))
    headers = [*directory.glob("*.h"), *directory.glob("*.cuh")]
    threads = max(1, kernels.jobs // max(1, len(sources)))
    work = compilations(kernels.nvcc.path, sources, kernels.flags, build_temp / "kernels", threads)
    return [str(o) for o in compile_all(work, headers, min(kernels.jobs, len(sources)),
                                        log=lambda line: print(line, flush=True))]
