"""Recorded events written as they are: the batches `EventStore.restore` hands a backend.

A batch is consecutive events of one stream, consecutive in the session's commit order too, so a
backend writes it as it writes one append (Redis's stream index keeps one entry for it). Each
batch is validated and encoded as an append's events are, big fields moved out to artifacts, but
keeps the versions, cursors and event ids it was recorded with.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from ledger_bus.model.errors import InvalidEvent, InvalidInput, VersionConflict
from ledger_bus.model.ids import StreamId, parse_cursor
from ledger_bus.model.prepared import Limits, PreparedAppend
from ledger_bus.model.records import RecordedEvent

RESTORE_CHUNK: Final = 500  # events of one stream written in one call, at most


@dataclass(frozen=True, slots=True)
class RestoreBatch:
    """Recorded events of one stream, consecutive in it and in the session log."""

    events: list[RecordedEvent]
    prepared: PreparedAppend

    @property
    def stream(self) -> StreamId:
        return self.events[0].stream

    @property
    def first_version(self) -> int:
        return self.events[0].version

    @property
    def cursors(self) -> list[str]:
        return [e.cursor for e in self.events]


def restore_batches(events: Iterable[RecordedEvent], limits: Limits) -> Iterator[RestoreBatch]:
    """Group recorded events (commit order) into batches, each validated and encoded; raise
    InvalidInput naming the first event out of commit order, VersionConflict for a gap in a
    stream's versions."""
    from ledger_bus.model.batch import prepare_append  # see EventStore._prepare

    chunk = min(RESTORE_CHUNK, limits.max_events_per_append)
    batch: list[RecordedEvent] = []
    last: dict[str, tuple[int, int]] = {}  # session -> the newest cursor given
    versions: dict[StreamId, int] = {}  # stream -> the version of its last event given

    def ready() -> RestoreBatch:
        first = batch[0]
        fields = [dict(e.fields) for e in batch]
        try:
            prepared = prepare_append(
                first.session_id, first.stream.name, "restore", fields, limits
            )
        except InvalidEvent as err:
            at = batch[err.index] if err.index is not None else first
            raise InvalidEvent(f"{at!r}: {err.reason}", field=err.field) from None
        return RestoreBatch(list(batch), prepared)

    for event in events:
        cursor = parse_cursor(event.cursor)
        if cursor <= last.get(event.session_id, (-1, -1)):
            raise InvalidInput(f"{event!r}: events to restore must come in commit order")
        last[event.session_id] = cursor
        # A gap within what is given is refused before the batch before it is written; one
        # between what is given and what the store holds, by the store.
        previous = versions.get(event.stream, event.version - 1)
        if event.version != previous + 1:
            raise VersionConflict(str(event.stream), previous, event.version - 1)
        versions[event.stream] = event.version
        if batch and (
            event.stream != batch[-1].stream
            or event.version != batch[-1].version + 1
            or len(batch) >= chunk
        ):
            yield ready()
            batch.clear()
        batch.append(event)
    if batch:
        yield ready()
