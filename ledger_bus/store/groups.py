"""Redis consumer groups over a session log: the primitives a tailer is built from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import redis.exceptions as rx

from ledger_bus.errors import InvalidInput
from ledger_bus.ids import check_name
from ledger_bus.store.base import EventStore, RecordedEvent
from ledger_bus.store.redis import Entries, RedisStore, _redis_cursor, _text


@dataclass(frozen=True, slots=True)
class Delivery:
    """One session log entry handed to a consumer: the event, and how often it was handed out."""

    event: RecordedEvent
    entry_id: str
    deliveries: int


@dataclass(frozen=True, slots=True)
class GroupStats:
    """Where a group stands: events not yet delivered (lag) and delivered but not acked."""

    group: str
    consumers: int
    pending: int
    lag: int
    last_delivered: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "consumers": self.consumers,
            "pending": self.pending,
            "lag": self.lag,
            "last_delivered": self.last_delivered,
        }


def redis_store(store: EventStore) -> RedisStore:
    """The store as a RedisStore, or InvalidInput: consumer groups need Redis."""
    if not isinstance(store, RedisStore):
        raise InvalidInput("consumer groups need a Redis store (redis:// or rediss://)")
    return store


class SessionGroup:
    """A consumer group on one session's log; every entry goes to one consumer of the group."""

    def __init__(self, store: EventStore, session_id: str, group: str):
        self.store = redis_store(store)
        self.session_id = check_name(session_id, "session id")
        self.group = check_name(group, "group name")
        self.log = self.store.keys.log(session_id)
        self.dead_letters = self.store.keys.group_dead_letters(session_id, group)
        self._client = self.store.client
        self.max_block_ms = self.store.max_block_ms

    def create(self, after_cursor: str | None) -> bool:
        """Create the group to deliver what commits after `after_cursor` (None: the session's end).

        Returns False, changing nothing, when the group exists already.
        """
        start = "$" if after_cursor is None else _redis_cursor(after_cursor)

        def create() -> bool:
            try:
                self._client.xgroup_create(self.log, self.group, id=start, mkstream=True)
            except rx.ResponseError as err:
                if str(err).startswith("BUSYGROUP"):
                    return False
                raise
            return True

        return self.store._run(create)

    def exists(self) -> bool:
        def groups() -> list[dict[str, Any]]:
            try:
                return cast(list[dict[str, Any]], self._client.xinfo_groups(self.log))
            except rx.ResponseError:  # no such key yet
                return []

        return any(_text(g["name"]) == self.group for g in self.store._run(groups))

    def _deliveries(self, entries: Entries, counts: dict[bytes, int] | None) -> list[Delivery]:
        events = self.store._records(self.session_id, entries)
        times = counts or {}
        return [
            Delivery(event, entry_id.decode(), times.get(entry_id, 1))
            for (entry_id, _), event in zip(entries, events, strict=True)
        ]

    def read(
        self, consumer: str, count: int, block_ms: int | None, own_pending: bool = False
    ) -> list[Delivery]:
        """New entries for `consumer` (blocking up to block_ms), or its own pending ones again."""
        block = None if block_ms is None or own_pending else min(block_ms, self.max_block_ms)
        start = "0" if own_pending else ">"

        def read() -> Any:
            return self._client.xreadgroup(
                self.group, consumer, {self.log: start}, count=count, block=block
            )

        reply = self.store._run(read)
        entries = cast(Entries, reply[0][1]) if reply else []
        # An own pending entry deleted from the log comes back with no fields; nothing to redo.
        gone = [entry_id for entry_id, fields in entries if not fields]
        if gone:
            self.ack([_text(i) for i in gone])
            entries = [e for e in entries if e[1]]
        counts = self.delivery_counts([e[0] for e in entries]) if own_pending and entries else None
        return self._deliveries(entries, counts)

    def claim(self, consumer: str, min_idle_ms: int, count: int) -> list[Delivery]:
        """Take over entries that other consumers left pending for at least `min_idle_ms`."""

        def claim() -> Any:
            return self._client.xautoclaim(
                self.log, self.group, consumer, min_idle_ms, "0-0", count=count
            )

        reply = self.store._run(claim)
        # Redis 7 drops entries deleted from the log out of the pending list by itself, and
        # reports them third; there is nothing left to deliver for those.
        entries = cast(Entries, reply[1])
        counts = self.delivery_counts([e[0] for e in entries]) if entries else {}
        return self._deliveries(entries, counts)

    def keep(self, consumer: str, entry_ids: list[str]) -> None:
        """Reset the idle time of entries `consumer` is still working on, so that no other
        consumer takes them over; the delivery count does not change."""
        ids: list[Any] = list(entry_ids)
        if ids:
            self.store._run(
                lambda: self._client.xclaim(self.log, self.group, consumer, 0, ids, justid=True)
            )

    def delivery_counts(self, entry_ids: list[bytes]) -> dict[bytes, int]:
        """How many times each pending entry has been handed out."""

        def read() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for entry_id in entry_ids:
                pipe.xpending_range(self.log, self.group, entry_id, entry_id, 1)
            return list(pipe.execute())

        counts: dict[bytes, int] = {}
        for found in self.store._run(read):
            for item in found:
                counts[item["message_id"]] = int(item["times_delivered"])
        return counts

    def ack(self, entry_ids: list[str]) -> int:
        if not entry_ids:
            return 0
        return int(self.store._run(lambda: self._client.xack(self.log, self.group, *entry_ids)))

    def dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Move an entry the group gave up on to the dead-letter stream and ack it, atomically."""
        event = delivery.event
        fields = {
            "entry": delivery.entry_id,
            "cursor": event.cursor,
            "stream": event.stream.name,
            "version": event.version,
            "event_id": event.event_id,
            "deliveries": delivery.deliveries,
            "reason": reason,
        }

        def move() -> None:
            pipe = self._client.pipeline(transaction=True)  # one slot: MULTI works on a cluster
            pipe.xadd(self.dead_letters, fields)
            pipe.xack(self.log, self.group, delivery.entry_id)
            pipe.execute()

        self.store._run(move)

    def dead(self) -> list[dict[str, str]]:
        """The dead-letter entries of this group, oldest first."""
        entries = cast(Entries, self.store._run(lambda: self._client.xrange(self.dead_letters)))
        return [{_text(k): _text(v) for k, v in fields.items()} for _, fields in entries]

    def stats(self) -> GroupStats:
        """Pending and lag, computed here: XINFO's own lag is not kept after some operations."""

        def read() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            pipe.xinfo_groups(self.log)
            pipe.xlen(self.log)
            return list(pipe.execute())

        groups, length = self.store._run(read)
        info = next((g for g in groups if _text(g["name"]) == self.group), None)
        if info is None:
            raise InvalidInput(f"no consumer group {self.group!r} on session {self.session_id!r}")
        last = _text(info["last-delivered-id"])
        read_count = info.get("entries-read")
        if read_count is not None:
            lag = max(0, int(length) - int(read_count))
        else:
            after = cast(
                Entries,
                self.store._run(
                    lambda: self._client.xrange(self.log, "(" + last, "+", count=100_000)
                ),
            )
            lag = len(after)
        return GroupStats(self.group, int(info["consumers"]), int(info["pending"]), lag, last)
