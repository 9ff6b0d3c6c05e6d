"""Reads: streams, the session log, waits, artifacts, sessions; leases and open attempts."""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    case,
    func,
    or_,
    select,
    tuple_,
    update,
)

from ledger_bus.model.ids import StreamId, cursor_ms
from ledger_bus.model.records import (
    AppendRecord,
    OpenAttempt,
    RecordedEvent,
    SessionInfo,
    StreamInfo,
)
from ledger_bus.store.attempts import LeaseStep
from ledger_bus.store.base import PAGE
from ledger_bus.store.buckets import bucket_of
from ledger_bus.store.sql import statements
from ledger_bus.store.sql.core import SqlCore
from ledger_bus.store.steps import immediate


class SqlReads(SqlCore):
    """Everything the store reads, its leases and open attempts."""

    @immediate
    def _read_stream(self, stream: StreamId, after: int, count: int) -> list[RecordedEvent]:
        # An adapter reads what is new in its stream on every call: the driver's own statement.
        values = {"session": stream.session_id, "stream": stream.name, "after": after, "n": count}
        rows = self._select(self._sql.stream_read, values)
        return self._records(stream.session_id, rows)

    @immediate
    def _scan(self, session_id: str, after: str | None, count: int) -> list[RecordedEvent]:
        return self._scan_now(session_id, after, count)

    def _scan_now(self, session_id: str, after: str | None, count: int) -> list[RecordedEvent]:
        if after is None:
            values: statements.Params = {"session": session_id, "n": count}
            rows = self._select(self._sql.scan, values)
        else:
            values = {"session": session_id, "after": after, "n": count}
            rows = self._select(self._sql.scan_after, values)
        return self._records(session_id, rows)

    @immediate
    def _tail(self, session_id: str, n: int, before: str | None) -> list[RecordedEvent]:
        values = {"session": session_id, "n": n, "before": before}
        if before is None:
            rows = self._select(self._sql.tail, values)
        else:
            rows = self._select(self._sql.tail_before, values)
        return self._records(session_id, reversed(rows))

    def _select(self, statement: str, values: dict[str, Any]) -> list[Any]:
        """The rows of one read, `statement` on the driver's own connection (statements.read):
        of the file, or of the store's empty ledger while the file has none (core.py)."""
        if self._absent:
            self._look_again()
        engine = self._reads if self._absent else self.engine
        return self._retried(lambda: statements.read(engine, statement, values, self.postgres))

    @immediate
    def _wait(
        self, session_id: str, after: str | None, timeout_ms: int, count: int
    ) -> list[RecordedEvent]:
        deadline = time.monotonic() + timeout_ms / 1000
        if after is None:
            after = self._run(lambda c: self._last_cursor(c, session_id), write=False)
        with self._changes(session_id) as changed:
            while True:
                found = self._scan_now(session_id, after, count)
                if found or time.monotonic() >= deadline:
                    return found
                changed(deadline - time.monotonic())

    @immediate
    def _stream_version(self, stream: StreamId) -> int:
        v = self.tables.streams
        query = select(v.c.version).where(
            v.c.session_id == stream.session_id, v.c.stream == stream.name
        )
        return int(self._run(lambda c: c.execute(query).scalar() or 0, write=False))

    @immediate
    def _session_exists(self, session_id: str) -> bool:
        s = self.tables.sessions
        query = select(s.c.events).where(s.c.session_id == session_id)
        return bool(self._run(lambda c: c.execute(query).scalar() or 0, write=False))

    @immediate
    def _append_ids(self, session_id: str) -> list[AppendRecord]:
        i = self.tables.idempotency
        query = (
            select(
                i.c.stream,
                i.c.append_id,
                i.c.digest,
                i.c.first_version,
                i.c.last_version,
                i.c.cursor,
            )
            .where(i.c.session_id == session_id)
            .order_by(i.c.stream, i.c.append_id)
        )
        after: tuple[str, str] | None = None
        found: list[AppendRecord] = []
        while True:
            page = (
                query if after is None else query.where(tuple_(i.c.stream, i.c.append_id) > after)
            )
            rows = self._run(lambda c: c.execute(page.limit(PAGE)).all(), write=False)  # noqa: B023
            found += (AppendRecord(*row) for row in rows)
            if len(rows) < PAGE:
                return found
            after = (rows[-1].stream, rows[-1].append_id)

    @immediate
    def _artifact(self, session_id: str, sha256: str) -> bytes | None:
        a = self.tables.artifacts
        query = select(a.c.data).where(a.c.session_id == session_id, a.c.sha256 == sha256)
        found = self._run(lambda c: c.execute(query).scalar(), write=False)
        return None if found is None else bytes(found)

    @immediate
    def _artifact_uses(self, session_id: str) -> dict[str, int]:
        a = self.tables.artifacts
        query = select(a.c.sha256, a.c.uses).where(a.c.session_id == session_id)
        rows = self._run(lambda c: c.execute(query).all(), write=False)
        return {row.sha256: int(row.uses) for row in rows}

    @immediate
    def _session_info(self, session_id: str, append_ids: bool) -> SessionInfo:
        t = self.tables

        def read(conn: Connection) -> SessionInfo:
            head = conn.execute(
                select(t.sessions.c.last_cursor, t.sessions.c.events).where(
                    t.sessions.c.session_id == session_id
                )
            ).first()
            streams = conn.execute(
                select(t.streams.c.stream, t.streams.c.version)
                .where(t.streams.c.session_id == session_id)
                .order_by(t.streams.c.stream)
            ).all()
            first = conn.execute(
                select(t.events.c.cursor)
                .where(t.events.c.session_id == session_id)
                .order_by(t.events.c.cursor)
                .limit(1)
            ).scalar()
            ids = (
                conn.execute(
                    select(func.count())
                    .select_from(t.idempotency)
                    .where(t.idempotency.c.session_id == session_id)
                ).scalar_one()
                if append_ids
                else None
            )
            events = int(head.events) if head else 0
            return SessionInfo(
                session_id=session_id,
                events=events,
                streams=[StreamInfo(row.stream, int(row.version)) for row in streams],
                first_cursor=first,
                last_cursor=head.last_cursor if head and events else None,
                append_ids=int(ids) if ids is not None else None,
            )

        return self._run(read, write=False)

    @immediate
    def _session_count(self) -> int:
        s = self.tables.sessions
        query = select(func.count()).select_from(s).where(s.c.events > 0)
        return int(self._run(lambda c: c.execute(query).scalar_one(), write=False))

    @immediate
    def _sessions(self, limit: int | None) -> list[tuple[str, int]]:
        s = self.tables.sessions
        query = (
            select(s.c.session_id, s.c.last_cursor)
            .where(s.c.events > 0)
            .order_by(func.substr(s.c.last_cursor, 1, 13).desc(), s.c.session_id)
        )
        if limit is not None:
            query = query.limit(limit)
        rows = self._run(lambda c: c.execute(query).all(), write=False)
        return [(row.session_id, cursor_ms(row.last_cursor)) for row in rows]

    def _holder(self, conn: Connection, session_id: str, name: str, now: int) -> str | None:
        lease = self.tables.leases
        found = conn.execute(
            select(lease.c.owner, lease.c.expires_ms).where(
                lease.c.session_id == session_id, lease.c.name == name
            )
        ).first()
        if found is None or found.expires_ms <= now:
            return None
        return str(found.owner)

    @immediate
    def _lease_holder(self, session_id: str, name: str) -> str | None:
        return self._run(lambda c: self._holder(c, session_id, name, self._now(c)), write=False)

    @immediate
    def _lease(self, op: LeaseStep, session_id: str, name: str, owner: str, ttl_ms: int) -> int:
        # One statement each, so that two racing acquires cannot both read "free" and both
        # write: the database decides, on the row's key. A lease's row stays when it is released
        # or expires, keeping its token, so that every new holding draws a greater one.
        t = self.tables.leases
        mine = and_(t.c.session_id == session_id, t.c.name == name, t.c.owner == owner)

        def change(conn: Connection) -> int:
            now = self._now(conn)
            statement: Any
            if op == "acquire":
                new = self._upsert(t).values(
                    session_id=session_id, name=name, owner=owner, expires_ms=now + ttl_ms, token=1
                )
                # The same owner keeps its holding (and token) while it lasts; a token of 0 is a
                # holding from before leases were fenced, which draws one.
                kept = and_(t.c.owner == new.excluded.owner, t.c.expires_ms > now, t.c.token > 0)
                statement = new.on_conflict_do_update(
                    index_elements=[t.c.session_id, t.c.name],
                    set_={
                        "owner": new.excluded.owner,
                        "expires_ms": new.excluded.expires_ms,
                        "token": case((kept, t.c.token), else_=t.c.token + 1),
                    },
                    where=or_(t.c.expires_ms <= now, t.c.owner == new.excluded.owner),
                )
            elif op == "renew":
                statement = update(t).where(mine, t.c.expires_ms > now)
                statement = statement.values(
                    expires_ms=now + ttl_ms, token=case((t.c.token == 0, 1), else_=t.c.token)
                )
            else:
                statement = update(t).where(mine, t.c.expires_ms > now).values(expires_ms=0)
            row = conn.execute(statement.returning(t.c.token)).first()
            if row is None:
                return 0
            return 1 if op == "release" else int(row.token)

        return self._run(change)

    @immediate
    def _open_attempts(self, session_ids: list[str]) -> dict[str, list[OpenAttempt]]:
        o = self.tables.open_attempts
        if not session_ids:
            return {}
        query = select(o).where(o.c.session_id.in_(session_ids))
        rows = self._run(lambda c: c.execute(query).all(), write=False)
        found: dict[str, list[OpenAttempt]] = {s: [] for s in session_ids}
        for row in rows:
            found[row.session_id].append(
                OpenAttempt(
                    row.session_id,
                    row.attempt_id,
                    row.run_id or None,
                    row.tool,
                    row.stream,
                    row.cursor,
                    row.flagged_cursor,
                )
            )
        return found

    @immediate
    def _safe_to_replay(self, session_id: str, run_id: str, tool: str) -> bool:
        safe = self.tables.safe_tools
        query = select(safe.c.tool).where(
            safe.c.session_id == session_id, safe.c.run_id == run_id, safe.c.tool == tool
        )
        return self._run(lambda c: c.execute(query).first() is not None, write=False)

    @immediate
    def _open_sessions(self, buckets: Collection[int]) -> list[tuple[str, int]]:
        s = self.tables.sessions
        query = select(s.c.session_id, s.c.opened_ms).where(s.c.opened_ms.is_not(None))
        rows = self._run(lambda c: c.execute(query).all(), write=False)
        wanted = set(buckets)
        return sorted(
            (row.session_id, int(row.opened_ms))
            for row in rows
            if bucket_of(row.session_id) in wanted
        )

    @immediate
    def _forget_open_session(self, session_id: str, opened_before_ms: int) -> bool:
        s = self.tables.sessions
        statement = (
            update(s)
            .where(s.c.session_id == session_id, s.c.opened_ms < opened_before_ms)
            .values(opened_ms=None)
        )
        return self._run(lambda c: bool(c.execute(statement).rowcount > 0))
