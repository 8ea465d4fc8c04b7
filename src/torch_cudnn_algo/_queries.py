"""Read-only questions to the extension: what is registered, what cuDNN supports."""

from __future__ import annotations

import torch
from typing_extensions import Unpack

from . import _ops
from ._algorithms import DIRECTIONS, LegacyDirection
from ._conv_spec import ConvLike, Geometry, TensorLike, as_conv_spec
from ._ops import EngineConfig

__all__ = [
    "EngineConfig",
    "active_overrides",
    "clear_cache",
    "pinned_run_counts",
    "cudnn_version",
    "engine_configs",
    "legacy_algorithm_names",
    "legacy_workspace_sizes",
]

def _direction(direction: str) -> LegacyDirection:
    try:
        return DIRECTIONS[direction]
    except KeyError:
        raise ValueError(
            f"unknown direction {direction!r}; valid directions are {', '.join(DIRECTIONS)}"
        ) from None


def active_overrides() -> list[str]:
    """ATen operators this extension currently overrides (empty when nothing is pinned)."""
    return _ops.active_overrides()


def pinned_run_counts() -> dict[str, int]:
    """How many convolution calls ran a pinned choice or the ``"fastest"``
    policy's pick, per direction, since the process started.

    The counts only grow. Their difference around a call tells "the pinned
    algorithm ran" from "PyTorch never sent this convolution to cuDNN" or "the
    choice was refused and the stock path ran"::

        before = torch_cudnn_algo.diagnostics.pinned_run_counts()
        y = model(x)
        ran = torch_cudnn_algo.diagnostics.pinned_run_counts()["fwd"] - before["fwd"]
    """
    return _ops.pinned_run_counts()


def clear_cache() -> None:
    """Forgets what was built to run each configuration (execution plans, legacy
    algorithm setups) and every ``"fastest"`` decision (with the
    :func:`tuning_log`): the next call per configuration rebuilds (or tunes)
    it and logs (or warns) again."""
    _ops.clear_runner_cache()


def tuning_log() -> list[dict[str, object]]:
    """What the ``"fastest"`` policy decided, one dict per tuning since
    :func:`clear_cache`, in order (a configuration appears again when it was
    tuned again, after ``conv_workspace_limit`` or ``conv_knob_search`` changed):

    ``direction``, ``conv`` (the convolution's description), ``dtype``,
    ``deterministic``, ``pick`` (engine configuration name, or None: stock's
    own path runs), ``stock_config`` (the configuration stock itself runs),
    ``pick_ms`` and ``stock_config_ms`` (median GPU ms per call as the tuner
    timed them, side by side), ``candidates`` (configurations the heuristics
    offered under the rules), ``timed``, ``knob_configs`` (configurations
    ``conv_knob_search`` tried beyond them), ``probed`` (configurations run once to see
    whether they are worth timing further: every timed one), ``seconds`` (tuning time),
    ``workspace`` (bytes of the pick), ``max_rel_error`` (the pick's error
    against float64, when it was checked: a pick other than stock's
    configuration), ``stock_config_max_rel_error`` (stock's configuration's
    error on the same operands) and ``max_rel_error_bound`` (what the pick was
    allowed: twice stock's configuration's error plus the dtype's tolerance).

    Where the time went: ``time_s`` (wall seconds: ``heuristics`` query,
    execution plan ``build``, ``build_sum`` (each execution plan's build added up; builds run in
    parallel), ``wait`` (for the builds :func:`tune` started ahead),
    ``operands``, ``warmup``, ``timing``, ``accuracy`` (float64 reference and
    error checks), ``knob_search``), ``prepared_ahead`` (built by
    :func:`tune`'s background threads: ``heuristics`` and ``build`` then ran
    before ``seconds`` started), ``built`` (execution plans built), ``built_rtc``,
    ``listed_rtc`` and ``deferred_rtc`` (runtime-compiled configurations built,
    among the first round's, and left unbuilt), and ``configs``: per
    configuration considered, ``config``, ``rank`` (in the heuristics' list; -1
    for knob search), ``source`` (``"heuristics_a"``, ``"heuristics_b"``,
    ``"fallback"``; ``""`` for knob search), ``extra`` (the wide search's),
    ``probe`` (its first timed run: ``"near"`` the best one's, within 1.5x,
    so timed further, or ``"far"``; None: not timed, or timed by the knob
    search), ``rtc``, ``build_s`` (None: not built), ``cached``,
    ``runnable``, ``warmup_ms`` (host ms of its first run), ``ms`` (median
    GPU ms, None: not timed) and ``host_us`` (median host µs to enqueue one
    call, None: not timed).
    """
    return _ops.tuning_log()


