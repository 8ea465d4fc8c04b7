"""The profile table: one row per candidate of one convolution, the seed's
printout (sorted by time, first column = the value to assign to the flag), its
conversions (dicts, JSON, CSV) and the ``"fastest"`` policy's choice rule.

Pure Python: everything here is tested on synthetic rows without a GPU.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypedDict

from typing_extensions import Unpack

from . import _text_table

__all__ = [
    "TOLERANCES",
    "ProfileRow",
    "ProfileTable",
    "POLICIES",
    "choose_fastest",
    "choose_least_workspace",
    "choose_lowest_energy",
    "LOWEST_ENERGY_MIN_SAVING",
    "LOWEST_ENERGY_TIME_GUARD",
    "eligible_rows",
    "tolerance_for",
]

FORMAT = "torch_cudnn_algo.profile/1"

# Largest max_rel_error (max |out - ref| / max |ref|, ref in float64) the
# "fastest" policy accepts, per dtype. float32 has two: with TF32 allowed its
# tensor-core engines round inputs to 10 mantissa bits, like float16.
TOLERANCES: dict[str, float] = {
    "float16": 1e-2,
    "bfloat16": 5e-2,
    "float32": 1e-4,
    "float32+tf32": 1e-2,
    "float64": 1e-10,
}

# Medians this close (relative) count as a tie, broken by smaller workspace.
TIE_RELATIVE = 0.01

# The "lowest_energy" policy's defaults: a pick is at most this much slower than stock's own
# configuration (median GPU time per call) ...
LOWEST_ENERGY_TIME_GUARD = 0.02
# ... and saves at least this much energy per call against it, and more than the A/A spread.
LOWEST_ENERGY_MIN_SAVING = 0.01


# Numerical notes meaning "float32 computed at reduced precision".
_REDUCED_PRECISION_NOTES = frozenset({"TENSOR_CORE", "DOWN_CONVERT_INPUTS", "TF32"})


def tolerance_for(dtype: str, allow_tf32: bool) -> float:
    """The ``"fastest"`` policy's error tolerance for a dtype name ("float16", ...)."""
    key = "float32+tf32" if dtype == "float32" and allow_tf32 else dtype
    try:
        return TOLERANCES[key]
    except KeyError:
        raise ValueError(f"no tolerance for dtype {dtype!r}; known: {', '.join(TOLERANCES)}") from None


@dataclass(frozen=True)
class ProfileRow:
    """One candidate (or stock PyTorch's own choice) on one convolution."""

    value: int | str | None  # assign this to the flag; None is stock PyTorch's own choice
    label: str  # legacy algorithm name, engine source ("heuristics_a", ...) or "stock"
    status: str  # "ok", "unsupported: ...", "refused: ...", "out of memory", "over workspace limit", "failed: ..."
    time_ms: float | None = None  # median of the timed calls, GPU time
    workspace: int | None = None  # bytes cuDNN asked for
    deterministic: bool | None = None
    notes: tuple[str, ...] = ()  # math type / cuDNN numerical and behaviour notes
    max_rel_error: float | None = None  # max |out - ref| / max |ref|, ref in float64
    energy_j: float | None = None  # joules per call (median of the windows; see _energy)
    energy_min_j: float | None = None  # the least and most joules per call of a window
    energy_max_j: float | None = None
    energy_vs_stock: float | None = None  # joules per call over stock's, median of the rounds (alternated)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> ProfileRow:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown profile row fields {sorted(unknown)}; fields are {sorted(names)}")
        values = dict(data)
        values["notes"] = tuple(values.get("notes") or ())
        return cls(**values)  # type: ignore[arg-type]


def _sort_key(indexed: tuple[int, ProfileRow]) -> tuple[int, float, int]:
    index, row = indexed
    if row.ok and row.time_ms is not None:
        return (0, row.time_ms, index)
    return (1, 0.0, index)  # rows that did not run keep their listing order, last


def _format_bytes(value: int | None) -> str:
    if value is None:
        return "-"
    if value < 1 << 20:
        return f"{value / 1024:.1f} KiB" if value else "0"
    if value < 1 << 30:
        return f"{value / (1 << 20):.1f} MiB"
    return f"{value / (1 << 30):.2f} GiB"


