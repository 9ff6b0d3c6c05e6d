"""Deletes of sessions and streams (spec 3.9), one transaction under the session's lock."""

from __future__ import annotations

from sqlalchemy import (
    Connection,
    delete,
    func,
    select,
    update,
)

from ledger_bus.model.records import Deletion
from ledger_bus.store.sql.core import SqlCore
from ledger_bus.store.steps import immediate


class SqlDeletes(SqlCore):
    """Deleting."""

    @immediate
    def _delete(self, session_id: str, stream: str | None) -> Deletion:
        if self._absent:
            self._look_again()
        if self._absent:
            # No ledger here (a SQLite file that is not there, or holds none): nothing to
            # delete, and a delete is no reason to make one (a mistyped path would get a file).
            return Deletion(session_id, stream, 0, 0)
        return self._run(lambda conn: self._delete_in(conn, session_id, stream))

    def _delete_in(self, conn: Connection, session_id: str, stream: str | None) -> Deletion:
        """One transaction, under the session's row lock: appends wait for it, and what they
        write after it is the next generation."""
        t = self.tables
        s = t.sessions
        head = conn.execute(
            select(s.c.events, s.c.generation).where(s.c.session_id == session_id).with_for_update()
        ).first()
        if head is None:  # never written: nothing to lock, nothing to delete
            return Deletion(session_id, stream, 0, 0)
        events, generation = head
        where = [t.events.c.session_id == session_id]
        if stream is not None:
            where.append(t.events.c.stream == stream)
            events = conn.execute(
                select(func.count()).select_from(t.events).where(*where)
            ).scalar_one()
        if not events:
            return Deletion(session_id, stream, 0, int(generation))
        if stream is None:  # groups go with the log they follow, as on Redis
            for table in (
                t.pending,
                t.consumers,
                t.groups,
                t.dead_letters,
                t.safe_tools,
                t.artifacts,
                t.bounds,
            ):
                conn.execute(delete(table).where(table.c.session_id == session_id))
        else:  # the stream's events are no longer pending with anyone
            held = select(t.events.c.cursor).where(*where)
            p = t.pending
            conn.execute(delete(p).where(p.c.session_id == session_id, p.c.cursor.in_(held)))
            b = t.bounds
            conn.execute(delete(b).where(b.c.session_id == session_id, b.c.stream == stream))
            self._drop_uses(
                conn, session_id, conn.execute(select(t.events.c.payload).where(*where)).scalars()
            )
        for table in (t.events, t.streams, t.open_attempts):
            condition = [table.c.session_id == session_id]
            if stream is not None:
                condition.append(table.c.stream == stream)
            conn.execute(delete(table).where(*condition))
        # The session's row stays, with its last cursor: what is written next sorts after it.
        conn.execute(
            update(s)
            .where(s.c.session_id == session_id)
            .values(
                events=s.c.events - events,
                generation=s.c.generation + 1,
                deleted_ms=self._now(conn),
                **({"opened_ms": None} if stream is None else {}),
            )
        )
        return Deletion(session_id, stream, int(events), int(generation) + 1)
