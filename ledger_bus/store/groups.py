"""The consumer groups of the contract: a group delivers each event of a session's log to one of
its consumers, at least once; an event stays pending until acked, and an idle consumer's
pending events can be claimed. A capability a store declares beside the log (store/base.py)."""

from __future__ import annotations

import abc
from typing import ClassVar, Final, TypeVar

from ledger_bus.model.errors import NotFound
from ledger_bus.model.ids import check_name, parse_cursor
from ledger_bus.model.records import Delivery, GroupStats, PendingEntry
from ledger_bus.store.steps import Op, operation

T = TypeVar("T")

# Who holds a replayed dead letter until a consumer takes it over, and how idle it then looks.
REPLAY_CONSUMER: Final = "replayed"
REPLAY_IDLE_MS: Final = 365 * 86_400_000


def dead_letter_fields(delivery: Delivery, reason: str) -> dict[str, str]:
    """What a dead letter records of the event a group gave up on."""
    event = delivery.event
    return {
        "entry": delivery.entry_id,
        "cursor": event.cursor,
        "stream": event.stream.name,
        "version": str(event.version),
        "event_id": event.event_id,
        "deliveries": str(delivery.deliveries),
        "reason": reason,
    }


class GroupDelivery(abc.ABC):
    """What a consumer does with a group: create it, read, take back its own pending events,
    claim idle ones, keep, ack, dead-letter; on the primitives a backend provides."""

    @abc.abstractmethod
    def run_op(self, op: Op[T]) -> T:
        """Run an operation to its end (the store's own driver: Log.run_op)."""

    @abc.abstractmethod
    def _resolved_deliveries(self, session_id: str, found: list[Delivery]) -> Op[list[Delivery]]:
        """Deliveries with their events' artifacts put back (Log's)."""

    def group_create_op(self, session_id: str, group: str, after_cursor: str | None) -> Op[bool]:
        """Create `group` to deliver what commits after `after_cursor` (None: the session's
        current end); False, changing nothing, when it exists already."""
        check_group(session_id, group)
        if after_cursor is not None:
            parse_cursor(after_cursor)
        return (yield from self._group_create(session_id, group, after_cursor))

    group_create = operation(group_create_op)

    def group_exists_op(self, session_id: str, group: str) -> Op[bool]:
        check_group(session_id, group)
        return (yield from self._group_exists(session_id, group))

    group_exists = operation(group_exists_op)

    def group_read_op(
        self, session_id: str, group: str, consumer: str, count: int, block_ms: int | None
    ) -> Op[list[Delivery]]:
        """Events not yet delivered to the group, now `consumer`'s, waiting up to `block_ms` for
        the first (None: no wait). A read whose reply was lost is retried by first re-reading
        the consumer's own pending events, so none is stranded. NotFound: no such group."""
        check_group(session_id, group, consumer)
        found = yield from self._group_read(session_id, group, consumer, max(1, count), block_ms)
        return (yield from self._resolved_deliveries(session_id, found))

    group_read = operation(group_read_op)

    def group_pending_op(
        self, session_id: str, group: str, consumer: str, count: int
    ) -> Op[list[Delivery]]:
        """`consumer`'s own pending events again (after a restart), oldest first; each is handed
        out once more and its delivery count says so."""
        check_group(session_id, group, consumer)
        found = yield from self._group_pending(session_id, group, consumer, max(1, count))
        return (yield from self._resolved_deliveries(session_id, found))

    group_pending = operation(group_pending_op)

    def group_claim_op(
        self, session_id: str, group: str, consumer: str, min_idle_ms: int, count: int
    ) -> Op[list[Delivery]]:
        """Take over events pending at least `min_idle_ms` with any consumer."""
        check_group(session_id, group, consumer)
        found = yield from self._group_claim(
            session_id, group, consumer, max(0, min_idle_ms), max(1, count)
        )
        return (yield from self._resolved_deliveries(session_id, found))

    group_claim = operation(group_claim_op)

    def group_keep_op(
        self, session_id: str, group: str, consumer: str, entry_ids: list[str]
    ) -> Op[None]:
        """Reset the idle time of events `consumer` still works on, so none is claimed from it;
        their delivery counts do not change."""
        check_group(session_id, group, consumer)
        if entry_ids:
            yield from self._group_keep(session_id, group, consumer, entry_ids)

    group_keep = operation(group_keep_op)

    def group_ack_op(self, session_id: str, group: str, entry_ids: list[str]) -> Op[int]:
        """Mark events handled; returns how many were pending."""
        check_group(session_id, group)
        if not entry_ids:
            return 0
        return (yield from self._group_ack(session_id, group, entry_ids))

    group_ack = operation(group_ack_op)

    def group_dead_letter_op(
        self, session_id: str, group: str, delivery: Delivery, reason: str
    ) -> Op[None]:
        """Move an event the group gives up on to its dead-letter record and ack it, atomically."""
        check_group(session_id, group)
        yield from self._group_dead_letter(session_id, group, delivery, reason)

    group_dead_letter = operation(group_dead_letter_op)

    @abc.abstractmethod
    def _group_create(self, session_id: str, group: str, after: str | None) -> Op[bool]: ...

    @abc.abstractmethod
    def _group_exists(self, session_id: str, group: str) -> Op[bool]: ...

    @abc.abstractmethod
    def _group_read(
        self, session_id: str, group: str, consumer: str, count: int, block_ms: int | None
    ) -> Op[list[Delivery]]: ...

    @abc.abstractmethod
    def _group_pending(
        self, session_id: str, group: str, consumer: str, count: int
    ) -> Op[list[Delivery]]: ...

    @abc.abstractmethod
    def _group_claim(
        self, session_id: str, group: str, consumer: str, min_idle_ms: int, count: int
    ) -> Op[list[Delivery]]: ...

    @abc.abstractmethod
    def _group_keep(
        self, session_id: str, group: str, consumer: str, entry_ids: list[str]
    ) -> Op[None]: ...

    @abc.abstractmethod
    def _group_ack(self, session_id: str, group: str, entry_ids: list[str]) -> Op[int]: ...

    @abc.abstractmethod
    def _group_dead_letter(
        self, session_id: str, group: str, delivery: Delivery, reason: str
    ) -> Op[None]: ...


