"""The flags on ``torch.backends.cudnn``: values, validation, installation, env vars.

Each flag is a property on torch's ``CudnnModule`` class. Setting one parses the
value (``ValueError`` naming the valid values, previous value kept), pushes it to
the extension, and only then records it, so a failure anywhere leaves the old
value in place. Reading returns the canonical form (an int for a legacy algorithm).
"""

from __future__ import annotations

import contextlib
import operator
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from . import _extension, _ops, _warn
from ._algorithms import BACKWARD_DATA, BACKWARD_FILTER, FORWARD, POLICIES, LegacyDirection, parse_algo_value

__all__ = ["FLAGS", "flags", "get_flag", "install", "set_flag", "warn_environment"]


@dataclass(frozen=True)
class Flag:
    name: str  # attribute of torch.backends.cudnn
    default: object
    parse: Callable[[object], object]  # user value -> canonical value (ValueError if bad)
    parse_env: Callable[[str], object]  # environment string -> canonical value
    apply: Callable[[object], None]  # canonical value -> extension state
    doc: str

    @property
    def env_var(self) -> str:
        return "TORCH_CUDNN_" + self.name.upper()


_TRUE_STRINGS = frozenset({"1", "true", "yes", "on"})
_FALSE_STRINGS = frozenset({"", "0", "false", "no", "off"})
_inert_warned: set[str] = set()


ENVIRONMENT = "<environment>"  # where a warning about an environment variable says it comes from
_environment_warnings: dict = {}  # warnings' registry for them: each distinct warning once


def warn_environment(variable: str, value: str, problem: str) -> None:
    """One warning about an environment variable that was read at ``import torch`` and
    ignored. It names the variable and its value, and gives ``<environment>`` as its
    location: there is no line of the user's code to point at, and pointing at this
    package's ``__init__.py`` (where autoload happens to read it) misleads. Its module, for
    warning filters, is ``torch_cudnn_algo``."""
    _warn.warn(
        f"torch_cudnn_algo: ignoring environment variable {variable}={value!r}: {problem}",
        location=(ENVIRONMENT, 0), module="torch_cudnn_algo", registry=_environment_warnings,
    )


def _warn_if_inert(flag_name: str, value: object, default: object) -> bool:
    """True (after one warning per flag) when the extension is missing."""
    if _extension.is_loaded():
        return False
    if value != default and flag_name not in _inert_warned:
        _inert_warned.add(flag_name)
        warnings.warn(
            f"torch.backends.cudnn.{flag_name} has no effect: the torch_cudnn_algo C++ extension is "
            f"not loaded ({_extension.load_error()})",
            stacklevel=4,
        )
    return True


def _algo_flag(direction: LegacyDirection) -> Flag:
    def parse(value: object) -> int | str | None:
        return parse_algo_value(direction, value)

    def parse_env(text: str) -> int | str | None:
        return None if text.strip().lower() in ("", "none") else parse_algo_value(direction, text)

    def apply(value: object) -> None:
        if _warn_if_inert(direction.flag, value, None):
            return
        if value in POLICIES:
            _ops.set_policy(direction.key, value)
        elif isinstance(value, str):
            _ops.set_engine(direction.key, value)
        else:
            _ops.set_legacy_algo(direction.key, -1 if value is None else value)

    return Flag(
        name=direction.flag,
        default=None,
        parse=parse,
        parse_env=parse_env,
        apply=apply,
        doc=(
            f"cuDNN {direction.key} algorithm or engine configuration every cuDNN convolution "
            f"runs, 'fastest' (profile each configuration once and run its fastest candidate "
            f"within tolerance), or None for stock PyTorch. Accepts {direction.valid_values_text()}."
        ),
    )


def _is_numpy_bool(value: object) -> bool:
    return type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")


def _parse_bool(name: str) -> Callable[[object], bool]:
    def parse(value: object) -> bool:
        if isinstance(value, bool) or _is_numpy_bool(value):
            return bool(value)
        raise ValueError(f"torch.backends.cudnn.{name} must be True or False, got {value!r}")

    return parse


