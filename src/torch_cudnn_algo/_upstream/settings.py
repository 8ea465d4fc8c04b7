"""Settings: named choices of pinned algorithms, and the environment that carries one;
and the :class:`Config` of one invocation, resolved from the command line.

A setting reaches a pytest run only through ``TORCH_CUDNN_CONV_*`` variables, read
by the package's autoload at ``import torch``; the runner itself never imports torch.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

# The package's own flag-value parser (pure Python). Relative: the script loads this
# subpackage under a parent whose __init__ (which imports torch) never runs.
from .. import _algorithms

DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
ENV_VARS = {
    "fwd": "TORCH_CUDNN_CONV_FWD_ALGO",
    "bwd_data": "TORCH_CUDNN_CONV_BWD_DATA_ALGO",
    "bwd_filter": "TORCH_CUDNN_CONV_BWD_FILTER_ALGO",
}
STRICT_VAR = "TORCH_CUDNN_CONV_ALGO_STRICT"
PLAN_VAR = "TORCH_CUDNN_ALGO_PLAN"  # a plan file the autoload puts in use
# Every variable the package reads starts with one of these; all are removed from the
# environment of every run, then the setting's own are added.
ENV_PREFIXES = ("TORCH_CUDNN_CONV_", PLAN_VAR)


class UsageError(ValueError):
    """A bad command line: the script prints it with the usage and exits 2."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """A named choice of pinned algorithms: direction -> canonical flag value as text;
    or a plan file put in use at ``import torch`` (``plan``, no pins)."""

    name: str
    pins: tuple[tuple[str, str], ...]  # in DIRECTIONS order
    plan: str | None = None  # absolute path of a plan file

    @property
    def pin_map(self) -> dict[str, str]:
        return dict(self.pins)

    def env_vars(self, strict: bool = False) -> dict[str, str]:
        env = {ENV_VARS[direction]: value for direction, value in self.pins}
        if self.plan is not None:
            env[PLAN_VAR] = self.plan
        if strict:
            env[STRICT_VAR] = "1"
        return env

    def describe(self) -> str:
        if self.plan is not None:
            return f"plan {Path(self.plan).name}"
        return " ".join(f"{direction}={value}" for direction, value in self.pins)


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name or ""):
        raise UsageError(f"bad setting name {name!r}: use letters, digits, '_', '.', '-'")
    if name == "stock":
        raise UsageError("'stock' is the run without any pin; choose another setting name")


def make_plan_setting(spec: str) -> Setting:
    """``"NAME=PATH"`` (--plan): a setting that puts the plan file at PATH in use."""
    name, sep, path = spec.partition("=")
    name, path = name.strip(), path.strip()
    if not sep or not path:
        raise UsageError(f"--plan {spec!r}: expected NAME=PATH")
    _check_name(name)
    if not Path(path).is_file():
        raise UsageError(f"--plan {spec!r}: no plan file at {path}")
    return Setting(name, (), str(Path(path).resolve()))


def make_setting(name: str, pins: Mapping[str, object]) -> Setting:
    """Validates ``name`` and each direction's value (the package's own parser), canonically."""
    _check_name(name)
    if not pins:
        raise UsageError(f"setting {name!r} pins no direction")
    canonical = {}
    for direction, value in pins.items():
        if direction not in DIRECTIONS:
            raise UsageError(
                f"setting {name!r}: bad direction {direction!r}; expected one of {', '.join(DIRECTIONS)}"
            )
        try:
            parsed = _algorithms.parse_algo_value(_algorithms.DIRECTIONS[direction], value)
        except ValueError as exc:
            raise UsageError(f"setting {name!r}: bad value {value!r} for {direction}: {exc}") from None
        if parsed is None:
            raise UsageError(f"setting {name!r}: {direction} needs a value")
        canonical[direction] = str(parsed)
    return Setting(name, tuple((d, canonical[d]) for d in DIRECTIONS if d in canonical))


def _all_directions(value: object) -> dict[str, object]:
    return dict.fromkeys(DIRECTIONS, value)


# Together they pin every legacy algorithm of every direction at least once
# (backward filter 4 is in cuDNN's enum but not implemented), plus engine 0
# everywhere and the "fastest" policy everywhere.
DEFAULT_SETTINGS: tuple[Setting, ...] = tuple(
    make_setting(name, pins)
    for name, pins in (
        ("legacy0", _all_directions(0)),
        ("legacy1", _all_directions(1)),
        ("fft", {"fwd": 4, "bwd_data": 2, "bwd_filter": 2}),
        ("fft_tiling", {"fwd": 5, "bwd_data": 3, "bwd_filter": 6}),
        ("winograd", {"fwd": 6, "bwd_data": 4}),
        ("winograd_nonfused", {"fwd": 7, "bwd_data": 5, "bwd_filter": 5}),
        ("gemm", {"fwd": 2}),
        ("direct", {"fwd": 3}),
        ("algo3", {"bwd_filter": 3}),
        ("eng0", _all_directions("eng0")),
        ("fastest", _all_directions("fastest")),
    )
)


def parse_setting_spec(spec: str) -> Setting:
    """``"NAME=fwd:4,bwd_data:2,bwd_filter:2"`` -> a validated :class:`Setting`."""
    name, sep, body = spec.partition("=")
    if not sep or not body.strip():
        raise UsageError(f"--setting {spec!r}: expected NAME=DIRECTION:VALUE[,DIRECTION:VALUE...]")
    pins: dict[str, str] = {}
    for item in body.split(","):
        direction, colon, value = item.strip().partition(":")
        direction, value = direction.strip(), value.strip()
        if not colon or not direction or not value:
            raise UsageError(f"--setting {spec!r}: bad item {item.strip()!r}; expected DIRECTION:VALUE")
        if direction in pins:
            raise UsageError(f"--setting {spec!r}: {direction} given twice")
        pins[direction] = value
    return make_setting(name.strip(), pins)


def select_settings(names: str | None, custom: Sequence[str] = (), plans: Sequence[str] = ()) -> list[Setting]:
    """The default settings named in ``names`` (comma-separated; ``None``: all of
    them; ``"none"``: none), then the ``--setting`` specs, then the ``--plan`` ones."""
    by_name = {s.name: s for s in DEFAULT_SETTINGS}
    chosen: list[Setting] = []
    if names is None:
        chosen = list(DEFAULT_SETTINGS)
    elif names.strip().lower() != "none":
        for name in (n.strip() for n in names.split(",")):
            if not name:
                continue
            if name not in by_name:
                raise UsageError(f"unknown setting {name!r}; the defaults are {', '.join(by_name)}")
            if by_name[name] not in chosen:
                chosen.append(by_name[name])
    for setting in [*map(parse_setting_spec, custom), *map(make_plan_setting, plans)]:
        if any(s.name == setting.name for s in chosen) or setting.name in by_name:
            raise UsageError(f"a setting named {setting.name!r} already exists")
        chosen.append(setting)
    if not chosen:
        raise UsageError("no setting to run: name some with --settings or add one with --setting")
    return chosen


def child_environment(
    base: Mapping[str, str], setting: Setting | None, strict: bool = False
) -> dict[str, str]:
    """``base`` without any ``TORCH_CUDNN_CONV_*`` variable or plan, plus the setting's (none for stock)."""
    env = {key: value for key, value in base.items() if not key.startswith(ENV_PREFIXES)}
    if setting is not None:
        env.update(setting.env_vars(strict))
    return env


