"""What commands print: one rule for all of them.

JSONL when stdout is not a terminal, a table when it is, and `--output jsonl|table` to choose.
A table never wraps or cuts an id (the value one copies into the next command): when the ids do
not fit the terminal's width, each row is shown as a block of `name  value` lines instead, as
psql's expanded mode does. Only free text (a summary, an objective) is folded or shortened.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Final

from ledger_bus.cli.app import Settings
from ledger_bus.model.ids import cursor_ms
from ledger_bus.model.jsontext import dumps, format_time
from ledger_bus.model.records import RecordedEvent

# Columns of free text, which may be folded; every other column holds values kept whole.
TEXT_COLUMNS: Final = frozenset({"what", "objective", "detail", "reason", "line", "warning"})
_TEXT_MIN: Final = 16
_EVENT_COLUMNS: Final = ("at", "stream", "v", "type", "agent", "what")


def emit(obj: Any) -> None:
    """Print one JSON object as one line and flush, so a pipe sees it at once."""
    sys.stdout.write(dumps(obj) + "\n")
    sys.stdout.flush()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else dumps(value)


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


def _table(rows: list[dict[str, str]], title: str) -> None:
    from rich.cells import cell_len
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    if not rows:
        console.print(escape(f"{title}: none" if title else "none"))
        return
    columns = list(rows[0])
    widths = {c: max(cell_len(c), *(cell_len(r.get(c, "")) for r in rows)) for c in columns}
    needed = sum(
        (min(widths[c], _TEXT_MIN) if c in TEXT_COLUMNS else widths[c]) + 2 for c in columns
    )
    if needed > console.width:
        _expanded(console, columns, rows, title)
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


def _expanded(console: Any, columns: list[str], rows: list[dict[str, str]], title: str) -> None:
    from rich.markup import escape

    if title:
        console.print(f"[bold]{escape(title)}[/]")
    for number, row in enumerate(rows, 1):
        console.print(f"[dim]-[ {number} ]-[/]")
        _pairs(console, [(c, row.get(c, "")) for c in columns])


def _pairs(console: Any, pairs: list[tuple[str, str]]) -> None:
    """`name  value` lines. A value is never wrapped by us: a line longer than the terminal is
    left for the terminal to wrap, so that copying the value copies it whole."""
    from rich.markup import escape

    width = max((len(name) for name, _ in pairs), default=0)
    for name, value in pairs:
        console.print(f"[bold]{escape(name.ljust(width))}[/]  {escape(value)}", soft_wrap=True)


def show_rows(settings: Settings, rows: Iterable[dict[str, Any]], title: str = "") -> int:
    """Records of one shape: one JSON line each, or one table. Return how many."""
    if not settings.as_table:
        count = 0
        for row in rows:
            emit(row)
            count += 1
        return count
    cells = [{name: _cell(value) for name, value in row.items()} for row in rows]
    _table(cells, title)
    return len(cells)


def show_record(settings: Settings, record: dict[str, Any], title: str = "") -> None:
    """One result (of an append, an import, a resolve): one JSON line, or `name  value` lines."""
    if not settings.as_table:
        emit(record)
        return
    from rich.markup import escape

    console = _console()
    if title:
        console.print(f"[bold]{escape(title)}[/]")
    _pairs(console, [(name, _cell(value)) for name, value in record.items()])


def event_row(event: RecordedEvent, width: int = 120) -> dict[str, str]:
    """An event as a table row: when, where, what."""
    return {
        "at": format_time(cursor_ms(event.cursor))[11:23],
        "stream": event.stream.name,
        "v": str(event.version),
        "type": event.type,
        "agent": event.agent,
        "what": event.summary(width),
    }


def show_events(settings: Settings, events: Iterable[RecordedEvent], title: str = "") -> int:
    """Events as JSONL (the export format), or as one table. Return how many."""
    if not settings.as_table:
        return show_rows(settings, (event.to_dict() for event in events))
    return show_rows(settings, [event_row(event) for event in events], title)


class EventLines:
    """Events printed one by one as they arrive (`tail --follow`, `follow`): JSONL, or on a
    terminal a line each in fixed columns, so that lines printed minutes apart still align."""

    def __init__(self, settings: Settings):
        self.as_table = settings.as_table
        self._console = _console() if self.as_table else None
        self._header = False

    def __call__(self, event: RecordedEvent) -> None:
        if self._console is None:
            emit(event.to_dict())
            return
        from rich.markup import escape

        row = event_row(event, max(20, self._console.width))
        if not self._header:
            self._header = True
            header = {name: name for name in _EVENT_COLUMNS}
            self._console.print(self._line(header), style="bold")
        self._console.print(escape(self._line(row)), no_wrap=True, overflow="ellipsis")

    @staticmethod
    def _line(row: dict[str, str]) -> str:
        return (
            f"{row['at']:<12}  {row['stream']:<12} {row['v']:>5}  {row['type']:<11}"
            f" {row['agent']:<12} {row['what']}"
        )