class GroupAdmin(abc.ABC):
    """What an operator does with a session's groups: list them with what each holds, see who
    holds what, prune idle consumers, reset, delete, and read or replay the dead letters; on the
    primitives a backend provides."""

    @abc.abstractmethod
    def run_op(self, op: Op[T]) -> T:
        """Run an operation to its end (the store's own driver: Log.run_op)."""

    @abc.abstractmethod
    def _group_exists(self, session_id: str, group: str) -> Op[bool]:
        """Whether the group exists (GroupDelivery's)."""

    def group_dead_letters_op(self, session_id: str, group: str) -> Op[list[dict[str, str]]]:
        """The group's dead letters, oldest first."""
        check_group(session_id, group)
        return (yield from self._group_dead_letters(session_id, group))

    group_dead_letters = operation(group_dead_letters_op)

    def group_stats_op(
        self, session_id: str, group: str, idle_ms: int = 3_600_000
    ) -> Op[GroupStats]:
        """Lag, pending, and consumers live and idle (idle: nothing pending, no read for
        `idle_ms`). NotFound: no such group."""
        check_group(session_id, group)
        return (yield from self._group_stats(session_id, group, max(0, idle_ms)))

    group_stats = operation(group_stats_op)

    def group_prune_op(self, session_id: str, group: str, idle_ms: int) -> Op[list[str]]:
        """Remove the consumers idle for `idle_ms` that hold nothing pending, atomically (a
        consumer holding an event is never removed); returns their names."""
        check_group(session_id, group)
        return (yield from self._group_prune(session_id, group, max(0, idle_ms)))

    group_prune = operation(group_prune_op)

    def groups_op(self, session_id: str, idle_ms: int = 3_600_000) -> Op[list[GroupStats]]:
        """Every consumer group of the session, by name."""
        check_name(session_id, "session id")
        found = yield from self._groups(session_id, max(0, idle_ms))
        return sorted(found, key=lambda g: g.group)

    groups = operation(groups_op)

    def group_pending_entries_op(
        self, session_id: str, group: str, count: int = 1000
    ) -> Op[list[PendingEntry]]:
        """The group's pending events, oldest first: who holds each, how long, how often."""
        check_group(session_id, group)
        return (yield from self._group_pending_entries(session_id, group, max(1, count)))

    group_pending_entries = operation(group_pending_entries_op)

    def group_delete_op(self, session_id: str, group: str) -> Op[bool]:
        """Remove the group and its dead letters; False when there was no such group."""
        check_group(session_id, group)
        return (yield from self._group_delete(session_id, group))

    group_delete = operation(group_delete_op)

    def group_reset_op(self, session_id: str, group: str, cursor: str) -> Op[None]:
        """Make the group deliver what commits after `cursor` next (what it holds stays pending)."""
        check_group(session_id, group)
        parse_cursor(cursor)
        if not (yield from self._group_exists(session_id, group)):
            raise NotFound(f"no consumer group {group!r} on session {session_id!r}")
        yield from self._group_reset(session_id, group, cursor)

    group_reset = operation(group_reset_op)

    def group_replay_dead_letters_op(self, session_id: str, group: str) -> Op[int]:
        """Put the group's dead letters back: each is pending again, idle long enough for any
        consumer that takes over idle events to take it, with its delivery count reset; its dead
        letter is removed. Returns how many."""
        check_group(session_id, group)
        if not (yield from self._group_exists(session_id, group)):
            raise NotFound(f"no consumer group {group!r} on session {session_id!r}")
        return (yield from self._group_replay(session_id, group))

    group_replay_dead_letters = operation(group_replay_dead_letters_op)

    @abc.abstractmethod
    def _group_dead_letters(self, session_id: str, group: str) -> Op[list[dict[str, str]]]: ...

    @abc.abstractmethod
    def _group_stats(self, session_id: str, group: str, idle_ms: int) -> Op[GroupStats]: ...

    @abc.abstractmethod
    def _group_prune(self, session_id: str, group: str, idle_ms: int) -> Op[list[str]]: ...

    @abc.abstractmethod
    def _groups(self, session_id: str, idle_ms: int) -> Op[list[GroupStats]]: ...

    @abc.abstractmethod
    def _group_pending_entries(
        self, session_id: str, group: str, count: int
    ) -> Op[list[PendingEntry]]: ...

    @abc.abstractmethod
    def _group_delete(self, session_id: str, group: str) -> Op[bool]: ...

    @abc.abstractmethod
    def _group_reset(self, session_id: str, group: str, cursor: str) -> Op[None]: ...

    @abc.abstractmethod
    def _group_replay(self, session_id: str, group: str) -> Op[int]: ...


class Groups(GroupDelivery, GroupAdmin):
    """Consumer groups, a capability of a store: a consumer's side and an operator's, each on
    its own few primitives."""

    what: ClassVar[str] = "consumer groups"


def check_group(session_id: str, group: str, consumer: str | None = None) -> None:
    """The names a group operation is given, checked (InvalidInput)."""
    check_name(session_id, "session id")
    check_name(group, "group name")
    if consumer is not None:
        check_name(consumer, "consumer name")
