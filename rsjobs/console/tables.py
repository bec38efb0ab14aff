"""One way to print a table, for every command: a header row, text columns aligned left,
number columns aligned right, two spaces between columns, nothing cut.

On a terminal the header is bold and states are coloured (``rich``); anywhere else the
same layout is plain text without trailing spaces, so that scripts can split on runs of
spaces and ``grep`` finds whole task ids.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence
from typing import IO, NamedTuple

from rich.console import Console
from rich.table import Table
from rich.text import Text

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


#: the width tables are laid out in: wide enough that no cell is ever cut or wrapped
WIDE = 1 << 16


class Column(NamedTuple):
    """A column: its header, and whether it holds numbers (aligned right)."""

    name: str
    numeric: bool = False


def is_terminal(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _cell(value: object, styled: bool) -> Text:
    text = "-" if value is None or value == "" else str(value)
    style = STATE_STYLES.get(text, "") if styled else ""
    return Text(text, style=style)


def _table(
    columns: Sequence[Column], rows: Sequence[Sequence[object]], *, header: bool, styled: bool
) -> Table:
    table = Table(
        box=None,
        pad_edge=False,
        show_edge=False,
        show_header=header,
        header_style="bold" if styled else "",
        padding=(0, 1),
    )
    for c in columns:
        table.add_column(c.name, justify="right" if c.numeric else "left", no_wrap=True)
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"a row of {len(row)} cells for {len(columns)} columns")
        table.add_row(*(_cell(v, styled) for v in row))
    return table


def render_table(
    columns: Sequence[Column], rows: Sequence[Sequence[object]], *, header: bool = True
) -> str:
    """The table as plain text (the layout of :func:`print_table` off a terminal)."""
    buf = io.StringIO()
    table = _table(columns, rows, header=header, styled=False)
    Console(file=buf, width=WIDE, no_color=True, highlight=False, emoji=False).print(table)
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


def print_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[object]],
    *,
    header: bool = True,
    file: IO[str] | None = None,
) -> None:
    """Print the table to ``file`` (stdout): styled on a terminal, plain otherwise."""
    out = file if file is not None else sys.stdout
    if not is_terminal(out):
        out.write(render_table(columns, rows, header=header))
        out.flush()
        return
    table = _table(columns, rows, header=header, styled=True)
    # as wide as the table needs: the terminal wraps a long line, rich would cut cells
    Console(file=out, width=WIDE, highlight=False, emoji=False).print(table)
