"""How the commands show figures to people: tables whose dates are never cut, dates, sizes.

A table is as wide as the terminal (80 columns piped); when its rows do not fit, the text
columns wrap and a date column keeps its dates' width (``2026-11-25``, never ``2026-11-…``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal, TypeAlias

#: A column: its header, or its header and kind: ``"day"`` (``2026-11-25``), ``"when"``
#: (``2026-11-25 14:03``) or ``"right"`` (a figure, right-aligned).
Column: TypeAlias = "str | tuple[str, Literal['day', 'when', 'right']]"

_WIDTHS = {"day": len("2026-11-25"), "when": len("2026-11-25 14:03")}


def table(title: str | None, *columns: Column, **options: Any) -> Any:
    """A ``rich`` table with ``columns`` (see :data:`Column`); ``options`` are the
    table's (``show_header``...).

    Example:
        >>> t = table("facts", "value", ("since", "day"))
        >>> t.add_row("Munich", day(0))
        >>> [c.min_width for c in t.columns]
        [None, 10]
    """
    from rich.table import Table

    out = Table(title=title, **options)
    for column in columns:
        name, kind = (column, None) if isinstance(column, str) else column
        if kind in _WIDTHS:
            out.add_column(name, no_wrap=True, min_width=_WIDTHS[kind])
        elif kind == "right":
            out.add_column(name, justify="right", overflow="fold")
        else:
            out.add_column(name, overflow="fold")
    return out


def day(ts: float) -> str:
    """A day in UTC: ``2026-11-25``.

    Example:
        >>> day(0)
        '1970-01-01'
    """
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d")


def when(ts: float | None, never: str = "") -> str:
    """A moment in UTC to the minute, ``never`` for ``None``.

    Example:
        >>> when(90), when(None, never="never")
        ('1970-01-01 00:01', 'never')
    """
    return never if ts is None else f"{datetime.fromtimestamp(ts, timezone.utc):%Y-%m-%d %H:%M}"


def size(n: int) -> str:
    """Bytes for people: ``512 B``, ``48.2 kB``, ``3.1 MB``.

    Example:
        >>> size(512), size(48_200), size(3_100_000)
        ('512 B', '48.2 kB', '3.1 MB')
    """
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
