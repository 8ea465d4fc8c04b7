"""Read-only questions to the extension: what is registered, what cuDNN supports."""

from __future__ import annotations

import json

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from . import _extension
from ._algorithms import DIRECTIONS, LegacyDirection

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

IntOrSequence = int | Sequence[int]


def _direction(direction: str) -> LegacyDirection:
    try:
        return DIRECTIONS[direction]
    except KeyError:
        raise ValueError(
            f"unknown direction {direction!r}; valid directions are {', '.join(DIRECTIONS)}"
        ) from None


def active_overrides() -> list[str]:
    """ATen operators this extension currently overrides (empty when nothing is pinned)."""
    return list(_extension.ops().active_overrides())


def pinned_run_counts() -> dict[str, int]:
    """How many convolution calls ran one of our plans (a pinned choice or the
    ``"fastest"`` policy's pick), per direction, since the process started.

    The counts only grow. Their difference around a call tells "the pinned
    algorithm ran" from "PyTorch never sent this convolution to cuDNN" or "the
    choice was refused and the stock path ran"::

        before = torch_cudnn_algo.pinned_run_counts()
        y = model(x)
        ran = torch_cudnn_algo.pinned_run_counts()["fwd"] - before["fwd"]
    """
    fwd, bwd_data, bwd_filter = _extension.ops().pinned_run_counts()
    return {"fwd": fwd, "bwd_data": bwd_data, "bwd_filter": bwd_filter}


