"""Plans: the choices for a set of convolution configurations, saved and reused.

A :class:`Plan` maps configurations (a :class:`ConvSpec` with its direction)
to the choice to run: a legacy algorithm, an engine configuration, or ``None``
for stock PyTorch's own path. While a plan is in use (:func:`use_plan`), its
entries win over the ``torch.backends.cudnn.conv_*_algo`` flags for their
configurations; every other configuration follows the flags.

A plan file is JSON with its format version, the torch, cuDNN and GPU it was
made on and when, and the readable configuration strings as keys::

    {"format": "torch-cudnn-algo plan", "version": 1, "torch": "2.11.0+cu130",
     "cudnn": 91900, "gpu": "NVIDIA H100 80GB HBM3", "created": "2026-11-22T10:00:00+00:00",
     "policy": "fastest",
     "entries": {"conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd":
                 {"choice": "eng0_k2=3_k13=0", "time_ms": 0.071, "stock_ms": 0.073, ...}}}

An entry may also carry its choice's execution plan as cuDNN built it
(``"execution_plan"``: the cuDNN frontend's serialized execution plan, base64,
with the GPU model, cuDNN and frontend versions it was made with and its sha256),
so that a process using the plan deserializes it instead of querying cuDNN's
heuristics and compiling; docs/plan_format.md describes the format.

Distributed jobs: let rank 0 tune and save, the other ranks wait and load, so
every rank runs the same algorithms and compiles nothing (see the README).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import hashlib
import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType

import torch

from . import _extension, _flags, _ops, _text_table
from ._algorithms import DIRECTIONS
from ._conv_spec import ConvLike, ConvSpec
from ._version_gate import cudnn_version_string

__all__ = ["Plan", "PlanEntry", "PlanError", "PlanMismatchWarning", "SerializedExecutionPlan", "current_plan",
           "execution_plan_counts", "load_plan", "plan_entry_run_counts", "use_plan"]

FORMAT = "torch-cudnn-algo plan"
# 1: choices and measures; 2: entries may carry their built execution plan. A
# file is written with the lowest version that describes it (see Plan.to_dict).
VERSION = 2
ENV_VAR = "TORCH_CUDNN_ALGO_PLAN"

_MEASURES = ("time_ms", "stock_ms", "workspace", "energy_j")
_BUILT = ("execution_plan", "execution_plan_unavailable")  # version 2


class PlanError(ValueError):
    """A plan file or plan that cannot be used: what is wrong, and where."""


class PlanMismatchWarning(UserWarning):
    """A plan made under another cuDNN or GPU than this process runs."""


@dataclass(frozen=True)
class SerializedExecutionPlan:
    """An engine configuration's execution plan as cuDNN built it for one
    convolution: the cuDNN frontend's ``Graph::serialize`` bytes, and what they
    were made with. Valid only for that GPU model, cuDNN and frontend version."""

    data: bytes
    gpu: str  # GPU model name, as torch.cuda.get_device_name gives it
    cudnn: int  # cudnnGetVersion(), e.g. 91900
    cudnn_frontend: int  # CUDNN_FRONTEND_VERSION, e.g. 13200

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def to_dict(self) -> dict[str, object]:
        return {"gpu": self.gpu, "cudnn": self.cudnn, "cudnn_frontend": self.cudnn_frontend,
                "bytes": len(self.data), "sha256": self.sha256,
                "base64": base64.b64encode(self.data).decode("ascii")}

    @classmethod
    def from_dict(cls, value: object) -> SerializedExecutionPlan:
        """Reads what to_dict wrote; ValueError says what is corrupt."""
        if not isinstance(value, dict):
            raise ValueError(f"execution_plan must be an object, got {value!r}")
        fields = {"gpu": str, "cudnn": int, "cudnn_frontend": int, "bytes": int, "sha256": str, "base64": str}
        unknown = set(value) - set(fields)
        if unknown:
            raise ValueError(f"execution_plan: unknown fields {sorted(unknown)}; fields are {', '.join(fields)}")
        for name, kind in fields.items():
            if not isinstance(value.get(name), kind) or isinstance(value.get(name), bool):
                expected = "an integer" if kind is int else "a string"
                raise ValueError(f"execution_plan: {name} must be {expected}, got {value.get(name)!r}")
        try:
            data = base64.b64decode(value["base64"], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"execution_plan is corrupt: not base64 ({exc})") from None
        built = cls(data, value["gpu"], value["cudnn"], value["cudnn_frontend"])
        if len(data) != value["bytes"] or built.sha256 != value["sha256"].lower():
            raise ValueError(f"execution_plan is corrupt: {len(data)} bytes with sha256 {built.sha256}, "
                             f"the file says {value['bytes']} bytes with sha256 {value['sha256']}")
        return built

    def mismatch(self, gpu: str | None, cudnn: int | None, cudnn_frontend: int | None) -> str | None:
        """Why this execution plan cannot be loaded where those run, or None."""
        if self.gpu != gpu:
            return f"made on a {self.gpu}, this process runs on a {gpu}"
        if self.cudnn != cudnn:
            return f"made with cuDNN {self.cudnn}, this process runs cuDNN {cudnn}"
        if self.cudnn_frontend != cudnn_frontend:
            return (f"made with cuDNN frontend {self.cudnn_frontend}, this build of torch-cudnn-algo "
                    f"has frontend {cudnn_frontend}")
        return None


@dataclass(frozen=True)
class PlanEntry:
    """The choice for one configuration, with what tuning measured for it and,
    for an engine configuration, its execution plan as built."""

    choice: int | str | None  # the flag value to run; None: stock PyTorch's own path
    time_ms: float | None = None  # the choice's median GPU time per call when tuned
    stock_ms: float | None = None  # stock's configuration, timed in the same run
    workspace: int | None = None  # bytes the choice asks for
    energy_j: float | None = None  # joules per call, when measured
    execution_plan: SerializedExecutionPlan | None = None  # the choice as built, reloaded instead of built
    execution_plan_unavailable: str | None = None  # why tune() kept no execution plan

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"choice": self.choice}
        data.update({name: getattr(self, name) for name in _MEASURES if getattr(self, name) is not None})
        if self.execution_plan is not None:
            data["execution_plan"] = self.execution_plan.to_dict()
        if self.execution_plan_unavailable is not None:
            data["execution_plan_unavailable"] = self.execution_plan_unavailable
        return data


def _canonical_choice(conv: ConvSpec, choice: object) -> int | str | None:
    """The flag value as the direction's flag would store it; ValueError otherwise."""
    if choice is None:
        return None
    if isinstance(choice, str) and choice.lower() == "fastest":
        raise ValueError("a plan holds resolved choices, not the 'fastest' policy")
    return _flags.FLAGS[DIRECTIONS[conv.direction].flag].parse(choice)  # type: ignore[return-value]


