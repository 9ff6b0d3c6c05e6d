"""The JSONL format: one JSON object a line, as export and the mirror write it, `ledger-bus scan`
prints it and import reads it back.

An event's line holds the ledger's keys first (session, stream, version, cursor, type, agent,
event_id, recorded_at), then the event's own fields; import keeps the fields and drops the keys
the ledger assigns (events.RESERVED_FIELDS).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from ledger_bus.ids import cursor_ms

if TYPE_CHECKING:  # the records call into this module; it only reads their attributes
    from ledger_bus.records import RecordedEvent, SessionInfo


def format_time(ms: int) -> str:
    """Return a millisecond timestamp as ISO 8601 UTC, e.g. 2026-11-29T23:01:02.345Z."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _default(value: Any) -> Any:
    """An artifact's reference (ledger_bus.artifacts) as JSON shows it; nothing else."""
    to_dict = getattr(value, "to_dict", None)
    if to_dict is None:
        raise TypeError(f"{type(value).__name__} is not JSON")
    return to_dict()


def dumps(obj: Any) -> str:
    """One JSON object on one line: JSON escapes every line break inside strings."""
    return orjson.dumps(obj, default=_default, option=orjson.OPT_PASSTHROUGH_DATACLASS).decode(
        "utf-8"
    )


def event_dict(event: RecordedEvent) -> dict[str, Any]:
    """The flat JSON object of an event's line: ledger keys first, then the event's fields."""
    fields = event.fields
    out: dict[str, Any] = {
        "session": event.stream.session_id,
        "stream": event.stream.name,
        "version": event.version,
        "cursor": event.cursor,
        "type": fields["type"],
        "agent": fields["agent"],
        "event_id": fields["event_id"],
        "recorded_at": format_time(cursor_ms(event.cursor)),
    }
    for name, value in fields.items():
        out.setdefault(name, value)
    return out


def event_line(event: RecordedEvent) -> str:
    """An event as one line of the format, newline included."""
    return dumps(event_dict(event)) + "\n"


def session_dict(info: SessionInfo) -> dict[str, Any]:
    """What a session holds, as `ledger-bus inspect` prints it."""

    def at(cursor: str | None) -> str | None:
        return format_time(cursor_ms(cursor)) if cursor else None

    return {
        "session": info.session_id,
        "events": info.events,
        "streams": {s.name: s.version for s in info.streams},
        "append_ids": info.append_ids,
        "first_cursor": info.first_cursor,
        "last_cursor": info.last_cursor,
        "first_at": at(info.first_cursor),
        "last_at": at(info.last_cursor),
    }