def settings_help_table() -> str:
    """The default settings as the aligned table of ``--help`` and ``--list-settings``."""
    lines = [f"  {'setting':<19}{'fwd':<9}{'bwd_data':<10}bwd_filter"]
    for s in DEFAULT_SETTINGS:
        fwd, bwd_data, bwd_filter = (s.pin_map.get(d, "-") for d in DIRECTIONS)
        lines.append(f"  {s.name:<19}{fwd:<9}{bwd_data:<10}{bwd_filter}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- one invocation

# What one invocation of the runner asked for, resolved from the command line.
@dataclasses.dataclass(frozen=True)
class Config:
    file: Path  # the test file, resolved; pytest runs in its folder
    settings: tuple[Setting, ...]
    extra: tuple[str, ...]  # pytest arguments after `--`
    k: str
    jobs: int
    timeout: float | None  # per pytest process; None: none
    test_timeout: float | None  # no new line of -v output for this long; None: off
    out: Path  # resolved
    python: str
    strict: bool
    max_restarts: int
    preflight: bool
    large_tensor_tests: str = "alone"  # large_tests.MODES: alone after the parallel phase, skip, parallel

    @property
    def rootdir(self) -> Path:
        return self.file.parent

    @property
    def file_name(self) -> str:
        return self.file.name
