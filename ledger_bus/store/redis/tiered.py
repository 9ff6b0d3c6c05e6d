"""A Redis store that reads archived sessions through their archive (spec 3.10).

`connect("redis://...", archive="postgresql://...")` (or LEDGER_BUS_ARCHIVE) gives this store.
Everything is Redis's, as in RedisStore, but for sessions moved to the archive
(operations/archiving.py): their reads are served by the archive, unchanged in content and cursors;
an append to one is refused (SessionArchived), but a retry of an append the archive records
returns its original result; a deletion deletes there too.

Whether a session is archived is its tombstone's word, asked only when Redis has no events for
it, and remembered for a few seconds: an archived session stays so until it is deleted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ledger_bus.model.durability import Durability
from ledger_bus.model.errors import IdempotencyConflict, SessionArchived
from ledger_bus.model.ids import StreamId
from ledger_bus.model.prepared import PreparedAppend
from ledger_bus.model.records import (
    AppendRecord,
    AppendResult,
    Deletion,
    RecordedEvent,
    SessionInfo,
)
from ledger_bus.store.families import Tiered
from ledger_bus.store.redis import RedisStore
from ledger_bus.store.redis.client import RedisClient
from ledger_bus.store.steps import Op, Sleep

if TYPE_CHECKING:  # SQLAlchemy is the `sql` extra's: a Redis user without it lists sessions
    from ledger_bus.store.sql import SqlStore

ARCHIVED_TTL: Final = 5.0  # seconds a session found archived is taken for archived
T = TypeVar("T")


class TieredStore(RedisStore, Tiered):
    """Redis for what lives there, `archive` for the sessions moved to it."""

    archive: SqlStore

    def __init__(self, client: RedisClient, *, archive: SqlStore, **options: Any):
        super().__init__(client, **options)
        self.archive = archive
        self._archived: dict[str, float] = {}  # session -> until when it is taken as archived

    def _in_archive(self, session_id: str) -> Op[bool]:
        """Whether the session has moved to the archive (its move finished)."""
        until = self._archived.get(session_id)
        if until is not None and until > time.monotonic():
            return True
        _, moved = yield from self._archive_state(session_id)
        if moved:
            self._remember(self._archived, session_id, time.monotonic() + ARCHIVED_TTL)
        else:
            self._archived.pop(session_id, None)
        return moved

    def _here_or_archived(
        self, session_id: str, here: Callable[[], Op[T]], there: Callable[[], Op[T]]
    ) -> Op[T]:
        """`there()` (the archive) for a session known to have moved; else `here()` (Redis),
        unless it found nothing and the session has moved since."""
        if self._archived.get(session_id, 0.0) > time.monotonic():
            return (yield from there())
        found = yield from here()
        if found or not (yield from self._in_archive(session_id)):
            return found
        return (yield from there())

    # -- reads: Redis first, the archive for the sessions moved to it --------------------------

    def _read_stream(self, stream: StreamId, after: int, count: int) -> Op[list[RecordedEvent]]:
        return (
            yield from self._here_or_archived(
                stream.session_id,
                lambda: super(TieredStore, self)._read_stream(stream, after, count),
                lambda: self.archive._read_stream(stream, after, count),
            )
        )

    def _scan(self, session_id: str, after: str | None, count: int) -> Op[list[RecordedEvent]]:
        return (
            yield from self._here_or_archived(
                session_id,
                lambda: super(TieredStore, self)._scan(session_id, after, count),
                lambda: self.archive._scan(session_id, after, count),
            )
        )

    def _tail(self, session_id: str, n: int, before: str | None) -> Op[list[RecordedEvent]]:
        return (
            yield from self._here_or_archived(
                session_id,
                lambda: super(TieredStore, self)._tail(session_id, n, before),
                lambda: self.archive._tail(session_id, n, before),
            )
        )

    def _wait(
        self, session_id: str, after: str | None, timeout_ms: int, count: int
    ) -> Op[list[RecordedEvent]]:
        if not (yield from self._in_archive(session_id)):
            return (yield from super()._wait(session_id, after, timeout_ms, count))
        # An archived session takes no appends: what follows `after` is there already, or never.
        found = (
            (yield from self.archive._scan(session_id, after, count)) if after is not None else []
        )
        if not found:
            yield Sleep(timeout_ms / 1000)
        return found

    def _stream_version(self, stream: StreamId) -> Op[int]:
        return (
            yield from self._here_or_archived(
                stream.session_id,
                lambda: super(TieredStore, self)._stream_version(stream),
                lambda: self.archive._stream_version(stream),
            )
        )

    def _session_exists(self, session_id: str) -> Op[bool]:
        return (
            yield from self._here_or_archived(
                session_id,
                lambda: super(TieredStore, self)._session_exists(session_id),
                lambda: self.archive._session_exists(session_id),
            )
        )

    def _session_info(self, session_id: str, append_ids: bool) -> Op[SessionInfo]:
        info = yield from super()._session_info(session_id, append_ids)
        if info.events or not (yield from self._in_archive(session_id)):
            return info
        return (yield from self.archive._session_info(session_id, append_ids))

    def _artifact(self, session_id: str, sha256: str) -> Op[bytes | None]:
        return (
            yield from self._here_or_archived(
                session_id,
                lambda: super(TieredStore, self)._artifact(session_id, sha256),
                lambda: self.archive._artifact(session_id, sha256),
            )
        )

    def _artifact_uses(self, session_id: str) -> Op[dict[str, int]]:
        if (yield from self._in_archive(session_id)):
            return (yield from self.archive._artifact_uses(session_id))
        return (yield from super()._artifact_uses(session_id))

    def _append_ids(self, session_id: str) -> Op[list[AppendRecord]]:
        return (
            yield from self._here_or_archived(
                session_id,
                lambda: super(TieredStore, self)._append_ids(session_id),
                lambda: self.archive._append_ids(session_id),
            )
        )

    # -- writes ------------------------------------------------------------------------------------

    def _append(
        self,
        stream: StreamId,
        expected: int | None,
        append_id: str,
        prepared: PreparedAppend,
        durability: Durability,
    ) -> Op[AppendResult]:
        try:
            return (yield from super()._append(stream, expected, append_id, prepared, durability))
        except SessionArchived:
            # Rule 1 of spec 3.1 holds where the session's records went.
            key = (stream.name, append_id)
            record = self.archive_record(stream.session_id, key)
            if record is None:
                raise
            if record.digest != prepared.digest:
                raise IdempotencyConflict(str(stream), append_id) from None
            return AppendResult(
                stream,
                record.first_version,
                record.last_version,
                record.cursor,
                deduplicated=True,
            )

    def archive_record(self, session_id: str, key: tuple[str, str]) -> AppendRecord | None:
        return self.archive.find_append_ids(session_id, [key]).get(key)

    def _delete(self, session_id: str, stream: str | None) -> Op[Deletion]:
        if not (yield from self._in_archive(session_id)):
            return (yield from super()._delete(session_id, stream))
        done = yield from self.archive._delete(session_id, stream)
        if stream is None:
            # Gone from the archive: the id is written again here, as its next generation.
            self.end_archive(session_id, (yield from self.archive._append_ids(session_id)))
            self._archived.pop(session_id, None)
            generation = yield from self._generation_of(session_id)
            return Deletion(session_id, None, done.events, generation)
        return done

    def close(self) -> None:
        super().close()
        self.archive.close()
