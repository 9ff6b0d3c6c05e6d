"""The conversation log: a session as conversation.jsonl, one event a line, and back.

Export writes what `ledger-bus scan` prints, so `tail -n 20 conversation.jsonl | jq .` reads it.
Import is idempotent by event id: a line whose event id is in the session already (or earlier
in the file) with the same content is skipped, and one whose event id is there with other
content refuses the whole import before anything is written. So importing the same file twice,
or a session's own export into it, changes nothing.

A ledger export (every line with its `version` and `cursor`) imported where its events fit (an
empty session, or one holding the file's first events, as an import cut short leaves it) keeps
its versions, cursors, event ids and so `recorded_at` exactly: the store restores the events as
they were recorded. Any other file (a conversation.jsonl without ledger fields, or a session
that went on since) is appended: each line's event to its stream, in file order, with append
ids derived from the file itself, and new versions and cursors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import IO, Final

from ledger_bus.agent.filters import EventFilter, select
from ledger_bus.model.batch import prepare_append
from ledger_bus.model.errors import InvalidEvent, InvalidInput, Refused
from ledger_bus.model.ids import ANY, StreamId, check_name, parse_cursor
from ledger_bus.model.jsonl import event_line
from ledger_bus.model.jsontext import JSONObject, parse_json, text_lines
from ledger_bus.model.records import RecordedEvent
from ledger_bus.model.vocabulary import RESERVED_FIELDS
from ledger_bus.store.base import EventStore, Restores, need

IMPORT_BATCH: Final = 100
DEFAULT_STREAM: Final = "main"


def export_session(
    store: EventStore, session_id: str, out: IO[str], keep: EventFilter | None = None
) -> int:
    """Write the session (what `keep` keeps of it) to `out` in commit order, a page at a time;
    return the event count."""
    count = 0
    events = store.iter_session(session_id) if keep is None else select(store, session_id, keep)
    for event in events:
        out.write(event_line(event))
        count += 1
    return count


@dataclass(frozen=True, slots=True)
class ImportBatch:
    """Consecutive lines of one stream, appended together."""

    stream: StreamId
    append_id: str
    events: list[JSONObject]
    first_line: int


@dataclass(frozen=True, slots=True)
class ImportReport:
    events: int  # written, or found written by an earlier import of the same batch
    appends: int
    deduplicated: int
    skipped: int = 0  # lines whose event was in the session already
    kept_cursors: bool = False  # restored as recorded: versions, cursors and times kept

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ImportPlan:
    """What an import appends, and how many lines it skips (their events are there already)."""

    batches: list[ImportBatch]
    skipped: int
    # The events as recorded, when the file is a ledger export that fits the session: restored
    # with their versions and cursors instead of appended.
    recorded: list[RecordedEvent] | None = None


@dataclass(frozen=True, slots=True)
class _Line:
    number: int
    stream: str
    event: JSONObject
    placed: tuple[int, str] | None  # (version, cursor), where a ledger export says it was


def _parse(lines: Iterable[bytes | str], default_stream: str) -> Iterator[_Line]:
    for number, line in text_lines(lines, "file"):
        obj = parse_json(line, f"line {number}")
        if not isinstance(obj, dict):
            raise InvalidInput(f"line {number}: expected a JSON object")
        stream = obj.get("stream", default_stream)
        try:
            check_name(stream, "stream name")
        except InvalidInput as err:
            raise InvalidInput(f"line {number}: {err}") from None
        event = {k: v for k, v in obj.items() if k not in RESERVED_FIELDS}
        version, cursor = obj.get("version"), obj.get("cursor")
        placed = None
        if type(version) is int and version >= 1 and isinstance(cursor, str):
            try:
                parse_cursor(cursor)
            except InvalidInput:
                pass  # no cursor of a ledger's: the line is appended
            else:
                placed = (version, cursor)
        yield _Line(number, stream, event, placed)


def plan_import(
    store: EventStore,
    session_id: str,
    lines: Iterable[bytes | str],
    default_stream: str = DEFAULT_STREAM,
) -> ImportPlan:
    """Parse and validate a whole conversation.jsonl before anything is written.

    Raises InvalidInput (or InvalidEvent) naming the line of the first fault; Refused naming
    the line whose event id is in the session already with other content.
    """
    check_name(session_id, "session id")
    held = list(store.iter_session(session_id))
    known = {e.event_id: _content(e.fields) for e in held}
    kept: list[_Line] = []
    batches: list[ImportBatch] = []
    current: list[tuple[int, JSONObject]] = []
    current_stream = ""

    def close() -> None:
        if not current:
            return
        ref = StreamId(session_id, current_stream)
        events = [event for _, event in current]
        # The ordinal keeps two identical runs at different places in the file apart.
        provisional = f"import:{len(batches)}"
        try:
            prepared = prepare_append(session_id, current_stream, provisional, events, store.limits)
        except InvalidEvent as err:
            line = current[err.index][0] if err.index is not None else current[0][0]
            where = f"line {line}" + (f", field {err.field!r}" if err.field else "")
            raise InvalidEvent(f"{where}: {err.reason}") from None
        append_id = f"{provisional}:{prepared.digest[:24]}"
        batches.append(ImportBatch(ref, append_id, events, current[0][0]))
        current.clear()

    skipped = 0
    for line in _parse(lines, default_stream):
        number, stream, event = line.number, line.stream, line.event
        event_id = event.get("event_id")
        if isinstance(event_id, str):
            content = _content(event)
            there = known.get(event_id)
            if there is not None:
                if there != content:
                    raise Refused(
                        f"line {number}: event {event_id!r} is in session {session_id!r}"
                        " already, with other content; nothing was imported"
                    )
                skipped += 1
                continue
            known[event_id] = content
        if stream != current_stream or len(current) >= IMPORT_BATCH:
            close()
            current_stream = stream
        current.append((number, event))
        kept.append(line)
    close()
    return ImportPlan(batches, skipped, _as_recorded(session_id, held, kept))


def _as_recorded(
    session_id: str, held: list[RecordedEvent], lines: list[_Line]
) -> list[RecordedEvent] | None:
    """The lines as the events they record, if each says where it was recorded (a ledger
    export) and all of them fit after what the session holds: cursors ascending above its
    newest, each stream's versions going on from its own. None: the lines are to be appended."""
    newest = held[-1].cursor if held else ""
    versions = {e.stream.name: e.version for e in held}
    recorded = []
    for line in lines:
        if line.placed is None:
            return None
        version, cursor = line.placed
        if cursor <= newest or versions.get(line.stream, version - 1) != version - 1:
            return None
        newest, versions[line.stream] = cursor, version
        recorded.append(
            RecordedEvent(StreamId(session_id, line.stream), version, cursor, line.event)
        )
    return recorded or None


