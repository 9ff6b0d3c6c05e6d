"""Consumer groups on a session's log: reads, claims, acks, dead letters, stats."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import redis.exceptions as rx

from ledger_bus.model.errors import (
    BackendRefused,
    NotFound,
)
from ledger_bus.model.records import (
    Delivery,
    GroupStats,
    PendingEntry,
)
from ledger_bus.store.groups import REPLAY_CONSUMER, REPLAY_IDLE_MS, dead_letter_fields
from ledger_bus.store.redis.client import ClientRequest, RedisPipeline, ScriptArg
from ledger_bus.store.redis.core import (
    Entries,
    RedisCore,
    T,
    pipelined,
)
from ledger_bus.store.redis.encoding import (
    ledger_cursor,
    redis_cursor,
    text_of,
)
from ledger_bus.store.redis.replies import prune_consumers_reply
from ledger_bus.store.redis.scripts import PRUNE_CONSUMERS
from ledger_bus.store.steps import Op, call


class RedisGroups(RedisCore):
    """Consumer groups, with delivery counts and a dead-letter stream."""

    def _group_call(self, make: Callable[[], Op[T]], session_id: str, group: str) -> Op[T]:
        """A retried operation, with a refusal because the group does not exist as NotFound. The
        group is looked up rather than the error parsed: servers word NOGROUP differently, and
        a pipeline wraps it in text of its own."""
        try:
            return (yield from self._retried(make))
        except BackendRefused:
            if not (yield from self._group_exists(session_id, group)):
                raise NotFound(f"no consumer group {group!r} on session {session_id!r}") from None
            raise

    def _group_request(self, request: ClientRequest, session_id: str, group: str) -> Op[Any]:
        return self._group_call(lambda: call(request), session_id, group)

    def _deliveries(
        self, session_id: str, entries: Entries, counts: dict[bytes, int] | None
    ) -> list[Delivery]:
        events = self._records(session_id, entries)
        times = counts or {}
        return [
            Delivery(event, entry_id.decode(), times.get(entry_id, 1))
            for (entry_id, _), event in zip(entries, events, strict=True)
        ]

    def _group_create(self, session_id: str, group: str, after: str | None) -> Op[bool]:
        log = self.keys.log(session_id)
        start = "$" if after is None else redis_cursor(after)

        def create() -> Op[bool]:
            try:
                yield lambda c: c.xgroup_create(log, group, id=start, mkstream=True)
            except rx.ResponseError as err:
                if str(err).startswith("BUSYGROUP"):
                    return False
                raise
            return True

        return (yield from self._retried(create))

    def _group_exists(self, session_id: str, group: str) -> Op[bool]:
        log = self.keys.log(session_id)

        def groups() -> Op[list[dict[str, Any]]]:
            try:
                return cast(list[dict[str, Any]], (yield lambda c: c.xinfo_groups(log)))
            except rx.ResponseError:  # no such key yet
                return []

        return any(text_of(g["name"]) == group for g in (yield from self._retried(groups)))

    def _group_read(
        self, session_id: str, group: str, consumer: str, count: int, block_ms: int | None
    ) -> Op[list[Delivery]]:
        log = self.keys.log(session_id)
        block = None if block_ms is None else min(block_ms, self.max_block_ms)
        tries = 0

        def read() -> Op[tuple[Any, bool]]:
            nonlocal tries
            tries += 1
            if tries > 1:
                # The try before may have delivered entries to this consumer and lost the reply
                # on the way back: they are pending with it now, and a read of new entries
                # would never see them again. Read them first.
                own = yield lambda c: c.xreadgroup(group, consumer, {log: "0"}, count=count)
                if own and own[0][1]:
                    return own, True
            new = yield lambda c: c.xreadgroup(
                group, consumer, {log: ">"}, count=count, block=block
            )
            return new, False

        reply, own_pending = yield from self._group_call(read, session_id, group)
        if own_pending:
            return (yield from self._own_pending(session_id, group, cast(Entries, reply[0][1])))
        entries = cast(Entries, reply[0][1]) if reply else []
        return self._deliveries(session_id, entries, None)

    def _group_pending(
        self, session_id: str, group: str, consumer: str, count: int
    ) -> Op[list[Delivery]]:
        log = self.keys.log(session_id)
        reply = yield from self._group_request(
            lambda c: c.xreadgroup(group, consumer, {log: "0"}, count=count), session_id, group
        )
        entries = cast(Entries, reply[0][1]) if reply else []
        return (yield from self._own_pending(session_id, group, entries))

    def _own_pending(self, session_id: str, group: str, entries: Entries) -> Op[list[Delivery]]:
        # An own pending entry deleted from the log comes back with no fields; nothing to redo.
        gone = [text_of(entry_id) for entry_id, fields in entries if not fields]
        if gone:
            yield from self._group_ack(session_id, group, gone)
            entries = [e for e in entries if e[1]]
        counts = yield from self._delivery_counts(session_id, group, [e[0] for e in entries])
        return self._deliveries(session_id, entries, counts)

    def _group_claim(
        self, session_id: str, group: str, consumer: str, min_idle_ms: int, count: int
    ) -> Op[list[Delivery]]:
        log = self.keys.log(session_id)
        reply = yield from self._group_request(
            lambda c: c.xautoclaim(log, group, consumer, min_idle_ms, "0-0", count=count),
            session_id,
            group,
        )
        # Redis 7 drops entries deleted from the log out of the pending list by itself, and
        # reports them third; there is nothing left to deliver for those.
        entries = cast(Entries, reply[1])
        counts = yield from self._delivery_counts(session_id, group, [e[0] for e in entries])
        return self._deliveries(session_id, entries, counts)

    def _group_keep(
        self, session_id: str, group: str, consumer: str, entry_ids: list[str]
    ) -> Op[None]:
        log, ids = self.keys.log(session_id), list(entry_ids)
        yield from self._group_request(
            lambda c: c.xclaim(log, group, consumer, 0, ids, justid=True), session_id, group
        )

    def _delivery_counts(
        self, session_id: str, group: str, entry_ids: list[bytes]
    ) -> Op[dict[bytes, int]]:
        if not entry_ids:
            return {}
        log = self.keys.log(session_id)

        def read(pipe: RedisPipeline) -> None:
            for entry_id in entry_ids:
                pipe.xpending_range(log, group, entry_id, entry_id, 1)

        found_all = yield from self._group_request(pipelined(read), session_id, group)
        return {
            item["message_id"]: int(item["times_delivered"])
            for found in found_all
            for item in found
        }

    def _group_ack(self, session_id: str, group: str, entry_ids: list[str]) -> Op[int]:
        log = self.keys.log(session_id)
        acked = yield from self._group_request(
            lambda c: c.xack(log, group, *entry_ids), session_id, group
        )
        return int(acked)

    def _group_dead_letter(
        self, session_id: str, group: str, delivery: Delivery, reason: str
    ) -> Op[None]:
        log, dead = self.keys.log(session_id), self.keys.group_dead_letters(session_id, group)
        fields: dict[Any, Any] = dead_letter_fields(delivery, reason)

        def move(pipe: RedisPipeline) -> None:
            pipe.xadd(dead, fields)
            pipe.xack(log, group, delivery.entry_id)

        # One slot: MULTI works on a cluster.
        yield from self._group_request(pipelined(move, transaction=True), session_id, group)

    def _group_dead_letters(self, session_id: str, group: str) -> Op[list[dict[str, str]]]:
        dead = self.keys.group_dead_letters(session_id, group)
        entries = yield from self._run(lambda c: c.xrange(dead))
        return [
            {text_of(k): text_of(v) for k, v in fields.items()}
            for _, fields in cast(Entries, entries)
        ]

    def _group_stats(self, session_id: str, group: str, idle_ms: int) -> Op[GroupStats]:
        # Lag is computed here: XINFO's own is not kept after some operations.
        log = self.keys.log(session_id)

        def read(pipe: RedisPipeline) -> None:
            pipe.xinfo_groups(log)
            pipe.xlen(log)
            pipe.xinfo_consumers(log, group)

        groups, length, consumers = yield from self._group_request(
            pipelined(read), session_id, group
        )
        info = next((g for g in groups if text_of(g["name"]) == group), None)
        if info is None:
            raise NotFound(f"no consumer group {group!r} on session {session_id!r}")
        last = text_of(info["last-delivered-id"])
        read_count = info.get("entries-read")
        if read_count is not None:
            lag = max(0, int(length) - int(read_count))
        else:
            after = yield from self._run(lambda c: c.xrange(log, "(" + last, "+", count=100_000))
            lag = len(after)
        idle = sum(1 for c in consumers if not int(c["pending"]) and int(c["idle"]) >= idle_ms)
        return GroupStats(
            group=group,
            consumers=len(consumers) - idle,
            idle_consumers=idle,
            pending=int(info["pending"]),
            lag=lag,
            last_delivered=ledger_cursor(last),
        )

    def _group_prune(self, session_id: str, group: str, idle_ms: int) -> Op[list[str]]:
        keys = self.keys.prune_consumers_keys(session_id)
        args: list[ScriptArg] = [group, idle_ms]
        removed = yield from self._group_call(
            lambda: self._evalsha(PRUNE_CONSUMERS, keys, args), session_id, group
        )
        return prune_consumers_reply(removed)

    def _groups(self, session_id: str, idle_ms: int) -> Op[list[GroupStats]]:
        log = self.keys.log(session_id)

        def names() -> Op[list[Any]]:
            try:
                return cast(list[Any], (yield lambda c: c.xinfo_groups(log)))
            except rx.ResponseError:  # no log yet
                return []

        found = []
        for g in (yield from self._retried(names)):
            found.append((yield from self._group_stats(session_id, text_of(g["name"]), idle_ms)))
        return found

    def _group_pending_entries(
        self, session_id: str, group: str, count: int
    ) -> Op[list[PendingEntry]]:
        log = self.keys.log(session_id)
        found = yield from self._group_request(
            lambda c: c.xpending_range(log, group, "-", "+", count), session_id, group
        )
        return [
            PendingEntry(
                entry_id=text_of(item["message_id"]),
                cursor=ledger_cursor(item["message_id"]),
                consumer=text_of(item["consumer"]),
                idle_ms=int(item["time_since_delivered"]),
                deliveries=int(item["times_delivered"]),
            )
            for item in found
        ]

    def _group_delete(self, session_id: str, group: str) -> Op[bool]:
        log, dead = self.keys.log(session_id), self.keys.group_dead_letters(session_id, group)

        def delete(pipe: RedisPipeline) -> None:
            pipe.xgroup_destroy(log, group)
            pipe.delete(dead)

        if not (yield from self._group_exists(session_id, group)):
            return False
        # One slot: MULTI works on a cluster.
        return bool((yield from self._run(pipelined(delete, transaction=True)))[0])

    def _group_reset(self, session_id: str, group: str, cursor: str) -> Op[None]:
        log = self.keys.log(session_id)
        yield from self._group_request(
            lambda c: c.xgroup_setid(log, group, redis_cursor(cursor)), session_id, group
        )

    def _group_replay(self, session_id: str, group: str) -> Op[int]:
        log, dead = self.keys.log(session_id), self.keys.group_dead_letters(session_id, group)
        letters = cast(Entries, (yield from self._run(lambda c: c.xrange(dead))))
        if not letters:
            return 0
        entries = [fields[b"entry"] for _, fields in letters]
        letter_ids = [letter_id for letter_id, _ in letters]

        def replay(pipe: RedisPipeline) -> None:
            pipe.xclaim(
                log,
                group,
                REPLAY_CONSUMER,
                0,
                entries,
                idle=REPLAY_IDLE_MS,
                retrycount=0,
                force=True,
                justid=True,
            )
            pipe.xdel(dead, *letter_ids)

        # One slot: all of it, or none.
        claimed = yield from self._group_request(
            pipelined(replay, transaction=True), session_id, group
        )
        return len(claimed[0])
