"""The typed boundary to the C++ extension: the only module that calls ``torch.ops.torch_cudnn_algo``.

One function per operator, with the operator's name. Arguments and results are
Python values: a convolution goes in as one :class:`ConvSpec`; results come
back as scalars, lists, dicts or the small frozen records below, never as
columns of parallel lists or as text to evaluate. How each operator encodes
its values is known here and nowhere else, so a change of encoding on the C++
side changes only this module.

Every function raises RuntimeError naming the load failure when the extension
is not loaded (:func:`_extension.load_error`). Calls that run cuDNN on the GPU
check :func:`require_gpu` first, for a clearer error than the driver's.

Benchmarks and tests may import this module (``torch_cudnn_algo._ops``) for what
the public API does not expose (counters, the execution plans built); it is
not a stable API.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from . import _extension
from ._conv_spec import ConvSpec

__all__ = [
    "CandidateRun",
    "ConvDescription",
    "ConvRequest",
    "EngineConfig",
    "OwnKernel",
    "ExecutionPlanSummary",
    "PlanEntryInForce",
    "require_gpu",
    "set_job_coordinator",
    "set_profiler",
]


def _lib() -> Any:
    """``torch.ops.torch_cudnn_algo``; raises RuntimeError naming the load failure."""
    if not _extension.is_loaded():
        raise RuntimeError(f"torch_cudnn_algo: the C++ extension is not loaded ({_extension.load_error()})")
    return torch.ops.torch_cudnn_algo


def require_gpu(caller: str) -> None:
    """Raises RuntimeError naming ``caller`` and the reason when there is no usable CUDA GPU
    (instead of the driver error cuDNN's first call would give, "CUDA driver version is
    insufficient ..."), or when the extension is not loaded."""
    if torch.version.cuda is None:
        raise RuntimeError(f"torch_cudnn_algo.{caller} needs a CUDA GPU, and the installed torch "
                           f"{torch.__version__} is a CPU-only build")
    if not torch.cuda.is_available():
        raise RuntimeError(f"torch_cudnn_algo.{caller} needs a CUDA GPU, and torch.cuda.is_available() "
                           "is False here")
    _lib()


# -- records ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvRequest:
    """A convolution as the extension met it: the cuDNN problem x (*) w = y of one direction
    (for a transposed convolution, ``input`` is y and ``output`` x), with the settings it ran
    under and the device it ran on."""

    direction: str
    input: tuple[int, ...]
    weight: tuple[int, ...]
    output: tuple[int, ...]
    padding: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    dtype: str  # a torch dtype's name, e.g. "float16"
    channels_last: bool
    device: int
    deterministic: bool
    allow_tf32: bool
    transposed: bool

    def conv_spec(self) -> ConvSpec:
        """The convolution as ``torch.nn.functional`` takes it (a transposed convolution's
        input is y, its output x)."""
        x, w, y = self.input, self.weight, self.output
        output_padding = (0,) * len(self.stride)
        if self.transposed:  # what output_padding made x this size
            output_padding = tuple(xs - ((ys - 1) * s - 2 * p + d * (k - 1) + 1) for xs, ys, k, s, p, d in
                                   zip(x[2:], y[2:], w[2:], self.stride, self.padding, self.dilation))
        return ConvSpec(y if self.transposed else x, w, self.stride, self.padding, self.dilation, self.groups,
                        self.transposed, output_padding, getattr(torch, self.dtype), self.channels_last,
                        self.direction)


_MEMORY_FORMATS = {torch.contiguous_format: "contiguous", torch.channels_last: "channels_last",
                   torch.channels_last_3d: "channels_last_3d"}


def _conv_json(conv: ConvSpec) -> str:
    """``conv`` as the extension's operators take a convolution: one JSON object, in the cuDNN
    form (a 1-d convolution as 2-d), its operands described by shape, dtype and memory format."""
    c = conv.cudnn_form()
    return json.dumps({
        "direction": conv.direction, "input": list(c.input), "weight": list(c.weight),
        "padding": list(c.padding), "stride": list(c.stride), "dilation": list(c.dilation),
        "groups": c.groups, "transposed": c.transposed, "output_padding": list(c.output_padding),
        "dtype": str(c.dtype).removeprefix("torch."), "memory_format": _MEMORY_FORMATS[c.memory_format],
    })


def _conv_request(text: str) -> ConvRequest:
    """Reads the extension's description of a convolution (a JSON object)."""
    fields = json.loads(text)
    return ConvRequest(**{name: tuple(value) if isinstance(value, (list, tuple)) else value
                          for name, value in fields.items()})


@dataclass(frozen=True)
class EngineConfig:
    """One cuDNN graph-API engine configuration offered for a convolution."""

    name: str  # assign this to the direction's flag to pin it
    source: str  # "heuristics_a", "heuristics_b" or "fallback"
    workspace: int | None  # bytes; None if cuDNN could not build its execution plan
    numerical_notes: tuple[str, ...]  # TENSOR_CORE, DOWN_CONVERT_INPUTS, FFT, WINOGRAD, NONDETERMINISTIC, ...
    behavior_notes: tuple[str, ...]  # RUNTIME_COMPILATION, ...
    knob_space: str  # the engine's knobs and their ranges, e.g. "k2=0..3 k13=0..1"
    refusal: str | None  # why pinning it would be refused under the given settings


class ConvDescription(NamedTuple):
    """What a refusal prints for a convolution: its one-line description and a Python repro."""

    description: str
    repro: str


class CandidateRun(NamedTuple):
    """One candidate on a cuDNN problem: ``status`` is "ok", "unsupported: <why>" or
    "refused: <rule>"; ``workspace`` its bytes, -1 when it cannot run."""

    status: str
    workspace: int


class ExecutionPlanSummary(NamedTuple):
    """One execution plan this process built or deserialized, for an engine configuration."""

    direction: str
    conv: str  # the convolution's description
    engine: str  # the engine configuration name asked for
    choice: str  # the configuration that runs
    refusal: str  # why it does not run ("" when it does)
    workspace: int  # bytes
    deserialized: bool  # loaded from a serialized execution plan (a plan's, a compile worker's)


class PlanEntryInForce(NamedTuple):
    """One entry of the plan in force, as the extension holds it."""

    label: str  # the configuration's string form
    choice: str  # the flag value it runs; "" for stock's own path
    runs: int  # calls that ran the choice since the plan was put in use


# -- flags -----------------------------------------------------------------------------------


def set_legacy_algo(direction: str, algo: int) -> None:
    """Pins ``direction`` to legacy algorithm ``algo`` (-1: nothing pinned)."""
    _lib().set_legacy_algo(direction, algo)


def get_legacy_algo(direction: str) -> int:
    """The legacy algorithm pinned for ``direction``, -1 for none."""
    return int(_lib().get_legacy_algo(direction))


def set_engine(direction: str, name: str) -> None:
    """Pins ``direction`` to an engine configuration (ValueError if the name is malformed)."""
    _lib().set_engine(direction, name)


def get_engine(direction: str) -> str:
    """The engine configuration pinned for ``direction``, "" for none."""
    return str(_lib().get_engine(direction))


def canonical_engine_name(name: str) -> str:
    """The canonical form of an engine configuration name (ValueError if malformed)."""
    return str(_lib().canonical_engine_name(name))


def set_policy(direction: str, policy: str) -> None:
    """Sets ``direction``'s policy ("fastest"); ValueError for an unknown one."""
    _lib().set_policy(direction, policy)


def get_policy(direction: str) -> str:
    """``direction``'s policy, "" for none."""
    return str(_lib().get_policy(direction))


def set_strict(strict: bool) -> None:
    _lib().set_strict(strict)


def get_strict() -> bool:
    return bool(_lib().get_strict())


def set_workspace_limit(limit: int) -> None:
    """The workspace limit in bytes, -1 for none."""
    _lib().set_workspace_limit(limit)


def get_workspace_limit() -> int:
    """The workspace limit in bytes, -1 for none."""
    return int(_lib().get_workspace_limit())


def set_profile(enabled: bool) -> None:
    _lib().set_profile(enabled)


def get_profile() -> bool:
    return bool(_lib().get_profile())


def set_knob_search(enabled: bool) -> None:
    _lib().set_knob_search(enabled)


def get_knob_search() -> bool:
    return bool(_lib().get_knob_search())


def set_thread_bypass(bypass: bool) -> bool:
    """Whether this thread's convolutions take the stock path, unprofiled; returns the previous value."""
    return bool(_lib().set_thread_bypass(bypass))


# -- queries ---------------------------------------------------------------------------------


def legacy_algo_names(direction: str) -> list[str]:
    """The extension's names of ``direction``'s legacy algorithms, indexed by enum value."""
    return list(_lib().legacy_algo_names(direction))


def active_overrides() -> list[str]:
    """The ATen operators the extension overrides now."""
    return list(_lib().active_overrides())


def clear_runner_cache() -> None:
    """Forgets the runners built, the "fastest" decisions and the tuning log."""
    _lib().clear_runner_cache()


def runner_cache_size() -> int:
    """How many runners the extension holds."""
    return int(_lib().runner_cache_size())


def cudnn_runtime_version() -> int:
    """cudnnGetVersion(), e.g. 91900."""
    return int(_lib().cudnn_runtime_version())


def cudnn_frontend_version() -> int:
    """The cuDNN frontend version the extension was built with, e.g. 13200."""
    return int(_lib().cudnn_frontend_version())


def pinned_run_counts() -> dict[str, int]:
    """Calls that ran a pinned choice or the "fastest" pick, per direction."""
    fwd, bwd_data, bwd_filter = _lib().pinned_run_counts()
    return {"fwd": int(fwd), "bwd_data": int(bwd_data), "bwd_filter": int(bwd_filter)}


def profile_decision_count() -> int:
    """How many configurations the profiler decided (``conv_profile``, the "fastest" policy)."""
    return int(_lib().profile_decision_count())


def tuning_log() -> list[dict[str, object]]:
    """The "fastest" tuner's decisions, one dict per tuning (see ``torch_cudnn_algo.diagnostics.tuning_log``)."""
    return [json.loads(entry) for entry in _lib().tuning_log()]


def tuner_tolerance(dtype: str, allow_tf32: bool) -> float:
    """The error a tuner's pick may add for ``dtype`` ("float16", ...); ValueError for another dtype."""
    return float(_lib().tuner_tolerance(dtype, allow_tf32))


def legacy_workspace_size(conv: ConvSpec, allow_tf32: bool, algo: int) -> int:
    """Workspace bytes legacy algorithm ``algo`` asks for on ``conv``, -1 where cuDNN does not
    support it. Queries cuDNN on the current device; executes nothing."""
    return int(_lib().legacy_workspace_size(_conv_json(conv), allow_tf32, algo))


def describe_convolution(conv: ConvSpec, algo: int, deterministic: bool, allow_tf32: bool,
                         strict: bool) -> ConvDescription:
    """The description and Python repro a refusal of ``algo`` on ``conv`` would print; needs no GPU."""
    description, repro = _lib().describe_convolution(_conv_json(conv), algo, deterministic, allow_tf32, strict)
    return ConvDescription(description, repro)


def engine_configs(conv: ConvSpec, deterministic: bool, allow_tf32: bool) -> list[EngineConfig]:
    """The engine configurations cuDNN offers for ``conv``: heuristics mode A, mode B, then the
    fallback list, deduplicated; their execution plans are built on the current device."""
    rows = json.loads(_lib().engine_configs(_conv_json(conv), deterministic, allow_tf32))
    return [
        EngineConfig(row["name"], row["source"], None if row["workspace"] < 0 else int(row["workspace"]),
                     tuple(row["numerical_notes"]), tuple(row["behavior_notes"]), row["knob_space"],
                     row["refusal"] or None)
        for row in rows
    ]


@dataclass(frozen=True)
class OwnKernel:
    """One of our own kernels on a convolution, as the extension reports it before running."""

    name: str  # the flag value, e.g. "tca.direct"
    workspace: int | None  # bytes; None when it cannot run
    refusal: str | None  # why it cannot run this convolution


def own_kernels_built() -> bool:
    """Whether this build has our own kernels (every build but one made with TORCH_CUDNN_ALGO_OWN_KERNELS=0)."""
    return bool(_lib().own_kernels_built())


def own_kernels(conv: ConvSpec, deterministic: bool, allow_tf32: bool) -> list[OwnKernel]:
    """Our own kernels for ``conv`` (deterministic, fp32 accumulation, no TF32); a build without them
    lists them with the refusal saying so."""
    rows = json.loads(_lib().own_kernels(_conv_json(conv), deterministic, allow_tf32))
    return [OwnKernel(row["name"], None if row["workspace"] < 0 else int(row["workspace"]), row["refusal"] or None)
            for row in rows]


# -- profiling -------------------------------------------------------------------------------


def conv_request(conv: ConvSpec, deterministic: bool, allow_tf32: bool) -> tuple[ConvRequest, str]:
    """``conv`` as the profiler reads it on the current device, and its one-line description."""
    request, description = _lib().conv_request(_conv_json(conv), deterministic, allow_tf32)
    return _conv_request(request), str(description)


def run_candidate(direction: str, choice: str, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                  padding: list[int] | tuple[int, ...], stride: list[int] | tuple[int, ...],
                  dilation: list[int] | tuple[int, ...], groups: int, deterministic: bool, allow_tf32: bool,
                  execute: bool) -> CandidateRun:
    """Builds (cached) the runner of ``choice`` on the cuDNN problem of the operands and, with
    ``execute``, runs it once on the current stream, writing ``out``. Operands by direction:
    fwd (x, w) -> y; bwd_data (dy, w) -> dx; bwd_filter (x, dy) -> dw. An allocation failure
    raises torch.OutOfMemoryError."""
    status, workspace = _lib().run_candidate(direction, choice, a, b, out, padding, stride, dilation, groups,
                                             deterministic, allow_tf32, execute)
    return CandidateRun(str(status), int(workspace))


def set_profiler(profiler: Callable[[ConvRequest, str], str] | None) -> None:
    """Installs what the extension calls the first time it meets a configuration under
    ``conv_profile`` or the "fastest" policy: ``profiler(request, description)`` returns the
    flag value to run, "" for stock's path. None removes it."""
    module = importlib.import_module("torch_cudnn_algo._C")
    if profiler is None:
        module._set_profiler(None)
        return

    def from_extension(request: str, description: str) -> str:
        return profiler(_conv_request(request), description)

    module._set_profiler(from_extension)


# -- plans -----------------------------------------------------------------------------------


def stage_plan_entry(conv: ConvSpec, choice: str, label: str, execution_plan: bytes | None = None,
                     execution_plan_gpu: str = "") -> None:
    """Stages one plan entry: ``conv`` runs ``choice`` (a flag value, "" for stock's path),
    known as ``label``; ``execution_plan`` is its serialized execution plan, made on a
    ``execution_plan_gpu``. Nothing changes until :func:`commit_plan`. Needs no GPU."""
    if execution_plan is None:
        _lib().stage_plan_entry(_conv_json(conv), choice, label)
    else:
        data = torch.frombuffer(bytearray(execution_plan), dtype=torch.uint8)
        _lib().stage_plan_entry(_conv_json(conv), choice, label, data, execution_plan_gpu)


def commit_plan() -> None:
    """Puts the staged plan entries in force, replacing those in force."""
    _lib().commit_plan()


def discard_staged_plan() -> None:
    """Forgets the staged plan entries."""
    _lib().discard_staged_plan()


def plan_entries_in_force() -> list[PlanEntryInForce]:
    """The entries of the plan in force, with their run counts."""
    return [PlanEntryInForce(str(row["label"]), str(row["choice"]), int(row["runs"]))
            for row in json.loads(_lib().plan_entries_in_force())]


def plan_entries_with_execution_plan() -> list[str]:
    """The labels of the plan entries in force that carry a serialized execution plan."""
    return list(_lib().plan_entries_with_execution_plan())


def serialized_execution_plan(conv: ConvSpec, deterministic: bool, allow_tf32: bool,
                              choice: str) -> tuple[bytes, str]:
    """The serialized execution plan of engine configuration ``choice`` on ``conv`` (built on
    the current device if not built yet): (bytes, "") or (b"", why there is none)."""
    data, why_not = _lib().serialized_execution_plan(_conv_json(conv), deterministic, allow_tf32, choice)
    return bytes(data.tolist()), str(why_not)


def execution_plan_counts() -> dict[str, int]:
    """Execution plans built, deserialized, prefetched, failed to deserialize, and the
    microseconds building and deserializing took (see ``torch_cudnn_algo.diagnostics.execution_plan_counts``)."""
    return {str(name): int(value) for name, value in _lib().execution_plan_counts().items()}


def graph_runners() -> list[ExecutionPlanSummary]:
    """The execution plans this process's graph runners built or deserialized so far."""
    return [ExecutionPlanSummary(row["direction"], row["conv"], row["engine"], row["choice"], row["refusal"],
                                 int(row["workspace"]), bool(row["deserialized"]))
            for row in json.loads(_lib().graph_runners())]


# -- tuning ----------------------------------------------------------------------------------


def set_config_recording(enabled: bool) -> None:
    """Whether the extension records every configuration that reaches cuDNN."""
    _lib().set_config_recording(enabled)


def recorded_configs() -> list[ConvRequest]:
    """The configurations recorded, in the order first met."""
    return [_conv_request(text) for text in _lib().recorded_configs()]


def tune_fastest_conv(conv: ConvSpec, deterministic: bool, allow_tf32: bool, retune: bool = False) -> dict[str, Any]:
    """Decides ``conv`` under "fastest" on the current device: the tuning database's decision unless
    ``retune``, else the tuner's (kept in the database). Returns its tuning-log entry (a kept
    decision's recorded fields, with ``"kept": True``); the process does not remember it."""
    return json.loads(_lib().tune_fastest_conv(_conv_json(conv), deterministic, allow_tf32, retune))


def fastest_decision_kept(conv: ConvSpec, deterministic: bool, allow_tf32: bool) -> bool:
    """Whether the tuning database holds a "fastest" decision for ``conv`` under the settings in force."""
    return bool(_lib().fastest_decision_kept(_conv_json(conv), deterministic, allow_tf32))


def fastest_decision_key(conv: ConvSpec, deterministic: bool, allow_tf32: bool) -> str:
    """The tuning database's key of ``conv``'s "fastest" decision under the settings in force on the
    current device (configuration, settings, GPU model, releases); nothing is built."""
    return str(_lib().fastest_decision_key(_conv_json(conv), deterministic, allow_tf32))


def set_job_coordinator(coordinator: Callable[[str, str, str, bytes | None], bytes | str | None] | None) -> None:
    """Installs what the extension asks before it decides a configuration under "fastest" (see
    ``_distributed``): ``coordinator(op, scope, key, payload)``. None removes it."""
    importlib.import_module("torch_cudnn_algo._C")._set_job_coordinator(coordinator)


def kept_decision_counts() -> dict[str, int]:
    """Decisions this process took from the tuning database ("kept"), tuned itself ("tuned"), waited for
    another process to tune ("waited"), borrowed from the same convolution at a nearby size ("borrowed"),
    adopted from another rank of the job ("adopted") and made for the job ("shared")."""
    return {str(name): int(value) for name, value in _lib().kept_decision_counts().items()}


def prepare_fastest_conv(conv: ConvSpec, deterministic: bool, allow_tf32: bool) -> None:
    """Queues ``conv``'s "fastest" candidate builds to background threads; nothing runs on the GPU."""
    _lib().prepare_fastest_conv(_conv_json(conv), deterministic, allow_tf32)


def cancel_prepared_fastest() -> None:
    """Drops the candidate builds queued and not started."""
    _lib().cancel_prepared_fastest()


def enable_compile_workers(command: list[str], count: int) -> None:
    """Allows up to ``count`` compile worker processes running ``command`` (calls nest)."""
    _lib().enable_compile_workers(command, count)


def disable_compile_workers() -> None:
    """Undoes one :func:`enable_compile_workers`; the last one waits for builds in flight and
    stops the workers."""
    _lib().disable_compile_workers()


def compile_worker_counts() -> dict[str, int]:
    """Compile workers started and ready, builds they made and failed."""
    return {str(name): int(value) for name, value in _lib().compile_worker_counts().items()}


def execution_plan_cache_dir() -> str:
    """The execution plan cache's folder on disk ("" when off)."""
    return str(_lib().execution_plan_cache_dir())


def execution_plan_cache_counts() -> dict[str, int]:
    """Execution plans the on-disk cache loaded, saved, rejected, failed to save."""
    return {str(name): int(value) for name, value in _lib().execution_plan_cache_counts().items()}


def tuning_db_dir() -> str:
    """The tuning database's directory ("" when off)."""
    return str(_lib().tuning_db_dir())


def tuning_db_max_bytes() -> int:
    return int(_lib().tuning_db_max_bytes())


def tuning_db_entries() -> list[dict[str, Any]]:
    """Every whole entry, without blobs: path, kind, key, header (a dict), bytes, modified_ns."""
    return json.loads(_lib().tuning_db_entries())


def tuning_db_save(kind: str, key: str, header: str, blob: bytes) -> bool:
    data = torch.frombuffer(bytearray(blob), dtype=torch.uint8) if blob else torch.empty(0, dtype=torch.uint8)
    return bool(_lib().tuning_db_save(kind, key, header, data))


def tuning_db_load(kind: str, key: str) -> tuple[str, bytes] | None:
    """(header, blob) of the entry saved under ``key``, or None."""
    found, header, blob = _lib().tuning_db_load(kind, key)
    return (str(header), blob.numpy().tobytes()) if found else None


def tuning_db_remove(paths: list[str]) -> int:
    return int(_lib().tuning_db_remove(paths))


def tuning_db_clear() -> int:
    return int(_lib().tuning_db_clear())


def tuning_db_counts() -> dict[str, int]:
    return {str(name): int(value) for name, value in _lib().tuning_db_counts().items()}


def tuning_db_claim_for(kind: str, key: str, wait_ms: int, hold_ms: int) -> tuple[bool, bool]:
    """Claims ``key`` on this node as a tuning does, holds it ``hold_ms``, releases it: (owned, waited)."""
    owned, waited = _lib().tuning_db_claim_for(kind, key, wait_ms, hold_ms)
    return bool(owned), bool(waited)


def tuning_db_merge(from_dir: str) -> dict[str, Any]:
    """Merges the tuning database in ``from_dir`` into this process's: added, replaced, kept, conflicts."""
    report = json.loads(_lib().tuning_db_merge(from_dir))
    report["conflicts"] = [json.loads(line) for line in report["conflicts"]]
    return report
