"""Appends (one transaction under the session's lock, statements.py's hand-written path) and the
bounds of bounded streams."""

from __future__ import annotations

import time

from sqlalchemy import (
    Connection,
    delete,
    func,
    insert,
    select,
    update,
)

from ledger_bus.model.batch import PreparedAppend
from ledger_bus.model.durability import Durability
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.ids import StreamId, format_cursor
from ledger_bus.model.records import (
    AppendResult,
    Bound,
)
from ledger_bus.store.sql import statements
from ledger_bus.store.sql.core import SqlCore
from ledger_bus.store.sql.engine import BOUND_TTL
from ledger_bus.store.sql.errors import (
    classify,
    driver_error,
)
from ledger_bus.store.steps import immediate


class SqlAppend(SqlCore):
    """Appends and bounds."""

    @immediate
    def _append(
        self,
        stream: StreamId,
        expected: int | None,
        append_id: str,
        prepared: PreparedAppend,
        durability: Durability,
    ) -> AppendResult:
        if not durability.local:
            raise InvalidInput(
                f"a SQL store's durability is its database's own (synchronous_commit, its"
                f" replicas): durability {durability} cannot be asked per append"
            )

        def attempt() -> AppendResult:
            with self._writing():
                return write()

        def write() -> AppendResult:
            if self._absent:
                self._make_tables()
            raw = self.engine.raw_connection()
            try:
                return statements.append(
                    self._sql,
                    raw.dbapi_connection,
                    self._channel,
                    stream,
                    expected,
                    append_id,
                    prepared,
                )
            except Exception as err:
                if driver_error(err) is not None and classify(err) == "retry":
                    raw.invalidate()  # the connection may be gone: never hand it out again
                raise
            finally:
                raw.close()

        result = self._retried(attempt)
        if not result.deduplicated:
            bound = self._bound_of(stream)
            if bound is not None and bound.applies_to(append_id):
                self._run(lambda conn: self._trim(conn, stream, bound))
        return result

    def _bound_of(self, stream: StreamId) -> Bound | None:
        now = time.monotonic()
        known = self._bounds.get(stream)
        if known is not None and known[0] > now:
            return known[1]
        bound = self._bound_now(stream)
        self._remember(self._bounds, stream, (now + BOUND_TTL, bound))
        return bound

    def _trim(self, conn: Connection, stream: StreamId, bound: Bound) -> None:
        """What a bounded stream does after an append, as store/lua/append.lua's trim does:
        the appends older than the newest `keep` events go, whole; their append_ids stay for
        the dedup window. Under the session's row lock, in a transaction of its own."""
        t = self.tables
        session_id, name = stream.session_id, stream.name
        head = conn.execute(
            select(t.sessions.c.deleted_ms, t.streams.c.version)
            .join(
                t.streams,
                (t.streams.c.session_id == t.sessions.c.session_id) & (t.streams.c.stream == name),
            )
            .where(t.sessions.c.session_id == session_id)
            .with_for_update()
        ).first()
        if head is None:
            return
        # Records of appends before the last deletion are of an earlier generation: they stay.
        since = "" if head.deleted_ms is None else format_cursor(int(head.deleted_ms), 999_999)
        i, e = t.idempotency, t.events
        records = (i.c.session_id == session_id, i.c.stream == name, i.c.cursor > since)
        upto = conn.execute(
            select(func.max(i.c.last_version)).where(
                *records, i.c.last_version <= int(head.version) - bound.keep
            )
        ).scalar()
        in_stream = (e.c.session_id == session_id, e.c.stream == name)
        if upto is not None:
            going = (*in_stream, e.c.version <= upto)
            gone = conn.execute(select(e.c.cursor, e.c.payload).where(*going)).all()
            if gone:
                self._drop_uses(conn, session_id, (row.payload for row in gone))
                p = t.pending
                held = select(e.c.cursor).where(*going)
                conn.execute(delete(p).where(p.c.session_id == session_id, p.c.cursor.in_(held)))
                conn.execute(delete(e).where(*going))
                conn.execute(
                    update(t.sessions)
                    .where(t.sessions.c.session_id == session_id)
                    .values(events=t.sessions.c.events - len(gone))
                )
        oldest = conn.execute(select(func.min(e.c.version)).where(*in_stream)).scalar()
        if oldest is None:
            return
        cutoff = format_cursor(max(0, self._now(conn) - bound.dedup_window_ms), 0)
        conn.execute(delete(i).where(*records, i.c.last_version < oldest, i.c.cursor < cutoff))

    @immediate
    def _set_bound(self, stream: StreamId, bound: Bound | None) -> None:
        b = self.tables.bounds
        key = (b.c.session_id == stream.session_id, b.c.stream == stream.name)

        def write(conn: Connection) -> None:
            conn.execute(delete(b).where(*key))
            if bound is not None:
                conn.execute(
                    insert(b).values(
                        session_id=stream.session_id,
                        stream=stream.name,
                        keep=bound.keep,
                        dedup_ms=bound.dedup_window_ms,
                        only=bound.only,
                    )
                )

        self._run(write)
        self._remember(self._bounds, stream, (time.monotonic() + BOUND_TTL, bound))

    @immediate
    def _bound(self, stream: StreamId) -> Bound | None:
        return self._bound_now(stream)

    def _bound_now(self, stream: StreamId) -> Bound | None:
        b = self.tables.bounds
        query = select(b.c.keep, b.c.dedup_ms, b.c.only).where(
            b.c.session_id == stream.session_id, b.c.stream == stream.name
        )
        row = self._run(lambda c: c.execute(query).first(), write=False)
        return None if row is None else Bound(int(row.keep), int(row.dedup_ms), row.only)

    def tail_plan(self, session_id: str, n: int = 20) -> str:
        """How the database runs a tail of the session: its query plan, as text."""
        e = self.tables.events
        query = self._events([e.c.session_id == session_id], e.c.cursor.desc(), n)
        compiled = query.compile(self.engine, compile_kwargs={"literal_binds": True})
        prefix = "EXPLAIN" if self.postgres else "EXPLAIN QUERY PLAN"

        def explain(conn: Connection) -> str:
            rows = conn.exec_driver_sql(f"{prefix} {compiled}").all()
            return "\n".join(" ".join(str(v) for v in row) for row in rows)

        return self._run(explain, write=False)
