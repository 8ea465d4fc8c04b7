"""The tuning database: what tuning learnt, kept on disk for every later process, rank and node
that shares the directory (``csrc/store/tuning_db.h``; ``docs/tuning-db.md``)."""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass

from . import _ops, _warn
from ._conv_spec import ConvSpec
from ._plan import Plan, PlanEntry, SerializedExecutionPlan


@dataclass(frozen=True)
class TuningDbEntry:
    """One entry of the tuning database."""

    kind: str  # "decision" (a tuning's pick) or "execution_plan" (a compiled engine's execution plan)
    configuration: ConvSpec | None  # the convolution (cuDNN form, direction included); None if unreadable
    header: dict[str, object]  # everything the entry records: engine or choice, times, GPU, versions, ...
    saved: str | None  # when it was written (UTC, ISO 8601)
    host: str | None  # where it was written
    bytes: int  # the file's size
    last_used: datetime.datetime  # last written or loaded (what eviction goes by), UTC
    path: str
    key: str  # everything the entry is valid for, as text

    @property
    def borrowed(self) -> bool:
        """A decision ``"fastest"`` took from the same convolution at a nearby size instead of tuning
        (``header["borrowed_from"]`` is that size's configuration); ``tune()`` tunes it."""
        return self.kind == "decision" and "borrowed_from" in self.header


def directory() -> str | None:
    """The directory of the tuning database, or None when it is off: ``TORCH_CUDNN_ALGO_DB`` (``0`` or
    empty: off; the older ``TORCH_CUDNN_ALGO_COMPILE_CACHE`` is read when it is unset), else
    ``$XDG_CACHE_HOME/torch_cudnn_algo/db``, else ``~/.cache/torch_cudnn_algo/db``."""
    return _ops.tuning_db_dir() or None


def max_bytes() -> int:
    """The database's size bound: ``TORCH_CUDNN_ALGO_DB_MAX_MB`` megabytes (default 1024); least
    recently used entries are evicted beyond it."""
    return _ops.tuning_db_max_bytes()


def check_environment() -> None:
    """Reads the database's settings once at import, so that a value that cannot be used
    (``TORCH_CUDNN_ALGO_DB`` naming a file, ``TORCH_CUDNN_ALGO_DB_MAX_MB=banana``) is told there:
    one warning naming the variable, the value, what is valid and the default in force."""
    try:
        directory()
        max_bytes()
    except Exception as exc:  # noqa: BLE001 - import must never fail (warnings as errors, say)
        _warn.warn(f"torch_cudnn_algo: could not read the tuning database's settings ({type(exc).__name__}: {exc})")


def _configuration(header: dict[str, object]) -> ConvSpec | None:
    fields = header.get("configuration")
    if not isinstance(fields, dict):
        return None
    try:
        return _ops._conv_request(json.dumps(fields)).conv_spec()
    except (TypeError, ValueError, AttributeError):
        return None


def entries() -> list[TuningDbEntry]:
    """Every whole entry of the database (files that are not, torn or corrupt ones, are left out)."""
    found = []
    for row in _ops.tuning_db_entries():
        header = row["header"] if isinstance(row["header"], dict) else {}
        found.append(TuningDbEntry(
            kind=row["kind"], configuration=_configuration(header), header=header,
            saved=header.get("saved") if isinstance(header.get("saved"), str) else None,
            host=header.get("host") if isinstance(header.get("host"), str) else None,
            bytes=int(row["bytes"]),
            last_used=datetime.datetime.fromtimestamp(row["modified_ns"] / 1e9, datetime.timezone.utc),
            path=row["path"], key=row["key"]))
    return found


def clear() -> int:
    """Removes every entry (and anything an interrupted write left); returns how many entries."""
    return _ops.tuning_db_clear()


def remove(entries: list[TuningDbEntry]) -> int:
    """Removes these entries; returns how many were removed."""
    return _ops.tuning_db_remove([entry.path for entry in entries])


def counts() -> dict[str, int]:
    """This process's entries loaded, saved, rejected (torn, corrupt), failed to save, evicted."""
    return _ops.tuning_db_counts()


@dataclass(frozen=True)
class MergeReport:
    """What :func:`merge` did."""

    added: int  # entries this database lacked
    replaced: int  # decisions here that the merged database's beat
    kept: int  # entries this database already held, the same or better
    conflicts: list[dict[str, object]]  # per configuration decided differently: both sides, which was kept


def merge(from_dir: str | os.PathLike[str]) -> MergeReport:
    """Merges another tuning database (another machine's, a team's) into this one: entries this one
    lacks are added; where both hold a decision with different picks, the faster pick as each
    measured it wins (the newer where either has no time), and the conflict is reported."""
    report = _ops.tuning_db_merge(os.fspath(from_dir))
    return MergeReport(report["added"], report["replaced"], report["kept"], report["conflicts"])


def export_plan(gpu: str | None = None) -> Plan:
    """The database's ``"fastest"`` decisions as a :class:`Plan` (with each pick's execution plan),
    for the GPU model ``gpu``: by default the only one the decisions were made on. Where several
    decisions share a configuration (made under other determinism, TF32 or workspace settings),
    a tuned one is taken before a borrowed one, then the newest. Raises ValueError when there is
    nothing to export: no decisions (for ``gpu``), or decisions for several GPU models and none named."""
    decisions = [entry for entry in entries() if entry.kind == "decision"]
    models = sorted({str(entry.header.get("gpu")) for entry in decisions})
    if not decisions:
        raise ValueError(f"the tuning database ({directory()}) holds no decisions, so there is nothing to "
                         "export; \"fastest\" and tune() make them")
    if gpu is None:
        if len(models) > 1:
            raise ValueError(f"the tuning database holds decisions for several GPU models ({', '.join(models)}); "
                             "name one")
        gpu = models[0]
    chosen: dict[ConvSpec, TuningDbEntry] = {}
    for entry in decisions:
        if entry.header.get("gpu") != gpu or entry.configuration is None:
            continue
        known = chosen.get(entry.configuration)
        if known is None or (not entry.borrowed, entry.saved or "") > (not known.borrowed, known.saved or ""):
            chosen[entry.configuration] = entry
    if not chosen:
        raise ValueError(f"the tuning database holds no readable decisions for the GPU model {gpu!r}, so there is "
                         f"nothing to export; it holds decisions for: {', '.join(models)}")
    cudnn = {entry.header.get("cudnn") for entry in chosen.values()}
    plan = Plan({}, policy="fastest", gpu=gpu, cudnn=cudnn.pop() if len(cudnn) == 1 else None,
                torch=str(next(iter(chosen.values())).header.get("torch")) if chosen else "unknown")
    for spec, entry in chosen.items():
        pick = entry.header.get("pick")
        built = None
        if isinstance(pick, str):
            loaded = _ops.tuning_db_load("decision", entry.key)
            if loaded is not None and loaded[1]:
                built = SerializedExecutionPlan(loaded[1], str(gpu), int(entry.header["cudnn"]),
                                                int(entry.header["cudnn_frontend"]))
        plan[spec] = PlanEntry(pick, _number(entry.header.get("pick_ms")),
                               _number(entry.header.get("stock_config_ms")), _int(entry.header.get("workspace")),
                               execution_plan=built)
    return plan


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