def clear_cache() -> None:
    """Forgets every cached plan and every ``"fastest"`` decision (with the
    :func:`tuning_log`): the next call per configuration rebuilds (or tunes)
    it and logs (or warns) again."""
    _extension.ops().clear_plan_cache()


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
    ``conv_knob_search`` tried beyond them), ``seconds`` (tuning time),
    ``workspace`` (bytes of the pick), ``max_rel_error`` (the pick's error
    against float64, when it was checked; stock's configuration is not).
    """
    return [json.loads(entry) for entry in _extension.ops().tuning_log()]


def cudnn_version() -> int:
    """cuDNN version loaded in this process, e.g. 91900."""
    return int(_extension.ops().cudnn_runtime_version())


def legacy_algorithm_names(direction: str = "fwd") -> list[str]:
    """Names of a direction's legacy algorithms, indexed by enum value."""
    return list(_direction(direction).names)


def _expand(name: str, value: IntOrSequence, spatial_dims: int) -> list[int]:
    values = [int(value)] * spatial_dims if isinstance(value, int) else [int(v) for v in value]
    if len(values) != spatial_dims:
        raise ValueError(f"{name} must be an int or {spatial_dims} ints, got {value!r}")
    return values


def _settings(allow_tf32: bool | None, deterministic: bool | None) -> tuple[bool, bool]:
    """The given settings, None meaning the current torch.backends.cudnn ones
    (determinism also from torch.use_deterministic_algorithms)."""
    if allow_tf32 is None:
        allow_tf32 = torch.backends.cudnn.allow_tf32
    if deterministic is None:
        deterministic = torch.backends.cudnn.deterministic or torch.are_deterministic_algorithms_enabled()
    return bool(allow_tf32), bool(deterministic)


def _user_conv_args(input, weight, stride, padding, dilation, output_padding):
    """(input, weight, {param: list}) with 1-d convolutions lifted to 2-d [N, C, 1, L]."""
    params = {"stride": stride, "padding": padding, "dilation": dilation, "output_padding": output_padding}
    if input.dim() == 3:  # 1-d convolutions reach cuDNN as the 2-d problem [N, C, 1, L]
        input, weight = input.unsqueeze(2), weight.unsqueeze(2)
        unit = {"stride": 1, "padding": 0, "dilation": 1, "output_padding": 0}
        params = {name: [unit[name]] + _expand(name, value, 1) for name, value in params.items()}
    spatial = input.dim() - 2
    return input, weight, {name: _expand(name, value, spatial) for name, value in params.items()}


@dataclass(frozen=True)
class EngineConfig:
    """One cuDNN graph-API engine configuration offered for a convolution."""

    name: str  # assign this to the direction's flag to pin it
    source: str  # "heuristics_a", "heuristics_b" or "fallback"
    workspace: int | None  # bytes; None if cuDNN could not build the plan
    numerical_notes: tuple[str, ...]  # TENSOR_CORE, DOWN_CONVERT_INPUTS, FFT, WINOGRAD, NONDETERMINISTIC, ...
    behavior_notes: tuple[str, ...]  # RUNTIME_COMPILATION, ...
    knob_space: str  # the engine's knobs and their ranges, e.g. "k2=0..3 k13=0..1"
    refusal: str | None  # why pinning it would be refused under the given settings


def engine_configs(
    direction: str,
    input: torch.Tensor,
    weight: torch.Tensor,
    *,
    stride: IntOrSequence = 1,
    padding: IntOrSequence = 0,
    dilation: IntOrSequence = 1,
    groups: int = 1,
    transposed: bool = False,
    output_padding: IntOrSequence = 0,
    allow_tf32: bool | None = None,
    deterministic: bool | None = None,
) -> list[EngineConfig]:
    """The engine configurations cuDNN offers for a convolution in ``direction``:
    heuristics mode A, mode B, then the fallback list, deduplicated, in that order
    (mode A's first usable one is what stock PyTorch runs). Plans are built to
    learn their workspace; no convolution is executed.

    Arguments as for :func:`legacy_workspace_sizes`; ``allow_tf32`` and
    ``deterministic`` default to the current ``torch.backends.cudnn`` settings and
    decide each configuration's ``refusal``.
    """
    spec = _direction(direction)
    input, weight, p = _user_conv_args(input, weight, stride, padding, dilation, output_padding)
    allow_tf32, deterministic = _settings(allow_tf32, deterministic)
    columns = _extension.ops().engine_configs(
        spec.key, input, weight, p["padding"], p["stride"], p["dilation"], groups, transposed,
        p["output_padding"], deterministic, allow_tf32,
    )
    split = lambda text: tuple(text.split(",")) if text else ()  # noqa: E731
    return [
        EngineConfig(name, source, None if workspace < 0 else int(workspace), split(numerical),
                     split(behavior), knobs, refusal or None)
        for name, source, workspace, numerical, behavior, knobs, refusal in zip(*columns)
    ]


def legacy_workspace_sizes(
    direction: str,
    input: torch.Tensor,
    weight: torch.Tensor,
    *,
    stride: IntOrSequence = 1,
    padding: IntOrSequence = 0,
    dilation: IntOrSequence = 1,
    groups: int = 1,
    transposed: bool = False,
    output_padding: IntOrSequence = 0,
    allow_tf32: bool | None = None,
) -> dict[int, int | None]:
    """Workspace bytes each legacy algorithm of ``direction`` asks for on this
    convolution, ``None`` where cuDNN does not support it. Nothing is executed.

    ``input`` and ``weight`` are CUDA tensors shaped as for ``torch.nn.functional.convNd``
    (``conv_transposeNd`` with ``transposed=True``); their memory format chooses NCHW
    or NHWC as PyTorch would. ``direction`` is the cuDNN call: for a transposed
    convolution the forward pass is ``"bwd_data"`` and the input gradient ``"fwd"``.
    ``allow_tf32`` defaults to ``torch.backends.cudnn.allow_tf32``.
    """
    spec = _direction(direction)
    input, weight, p = _user_conv_args(input, weight, stride, padding, dilation, output_padding)
    allow_tf32, _ = _settings(allow_tf32, deterministic=False)
    ops = _extension.ops()
    sizes: dict[int, int | None] = {}
    for algo in range(len(spec.names)):
        bytes_ = ops.legacy_workspace_size(
            spec.key, input, weight, p["padding"], p["stride"], p["dilation"], groups,
            transposed, p["output_padding"], allow_tf32, algo,
        )
        sizes[algo] = None if bytes_ < 0 else int(bytes_)
    return sizes