def _format_float(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _format_energy(row: ProfileRow) -> str:
    if row.energy_j is None:
        return "-"
    if row.energy_min_j is None or row.energy_max_j is None:
        return f"{row.energy_j:.3g}"
    return f"{row.energy_j:.3g} ({row.energy_min_j:.3g}-{row.energy_max_j:.3g})"


def _format_bool(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _format_value(value: int | str | None) -> str:
    return "None (stock)" if value is None else str(value)


@dataclass
class ProfileTable:
    """Every candidate's row for one convolution in one direction, fastest first."""

    direction: str  # "fwd", "bwd_data", "bwd_filter": the cuDNN call
    convolution: str  # the convolution's description
    dtype: str  # "float16", ...
    rows: list[ProfileRow]
    environment: dict[str, object] = field(default_factory=dict)  # GPU, cuDNN, torch, timing setup

    def __post_init__(self) -> None:
        self.rows = [row for _, row in sorted(enumerate(self.rows), key=_sort_key)]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def row(self, value: int | str | None) -> ProfileRow:
        """The row whose flag value is ``value`` (None: stock)."""
        for row in self.rows:
            if row.value == value:
                return row
        raise KeyError(f"no row with value {value!r}")

    @property
    def stock(self) -> ProfileRow | None:
        return next((row for row in self.rows if row.value is None), None)

    def fastest(
        self,
        *,
        tolerance: float | None = None,
        deterministic: bool = False,
        allow_tf32: bool = True,
        workspace_limit: int | None = None,
    ) -> ProfileRow | None:
        """The ``"fastest"`` policy's pick from this table (see :func:`choose_fastest`)."""
        return self.pick("fastest", tolerance=tolerance, deterministic=deterministic, allow_tf32=allow_tf32,
                         workspace_limit=workspace_limit)

    def pick(
        self,
        policy: str,
        *,
        tolerance: float | None = None,
        deterministic: bool = False,
        allow_tf32: bool = True,
        workspace_limit: int | None = None,
        time_guard: float = LOWEST_ENERGY_TIME_GUARD,
        min_saving: float = LOWEST_ENERGY_MIN_SAVING,
    ) -> ProfileRow | None:
        """A policy's pick ("fastest", "least_workspace", "lowest_energy") under
        the contract's rules; None: no row qualifies. ``time_guard`` and
        ``min_saving`` are the ``"lowest_energy"`` policy's (see
        :func:`choose_lowest_energy`); its resolution is the A/A spread of this
        table's energy measurement."""
        try:
            choose = POLICIES[policy]
        except KeyError:
            raise ValueError(f"unknown policy {policy!r}; policies are {', '.join(POLICIES)}") from None
        if tolerance is None:
            tolerance = tolerance_for(self.dtype, allow_tf32)
        rules: PolicyRules = {"tolerance": tolerance, "deterministic": deterministic,
                              "reduced_precision_allowed": allow_tf32 or self.dtype != "float32",
                              "workspace_limit": workspace_limit}
        if policy == "lowest_energy":
            energy = self.environment.get("energy_measure")
            resolution = energy.get("resolution") if isinstance(energy, dict) else None
            return choose_lowest_energy(self.rows, time_guard=time_guard, min_saving=min_saving,
                                        resolution=resolution if isinstance(resolution, (int, float)) else 0.0,
                                        **rules)
        return choose(self.rows, **rules)

    # -- printing ---------------------------------------------------------
    def format(self) -> str:
        """The seed's table: one row per candidate, fastest first; the first
        column is exactly what to assign to the direction's flag."""
        headers = ("flag value", "source", "time ms", "vs stock", "workspace", "determ.",
                   "max rel err", "J/call (min-max)", "J vs stock", "notes", "status")
        stock = self.stock
        stock_ms = stock.time_ms if stock is not None and stock.ok else None
        lines = []
        for row in self.rows:
            ratio = None if stock_ms is None or row.time_ms is None else row.time_ms / stock_ms
            lines.append((
                _format_value(row.value),
                row.label,
                _format_float(row.time_ms, ".4f"),
                _format_float(ratio, ".2f") + ("x" if ratio is not None else ""),
                _format_bytes(row.workspace),
                _format_bool(row.deterministic),
                _format_float(row.max_rel_error, ".1e"),
                _format_energy(row),
                _format_float(row.energy_vs_stock, ".3f") + ("x" if row.energy_vs_stock is not None else ""),
                ",".join(row.notes),
                row.status,  # last: an unsupported row's reason is long
            ))
        numeric = {2, 3, 4, 6, 7, 8}
        title = f"cuDNN {self.direction} candidates for {self.convolution}"
        energy = self.environment.get("energy_measure")
        footer = [f"energy: {energy['summary']}"] if isinstance(energy, dict) and energy.get("summary") else []
        return "\n".join([title, *_text_table.aligned([headers, *lines], right=numeric), *footer])

    def __str__(self) -> str:
        return self.format()

    # -- conversions ------------------------------------------------------
    def to_dicts(self) -> list[dict[str, object]]:
        return [row.to_dict() for row in self.rows]

    def to_json(self, **dumps_kwargs) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                "direction": self.direction,
                "convolution": self.convolution,
                "dtype": self.dtype,
                "environment": self.environment,
                "rows": self.to_dicts(),
            },
            **dumps_kwargs,
        )

    @classmethod
    def from_json(cls, text: str) -> ProfileTable:
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise ValueError(f"not a profile table: format is {data.get('format')!r}, expected {FORMAT!r}")
        return cls(
            direction=data["direction"],
            convolution=data["convolution"],
            dtype=data["dtype"],
            rows=[ProfileRow.from_dict(row) for row in data["rows"]],
            environment=data.get("environment", {}),
        )

    _CSV_TABLE_COLUMNS = ("direction", "convolution", "dtype")

    def to_csv(self) -> str:
        """One line per row; the table's direction, convolution and dtype repeat
        on every line so the file stands alone. Notes are ';'-separated; an
        empty cell is None."""
        columns = [f.name for f in dataclasses.fields(ProfileRow)]
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([*self._CSV_TABLE_COLUMNS, *columns])
        for row in self.rows:
            cells = []
            for name in columns:
                value = getattr(row, name)
                if name == "notes":
                    cells.append(";".join(value))
                elif value is None:
                    cells.append("")
                elif isinstance(value, float):
                    cells.append(repr(value))  # round-trips exactly
                else:
                    cells.append(str(value))
            writer.writerow([self.direction, self.convolution, self.dtype, *cells])
        return out.getvalue()

    @classmethod
    def from_csv(cls, text: str) -> ProfileTable:
        reader = csv.DictReader(io.StringIO(text))
        rows, header = [], None
        for record in reader:
            header = tuple(record[c] for c in cls._CSV_TABLE_COLUMNS)
            rows.append(ProfileRow(
                value=_parse_value(record["value"]),
                label=record["label"],
                status=record["status"],
                time_ms=_parse_optional(record["time_ms"], float),
                workspace=_parse_optional(record["workspace"], int),
                deterministic=_parse_optional(record["deterministic"], _parse_bool),
                notes=tuple(n for n in record["notes"].split(";") if n),
                max_rel_error=_parse_optional(record["max_rel_error"], float),
                energy_j=_parse_optional(record["energy_j"], float),
                **{name: _parse_optional(record.get(name, ""), float)
                   for name in ("energy_min_j", "energy_max_j", "energy_vs_stock")},
            ))
        if header is None:
            raise ValueError("empty profile CSV: no rows")
        return cls(direction=header[0], convolution=header[1], dtype=header[2], rows=rows)


