"""One way to print a table, for every command: a header row, text columns aligned left,
number columns aligned right, two spaces between columns, nothing cut.

On a terminal the header is bold and states are coloured (ANSI escapes); anywhere else the
same layout is plain text without trailing spaces, so that scripts can split on runs of
spaces and ``grep`` finds whole task ids.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO, NamedTuple

__all__ = ["STATE_STYLES", "Column", "is_terminal", "print_table", "render_table"]

#: colours of task states on a terminal (the same everywhere a state is printed)
STATE_STYLES = {
    "WAITING": "dim",
    "PENDING": "",
    "SCHEDULED": "blue",
    "RUNNING": "cyan",
    "DEFERRED": "magenta",
    "PAUSED": "blue",
    "SUCCEEDED": "green",
    "FAILED": "red",
    "CANCELLED": "yellow",
    "TIMED_OUT": "magenta",
}


#: ANSI SGR codes of the styles above (and of the header's bold)
_SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
        "magenta": "35", "cyan": "36"}  # fmt: skip


class Column(NamedTuple):
    """A column: its header, and whether it holds numbers (aligned right)."""

    name: str
    numeric: bool = False


def is_terminal(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _text(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _styled(text: str, style: str) -> str:
    code = _SGR.get(style)
    return f"\x1b[{code}m{text}\x1b[0m" if code else text


def _lines(
    columns: Sequence[Column], rows: Sequence[Sequence[object]], *, header: bool, styled: bool
) -> list[str]:
    """The table's lines: each column as wide as its widest cell, two spaces between
    columns, text aligned left and numbers right, no trailing spaces; with ``styled``, the
    header bold and task states in their colours (escapes add no width)."""
    cells = [[_text(v) for v in row] for row in rows]
    for row in cells:
        if len(row) != len(columns):
            raise ValueError(f"a row of {len(row)} cells for {len(columns)} columns")
    heads = [c.name for c in columns]
    widths = [
        max([len(heads[j]) if header else 0, *(len(row[j]) for row in cells)])
        for j in range(len(columns))
    ]

    def line(row: list[str], style_of: dict[str, str] | str) -> str:
        parts = []
        for j, (c, text) in enumerate(zip(columns, row, strict=True)):
            pad = " " * (widths[j] - len(text))
            style = style_of if isinstance(style_of, str) else style_of.get(text, "")
            shown = _styled(text, style) if styled else text
            parts.append(pad + shown if c.numeric else shown + pad)
        return "  ".join(parts).rstrip()

    out = [line(heads, "bold")] if header else []
    return out + [line(row, STATE_STYLES) for row in cells]


def render_table(
    columns: Sequence[Column], rows: Sequence[Sequence[object]], *, header: bool = True
) -> str:
    """The table as plain text (the layout of :func:`print_table` off a terminal)."""
    return "".join(f"{ln}\n" for ln in _lines(columns, rows, header=header, styled=False))


def print_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[object]],
    *,
    header: bool = True,
    file: IO[str] | None = None,
) -> None:
    """Print the table to ``file`` (stdout): styled on a terminal, plain otherwise (as
    wide as the table needs: a terminal wraps a long line, no cell is cut)."""
    out = file if file is not None else sys.stdout
    styled = is_terminal(out)
    out.write("".join(f"{ln}\n" for ln in _lines(columns, rows, header=header, styled=styled)))
    out.flush()
