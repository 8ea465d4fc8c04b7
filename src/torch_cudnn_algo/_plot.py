"""``profile --plot``: one convolution's candidates as time against workspace;
``profile --energy-plot``: energy per call against time per call.

The table answers "which is fastest"; the plot shows the trade-off behind it:
how much workspace memory each extra bit of speed costs, and how far stock
PyTorch's choice is from the best. matplotlib is an optional dependency (the
``plot`` extra), imported only when a plot is asked for. The figure is drawn
on a :class:`matplotlib.figure.Figure` with the Agg canvas directly, so no
pyplot global state (current figure, backend choice) is touched in the caller.
"""

from __future__ import annotations

import os
import textwrap

from ._algorithms import DIRECTIONS
from ._table import ProfileRow, ProfileTable

__all__ = ["plot_profile", "plot_profile_energy"]

_MIB = 1 << 20
_MISSING_MATPLOTLIB = (
    "torch-cudnn-algo: profile --plot needs matplotlib; install it with pip install 'torch-cudnn-algo[plot]'"
)
_TITLE_WIDTH = 80  # characters per title line
_STOCK_COLOR = "crimson"


def _timed_rows(table: ProfileTable) -> list[ProfileRow]:
    return [row for row in table.rows if row.ok and row.time_ms is not None]


def _workspace_mib(row: ProfileRow) -> float:
    # A row without a workspace (stock PyTorch's: cuDNN chose it) sits at 0.
    return (row.workspace or 0) / _MIB


def _flag_text(table: ProfileTable, row: ProfileRow) -> str:
    if row.value is None:
        return "fastest: stock PyTorch (flag None)"
    direction = DIRECTIONS.get(table.direction)
    flag = direction.flag if direction is not None else "flag"
    return f"fastest: {flag} = {row.value!r}"


