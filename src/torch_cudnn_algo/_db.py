"""The tuning database: what tuning learnt, kept on disk for every later process, rank and node
that shares the directory (``csrc/store/tuning_db.h``; ``docs/tuning-db.md``)."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass

from . import _ops
from ._conv_spec import ConvSpec


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


def tuning_db_dir() -> str | None:
    """The directory of the tuning database, or None when it is off: ``TORCH_CUDNN_ALGO_DB`` (``0`` or
    empty: off; the older ``TORCH_CUDNN_ALGO_COMPILE_CACHE`` is read when it is unset), else
    ``$XDG_CACHE_HOME/torch_cudnn_algo/db``, else ``~/.cache/torch_cudnn_algo/db``."""
    return _ops.tuning_db_dir() or None


def tuning_db_max_bytes() -> int:
    """The database's size bound: ``TORCH_CUDNN_ALGO_DB_MAX_MB`` megabytes (default 1024); least
    recently used entries are evicted beyond it."""
    return _ops.tuning_db_max_bytes()


def _configuration(header: dict[str, object]) -> ConvSpec | None:
    fields = header.get("configuration")
    if not isinstance(fields, dict):
        return None
    try:
        return _ops._conv_request(json.dumps(fields)).conv_spec()
    except (TypeError, ValueError, AttributeError):
        return None


def tuning_db_entries() -> list[TuningDbEntry]:
    """Every whole entry of the database (files that are not, torn or corrupt ones, are left out)."""
    entries = []
    for row in _ops.tuning_db_entries():
        header = row["header"] if isinstance(row["header"], dict) else {}
        entries.append(TuningDbEntry(
            kind=row["kind"], configuration=_configuration(header), header=header,
            saved=header.get("saved") if isinstance(header.get("saved"), str) else None,
            host=header.get("host") if isinstance(header.get("host"), str) else None,
            bytes=int(row["bytes"]),
            last_used=datetime.datetime.fromtimestamp(row["modified_ns"] / 1e9, datetime.timezone.utc),
            path=row["path"]))
    return entries


def clear_tuning_db() -> int:
    """Removes every entry (and anything an interrupted write left); returns how many entries."""
    return _ops.tuning_db_clear()


def remove_tuning_db_entries(entries: list[TuningDbEntry]) -> int:
    """Removes these entries; returns how many were removed."""
    return _ops.tuning_db_remove([entry.path for entry in entries])


def tuning_db_counts() -> dict[str, int]:
    """This process's entries loaded, saved, rejected (torn, corrupt), failed to save, evicted."""
    return _ops.tuning_db_counts()
