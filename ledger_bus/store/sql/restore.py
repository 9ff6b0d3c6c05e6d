"""Sessions moved in (restore, ledger-bus archive) and what verifies them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Final

from sqlalchemy import (
    Connection,
    bindparam,
    insert,
    select,
    tuple_,
    update,
)

from ledger_bus.model.artifacts import pack
from ledger_bus.model.attempts import Opens, attempt_note
from ledger_bus.model.errors import (
    InvalidInput,
    VersionConflict,
)
from ledger_bus.model.ids import CURSOR_ZERO
from ledger_bus.model.records import (
    AppendRecord,
    RecordedEvent,
)
from ledger_bus.store.families import ArchiveTarget
from ledger_bus.store.restore import DIGEST_PAGE, PageDigests, RestoreBatch
from ledger_bus.store.sql import statements
from ledger_bus.store.sql.core import SqlCore
from ledger_bus.store.steps import immediate

RESTORE_BATCH: Final = 5000  # events restored per transaction


class SqlRestore(SqlCore, ArchiveTarget):
    """Sessions moved in: events as they were recorded, append_id records, artifacts, and the
    digests an archive is verified by."""

    def restore_moved(
        self,
        events: Iterable[RecordedEvent],
        seen: Callable[[RecordedEvent, bytes], object] | None = None,
    ) -> int:
        """Write recorded events as they are, with their streams, versions, cursors and event ids:
        a session moved here from another store by `ledger-bus archive`, its artifacts copied
        on their own (`restore_artifact`). Return how many were written. Unlike `restore`, the
        fields are kept as given, artifact references included, without validation: they come
        from a store that validated them; and the batches are larger (COPY on PostgreSQL).

        Events come in commit order; each must be above its session's newest cursor and the next
        version of its stream, so what an append writes afterwards sorts after them. An event
        already here (its cursor taken) is skipped: a move cut short can be run again. Open
        attempts follow from the events, as they do for appends. `seen` is told of every event
        with the payload bytes it has here, written now or before.
        """
        written = 0
        batch: list[RecordedEvent] = []

        def flush() -> None:
            nonlocal written
            if batch:
                payloads = [pack(e.fields) for e in batch]
                if seen is not None:
                    for recorded, payload in zip(batch, payloads, strict=True):
                        seen(recorded, payload)
                written += self._run(lambda conn: self._restore(conn, list(batch), payloads))
                batch.clear()

        for recorded in events:
            if batch and (
                recorded.session_id != batch[0].session_id or len(batch) >= RESTORE_BATCH
            ):
                flush()
            batch.append(recorded)
        flush()
        return written

    @immediate
    def _restore_batch(self, batch: RestoreBatch) -> int:
        """EventStore.restore's batch: validated, its big fields kept as artifacts."""
        rows = statements.artifact_rows(batch.stream.session_id, batch.prepared)

        def write(conn: Connection) -> int:
            written = self._restore(conn, batch.events, batch.prepared.payloads)
            if written and rows:
                driver_cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
                driver_cursor.executemany(self._sql.artifact_add, rows)
                driver_cursor.close()
            return written

        return self._run(write)

    def _restore(self, conn: Connection, events: list[RecordedEvent], payloads: list[bytes]) -> int:
        t = self.tables
        session_id = events[0].session_id
        last, count = self._lock_session(conn, session_id)
        fresh = [e for e in events if e.cursor > last]
        if not fresh:
            return 0
        payloads = payloads[len(events) - len(fresh) :]  # those skipped come first
        versions = {
            row.stream: int(row.version)
            for row in conn.execute(
                select(t.streams.c.stream, t.streams.c.version).where(
                    t.streams.c.session_id == session_id
                )
            )
        }
        known = dict(versions)
        previous = last
        opened = False
        for recorded in fresh:
            name = recorded.stream.name
            if recorded.cursor <= previous:
                raise InvalidInput(f"{recorded!r}: events to restore must come in commit order")
            # A stream's first event here may come after others a bound trimmed (spec 3.12);
            # from then on its versions follow one another.
            if name in versions and recorded.version != versions[name] + 1:
                raise VersionConflict(str(recorded.stream), versions[name], recorded.version - 1)
            versions[name] = recorded.version
            previous = recorded.cursor
        self._insert_events(conn, session_id, fresh, payloads)
        for name, version in versions.items():
            if name not in known:
                conn.execute(
                    insert(t.streams).values(session_id=session_id, stream=name, version=version)
                )
            elif version != known[name]:
                conn.execute(
                    update(t.streams)
                    .where(t.streams.c.session_id == session_id, t.streams.c.stream == name)
                    .values(version=version)
                )
        notes: list[statements.Note] = []
        for recorded in fresh:
            note = attempt_note(recorded.fields)
            if note is not None:
                opened = opened or type(note) is Opens
                notes.append((recorded.stream.name, note, recorded.cursor))
        self._apply_notes(conn, session_id, notes)
        values: statements.Params = {"last_cursor": fresh[-1].cursor, "events": count + len(fresh)}
        if opened:
            values["opened_ms"] = self._now(conn)
        conn.execute(
            update(t.sessions).where(t.sessions.c.session_id == session_id).values(**values)
        )
        return len(fresh)

    def _insert_events(
        self, conn: Connection, session_id: str, events: list[RecordedEvent], payloads: list[bytes]
    ) -> None:
        driver_cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        # sqlite3's executemany runs in C; psycopg's async adapter has no COPY to offer (under
        # SQLAlchemy 2.0 it hands on the async cursor's, which a blocking `with` cannot enter).
        if not self.postgres or not _blocking_psycopg(driver_cursor):
            driver_cursor.close()
            conn.execute(
                insert(self.tables.events),
                [
                    {
                        "session_id": session_id,
                        "cursor": e.cursor,
                        "stream": e.stream.name,
                        "version": e.version,
                        "payload": payload,
                    }
                    for e, payload in zip(events, payloads, strict=True)
                ],
            )
            return
        # psycopg's executemany sends a statement per row; COPY streams them, several times
        # faster than that or than one statement from arrays.
        columns = "session_id, cursor, stream, version, payload"
        with driver_cursor.copy(f"COPY {self.tables.events.name} ({columns}) FROM STDIN") as copy:
            for e, payload in zip(events, payloads, strict=True):
                copy.write_row((session_id, e.cursor, e.stream.name, e.version, payload))
        driver_cursor.close()

    def _apply_notes(self, conn: Connection, session_id: str, notes: list[statements.Note]) -> None:
        """Keep open attempts for restored events as their appends did."""
        net = statements.net_notes(notes) if self.postgres else None
        if net is None:
            driver_cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            statements.apply_notes(self._sql, driver_cursor, session_id, notes)
            driver_cursor.close()
            return
        opened, closed = net
        drop, add = statements.restored_attempts(self.tables.open_attempts.name)
        gone = sorted(closed - opened.keys())
        if gone:
            conn.execute(drop, {"session": session_id, "ids": gone})
        if opened:
            conn.execute(
                add,
                {
                    "session": session_id,
                    "attempts": list(opened),
                    "runs": [o[0] for o in opened.values()],
                    "tools": [o[1] for o in opened.values()],
                    "streams": [o[2] for o in opened.values()],
                    "cursors": [o[3] for o in opened.values()],
                },
            )

    def restore_append_ids(self, session_id: str, records: Iterable[AppendRecord]) -> int:
        """Record appends of a session moved here, as its events were (restore); one already
        recorded is left as it is, so a move cut short can be run again. Return how many
        records were given."""
        statement = self._insert_new(self.tables.idempotency)
        given = 0
        batch: list[statements.Params] = []

        def flush() -> None:
            rows = list(batch)
            self._run(lambda c: c.execute(statement, rows))
            batch.clear()

        for record in records:
            given += 1
            batch.append({"session_id": session_id, **dataclasses.asdict(record)})
            if len(batch) >= RESTORE_BATCH:
                flush()
        if batch:
            flush()
        return given

    def restore_artifact(self, session_id: str, sha256: str, data: bytes, uses: int) -> None:
        """Keep an artifact of a session moved here, with the references its events hold; one
        kept before takes the count given (a move cut short can be run again)."""
        a = self.tables.artifacts
        statement = self._upsert(a).values(
            session_id=session_id, sha256=sha256, uses=uses, data=data
        )
        statement = statement.on_conflict_do_update(
            index_elements=[a.c.session_id, a.c.sha256], set_={"uses": statement.excluded.uses}
        )
        self._run(lambda c: c.execute(statement))

    def page_digests(self, session_id: str) -> list[tuple[int, str]]:
        """The session's events as `PageDigests` gives them: on PostgreSQL computed by the
        server, so that verifying an archive does not carry every payload back."""
        if not self.postgres:
            digests = PageDigests()
            e = self.tables.events
            query = (
                select(e.c.cursor, e.c.stream, e.c.version, e.c.payload)
                .where(e.c.session_id == session_id, e.c.cursor > bindparam("after"))
                .order_by(e.c.cursor)
                .limit(DIGEST_PAGE)
            )
            after = CURSOR_ZERO
            while rows := self._run(
                lambda c: c.execute(query, {"after": after}).all(),  # noqa: B023
                write=False,
            ):
                for cursor, stream, version, payload in rows:
                    digests.add(cursor, stream, int(version), bytes(payload))
                after = rows[-1][0]
            return digests.finish()
        page = statements.page_digest(self.tables.events.name)
        pages: list[tuple[int, str]] = []
        after = CURSOR_ZERO
        while True:
            values = {"session": session_id, "after": after, "n": DIGEST_PAGE}
            count, last, digest = self._run(
                lambda c: c.execute(page, values).one(),  # noqa: B023
                write=False,
            )
            if not count:
                return pages
            pages.append((int(count), str(digest)))
            after = last

    def find_append_ids(
        self, session_id: str, keys: list[tuple[str, str]]
    ) -> dict[tuple[str, str], AppendRecord]:
        """The records of these (stream, append_id) pairs that the session has."""
        i = self.tables.idempotency
        query = select(
            i.c.stream, i.c.append_id, i.c.digest, i.c.first_version, i.c.last_version, i.c.cursor
        ).where(i.c.session_id == session_id, tuple_(i.c.stream, i.c.append_id).in_(keys))
        rows = self._run(lambda c: c.execute(query).all(), write=False) if keys else []
        return {(row.stream, row.append_id): AppendRecord(*row) for row in rows}


def _blocking_psycopg(cursor: object) -> bool:
    """Whether `cursor` is psycopg's own blocking cursor (not SQLAlchemy's adapter of its
    asyncio one)."""
    import psycopg  # noqa: PLC0415  (psycopg: the [postgres] extra)

    return isinstance(cursor, psycopg.Cursor)
