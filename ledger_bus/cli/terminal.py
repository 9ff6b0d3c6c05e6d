"""What a terminal shows: tables and `name  value` lines, drawn with rich.

Loaded only when stdout is a terminal (or `--output table`): JSONL, what scripts read, never
pays for rich.
"""

from __future__ import annotations

from typing import Final

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table

# Columns of free text, which may be folded; every other column holds values kept whole.
TEXT_COLUMNS: Final = frozenset({"what", "objective", "detail", "reason", "line", "warning"})
_TEXT_MIN: Final = 16


class Terminal:
    """A console that draws the output rule's tables and records."""

    def __init__(self, highlight: bool = False) -> None:
        self.console = Console(highlight=highlight)

    @property
    def width(self) -> int:
        return self.console.width

    def table(self, rows: list[dict[str, str]], title: str) -> None:
        """Rows as one table; as blocks of `name  value` lines when the ids do not fit."""
        console = self.console
        if not rows:
            console.print(escape(f"{title}: none" if title else "none"))
            return
        columns = list(rows[0])
        widths = {c: max(cell_len(c), *(cell_len(r.get(c, "")) for r in rows)) for c in columns}
        needed = sum(
            (min(widths[c], _TEXT_MIN) if c in TEXT_COLUMNS else widths[c]) + 2 for c in columns
        )
        if needed > console.width:
            self._expanded(columns, rows, title)
            return
        table = Table(title=escape(title) if title else None, box=None, header_style="bold")
        for column in columns:
            if column in TEXT_COLUMNS:
                table.add_column(column, overflow="fold", ratio=1, min_width=_TEXT_MIN)
            else:
                table.add_column(column, no_wrap=True, min_width=widths[column])
        for row in rows:
            table.add_row(*(escape(row.get(c, "")) for c in columns))
        console.print(table)

    def record(self, pairs: list[tuple[str, str]], title: str) -> None:
        """One record as `name  value` lines, under its title."""
        if title:
            self.console.print(f"[bold]{escape(title)}[/]")
        self._pairs(pairs)

    def line(self, text: str, *, header: bool = False) -> None:
        """One line of fixed columns, cut at the terminal's edge (a header's in bold)."""
        if header:
            self.console.print(text, style="bold")
        else:
            self.console.print(escape(text), no_wrap=True, overflow="ellipsis")

    def markup(self, text: str) -> None:
        """One line of rich markup, as it is."""
        self.console.print(text)

    def _expanded(self, columns: list[str], rows: list[dict[str, str]], title: str) -> None:
        if title:
            self.console.print(f"[bold]{escape(title)}[/]")
        for number, row in enumerate(rows, 1):
            self.console.print(f"[dim]-[ {number} ]-[/]")
            self._pairs([(c, row.get(c, "")) for c in columns])

    def _pairs(self, pairs: list[tuple[str, str]]) -> None:
        """`name  value` lines. A value is never wrapped by us: a line longer than the terminal
        is left for the terminal to wrap, so that copying the value copies it whole."""
        width = max((len(name) for name, _ in pairs), default=0)
        for name, value in pairs:
            self.console.print(
                f"[bold]{escape(name.ljust(width))}[/]  {escape(value)}", soft_wrap=True
            )