def plot_profile(table: ProfileTable, path: str | os.PathLike) -> None:
    """Save a PNG of ``table``: each candidate that ran, median time (ms)
    against workspace (MiB, symlog since many candidates need none); legacy
    algorithms and engine configurations with different markers, stock PyTorch
    as a star and a dashed line at its time, the fastest row labelled with the
    value to assign to the flag. Rows that did not run are left out.

    Raises ValueError when no row has a time, ImportError without matplotlib.
    """
    timed = _timed_rows(table)
    if not timed:
        raise ValueError(
            f"cannot plot the {table.direction} profile of {table.convolution}: no candidate in this "
            "table ran (no row has status 'ok' and a time)"
        )
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError as exc:
        raise ImportError(_MISSING_MATPLOTLIB) from exc

    figure = Figure(figsize=(9, 6), dpi=100)
    FigureCanvasAgg(figure)  # attaches itself to the figure; savefig renders with it
    ax = figure.add_subplot()
    handles: list[object] = []

    groups = (
        ("legacy algorithm", "o", "tab:blue", [r for r in timed if isinstance(r.value, int)]),
        ("engine configuration", "^", "tab:green", [r for r in timed if isinstance(r.value, str)]),
    )
    for label, marker, color, rows in groups:
        if rows:
            handles.append(ax.scatter(
                [_workspace_mib(r) for r in rows], [r.time_ms for r in rows],
                marker=marker, color=color, alpha=0.75, edgecolors="black", linewidths=0.5,
                label=label, zorder=3,
            ))

    stock = table.stock
    if stock is not None and stock.ok and stock.time_ms is not None:
        ax.axhline(stock.time_ms, color=_STOCK_COLOR, linestyle="--", linewidth=1, zorder=2)
        ax.scatter([_workspace_mib(stock)], [stock.time_ms], marker="*", s=250, color=_STOCK_COLOR,
                   edgecolors="black", linewidths=0.5, zorder=4)
        handles.append(Line2D([], [], color=_STOCK_COLOR, linestyle="--", marker="*", markersize=14,
                              markeredgecolor="black", markeredgewidth=0.5, label="stock PyTorch"))

    ax.set_xscale("symlog", linthresh=1.0)  # in MiB: linear below 1 MiB, where 0 lives
    ax.set_xlim(left=-0.1)
    ax.set_xlabel("workspace (MiB; symlog scale, linear below 1 MiB)")
    # Times span orders of magnitude (a slow legacy algorithm beside the engines): log scale.
    ax.set_yscale("log")
    ax.set_ylabel("median time (ms, log scale)")
    # Label the fastest row, on the side of the point away from the axes' edge.
    best = min(timed, key=lambda row: row.time_ms)
    ax.autoscale_view()
    point = (_workspace_mib(best), best.time_ms)
    on_right = ax.transAxes.inverted().transform(ax.transData.transform(point))[0] > 0.6
    ax.annotate(
        _flag_text(table, best), xy=point, xytext=(-25 if on_right else 25, 25),
        textcoords="offset points", ha="right" if on_right else "left", fontsize=9, zorder=5,
        bbox={"boxstyle": "round", "facecolor": "lightyellow", "alpha": 0.9},
        arrowprops={"arrowstyle": "->", "color": "black"},
    )

    ax.set_title(textwrap.fill(f"cuDNN {table.direction}: {table.convolution}", _TITLE_WIDTH), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(handles=handles, loc="best")
    figure.tight_layout()
    figure.savefig(os.fspath(path), format="png")


def _energy_rows(table: ProfileTable) -> list[ProfileRow]:
    return [row for row in table.rows if row.ok and row.time_ms is not None and row.energy_j is not None]


def plot_profile_energy(table: ProfileTable, path: str | os.PathLike) -> None:
    """Save a PNG of ``table``'s energy: each candidate whose energy was measured, joules per
    call (median, the bar its min-max over the windows) against median time per call; stock
    PyTorch as a star with dashed lines at its time and energy, so the quadrant below and left
    of it holds the candidates that are both faster and more frugal. The A/A spread of the
    measurement is in the title.

    Raises ValueError when no row has an energy reading, ImportError without matplotlib.
    """
    measured = _energy_rows(table)
    if not measured:
        raise ValueError(
            f"cannot plot the energy of the {table.direction} profile of {table.convolution}: no row has an "
            "energy reading (profile with energy=True, or --energy)"
        )
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError as exc:
        raise ImportError(_MISSING_MATPLOTLIB.replace("--plot", "--energy-plot")) from exc

    figure = Figure(figsize=(9, 6), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    handles: list[object] = []
    candidates = [row for row in measured if row.value is not None]
    if candidates:
        low = [row.energy_j - (row.energy_min_j if row.energy_min_j is not None else row.energy_j) for row in candidates]
        high = [(row.energy_max_j if row.energy_max_j is not None else row.energy_j) - row.energy_j
                for row in candidates]
        ax.errorbar([row.time_ms for row in candidates], [row.energy_j for row in candidates], yerr=[low, high],
                    fmt="none", ecolor="gray", elinewidth=1, capsize=3, zorder=2)
        handles.append(ax.scatter([row.time_ms for row in candidates], [row.energy_j for row in candidates],
                                  marker="^", color="tab:green", alpha=0.8, edgecolors="black", linewidths=0.5,
                                  label="candidate (bar: min-max of the windows)", zorder=3))
        for row in candidates:
            ax.annotate(str(row.value), (row.time_ms, row.energy_j), textcoords="offset points", xytext=(5, 5),
                        fontsize=7, zorder=4)
    stock = table.stock
    if stock is not None and stock in measured:
        ax.axvline(stock.time_ms, color=_STOCK_COLOR, linestyle="--", linewidth=1, zorder=1)
        ax.axhline(stock.energy_j, color=_STOCK_COLOR, linestyle="--", linewidth=1, zorder=1)
        ax.scatter([stock.time_ms], [stock.energy_j], marker="*", s=250, color=_STOCK_COLOR, edgecolors="black",
                   linewidths=0.5, zorder=5)
        handles.append(Line2D([], [], color=_STOCK_COLOR, linestyle="--", marker="*", markersize=14,
                              markeredgecolor="black", markeredgewidth=0.5, label="stock PyTorch"))
    ax.set_xlabel("median time per call (ms)")
    ax.set_ylabel("energy per call (J, median of the windows)")
    energy = table.environment.get("energy_measure")
    resolution = energy.get("resolution") if isinstance(energy, dict) else None
    spread = f"; A/A spread +/-{resolution * 100:.1f}%" if isinstance(resolution, (int, float)) else ""
    ax.set_title(textwrap.fill(f"cuDNN {table.direction}: {table.convolution}{spread}", _TITLE_WIDTH), fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(handles=handles, loc="best")
    figure.tight_layout()
    figure.savefig(os.fspath(path), format="png")