def _conv_key(conv: ConvLike) -> ConvSpec:
    spec = conv if isinstance(conv, ConvSpec) else ConvSpec.parse(conv)
    return spec.cudnn_form()  # a 1-d convolution runs, and is planned, as 2-d


def _environment() -> dict[str, object]:
    """torch, cuDNN and GPU of this process, as a plan records them."""
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "gpu": gpu}


def _build_environment() -> tuple[str | None, int | None, int | None]:
    """GPU model, cuDNN and cuDNN frontend versions an execution plan built here
    is made with, as SerializedExecutionPlan records them; None where unknown (no GPU,
    no extension)."""
    if not _extension.is_loaded():
        return None, None, None
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return gpu, _ops.cudnn_runtime_version(), _ops.cudnn_frontend_version()


@dataclass
class Plan:
    """Choices per convolution configuration (see the module docstring).

    ``plan[conv]`` is the :class:`PlanEntry` of a configuration (a
    :class:`ConvSpec` or its string, direction included); iterating gives the
    configurations. ``policy`` says how the choices were made.
    """

    entries: dict[ConvSpec, PlanEntry] = field(default_factory=dict)
    policy: str = "manual"
    torch: str = field(default_factory=lambda: torch.__version__)
    cudnn: int | None = field(default_factory=lambda: torch.backends.cudnn.version())
    gpu: str | None = field(default_factory=lambda: _environment()["gpu"])  # type: ignore[return-value]
    created: str = field(default_factory=lambda: datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"))
    source: str | None = None  # the file it was loaded from

    def __post_init__(self) -> None:
        given, self.entries = self.entries, {}
        for conv, entry in given.items():
            self[conv] = entry

    def __setitem__(self, conv: ConvLike, entry: PlanEntry | int | str | None) -> None:
        key = _conv_key(conv)
        if not isinstance(entry, PlanEntry):
            entry = PlanEntry(entry)
        choice = _canonical_choice(key, entry.choice)
        if entry.execution_plan is not None and not isinstance(choice, str):
            raise ValueError(f"an execution plan belongs to an engine configuration, not to choice {choice!r}")
        self.entries[key] = dataclasses.replace(entry, choice=choice)

    def __getitem__(self, conv: ConvLike) -> PlanEntry:
        return self.entries[_conv_key(conv)]

    def __contains__(self, conv: object) -> bool:
        return isinstance(conv, (ConvSpec, str)) and _conv_key(conv) in self.entries

    def __iter__(self) -> Iterator[ConvSpec]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    # -- files ----------------------------------------------------------------
    def to_dict(self) -> dict[str, object]:
        entries = {str(conv): entry.to_dict() for conv, entry in self.entries.items()}
        # Version 1 where nothing of version 2 is in it: older releases still read such a file.
        version = VERSION if any(set(_BUILT) & set(entry) for entry in entries.values()) else 1
        return {"format": FORMAT, "version": version, "torch": self.torch, "cudnn": self.cudnn,
                "gpu": self.gpu, "created": self.created, "policy": self.policy, "entries": entries}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the plan as JSON; the file appears whole (written aside, then
        renamed), so a rank loading it never reads half a plan."""
        path = os.fspath(path)
        partial = f"{path}.{os.getpid()}.partial"
        with open(partial, "w", encoding="utf-8") as file:
            file.write(self.to_json() + "\n")
        os.replace(partial, path)

    @classmethod
    def from_json(cls, text: str, source: str = "<string>") -> Plan:
        """Reads a plan; a PlanError names ``source`` and what is wrong."""
        def fail(what: str) -> PlanError:
            return PlanError(f"{source}: {what}")

        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise fail(f"not a torch-cudnn-algo plan: not JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise fail(f'not a torch-cudnn-algo plan: no "format": "{FORMAT}" at its top level')
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise fail(f'"version" must be an integer, got {version!r}')
        if version > VERSION:
            raise fail(f"plan format version {version} is newer than this torch-cudnn-algo reads "
                       f"(version {VERSION}); upgrade torch-cudnn-algo or tune again")
        if version < 1:
            raise fail(f"plan format version {version} does not exist (versions are 1 to {VERSION})")
        entries = data.get("entries")
        if not isinstance(entries, dict):
            raise fail('"entries" must be an object mapping configurations to choices')
        for name in ("torch", "gpu", "created", "policy"):
            if data.get(name) is not None and not isinstance(data[name], str):
                raise fail(f'"{name}" must be a string, got {data[name]!r}')
        cudnn = data.get("cudnn")
        if cudnn is not None and (not isinstance(cudnn, int) or isinstance(cudnn, bool)):
            raise fail(f'"cudnn" must be an integer such as 91900, got {cudnn!r}')
        plan = cls({}, policy=data.get("policy") or "manual", torch=data.get("torch") or "unknown",
                   cudnn=cudnn, gpu=data.get("gpu"), created=data.get("created") or "unknown",
                   source=source)
        for conv_text, value in entries.items():
            if not isinstance(value, dict) or "choice" not in value:
                raise fail(f"entry {conv_text!r}: expected an object with a \"choice\", got {value!r}")
            known = ("choice", *_MEASURES, *(_BUILT if version >= 2 else ()))
            unknown = set(value) - set(known)
            if unknown:
                raise fail(f"entry {conv_text!r}: unknown fields {sorted(unknown)}; fields are "
                           f"{', '.join(known)}")
            try:
                conv = _conv_key(conv_text)
                if conv in plan.entries:
                    raise ValueError(f"a second entry for {conv}")
                measures = {name: value.get(name) for name in _MEASURES}
                for name, measure in measures.items():
                    if measure is not None and (not isinstance(measure, (int, float)) or isinstance(measure, bool)):
                        raise ValueError(f"{name} must be a number, got {measure!r}")
                unavailable = value.get("execution_plan_unavailable")
                if unavailable is not None and not isinstance(unavailable, str):
                    raise ValueError(f"execution_plan_unavailable must be a string, got {unavailable!r}")
                built = value.get("execution_plan")
                plan[conv] = PlanEntry(value["choice"], **measures,  # type: ignore[arg-type]
                                       execution_plan=None if built is None else SerializedExecutionPlan.from_dict(built),
                                       execution_plan_unavailable=unavailable)
            except (ValueError, TypeError) as exc:
                raise fail(f"entry {conv_text!r}: {exc}") from None
        return plan

    def mismatches(self) -> list[str]:
        """How the cuDNN and GPU this plan was made on differ from this process's."""
        here = _environment()
        problems = []
        if self.cudnn is not None and here["cudnn"] is not None and self.cudnn != here["cudnn"]:
            problems.append(f"it was made with cuDNN {cudnn_version_string(self.cudnn)}, "
                            f"this process runs cuDNN {cudnn_version_string(here['cudnn'])}")
        if self.gpu is not None and here["gpu"] is not None and self.gpu != here["gpu"]:
            problems.append(f"it was made on a {self.gpu}, this process runs on a {here['gpu']}")
        return problems

    # -- printing ---------------------------------------------------------------
    def format(self) -> str:
        """One line per configuration: direction, convolution, choice, and the
        tuned and stock times when measured."""
        built = sum(1 for entry in self.entries.values() if entry.execution_plan is not None)
        lines = [f"plan ({self.policy}; {len(self)} configurations"
                 + (f", {built} with their built execution plans" if built else "")
                 + f"; torch {self.torch}, cuDNN {cudnn_version_string(self.cudnn)}, {self.gpu or 'no GPU'})"]
        header = ("direction", "choice", "ms", "stock ms", "workspace", "convolution")
        rows = [header]
        for conv, entry in self.entries.items():
            choice = "stock" if entry.choice is None else str(entry.choice)
            rows.append((conv.direction, choice, _num(entry.time_ms), _num(entry.stock_ms),
                         "-" if entry.workspace is None else f"{entry.workspace / 2**20:.1f} MiB", str(conv)))
        return "\n".join([*lines, *_text_table.aligned(rows, free_last=True)])

    def __str__(self) -> str:
        return self.format()


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def load_plan(path: str | os.PathLike[str], *, strict: bool | None = None) -> Plan:
    """Reads a plan file. A corrupt or foreign file raises :class:`PlanError`
    naming the file and what is wrong. A plan made under another cuDNN or GPU
    warns (:class:`PlanMismatchWarning`); with ``strict`` (default: the
    ``conv_algo_strict`` flag) it raises PlanError instead."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as file:
        try:
            text = file.read()
        except UnicodeDecodeError as exc:
            raise PlanError(f"{path}: not a torch-cudnn-algo plan: not UTF-8 text ({exc})") from None
    plan = Plan.from_json(text, source=path)
    problems = plan.mismatches()
    if problems:
        if strict is None:
            strict = bool(_flags.get_flag("conv_algo_strict"))
        message = (f"{path}: {'; '.join(problems)}; its choices may be slower there or refused "
                   "(tune again for this machine)")
        if strict:
            raise PlanError(message + " [conv_algo_strict makes this an error]")
        warnings.warn(message, PlanMismatchWarning, stacklevel=2)
    return plan


_in_force: Plan | None = None


def current_plan() -> Plan | None:
    """The plan in use, or None."""
    return _in_force


def _loadable_execution_plans(plan: Plan, warn: bool) -> dict[ConvSpec, SerializedExecutionPlan]:
    """The execution plans `plan` carries that this process may load: made for
    its GPU model, cuDNN and frontend. The others are ignored (their choices are
    built as without one), with one warning when `warn`; without a GPU none is
    loadable and nothing is said (nothing would run)."""
    carried = {conv: e.execution_plan for conv, e in plan.entries.items() if e.execution_plan is not None}
    if not carried:
        return {}
    here = _build_environment()
    if here[0] is None:
        return {}
    loadable, reasons = {}, {}
    for conv, built in carried.items():
        why = built.mismatch(*here)
        if why is None:
            loadable[conv] = built
        else:
            reasons[why] = reasons.get(why, 0) + 1
    if reasons and warn:
        where = plan.source or "the plan"
        ignored = len(carried) - len(loadable)
        warnings.warn(f"{where}: {ignored} of its {len(carried)} built execution plans are ignored ("
                      + "; ".join(f"{count} {why}" for why, count in reasons.items())
                      + "); those choices are built here as without them", PlanMismatchWarning, stacklevel=4)
    return loadable


def _apply(plan: Plan | None, warn: bool = True) -> None:
    """Puts `plan` in force in the extension, all entries or none."""
    global _in_force
    _ops.discard_staged_plan()
    try:
        loadable = _loadable_execution_plans(plan, warn) if plan is not None else {}
        for conv, entry in (plan.entries.items() if plan is not None else ()):
            choice = "" if entry.choice is None else str(entry.choice)
            built = loadable.get(conv)
            if built is None:
                _ops.stage_plan_entry(conv, choice, str(conv))
            else:
                _ops.stage_plan_entry(conv, choice, str(conv), built.data, built.gpu)
    except Exception as exc:
        _ops.discard_staged_plan()
        where = plan.source if plan is not None and plan.source else "the plan"
        raise PlanError(f"{where}: cannot be used: {exc}") from None
    _ops.commit_plan()
    _in_force = plan


class use_plan:  # noqa: N801 - a function-like context manager, as torch.autograd.set_grad_enabled
    """Puts ``plan`` in use (``None``: no plan), replacing the one in use.

    Also a context manager that restores the previous plan on exit::

        with torch_cudnn_algo.use_plan(torch_cudnn_algo.load_plan("plan.json")):
            train()
    """

    def __init__(self, plan: Plan | str | os.PathLike[str] | None) -> None:
        if isinstance(plan, (str, os.PathLike)):
            plan = load_plan(plan)
        if plan is not None and not isinstance(plan, Plan):
            raise TypeError(f"use_plan takes a Plan, a plan file's path or None, got {type(plan).__name__}")
        self.plan = plan
        self._previous = _in_force
        _apply(plan)

    def __enter__(self) -> Plan | None:
        return self.plan

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        _apply(self._previous, warn=False)  # its warnings were given when it was put in use


def plan_entry_run_counts() -> dict[str, int]:
    """Per entry of the plan in use (its configuration's string form), how many calls
    ran its choice since the plan was put in use: what tells "the planned
    algorithm ran" from "it was refused" (warning) or "never met"."""
    return {entry.label: entry.runs for entry in _ops.plan_entries_in_force()}


def execution_plan_counts() -> dict[str, int]:
    """How many execution plans of engine configurations this process built from
    scratch (``"built"``: cuDNN heuristics and engine build, possibly runtime
    compilation; ``"built_by_heuristics"`` of them needed a heuristics query
    to find their configuration, a name that does not fix every knob of its
    engine or one cuDNN cannot build as named), deserialized from a plan's
    serialized execution plans (``"deserialized"``; ``"prefetched"`` of them were
    loaded ahead of their first call by the worker threads that the first such
    call on a device starts), and could not deserialize (``"deserialize_failed"``:
    then built); ``"build_us"`` and ``"deserialize_us"``: the microseconds those
    builds and deserializations (failed attempts included) took, added up over
    threads."""
    return _ops.execution_plan_counts()


def apply_environment() -> None:
    """Autoload: puts the plan named by TORCH_CUDNN_ALGO_PLAN in use. Any
    failure is one warning and no plan; ``import torch`` never fails over it."""
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    try:
        use_plan(path)
    except Exception as exc:  # noqa: BLE001
        _flags.warn_environment(ENV_VAR, path, str(exc))