def _parse_env_bool(name: str) -> Callable[[str], bool]:
    def parse(text: str) -> bool:
        lowered = text.strip().lower()
        if lowered in _TRUE_STRINGS:
            return True
        if lowered in _FALSE_STRINGS:
            return False
        raise ValueError(
            f"TORCH_CUDNN_{name.upper()}={text!r}: expected one of 1/0, true/false, yes/no, on/off"
        )

    return parse


def _apply_strict(value: object) -> None:
    if not _warn_if_inert("conv_algo_strict", value, False):
        _ops.set_strict(value)


def _parse_workspace_limit(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, bool):
        try:
            limit = operator.index(value)  # int, numpy integers, ...
        except TypeError:
            limit = None
        if limit is not None and limit >= 0:
            return limit
    raise ValueError(
        f"torch.backends.cudnn.conv_workspace_limit must be a number of bytes (an int >= 0) or None, "
        f"got {value!r}"
    )


def _parse_env_workspace_limit(text: str) -> int | None:
    stripped = text.strip()
    if stripped.lower() in ("", "none"):
        return None
    try:
        return _parse_workspace_limit(int(stripped))
    except ValueError:
        raise ValueError(
            f"TORCH_CUDNN_CONV_WORKSPACE_LIMIT={text!r}: expected a number of bytes or 'none'"
        ) from None


def _apply_workspace_limit(value: object) -> None:
    if not _warn_if_inert("conv_workspace_limit", value, None):
        _ops.set_workspace_limit(-1 if value is None else value)


def _apply_profile(value: object) -> None:
    if not _warn_if_inert("conv_profile", value, False):
        _ops.set_profile(value)


def _apply_knob_search(value: object) -> None:
    if not _warn_if_inert("conv_knob_search", value, False):
        _ops.set_knob_search(value)


FLAGS: dict[str, Flag] = {
    flag.name: flag
    for flag in (
        _algo_flag(FORWARD),
        _algo_flag(BACKWARD_DATA),
        _algo_flag(BACKWARD_FILTER),
        Flag(
            name="conv_algo_strict",
            default=False,
            parse=_parse_bool("conv_algo_strict"),
            parse_env=_parse_env_bool("conv_algo_strict"),
            apply=_apply_strict,
            doc=(
                "When a pinned algorithm cannot run a convolution: False warns once per "
                "configuration and runs PyTorch's own choice; True raises a RuntimeError with "
                "the convolution's parameters and a Python repro."
            ),
        ),
        Flag(
            name="conv_workspace_limit",
            default=None,
            parse=_parse_workspace_limit,
            parse_env=_parse_env_workspace_limit,
            apply=_apply_workspace_limit,
            doc=(
                "Most workspace bytes a pinned choice or the 'fastest' policy may use, or None for "
                "no limit. A pinned choice over it is refused like an unsupported one (warning, or "
                "error under conv_algo_strict) and the stock path runs; 'fastest' skips candidates "
                "over it."
            ),
        ),
        Flag(
            name="conv_profile",
            default=False,
            parse=_parse_bool("conv_profile"),
            parse_env=_parse_env_bool("conv_profile"),
            apply=_apply_profile,
            doc=(
                "Profile every candidate of each new cuDNN convolution configuration once and log "
                "its table (logger 'torch_cudnn_algo', INFO) before the configuration runs."
            ),
        ),
        Flag(
            name="conv_knob_search",
            default=False,
            parse=_parse_bool("conv_knob_search"),
            parse_env=_parse_env_bool("conv_knob_search"),
            apply=_apply_knob_search,
            doc=(
                "Let the 'fastest' policy also search the knob values of its best engines beyond "
                "the configurations cuDNN's heuristics list (up to about 1 s more per "
                "configuration). Changing it forgets the policy's decisions."
            ),
        ),
    )
}

_values: dict[str, object] = {name: flag.default for name, flag in FLAGS.items()}
_installed = False


