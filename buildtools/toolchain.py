"""The C++ compiler a build uses, chosen for the libstdc++ this Python loads, and how the
extension links it.

Two libstdc++ hazards:

1. A second, private libstdc++. A compiler wrapper whose ``-B`` directory holds
   ``libstdc++.a`` and a *dangling* ``libstdc++.so`` symlink (some images' default
   ``CXX``) makes the driver's implicit ``-lstdc++`` silently link the static
   archive: the extension then carries its own copy of libstdc++ (no
   ``libstdc++.so.6`` among its DT_NEEDED entries) and dies with SIGSEGV in
   ``std::ostream`` at its first log line. The build therefore
   links the libstdc++ this Python loads by soname (``-l:libstdc++.so.6``, from
   its directory), and refuses a linked extension whose DT_NEEDED lacks it
   (``static_libstdcxx_problem``).
2. Headers newer than the runtime. Code compiled with a GCC's headers needs
   that GCC's libstdc++ or newer at run time; the Python process loads one
   libstdc++.so.6 for everyone (torch's, usually the system's). A compiler's
   libstdc++ is the one ``$CXX -print-file-name=libstdc++.so.6`` names; versions
   are compared by the highest ``GLIBCXX_x.y.z`` symbol version each library
   defines, and a newer compiler is replaced by a matching one. The runtime's
   version gate refuses an extension whose recorded libstdc++ is newer than the
   loaded one (src/torch_cudnn_algo/_version_gate.py, which reads the versions).

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
import subprocess
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import elf
from .version_gate import gate

SKIP_LIBSTDCXX_CHECK = "TORCH_CUDNN_ALGO_SKIP_LIBSTDCXX_CHECK"


class ToolchainError(Exception):
    """No usable C++ compiler; the message says what to do."""


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
    glibcxx: gate.Version | None


def inspect_compiler(command: str) -> Compiler:
    library = compiler_libstdcxx(command)
    return Compiler(command, library, gate.glibcxx_version(library))


@dataclass(frozen=True)
class ToolchainChoice:
    compiler: Compiler
    requested: Compiler
    runtime_libstdcxx: str | None
    runtime_glibcxx: gate.Version | None

    @property
    def switched(self) -> bool:
        return self.compiler.command != self.requested.command

    def describe(self) -> str:
        c = self.compiler
        return (f"{c.command} (libstdc++ {gate.format_glibcxx(c.glibcxx)}; this Python loads "
                f"{self.runtime_libstdcxx or 'no libstdc++ yet'}, {gate.format_glibcxx(self.runtime_glibcxx)})")


def newer_than_runtime(compiler: Compiler, runtime: gate.Version | None) -> bool:
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
    runtime = gate.glibcxx_version(runtime_libstdcxx)
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
        tried.append(f"{path} ({gate.format_glibcxx(candidate.glibcxx)})")
        if candidate.glibcxx is not None and candidate.glibcxx <= runtime:
            if best is None or candidate.glibcxx > best.glibcxx:
                best = candidate
    if best is not None:
        return ToolchainChoice(best, wanted, runtime_libstdcxx, runtime)
    raise ToolchainError(
        f"the C++ compiler {requested} comes with libstdc++ {gate.format_glibcxx(wanted.glibcxx)} "
        f"({wanted.libstdcxx}), newer than the libstdc++ this Python loads ({runtime_libstdcxx}, "
        f"{gate.format_glibcxx(runtime)}): an extension compiled with its headers can crash at run time "
        f"(SIGSEGV in std::ostream). No compiler with a libstdc++ not newer than {gate.format_glibcxx(runtime)} "
        f"was found (tried: {', '.join(tried) or 'none on PATH'}). Set CXX to one (a g++ of "
        f"{gate.gcc_release(runtime) or 'that release'} or older, e.g. the system's /usr/bin/g++), or make Python "
        f"load the compiler's libstdc++ here and wherever the extension runs (LD_LIBRARY_PATH="
        f"{os.path.dirname(wanted.libstdcxx or '') or '<its lib dir>'}), or set "
        f"{SKIP_LIBSTDCXX_CHECK}=1 to build anyway."
    )


# --- the build's steps ------------------------------------------------------------------------


def configure() -> ToolchainChoice:
    """Makes the build use a C++ compiler whose libstdc++ is not newer than the one this
    Python process loads (the one the extension will share at run time; the module's
    docstring says why this rather than a static libstdc++). When $CXX (default c++) is
    newer, sets CXX, which torch's ninja build compiles and setuptools links with, to a
    matching g++; sets CC too when switching or when CC is newer (without ninja,
    setuptools compiles with CC). Raises ToolchainError naming a fix when no compiler fits.
    """
    requested = os.environ.get("CXX") or "c++"
    if os.environ.get(SKIP_LIBSTDCXX_CHECK, "") not in ("", "0"):
        compiler = inspect_compiler(requested)
        print(f"torch-cudnn-algo: {SKIP_LIBSTDCXX_CHECK} is set: building with {requested} "
              "without checking its libstdc++", flush=True)
        return ToolchainChoice(compiler, compiler, gate.loaded_libstdcxx(), None)
    choice = choose_compiler(requested, gate.loaded_libstdcxx())
    if choice.switched:
        print(
            f"torch-cudnn-algo: CXX={requested} comes with libstdc++ "
            f"{gate.format_glibcxx(choice.requested.glibcxx)}, newer than the "
            f"{gate.format_glibcxx(choice.runtime_glibcxx)} this Python loads "
            f"({choice.runtime_libstdcxx}); an extension compiled with its headers can crash in it. "
            f"Building with {choice.compiler.command} ({gate.format_glibcxx(choice.compiler.glibcxx)}) instead.",
            flush=True,
        )
        os.environ["CXX"] = choice.compiler.command
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC")
    if choice.switched or (cc and newer_than_runtime(inspect_compiler(cc), choice.runtime_glibcxx)):
        os.environ["CC"] = c_compiler_for(choice.compiler.command) or choice.compiler.command
    return choice


def libstdcxx_link_args() -> list[str]:
    """Link the libstdc++ this Python loads, by soname, ahead of the driver's implicit
    -lstdc++: a compiler whose libstdc++.so cannot be found (the GPU image's
    /opt/gcc/bin/g++ has a dangling one) otherwise links libstdc++.a into the extension,
    a second libstdc++ in the process that crashed in std::ostream (hazard 1)."""
    loaded = gate.loaded_libstdcxx()
    directory = [f"-L{os.path.dirname(loaded)}"] if loaded else []
    return directory + ["-l:libstdc++.so.6"]


def static_libstdcxx_problem(library: str | os.PathLike) -> str | None:
    """Why a linked extension must not be shipped (it does not link the shared libstdc++.so.6), or None."""
    if "libstdc++.so.6" in elf.elf_needed(library):
        return None
    return (f"{library} does not link libstdc++.so.6: the compiler "
            f"({os.environ.get('CXX') or 'c++'}) linked a static libstdc++ into it, a second "
            "copy beside the one torch uses, which crashes. Build with a compiler whose "
            "shared libstdc++ the linker finds (e.g. CXX=/usr/bin/g++).")