def cudnn_version() -> int:
    """cuDNN version loaded in this process, e.g. 91900."""
    return _ops.cudnn_runtime_version()


def legacy_algorithm_names(direction: str = "fwd") -> list[str]:
    """Names of a direction's legacy algorithms, indexed by enum value."""
    return list(_direction(direction).names)


def _settings(allow_tf32: bool | None, deterministic: bool | None) -> tuple[bool, bool]:
    """The given settings, None meaning the current torch.backends.cudnn ones
    (determinism also from torch.use_deterministic_algorithms)."""
    if allow_tf32 is None:
        allow_tf32 = torch.backends.cudnn.allow_tf32
    if deterministic is None:
        deterministic = torch.backends.cudnn.deterministic or torch.are_deterministic_algorithms_enabled()
    return bool(allow_tf32), bool(deterministic)


def engine_configs(
    conv: ConvLike,
    input: TensorLike | None = None,
    weight: TensorLike | None = None,
    /,
    *,
    allow_tf32: bool | None = None,
    deterministic: bool | None = None,
    **geometry: Unpack[Geometry],
) -> list[EngineConfig]:
    """The engine configurations cuDNN offers for a convolution: heuristics
    mode A, mode B, then the fallback list, deduplicated, in that order (mode
    A's first usable one is what stock PyTorch runs). Execution plans are built to learn
    their workspace; no convolution is executed.

    The convolution is a :class:`ConvSpec`, its string form
    (``"conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"``), or a
    direction followed by input and weight as ``torch.nn.functional.convNd``
    takes them, with its parameters (``stride``, ``padding``, ``dilation``,
    ``groups``, ``transposed``, ``output_padding``) as keywords.
    ``allow_tf32`` and ``deterministic`` default to the current
    ``torch.backends.cudnn`` settings and decide each configuration's ``refusal``.
    """
    spec = as_conv_spec(conv, input, weight, geometry)
    allow_tf32, deterministic = _settings(allow_tf32, deterministic)
    _ops.require_gpu("diagnostics.engine_configs")
    return _ops.engine_configs(spec, deterministic, allow_tf32)


def legacy_workspace_sizes(
    conv: ConvLike,
    input: TensorLike | None = None,
    weight: TensorLike | None = None,
    /,
    *,
    allow_tf32: bool | None = None,
    **geometry: Unpack[Geometry],
) -> dict[int, int | None]:
    """Workspace bytes each legacy algorithm of the convolution's direction asks
    for, ``None`` where cuDNN does not support it. Nothing is executed.

    The convolution is given as for :func:`engine_configs`. Its memory format
    (from the tensors, or the description's layout) chooses NCHW or NHWC as
    PyTorch would. The direction is the cuDNN call: for a transposed
    convolution the forward pass is ``"bwd_data"`` and the input gradient
    ``"fwd"``. ``allow_tf32`` defaults to ``torch.backends.cudnn.allow_tf32``.
    """
    spec = as_conv_spec(conv, input, weight, geometry)
    allow_tf32, _ = _settings(allow_tf32, deterministic=False)
    _ops.require_gpu("diagnostics.legacy_workspace_sizes")
    sizes: dict[int, int | None] = {}
    for algo in range(len(_direction(spec.direction).names)):
        bytes_ = _ops.legacy_workspace_size(spec, allow_tf32, algo)
        sizes[algo] = None if bytes_ < 0 else int(bytes_)
    return sizes
