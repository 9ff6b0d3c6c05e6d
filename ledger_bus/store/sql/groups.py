"""Consumer groups on the session log, with the semantics of Redis's."""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    delete,
    func,
    insert,
    select,
    update,
)

from ledger_bus.model.errors import NotFound
from ledger_bus.model.records import (
    Delivery,
    GroupStats,
    PendingEntry,
)
from ledger_bus.store.groups import REPLAY_CONSUMER, REPLAY_IDLE_MS, dead_letter_fields
from ledger_bus.store.sql.core import SqlCore
from ledger_bus.store.steps import immediate


class SqlGroups(SqlCore):
    """Consumer groups: deliveries, claims, acks, dead letters, stats."""

    def _group_row(self, conn: Connection, session_id: str, group: str) -> str:
        g = self.tables.groups
        query = select(g.c.last_delivered).where(g.c.session_id == session_id, g.c.grp == group)
        if self.postgres:
            query = query.with_for_update()
        found = conn.execute(query).scalar()
        if found is None:
            raise NotFound(f"no consumer group {group!r} on session {session_id!r}")
        return str(found)

    def _seen(self, conn: Connection, session_id: str, group: str, consumer: str, now: int) -> None:
        c = self.tables.consumers
        where = and_(c.c.session_id == session_id, c.c.grp == group, c.c.consumer == consumer)
        if conn.execute(update(c).where(where).values(seen_ms=now)).rowcount == 0:
            conn.execute(
                insert(c).values(session_id=session_id, grp=group, consumer=consumer, seen_ms=now)
            )

    def _deliver(  # noqa: PLR0913  (one delivery's parts, as the read and the claim both give them)
        self,
        conn: Connection,
        session_id: str,
        group: str,
        consumer: str,
        cursors: list[str],
        now: int,
    ) -> list[Delivery]:
        """Hand `cursors` to `consumer`: each becomes (or stays) pending with it, counted."""
        p = self.tables.pending
        c = self.tables.consumers
        known = conn.execute(
            select(c.c.consumer).where(
                c.c.session_id == session_id, c.c.grp == group, c.c.consumer == consumer
            )
        ).first()
        if cursors or known is not None:  # like Redis: a read that finds nothing creates nobody
            self._seen(conn, session_id, group, consumer, now)
        if not cursors:
            return []
        held = {
            row.cursor: int(row.deliveries)
            for row in conn.execute(
                select(p.c.cursor, p.c.deliveries).where(
                    p.c.session_id == session_id, p.c.grp == group, p.c.cursor.in_(cursors)
                )
            )
        }
        for cursor in cursors:
            where = and_(p.c.session_id == session_id, p.c.grp == group, p.c.cursor == cursor)
            if cursor in held:
                conn.execute(
                    update(p)
                    .where(where)
                    .values(consumer=consumer, since_ms=now, deliveries=held[cursor] + 1)
                )
            else:
                conn.execute(
                    insert(p).values(
                        session_id=session_id,
                        grp=group,
                        cursor=cursor,
                        consumer=consumer,
                        deliveries=1,
                        since_ms=now,
                    )
                )
        e = self.tables.events
        rows = {
            row.cursor: row
            for row in conn.execute(
                select(e.c.stream, e.c.version, e.c.cursor, e.c.payload).where(
                    e.c.session_id == session_id, e.c.cursor.in_(cursors)
                )
            )
        }
        return [
            Delivery(self._record(session_id, rows[cursor]), cursor, held.get(cursor, 0) + 1)
            for cursor in cursors
            if cursor in rows
        ]

    @immediate
    def _group_create(self, session_id: str, group: str, after: str | None) -> bool:
        g = self.tables.groups

        def create(conn: Connection) -> bool:
            start = after if after is not None else self._last_cursor(conn, session_id)
            new = self._insert_new(g).values(session_id=session_id, grp=group, last_delivered=start)
            return conn.execute(new.returning(g.c.grp)).first() is not None

        return self._run(create)

    @immediate
    def _group_exists(self, session_id: str, group: str) -> bool:
        g = self.tables.groups
        query = select(g.c.grp).where(g.c.session_id == session_id, g.c.grp == group)
        return self._run(lambda c: c.execute(query).first() is not None, write=False)

    @immediate
    def _group_read(
        self, session_id: str, group: str, consumer: str, count: int, block_ms: int | None
    ) -> list[Delivery]:
        deadline = time.monotonic() + (block_ms or 0) / 1000
        g = self.tables.groups

        def read(conn: Connection) -> list[Delivery]:
            last = self._group_row(conn, session_id, group)
            fresh = [row.cursor for row in self._scan_rows(conn, session_id, last, count)]
            if fresh:
                conn.execute(
                    update(g)
                    .where(g.c.session_id == session_id, g.c.grp == group)
                    .values(last_delivered=fresh[-1])
                )
            return self._deliver(conn, session_id, group, consumer, fresh, self._now(conn))

        found = self._run(read)
        if found or block_ms is None:
            return found
        # Nothing yet: listen, then read again, since a commit between the read above and the
        # LISTEN would wake nobody. (The read above spares a listening connection when there is
        # something to deliver, the common case.)
        with self._changes(session_id) as changed:
            while True:
                found = self._run(read)
                if found or time.monotonic() >= deadline:
                    return found
                changed(deadline - time.monotonic())

    def _pending_cursors(self, conn: Connection, session_id: str, group: str, *where: Any) -> Any:
        p = self.tables.pending
        return conn.execute(
            select(p.c.cursor)
            .where(p.c.session_id == session_id, p.c.grp == group, *where)
            .order_by(p.c.cursor)
        ).scalars()

    @immediate
    def _group_pending(
        self, session_id: str, group: str, consumer: str, count: int
    ) -> list[Delivery]:
        p = self.tables.pending

        def pending(conn: Connection) -> list[Delivery]:
            self._group_row(conn, session_id, group)
            mine = list(self._pending_cursors(conn, session_id, group, p.c.consumer == consumer))
            return self._deliver(conn, session_id, group, consumer, mine[:count], self._now(conn))

        return self._run(pending)

    @immediate
    def _group_claim(
        self, session_id: str, group: str, consumer: str, min_idle_ms: int, count: int
    ) -> list[Delivery]:
        p = self.tables.pending

        def claim(conn: Connection) -> list[Delivery]:
            self._group_row(conn, session_id, group)
            now = self._now(conn)
            idle = list(
                self._pending_cursors(conn, session_id, group, p.c.since_ms <= now - min_idle_ms)
            )
            return self._deliver(conn, session_id, group, consumer, idle[:count], now)

        return self._run(claim)

    @immediate
    def _group_keep(self, session_id: str, group: str, consumer: str, entry_ids: list[str]) -> None:
        p = self.tables.pending

        def keep(conn: Connection) -> None:
            self._group_row(conn, session_id, group)
            now = self._now(conn)
            self._seen(conn, session_id, group, consumer, now)
            if entry_ids:
                conn.execute(
                    update(p)
                    .where(
                        p.c.session_id == session_id, p.c.grp == group, p.c.cursor.in_(entry_ids)
                    )
                    .values(consumer=consumer, since_ms=now)
                )

        self._run(keep)

    @immediate
    def _group_ack(self, session_id: str, group: str, entry_ids: list[str]) -> int:
        p = self.tables.pending

        def ack(conn: Connection) -> int:
            self._group_row(conn, session_id, group)
            if not entry_ids:
                return 0
            return int(
                conn.execute(
                    delete(p).where(
                        p.c.session_id == session_id, p.c.grp == group, p.c.cursor.in_(entry_ids)
                    )
                ).rowcount
            )

        return self._run(ack)

    @immediate
    def _group_dead_letter(
        self, session_id: str, group: str, delivery: Delivery, reason: str
    ) -> None:
        p, dead = self.tables.pending, self.tables.dead_letters

        def bury(conn: Connection) -> None:
            self._group_row(conn, session_id, group)
            fields = json.dumps(dead_letter_fields(delivery, reason))
            conn.execute(insert(dead).values(session_id=session_id, grp=group, fields=fields))
            conn.execute(
                delete(p).where(
                    p.c.session_id == session_id, p.c.grp == group, p.c.cursor == delivery.entry_id
                )
            )

        self._run(bury)

    @immediate
    def _group_dead_letters(self, session_id: str, group: str) -> list[dict[str, str]]:
        dead = self.tables.dead_letters
        query = (
            select(dead.c.fields)
            .where(dead.c.session_id == session_id, dead.c.grp == group)
            .order_by(dead.c.id)
        )
        rows = self._run(lambda c: c.execute(query).scalars().all(), write=False)
        return [json.loads(row) for row in rows]

    def _idle_consumers(
        self, conn: Connection, session_id: str, group: str, idle_ms: int, now: int
    ) -> list[str]:
        c, p = self.tables.consumers, self.tables.pending
        holding = select(p.c.consumer).where(p.c.session_id == session_id, p.c.grp == group)
        return list(
            conn.execute(
                select(c.c.consumer)
                .where(
                    c.c.session_id == session_id,
                    c.c.grp == group,
                    c.c.seen_ms <= now - idle_ms,
                    c.c.consumer.not_in(holding),
                )
                .order_by(c.c.consumer)
            ).scalars()
        )

    def _stats(self, conn: Connection, session_id: str, group: str, idle_ms: int) -> GroupStats:
        last = self._group_row(conn, session_id, group)
        now = self._now(conn)
        c, p, e = self.tables.consumers, self.tables.pending, self.tables.events

        def count(query: Any) -> int:
            return int(conn.execute(query).scalar_one())

        idle = len(self._idle_consumers(conn, session_id, group, idle_ms, now))
        consumers = count(
            select(func.count())
            .select_from(c)
            .where(c.c.session_id == session_id, c.c.grp == group)
        )
        pending = count(
            select(func.count())
            .select_from(p)
            .where(p.c.session_id == session_id, p.c.grp == group)
        )
        lag = count(
            select(func.count())
            .select_from(e)
            .where(e.c.session_id == session_id, e.c.cursor > last)
        )
        return GroupStats(
            group=group,
            consumers=consumers - idle,
            idle_consumers=idle,
            pending=pending,
            lag=lag,
            last_delivered=last,
        )

    @immediate
    def _group_stats(self, session_id: str, group: str, idle_ms: int) -> GroupStats:
        return self._run(lambda conn: self._stats(conn, session_id, group, idle_ms), write=False)

    @immediate
    def _group_prune(self, session_id: str, group: str, idle_ms: int) -> list[str]:
        c = self.tables.consumers

        def prune(conn: Connection) -> list[str]:
            self._group_row(conn, session_id, group)
            removed = self._idle_consumers(conn, session_id, group, idle_ms, self._now(conn))
            if removed:
                conn.execute(
                    delete(c).where(
                        c.c.session_id == session_id, c.c.grp == group, c.c.consumer.in_(removed)
                    )
                )
            return removed

        return self._run(prune)

    @immediate
    def _groups(self, session_id: str, idle_ms: int) -> list[GroupStats]:
        g = self.tables.groups

        def read(conn: Connection) -> list[GroupStats]:
            names = conn.execute(
                select(g.c.grp).where(g.c.session_id == session_id).order_by(g.c.grp)
            ).scalars()
            return [self._stats(conn, session_id, name, idle_ms) for name in list(names)]

        return self._run(read, write=False)

    @immediate
    def _group_pending_entries(self, session_id: str, group: str, count: int) -> list[PendingEntry]:
        p = self.tables.pending

        def read(conn: Connection) -> list[PendingEntry]:
            self._group_row(conn, session_id, group)
            now = self._now(conn)
            rows = conn.execute(
                select(p)
                .where(p.c.session_id == session_id, p.c.grp == group)
                .order_by(p.c.cursor)
                .limit(count)
            ).all()
            return [
                PendingEntry(
                    row.cursor, row.cursor, row.consumer, now - int(row.since_ms), row.deliveries
                )
                for row in rows
            ]

        return self._run(read, write=False)

    @immediate
    def _group_delete(self, session_id: str, group: str) -> bool:
        t = self.tables

        def drop(conn: Connection) -> bool:
            for table in (t.consumers, t.pending, t.dead_letters):
                conn.execute(
                    delete(table).where(table.c.session_id == session_id, table.c.grp == group)
                )
            return bool(
                conn.execute(
                    delete(t.groups).where(
                        t.groups.c.session_id == session_id, t.groups.c.grp == group
                    )
                ).rowcount
            )

        return self._run(drop)

    @immediate
    def _group_reset(self, session_id: str, group: str, cursor: str) -> None:
        g = self.tables.groups

        def reset(conn: Connection) -> None:
            self._group_row(conn, session_id, group)
            conn.execute(
                update(g)
                .where(g.c.session_id == session_id, g.c.grp == group)
                .values(last_delivered=cursor)
            )

        self._run(reset)

    @immediate
    def _group_replay(self, session_id: str, group: str) -> int:
        t = self.tables

        def replay(conn: Connection) -> int:
            self._group_row(conn, session_id, group)
            dead = t.dead_letters
            letters = conn.execute(
                select(dead.c.fields)
                .where(dead.c.session_id == session_id, dead.c.grp == group)
                .order_by(dead.c.id)
            ).scalars()
            since = self._now(conn) - REPLAY_IDLE_MS
            replayed = 0
            p = t.pending
            for letter in list(letters):
                cursor = json.loads(letter)["cursor"]
                present = conn.execute(
                    select(t.events.c.cursor).where(
                        t.events.c.session_id == session_id, t.events.c.cursor == cursor
                    )
                ).first()
                if present is None:
                    continue
                where = and_(p.c.session_id == session_id, p.c.grp == group, p.c.cursor == cursor)
                conn.execute(delete(p).where(where))
                conn.execute(
                    insert(p).values(
                        session_id=session_id,
                        grp=group,
                        cursor=cursor,
                        consumer=REPLAY_CONSUMER,
                        deliveries=0,
                        since_ms=since,
                    )
                )
                replayed += 1
            conn.execute(delete(dead).where(dead.c.session_id == session_id, dead.c.grp == group))
            return replayed

        return self._run(replay)
