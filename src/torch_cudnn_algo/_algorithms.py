"""cuDNN's legacy convolution algorithms and the parsing of flag values naming them.

Pure Python (no extension, no GPU) so flag validation works, and is tested,
everywhere. The C++ side carries the same table for its messages; a test checks
the two agree.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

__all__ = [
    "DIRECTIONS",
    "LegacyDirection",
    "POLICIES",
    "canonical_engine_name",
    "parse_algo_value",
]


# Flag values that choose per configuration instead of pinning one choice.
POLICIES = ("fastest",)
# Our own kernels, candidates beside cuDNN's (docs/usage.md, "Our own kernels").
KERNELS = ("tca.direct",)


@dataclass(frozen=True)
class LegacyDirection:
    """One cuDNN convolution direction and its legacy algorithm enum."""

    key: str  # "fwd", "bwd_data", "bwd_filter": the extension's spelling
    flag: str  # the torch.backends.cudnn attribute
    enum_prefix: str  # cuDNN's enum prefix, accepted (optionally) in names
    names: tuple[str, ...]  # indexed by enum value
    unimplemented: frozenset[int] = frozenset()  # in the enum, never implemented by cuDNN
    nondeterministic: frozenset[int] = frozenset()

    def describe(self, algo: int) -> str:
        return f"{algo} ({self.names[algo]})"

    def valid_values_text(self) -> str:
        usable = [self.describe(i) for i in range(len(self.names)) if i not in self.unimplemented]
        return (
            f"None, an int or a name among {', '.join(usable)} (names are case-insensitive and may "
            f"carry the {self.enum_prefix} prefix), a cuDNN engine configuration name such as "
            "'eng62' or 'eng62_k2=1_k13=1', our own kernel 'tca.direct', or the policy 'fastest'"
        )


FORWARD = LegacyDirection(
    key="fwd",
    flag="conv_fwd_algo",
    enum_prefix="CUDNN_CONVOLUTION_FWD_ALGO_",
    names=(
        "IMPLICIT_GEMM",
        "IMPLICIT_PRECOMP_GEMM",
        "GEMM",
        "DIRECT",
        "FFT",
        "FFT_TILING",
        "WINOGRAD",
        "WINOGRAD_NONFUSED",
    ),
)
BACKWARD_DATA = LegacyDirection(
    key="bwd_data",
    flag="conv_bwd_data_algo",
    enum_prefix="CUDNN_CONVOLUTION_BWD_DATA_ALGO_",
    names=("ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"),
    nondeterministic=frozenset({0}),
)
BACKWARD_FILTER = LegacyDirection(
    key="bwd_filter",
    flag="conv_bwd_filter_algo",
    enum_prefix="CUDNN_CONVOLUTION_BWD_FILTER_ALGO_",
    names=("ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"),
    unimplemented=frozenset({4}),
    nondeterministic=frozenset({0, 3}),
)

DIRECTIONS: dict[str, LegacyDirection] = {d.key: d for d in (FORWARD, BACKWARD_DATA, BACKWARD_FILTER)}

# cuDNN graph-API engine configuration names: "eng62" or "eng62_k2=1_k13=1".
_ENGINE_NAME = re.compile(r"eng(\d{1,9})((?:_k\d{1,9}=-?\d{1,18})*)", re.IGNORECASE)
_KNOB = re.compile(r"_k(\d+)=(-?\d+)", re.IGNORECASE)
_INTEGER = re.compile(r"[+-]?\d+")


_ENGINE_PREFIX = re.compile(r"eng\d", re.IGNORECASE)  # what a value meant as an engine name starts with
_ENGINE_PART = re.compile(r"eng\d{1,9}", re.IGNORECASE)
_KNOB_PART = re.compile(r"k\d{1,9}=-?\d{1,18}", re.IGNORECASE)


def _engine_name_problem(name: str) -> str:
    """Which part of a would-be engine name is wrong, as the end of a sentence
    (``": knob 'k2' has the value 'banana', which is not an integer"``), or ``""``."""
    engine, *knobs = name.split("_")
    if not _ENGINE_PART.fullmatch(engine):
        return f": {engine!r} is not 'eng' followed by the engine's number"
    for knob in knobs:
        if _KNOB_PART.fullmatch(knob):
            continue
        key, equals, value = knob.partition("=")
        if not re.fullmatch(r"k\d{1,9}", key, re.IGNORECASE):
            return f": {knob!r} is not a knob (a knob is 'k' followed by its id, '=', and its value)"
        if not equals:
            return f": knob {key!r} has no value ('{key}=V')"
        return f": knob {key!r} has the value {value!r}, which is not an integer"
    return ""


def canonical_engine_name(name: str) -> str:
    """``"ENG62_k13=1_k2=1"`` -> ``"eng62_k2=1_k13=1"`` (lower case, knobs by id).

    The same canonical form as the extension's (a test checks they agree), so
    names round-trip through the flags even while the extension is not loaded.
    """
    match = _ENGINE_NAME.fullmatch(name.strip())
    if match is None:
        raise ValueError(
            f"{name!r} is not an engine configuration name{_engine_name_problem(name.strip())}; expected "
            "'engN' or 'engN_kA=V_kB=W...' with integers N, A and V (for example 'eng62' or 'eng62_k2=1_k13=1')"
        )
    knobs = sorted((int(k), int(v)) for k, v in _KNOB.findall(match.group(2)))
    if len({k for k, _ in knobs}) != len(knobs):
        raise ValueError(f"{name!r} sets a knob twice")
    return f"eng{int(match.group(1))}" + "".join(f"_k{k}={v}" for k, v in knobs)


def _check_index(direction: LegacyDirection, algo: int) -> int:
    if not 0 <= algo < len(direction.names):
        raise ValueError(
            f"torch.backends.cudnn.{direction.flag}: {algo} is out of range; valid values are "
            f"{direction.valid_values_text()}"
        )
    if algo in direction.unimplemented:
        raise ValueError(
            f"torch.backends.cudnn.{direction.flag}: {direction.describe(algo)} is in cuDNN's enum "
            f"but not implemented by cuDNN; valid values are {direction.valid_values_text()}"
        )
    return algo


def parse_algo_value(direction: LegacyDirection, value: object) -> int | str | None:
    """Canonical form of a value assigned to a direction's flag.

    Returns ``None`` (stock PyTorch), the legacy enum value, the canonical
    engine configuration name, our own kernel's name (``"tca.direct"``), or
    ``"fastest"``. Raises ``ValueError`` naming
    the valid values for anything else.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(
            f"torch.backends.cudnn.{direction.flag} does not take a bool ({value!r}); valid values "
            f"are {direction.valid_values_text()}"
        )
    if isinstance(value, str):
        text = value.strip()
        if _INTEGER.fullmatch(text):
            return _check_index(direction, int(text))
        name = text.upper()
        if name.startswith(direction.enum_prefix):
            name = name[len(direction.enum_prefix) :]
        # cuDNN spells the numbered backward algorithms CUDNN_CONVOLUTION_BWD_*_ALGO_0.
        for candidate in (name, "ALGO_" + name):
            if candidate in direction.names:
                return _check_index(direction, direction.names.index(candidate))
        if _ENGINE_PREFIX.match(text):
            try:
                return canonical_engine_name(text)
            except ValueError as exc:
                raise ValueError(f"torch.backends.cudnn.{direction.flag}: {exc}") from None
        if text.lower() in POLICIES or text.lower() in KERNELS:
            return text.lower()
        raise ValueError(
            f"torch.backends.cudnn.{direction.flag}: unknown algorithm {value!r}; valid values are "
            f"{direction.valid_values_text()}"
        )
    try:
        algo = operator.index(value)  # int, numpy integers, ...
    except TypeError:
        raise ValueError(
            f"torch.backends.cudnn.{direction.flag} does not take a {type(value).__name__} "
            f"({value!r}); valid values are {direction.valid_values_text()}"
        ) from None
    return _check_index(direction, algo)
