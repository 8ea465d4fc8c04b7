"""Which torch a build accepts, and what the wheel says about the one it is built against: its
version (``0.1.0+cu130torch2.11``) and its torch requirement (``torch==2.11.*``). The extension
is compiled against torch's C++ ABI and loads only into the torch minor release it was built with.
"""

from __future__ import annotations

from .version_gate import gate

ALLOW_UNSUPPORTED_TORCH = "TORCH_CUDNN_ALGO_ALLOW_UNSUPPORTED_TORCH"


def _minor_key(version: str) -> tuple[int, int]:
    major, minor = gate.major_minor(version).split(".")
    return int(major), int(minor)


def torch_support_problem(torch_version: str, cuda: str | None) -> str | None:
    """Why this package cannot be built against ``torch_version`` (None when it can):
    a CPU-only torch, or a minor release outside SUPPORTED_TORCH."""
    if not cuda:
        return gate.cpu_only_torch_message(torch_version)
    minor = gate.major_minor(torch_version)
    if minor in gate.SUPPORTED_TORCH:
        return None
    side = "older" if _minor_key(minor) < _minor_key(gate.SUPPORTED_TORCH[0]) else "newer"
    return (
        f"torch {torch_version} is {side} than the releases this package supports "
        f"({', '.join(gate.SUPPORTED_TORCH)}): it patches torch's private convolution path, which changes "
        f"between minor releases. Install a supported one (`python3 -m pip install \"torch{gate.SUPPORTED_TORCH_RANGE}\"`), "
        f"or set {ALLOW_UNSUPPORTED_TORCH}=1 to build against this one anyway (untested)"
    )


def local_version(base: str, torch_version: str, cuda: str | None) -> str:
    """``("0.1.0", "2.11.0+cu130", "13.0")`` -> ``"0.1.0+cu130torch2.11"``."""
    accelerator = "cu" + cuda.replace(".", "") if cuda else "cpu"
    return f"{base}+{accelerator}torch{gate.major_minor(torch_version)}"


def torch_requirement(torch_version: str) -> str:
    """``"2.11.0+cu130"`` -> ``"torch==2.11.*"`` (the extension is tied to torch's minor release)."""
    return f"torch=={gate.major_minor(torch_version)}.*"