def _parse_value(text: str) -> int | str | None:
    if text == "":
        return None
    return int(text) if text.isdigit() else text


def _parse_bool(text: str) -> bool:
    if text not in ("True", "False"):
        raise ValueError(f"expected True or False, got {text!r}")
    return text == "True"


def _parse_optional(text: str, parse):
    return None if text == "" else parse(text)


def eligible_rows(
    rows: Iterable[ProfileRow],
    *,
    tolerance: float,
    deterministic: bool = False,
    reduced_precision_allowed: bool = True,
    workspace_limit: int | None = None,
) -> list[ProfileRow]:
    """Rows a policy may pick: they ran (status "ok") and can be pinned (value
    not None), with max_rel_error <= ``tolerance``, deterministic when
    ``deterministic``, no TF32/down-convert notes unless
    ``reduced_precision_allowed``, and workspace <= ``workspace_limit``."""
    return [
        row for row in rows
        if row.ok
        and row.value is not None
        and row.time_ms is not None
        and row.max_rel_error is not None
        and not math.isnan(row.max_rel_error)
        and row.max_rel_error <= tolerance
        and (not deterministic or row.deterministic is True)
        and (reduced_precision_allowed or not _REDUCED_PRECISION_NOTES.intersection(row.notes))
        and (workspace_limit is None or (row.workspace is not None and row.workspace <= workspace_limit))
    ]


