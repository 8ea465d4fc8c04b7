"""The tuning database: what tuning learnt (``"fastest"`` decisions, compiled engines' execution
plans), kept on disk for every later process, rank and node that shares its directory.

``TORCH_CUDNN_ALGO_DB`` names the directory (``0`` turns the database off) and
``TORCH_CUDNN_ALGO_DB_MAX_MB`` bounds its size; docs/tuning-db.md describes both. Here a
program reads it (:func:`entries`, :func:`counts`), edits it (:func:`clear`, :func:`remove`,
:func:`merge`) and turns its decisions into a plan (:func:`export_plan`)::

    import torch_cudnn_algo

    for entry in torch_cudnn_algo.db.entries():
        print(entry.kind, entry.configuration, entry.header.get("pick"))
    torch_cudnn_algo.db.export_plan().save("plan.json")

The ``torch-cudnn-algo db`` command does the same from a shell.
"""

from __future__ import annotations

from ._db import MergeReport, TuningDbEntry, clear, counts, directory, entries, export_plan, max_bytes, merge, remove

__all__ = [
    "MergeReport",
    "TuningDbEntry",
    "clear",
    "counts",
    "directory",
    "entries",
    "export_plan",
    "max_bytes",
    "merge",
    "remove",
]