def _content(fields: JSONObject) -> JSONObject:
    """What two records of one event must agree on: all but where and when it was committed."""
    return {k: v for k, v in fields.items() if k not in RESERVED_FIELDS and k != "event_id"}


def run_import(
    store: EventStore,
    plan: ImportPlan,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Restore the planned events as recorded, or append the planned batches in file order (an
    already imported batch deduplicates)."""
    if plan.recorded is not None:
        written = need(store, Restores).restore(plan.recorded)  # events as they were recorded
        # None of them is in the session (the plan skipped those that are), so a restore that
        # wrote none found the session's cursors past theirs: a session deleted since its export
        # remembers them. Its events are appended instead, with new cursors.
        if written:
            if progress:
                progress(len(plan.recorded))
            return ImportReport(
                events=len(plan.recorded),
                appends=0,
                deduplicated=len(plan.recorded) - written,
                skipped=plan.skipped,
                kept_cursors=True,
            )
    events = deduplicated = 0
    batches = plan.batches
    for batch in batches:
        result = store.append(batch.stream, ANY, batch.append_id, batch.events)
        events += len(batch.events)
        deduplicated += result.deduplicated
        if progress:
            progress(len(batch.events))
    return ImportReport(
        events=events, appends=len(batches), deduplicated=deduplicated, skipped=plan.skipped
    )
