"""What a build is made for: the configuration banner setup.py prints (so that a failed cluster
build says what it looked at), and the record it writes as torch_cudnn_algo/_build_info.py,
which the runtime's version gate reads at import.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from . import cuda_kernels
from .dependencies import Found
from .toolchain import ToolchainChoice


def record(version: str, torch_version: str, cuda: str, found: Found, toolchain: ToolchainChoice,
           kernels: cuda_kernels.KernelBuild | None) -> dict[str, str | None]:
    """The contents of _build_info.py."""
    return {
        "VERSION": version,
        "TORCH": torch_version,
        "CUDA": cuda,
        "CUDNN": found.cudnn.version,
        "CXX": toolchain.compiler.command,
        # The compiler's libstdc++ (its headers' release): the oldest one the extension runs with.
        "GLIBCXX": ".".join(map(str, toolchain.compiler.glibcxx)) if toolchain.compiler.glibcxx else None,
        # Our kernels' architectures ("sm_80 sm_90 compute_90"), None in a build without them.
        "KERNEL_ARCHS": " ".join(kernels.architectures.names()) if kernels else None,
    }


def render_build_info(info: Mapping[str, str | None]) -> str:
    lines = ['"""What this build of torch_cudnn_algo was made for; written by setup.py, do not edit."""', ""]
    lines += [f"{key} = {value!r}" for key, value in info.items()]
    return "\n".join(lines) + "\n"


def banner(requirement: str, info: Mapping[str, str | None], torch_dir: Path, found: Found,
           toolchain: ToolchainChoice, kernels: cuda_kernels.KernelBuild | None, debug: bool) -> str:
    """The resolved configuration, as setup.py prints it before compiling."""
    cudnn = found.cudnn
    if kernels:
        own_kernels = (f"{kernels.nvcc.path} (CUDA {kernels.nvcc.release}) for {kernels.architectures.describe()}"
                       + (f"; this nvcc cannot build {' '.join(kernels.dropped)}" if kernels.dropped else ""))
    else:
        own_kernels = f"left out ({cuda_kernels.OWN_KERNELS_ENV}=0): {cuda_kernels.WITHOUT_KERNELS}"
    return (
        "torch-cudnn-algo build configuration:\n"
        f"  version        {info['VERSION']} (requires {requirement})\n"
        f"  torch          {info['TORCH']} (CUDA {info['CUDA']}) at {torch_dir}\n"
        f"  cuDNN headers  {cudnn.include} (cuDNN {cudnn.version})\n"
        f"  cuDNN library  {cudnn.lib}/libcudnn.so.{cudnn.major}\n"
        f"  CUDA headers   {', '.join(map(str, found.cuda_includes))}\n"
        f"  cuDNN frontend {found.frontend_include}\n"
        f"  C++ compiler   {toolchain.describe()}\n"
        f"  own kernels    {own_kernels}\n"
        f"  python         {sys.version.split()[0]} (stable ABI, abi3)"
        + ("\n  debug build    symbols kept (TORCH_CUDNN_ALGO_DEBUG_BUILD)" if debug else "")
    )
