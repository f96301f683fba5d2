"""Plain aligned text tables, as the `hopsml` command and its subcommands print them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_MAX_CELL = 40
# Characters a terminal acts on instead of showing: C0 and C1 controls (an escape sequence can retitle the window,
# move the cursor or hide text) and the bidirectional overrides that reorder what is shown.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str, keep: str = "") -> str:
    """`text` with every control character shown as its escape, so that a name or a message read from a record
    cannot drive the terminal it is printed on; the characters in `keep` (such as a newline) stay.

    >>> print(printable("job\x1b]0;owned\x07 ok"))
    job\\x1b]0;owned\\x07 ok
    """
    return _CONTROL.sub(lambda m: m.group(0) if m.group(0) in keep else ascii(m.group(0))[1:-1], text)


def number(value: object, digits: int = 4) -> str:
    """A float with `digits` significant digits (0.944444 -> '0.9444'); anything else as str.

    >>> number(0.9444444), number(12345.678), number(3), number("x")
    ('0.9444', '1.235e+04', '3', 'x')
    """
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def pairs(mapping: object, sep: str = ",", digits: int = 4) -> str:
    """A dict as 'k=v' items with floats rounded to `digits` significant digits, or '-' when empty.

    >>> pairs({"accuracy": 0.944444, "loss": 0.26921, "epochs": 10})
    'accuracy=0.9444,loss=0.2692,epochs=10'
    """
    if not isinstance(mapping, dict):
        return "-" if mapping is None else number(mapping, digits)
    return sep.join(f"{k}={number(v, digits)}" for k, v in mapping.items()) or "-"


def cell(value: object, limit: int | None = _MAX_CELL) -> str:
    """One value as table text: '-' for nothing, k=v lists for dicts, short floats, long text cut
    (at `limit` characters; None: never)."""
    if value is None:
        return "-"
    if isinstance(value, dict):
        value = ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    if isinstance(value, float):
        value = f"{value:.6g}"
    text = printable(str(value))
    return text if limit is None or len(text) <= limit else text[:limit - 1] + "…"


def format_fields(items: Sequence[tuple[str, Any]], indent: str = "  ") -> str:
    """'name  value' lines with the values aligned; items whose value is None or '' are left out.

    >>> print(format_fields([("state", "FINISHED"), ("error", None), ("metric", "accuracy = 0.9444")]))
      state   FINISHED
      metric  accuracy = 0.9444
    """
    shown = [(k, printable(str(v), keep="\n")) for k, v in items if v is not None and v != ""]
    width = max((len(k) for k, _ in shown), default=0)
    return "\n".join(f"{indent}{k.ljust(width)}  {v}".rstrip() for k, v in shown)


def format_table(rows: list[dict[str, Any]], columns: Sequence[str], uncut: Sequence[str] = ()) -> str:
    """A header of upper-cased column names, then one aligned line per row; the columns in `uncut`
    show their whole text, the others are cut at 40 characters.

    >>> print(format_table([{"id": "a_1", "metric": 0.5}], ("id", "metric")))
    ID   METRIC
    a_1  0.5
    """
    cells = [[cell(row.get(c), None if c in uncut else _MAX_CELL) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)
