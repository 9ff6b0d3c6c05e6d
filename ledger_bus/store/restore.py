"""Restores, a capability of a store: recorded events written as they are (a session moved in,
an export imported), in the batches `Restores.restore` hands a backend.

A batch is consecutive events of one stream, consecutive in the session's commit order too, so a
backend writes it as it writes one append (Redis's stream index keeps one entry for it). Each
batch is validated and encoded as an append's events are, big fields moved out to artifacts, but
keeps the versions, cursors and event ids it was recorded with.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import ClassVar, Final, TypeVar

from ledger_bus.model.errors import InvalidEvent, InvalidInput, VersionConflict
from ledger_bus.model.ids import StreamId, check_name, parse_cursor
from ledger_bus.model.prepared import Limits, PreparedAppend
from ledger_bus.model.records import AppendRecord, RecordedEvent
from ledger_bus.store.steps import Op, operation

T = TypeVar("T")

RESTORE_CHUNK: Final = 500  # events of one stream written in one call, at most

DIGEST_PAGE: Final = 5000  # events a page digest covers


class PageDigests:
    """Digests of a session's events in commit order, a page of DIGEST_PAGE at a time: the
    sha256 of each event's `<cursor>␟<stream>␟<version>␟` and payload bytes, run together.
    What an archive is verified by (operations.archiving), the
    same whoever computes it: here, beside the other backend-neutral parts of a restore, so that
    verifying an archive needs no SQL driver."""

    def __init__(self) -> None:
        self.pages: list[tuple[int, str]] = []
        self._hash = hashlib.sha256()
        self._count = 0

    def add(self, cursor: str, stream: str, version: int, payload: bytes) -> None:
        self._hash.update(f"{cursor}\x1f{stream}\x1f{version}\x1f".encode())
        self._hash.update(payload)
        self._count += 1
        if self._count == DIGEST_PAGE:
            self._close()

    def _close(self) -> None:
        self.pages.append((self._count, self._hash.hexdigest()))
        self._hash = hashlib.sha256()
        self._count = 0

    def finish(self) -> list[tuple[int, str]]:
        if self._count:
            self._close()
        return self.pages


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
    from ledger_bus.model.batch import prepare_append  # noqa: PLC0415  (pydantic, as Log._prepare loads it)

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


class Restores(abc.ABC):
    """A capability of a store: sessions written as they were recorded (a move, an import), and
    what moves with a session besides its events (its append_ids, its artifacts' uses)."""

    what: ClassVar[str] = "restore"

    limits: Limits  # what restored events are held to: the store's (Log.limits)

    @abc.abstractmethod
    def run_op(self, op: Op[T]) -> T:
        """Run an operation to its end (the store's own driver: Log.run_op)."""

    def restore(self, events: Iterable[RecordedEvent]) -> int:
        """Write recorded events as they are, with their streams, versions, cursors and event ids:
        a session moved here, or a ledger export imported into an empty session. Return how many
        were written.

        Events come whole (as `iter_session` yields them), in commit order, each above its
        session's newest cursor and at the next version of its stream (a stream's first event
        here may have any version: a bound may have trimmed those before it), so what an
        append writes afterwards sorts after them; they are validated as an append's are. A
        batch already written (its cursors at or below the session's newest) is skipped, so a
        restore cut short can be run again. Open attempts follow from the events, as they do
        for appends; no append_id is recorded. Raises InvalidInput for events out of order,
        VersionConflict for a gap in a stream's versions; nothing of the batch is written."""
        return sum(
            self.run_op(self.restore_batch_op(batch))
            for batch in restore_batches(events, self.limits)
        )

    def restore_batch_op(self, batch: RestoreBatch) -> Op[int]:
        return (yield from self._restore_batch(batch))

    def iter_append_ids(self, session_id: str) -> Iterator[AppendRecord]:
        """Yield what the store keeps of each append of a session for idempotency, in no
        particular order: what moves with a session besides its events."""
        return iter(self.run_op(self.append_ids_op(session_id)))

    def append_ids_op(self, session_id: str) -> Op[list[AppendRecord]]:
        check_name(session_id, "session id")
        return (yield from self._append_ids(session_id))

    def artifact_uses_op(self, session_id: str) -> Op[dict[str, int]]:
        """The session's artifacts (sha256) with how many event fields reference each."""
        check_name(session_id, "session id")
        return (yield from self._artifact_uses(session_id))

    artifact_uses = operation(artifact_uses_op)

    # -- what a backend provides ----------------------------------------------------------------

    @abc.abstractmethod
    def _restore_batch(self, batch: RestoreBatch) -> Op[int]: ...

    @abc.abstractmethod
    def _append_ids(self, session_id: str) -> Op[list[AppendRecord]]: ...

    @abc.abstractmethod
    def _artifact_uses(self, session_id: str) -> Op[dict[str, int]]: ...
