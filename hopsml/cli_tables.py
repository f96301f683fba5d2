"""Plain aligned text tables, as the `hopsml` command and its subcommands print them."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

_MAX_CELL = 40


def cell(value: Any) -> str:
    """One value as table text: '-' for nothing, k=v lists for dicts, short floats, long text cut."""
    if value is None:
        return "-"
    if isinstance(value, dict):
        value = ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    if isinstance(value, float):
        value = f"{value:.6g}"
    text = str(value)
    return text if len(text) <= _MAX_CELL else text[:_MAX_CELL - 1] + "…"


def format_table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    """A header of upper-cased column names, then one aligned line per row.

    >>> print(format_table([{"id": "a_1", "metric": 0.5}], ("id", "metric")))
    ID   METRIC
    a_1  0.5
    """
    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)
