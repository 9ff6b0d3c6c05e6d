"""The JSONL format: one JSON object a line, as export and the mirror write it, `ledger-bus scan`
prints it and import reads it back.

An event's line is its record's JSON shape (`RecordedEvent.to_dict`): the ledger's keys first,
then the event's own fields; import keeps the fields and drops the keys the ledger assigns
(events.RESERVED_FIELDS).
"""

from __future__ import annotations

from ledger_bus.model.jsontext import dumps
from ledger_bus.model.records import RecordedEvent


def event_line(event: RecordedEvent) -> str:
    """An event as one line of the format, newline included."""
    return dumps(event.to_dict()) + "\n"
