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

Distributed jobs: let rank 0 tune and save, the other ranks wait and load, so
every rank runs the same algorithms (see the README).
"""

from __future__ import annotations

import datetime
import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType

import torch

from . import _extension, _flags
from ._algorithms import DIRECTIONS
from ._build import cudnn_version_string
from ._conv_spec import ConvLike, ConvSpec

__all__ = ["Plan", "PlanEntry", "PlanError", "PlanMismatchWarning", "current_plan", "load_plan",
           "plan_run_counts", "use_plan"]

FORMAT = "torch-cudnn-algo plan"
VERSION = 1
ENV_VAR = "TORCH_CUDNN_ALGO_PLAN"

_MEASURES = ("time_ms", "stock_ms", "workspace", "energy_j")


class PlanError(ValueError):
    """A plan file or plan that cannot be used: what is wrong, and where."""


class PlanMismatchWarning(UserWarning):
    """A plan made under another cuDNN or GPU than this process runs."""


@dataclass(frozen=True)
class PlanEntry:
    """The choice for one configuration, with what tuning measured for it."""

    choice: int | str | None  # the flag value to run; None: stock PyTorch's own path
    time_ms: float | None = None  # the choice's median GPU time per call when tuned
    stock_ms: float | None = None  # stock's configuration, timed in the same run
    workspace: int | None = None  # bytes the choice asks for
    energy_j: float | None = None  # joules per call, when measured

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"choice": self.choice}
        data.update({name: getattr(self, name) for name in _MEASURES if getattr(self, name) is not None})
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
        self.entries[key] = PlanEntry(_canonical_choice(key, entry.choice), entry.time_ms, entry.stock_ms,
                                      entry.workspace, entry.energy_j)

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
        return {"format": FORMAT, "version": VERSION, "torch": self.torch, "cudnn": self.cudnn,
                "gpu": self.gpu, "created": self.created, "policy": self.policy,
                "entries": {str(conv): entry.to_dict() for conv, entry in self.entries.items()}}

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
            unknown = set(value) - {"choice", *_MEASURES}
            if unknown:
                raise fail(f"entry {conv_text!r}: unknown fields {sorted(unknown)}; fields are "
                           f"choice, {', '.join(_MEASURES)}")
            try:
                conv = _conv_key(conv_text)
                if conv in plan.entries:
                    raise ValueError(f"a second entry for {conv}")
                measures = {name: value.get(name) for name in _MEASURES}
                for name, measure in measures.items():
                    if measure is not None and (not isinstance(measure, (int, float)) or isinstance(measure, bool)):
                        raise ValueError(f"{name} must be a number, got {measure!r}")
                plan[conv] = PlanEntry(value["choice"], **measures)  # type: ignore[arg-type]
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
        lines = [f"plan ({self.policy}; {len(self)} configurations; torch {self.torch}, "
                 f"cuDNN {cudnn_version_string(self.cudnn)}, "
                 f"{self.gpu or 'no GPU'})"]
        header = ("direction", "choice", "ms", "stock ms", "workspace", "convolution")
        rows = [header]
        for conv, entry in self.entries.items():
            choice = "stock" if entry.choice is None else str(entry.choice)
            rows.append((conv.direction, choice, _num(entry.time_ms), _num(entry.stock_ms),
                         "-" if entry.workspace is None else f"{entry.workspace / 2**20:.1f} MiB", str(conv)))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
        for row in rows:
            lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
        return "\n".join(lines)

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


def _apply(plan: Plan | None) -> None:
    """Puts `plan` in force in the extension, all entries or none."""
    global _in_force
    ops = _extension.ops()
    ops.discard_plan_choices()
    try:
        for conv, entry in (plan.entries.items() if plan is not None else ()):
            choice = "" if entry.choice is None else str(entry.choice)
            ops.stage_plan_choice(conv.direction, *conv.op_args(), choice, str(conv))
    except Exception as exc:
        ops.discard_plan_choices()
        where = plan.source if plan is not None and plan.source else "the plan"
        raise PlanError(f"{where}: cannot be used: {exc}") from None
    ops.commit_plan_choices()
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
        _apply(self._previous)


def plan_run_counts() -> dict[str, int]:
    """Per configuration of the plan in use (its string form), how many calls
    ran its choice since the plan was put in use: what tells "the planned
    algorithm ran" from "it was refused" (warning) or "never met"."""
    labels, _choices, runs = _extension.ops().plan_choices_in_force()
    return dict(zip(labels, runs))


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

