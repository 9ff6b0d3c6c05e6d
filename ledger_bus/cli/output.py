"""What commands print: one rule for all of them.

JSONL when stdout is not a terminal, a table when it is, and `--output jsonl|table` to choose.
A table never wraps or cuts an id (the value one copies into the next command): when the ids do
not fit the terminal's width, each row is shown as a block of `name  value` lines instead, as
psql's expanded mode does. Only free text (a summary, an objective) is folded or shortened.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

from ledger_bus.cli.app import Settings
from ledger_bus.model.ids import cursor_ms
from ledger_bus.model.jsontext import JSONObject, dumps, format_time
from ledger_bus.model.records import RecordedEvent

if TYPE_CHECKING:
    from ledger_bus.cli.terminal import Terminal

_EVENT_COLUMNS: Final = ("at", "stream", "v", "type", "agent", "what")


def emit(obj: object) -> None:
    """Print one JSON object as one line and flush, so a pipe sees it at once."""
    sys.stdout.write(dumps(obj) + "\n")
    sys.stdout.flush()


def _cell(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else dumps(value)


def terminal(highlight: bool = False) -> Terminal:
    """What draws tables; rich is loaded here, only when a terminal shows the output."""
    from ledger_bus.cli.terminal import Terminal  # noqa: PLC0415  (JSONL never loads rich)

    return Terminal(highlight)


def show_rows(settings: Settings, rows: Iterable[Mapping[str, object]], title: str = "") -> int:
    """Records of one shape: one JSON line each, or one table. Return how many."""
    if not settings.as_table:
        count = 0
        for row in rows:
            emit(row)
            count += 1
        return count
    cells = [{name: _cell(value) for name, value in row.items()} for row in rows]
    terminal().table(cells, title)
    return len(cells)


def show_record(settings: Settings, record: JSONObject, title: str = "") -> None:
    """One result (of an append, an import, a resolve): one JSON line, or `name  value` lines."""
    if not settings.as_table:
        emit(record)
        return
    terminal().record([(name, _cell(value)) for name, value in record.items()], title)


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
        self._terminal = terminal() if self.as_table else None
        self._header = False

    def __call__(self, event: RecordedEvent) -> None:
        if self._terminal is None:
            emit(event.to_dict())
            return
        row = event_row(event, max(20, self._terminal.width))
        if not self._header:
            self._header = True
            header = {name: name for name in _EVENT_COLUMNS}
            self._terminal.line(self._line(header), header=True)
        self._terminal.line(self._line(row))

    @staticmethod
    def _line(row: dict[str, str]) -> str:
        return (
            f"{row['at']:<12}  {row['stream']:<12} {row['v']:>5}  {row['type']:<11}"
            f" {row['agent']:<12} {row['what']}"
        )