class PolicyRules(TypedDict, total=False):
    """The keywords of :func:`eligible_rows` after ``rows``."""

    tolerance: float
    deterministic: bool
    reduced_precision_allowed: bool
    workspace_limit: int | None


def choose_fastest(rows: Iterable[ProfileRow], **rules: Unpack[PolicyRules]) -> ProfileRow | None:
    """The ``"fastest"`` policy: among the :func:`eligible_rows` (``rules`` are
    its keywords), the lowest median time; medians within ``TIE_RELATIVE`` of
    it are a tie, won by the smaller workspace. None when no row qualifies (the
    stock path runs).
    """
    eligible = eligible_rows(rows, **rules)
    if not eligible:
        return None
    best = min(row.time_ms for row in eligible)
    tied = [row for row in eligible if row.time_ms <= best * (1 + TIE_RELATIVE)]
    return min(tied, key=lambda row: (row.workspace or 0, row.time_ms))


# The "least_workspace" policy's time budget over the fastest eligible row.
LEAST_WORKSPACE_SLACK = 0.05


def choose_least_workspace(rows: Iterable[ProfileRow], **rules: Unpack[PolicyRules]) -> ProfileRow | None:
    """The ``"least_workspace"`` policy: among the :func:`eligible_rows` no more
    than ``LEAST_WORKSPACE_SLACK`` (5%) slower than the fastest of them, the
    smallest workspace (then the faster). None when no row qualifies."""
    eligible = eligible_rows(rows, **rules)
    if not eligible:
        return None
    budget = min(row.time_ms for row in eligible) * (1 + LEAST_WORKSPACE_SLACK)
    within = [row for row in eligible if row.time_ms <= budget]
    return min(within, key=lambda row: (row.workspace or 0, row.time_ms))


def _energy_ratio(row: ProfileRow, stock: ProfileRow | None) -> float | None:
    """Joules per call of ``row`` over stock's: the per-round median where both were measured
    alternately, else the ratio of their medians."""
    if row.energy_vs_stock is not None:
        return row.energy_vs_stock
    if row.energy_j is not None and stock is not None and stock.energy_j:
        return row.energy_j / stock.energy_j
    return None


def choose_lowest_energy(
    rows: Iterable[ProfileRow],
    *,
    time_guard: float = LOWEST_ENERGY_TIME_GUARD,
    min_saving: float = LOWEST_ENERGY_MIN_SAVING,
    resolution: float = 0.0,
    **rules: Unpack[PolicyRules],
) -> ProfileRow | None:
    """The ``"lowest_energy"`` policy: among the :func:`eligible_rows` whose
    energy per call was measured and whose median time is within ``time_guard``
    (a fraction: 0.02 = 2%) of stock's row (of the fastest eligible row where
    the table has no timed stock row), the one using the least energy per call
    relative to stock (then the faster). It is picked only if it saves more
    than ``min_saving`` and more than ``resolution`` (the A/A spread of the
    measurement: a smaller difference is noise); otherwise None (stock runs).
    A table without stock's energy picks the lowest energy within the guard."""
    if not (isinstance(time_guard, (int, float)) and time_guard >= 0):
        raise ValueError(f"time_guard must be a fraction >= 0 (0.02 = 2% slower than stock at most), got {time_guard!r}")
    if not (isinstance(min_saving, (int, float)) and 0 <= min_saving < 1):
        raise ValueError(f"min_saving must be a fraction in [0, 1) (0.01 = 1% less energy), got {min_saving!r}")
    rows = list(rows)
    eligible = eligible_rows(rows, **rules)
    stock = next((row for row in rows if row.value is None and row.ok and row.time_ms is not None), None)
    times = [row.time_ms for row in eligible]
    base_ms = stock.time_ms if stock is not None else (min(times) if times else None)
    if base_ms is None:
        return None
    within = [row for row in eligible if row.energy_j is not None and row.time_ms <= base_ms * (1 + time_guard)]
    if not within:
        return None
    ratios = {id(row): _energy_ratio(row, stock) for row in within}
    if any(ratio is None for ratio in ratios.values()):  # no stock energy to compare with
        return min(within, key=lambda row: (row.energy_j, row.time_ms))
    best = min(within, key=lambda row: (ratios[id(row)], row.time_ms))
    return best if ratios[id(best)] < 1 - max(min_saving, resolution) else None


POLICIES = {"fastest": choose_fastest, "least_workspace": choose_least_workspace,
            "lowest_energy": choose_lowest_energy}
