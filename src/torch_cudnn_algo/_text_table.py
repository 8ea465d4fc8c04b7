"""Rows of text cells as lines of aligned columns: the one layout behind every plain-text table
the package prints (the profile table, a plan, an energy report, the commands' listings)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["aligned"]


def aligned(rows: Sequence[Sequence[str]], *, right: Collection[int] = (), gap: str = "  ", indent: str = "",
            free_last: bool = False) -> list[str]:
    """``rows`` as lines, each column as wide as its widest cell: cells padded on the right (on the
    left in the columns numbered in ``right``), ``gap`` between columns, ``indent`` before each
    line, the padding at a line's end stripped.

    A row's last cell is free text, written as it is and not counted in its column's width,
    in every row with ``free_last``, and in a row shorter than the longest (a message beside a
    label, running across the columns the row lacks)."""
    columns = max((len(row) for row in rows), default=0)

    def free(row: Sequence[str]) -> bool:
        return free_last or len(row) < columns

    widths = [max((len(row[i]) for row in rows if i < len(row) - free(row)), default=0) for i in range(columns)]
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        if free(row):
            lines.append(indent + gap.join([*cells[:-1], row[-1]]))
        else:
            lines.append((indent + gap.join(cells)).rstrip())
    return lines