def _flag(name: str) -> Flag:
    try:
        return FLAGS[name]
    except KeyError:
        raise ValueError(
            f"unknown torch_cudnn_algo flag {name!r}; flags are {', '.join(FLAGS)}"
        ) from None


def get_flag(name: str) -> object:
    """Current canonical value of a flag."""
    _flag(name)
    return _values[name]


def _set_canonical(flag: Flag, value: object) -> None:
    flag.apply(value)
    _values[flag.name] = value


def set_flag(name: str, value: object) -> None:
    """Validates, applies and records a flag value; on error nothing changes."""
    flag = _flag(name)
    _set_canonical(flag, flag.parse(value))


def _make_property(flag: Flag) -> property:
    def getter(_module: object) -> object:
        return _values[flag.name]

    def setter(_module: object, value: object) -> None:
        set_flag(flag.name, value)

    return property(getter, setter, doc=flag.doc)


def _apply_environment() -> None:
    # Strict and the limit first, so a pinned algorithm from the environment starts under them.
    first = ("conv_algo_strict", "conv_workspace_limit")
    for flag in sorted(FLAGS.values(), key=lambda f: f.name not in first):
        text = os.environ.get(flag.env_var)
        if text is None:
            continue
        try:
            value = flag.parse_env(text)
            if value != flag.default and not _extension.is_loaded() and flag.name not in _inert_warned:
                _inert_warned.add(flag.name)  # said here, naming the variable, not as an assignment
                warn_environment(flag.env_var, text, "no effect: the torch_cudnn_algo C++ extension is not "
                                                     f"loaded ({_extension.load_error()})")
            _set_canonical(flag, value)
        except Exception as exc:  # never fail `import torch` over an env var
            warn_environment(flag.env_var, text, str(exc))


def install() -> None:
    """Adds the flags to ``torch.backends.cudnn`` (idempotent) and applies, in
    order, the ``TORCH_CUDNN_*`` environment variables and any value a script
    assigned to ``torch.backends.cudnn.<flag>`` before the flags existed."""
    global _installed
    if _installed:
        return
    import torch.backends.cudnn

    module = torch.backends.cudnn
    module_class = type(module)
    for flag in FLAGS.values():
        setattr(module_class, flag.name, _make_property(flag))
    _installed = True
    _apply_environment()
    for name in FLAGS:
        if name in module.__dict__:  # set before installation: honour it
            value = module.__dict__.pop(name)
            try:
                set_flag(name, value)
            except ValueError as exc:
                _warn.warn(f"torch_cudnn_algo: ignoring torch.backends.cudnn.{name}: {exc}", stacklevel=3)


_UNSET = object()


@contextlib.contextmanager
def flags(
    conv_fwd_algo: object = _UNSET,
    conv_bwd_data_algo: object = _UNSET,
    conv_bwd_filter_algo: object = _UNSET,
    conv_algo_strict: object = _UNSET,
    conv_workspace_limit: object = _UNSET,
    conv_profile: object = _UNSET,
    conv_knob_search: object = _UNSET,
) -> Iterator[None]:
    """Sets flags for the duration of a ``with`` block, like ``torch.backends.cudnn.flags``.

    Every value is validated before any is applied; the previous values are
    restored on exit, also when the block raises.
    """
    given = {
        "conv_fwd_algo": conv_fwd_algo,
        "conv_bwd_data_algo": conv_bwd_data_algo,
        "conv_bwd_filter_algo": conv_bwd_filter_algo,
        "conv_algo_strict": conv_algo_strict,
        "conv_workspace_limit": conv_workspace_limit,
        "conv_profile": conv_profile,
        "conv_knob_search": conv_knob_search,
    }
    requested = {name: value for name, value in given.items() if value is not _UNSET}
    parsed = {name: FLAGS[name].parse(value) for name, value in requested.items()}
    previous = {name: _values[name] for name in parsed}
    applied: list[str] = []
    try:
        for name, value in parsed.items():
            _set_canonical(FLAGS[name], value)
            applied.append(name)
        yield
    finally:
        for name in reversed(applied):
            _set_canonical(FLAGS[name], previous[name])
