"""Keeping an agent in the conversation: its last-N context, then every new event, at least once.

A tailer joins a session through a consumer group on the session log (a Redis consumer group on
Redis; the same semantics in memory). Each new event goes to
one consumer of the group; it is acked once the handler returns, and an event a consumer took and
never acked (its process died) is taken over by another after `claim_idle_ms`. An event that keeps
failing moves to the group's dead-letter stream after `max_deliveries`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final, Literal, TypeVar

from ledger_bus.agent.rewind import cursor_gone_op, report_rewind_op
from ledger_bus.model.errors import LedgerError
from ledger_bus.model.ids import CURSOR_ZERO, cursor_ms
from ledger_bus.model.jsontext import format_time
from ledger_bus.model.records import Delivery, GroupStats, RecordedEvent
from ledger_bus.store.base import EventStore, Groups, need
from ledger_bus.store.steps import Op

log = logging.getLogger("ledger_bus.tailer")

Handler = Callable[[RecordedEvent], object]
T = TypeVar("T")
REWIND_CHECK_S: Final = 1.0  # how often a consumer looks for the newest event it handled


def context_line(event: RecordedEvent, width: int = 200) -> str:
    """A compact line for a model's context: time, who, what."""
    at = format_time(cursor_ms(event.cursor))[11:19]
    return f"{at} {event.agent} {event.type}: {event.summary(width)}"


def render_context(events: Iterable[RecordedEvent], width: int = 200) -> str:
    """The events as compact lines of text, for a model's context window."""
    return "\n".join(context_line(event, width) for event in events)


def watch(
    store: EventStore,
    session_id: str,
    after: str,
    stop: threading.Event | None = None,
    block_ms: int = 5000,
) -> Iterator[RecordedEvent]:
    """Every event of the session committed after the cursor `after`, as it commits.

    A reader on its own: no group, nothing acked, nothing kept on the server, so it suits a
    person watching (`ledger-bus tail --follow`) and read-only credentials. A reader that must
    not miss an event across its own restarts, or shares the work with others, is a Tailer.
    """
    cursor = after
    while stop is None or not stop.is_set():
        batch = store.wait_session(session_id, cursor, timeout_ms=block_ms)
        yield from batch
        if batch:
            cursor = batch[-1].cursor


@dataclass
class TailerOptions:
    """How a tailer reads.

    count: events per read. block_ms: how long a read waits for new events.
    claim_idle_ms: take over events other consumers left unacked this long (None: never).
    max_deliveries: after this many deliveries an event goes to the dead-letter stream.
    keepalive_ms: while a handler runs, its event's idle time is reset this often, so that a
        slow handler is not mistaken for a dead one (default: a third of claim_idle_ms).
        Give every consumer of a group the same claim_idle_ms.
    skip_agent: events written by this agent are acked without reaching the handler.
    types: only these event types reach the handler; the others are acked.
    forget_idle_ms: on join, consumers of the group idle this long and holding nothing are
        removed, so that names used once (a restarted process, `follow --once`) do not pile up.
    """

    count: int = 100
    block_ms: int = 2000
    claim_idle_ms: int | None = None
    max_deliveries: int = 5
    keepalive_ms: int | None = None
    skip_agent: str | None = None
    types: Collection[str] | None = None
    forget_idle_ms: int = 3_600_000


@dataclass
class Tailer:
    """One consumer of one group on one session."""

    store: EventStore
    session_id: str
    group: str
    consumer: str
    options: TailerOptions = field(default_factory=TailerOptions)

    def __post_init__(self) -> None:
        # a tailer reads through a consumer group: a store without them is refused here
        self.groups = need(self.store, Groups)
        self._recovered = False
        self._handled: str | None = None  # cursor of the newest event handed out
        self._next_check = 0.0
        self.rewinds = 0  # times an event handed out was found gone afterwards

    # Each step is an operation (store/steps.py) on the store, run here by its own driver and by
    # ledger_bus.agent.aio.AsyncTailer on an asyncio one: the rules are written once.

    def _drive(self, op: Op[T]) -> T:
        return self.store.run_op(op)

    def context(self, n: int = 20) -> list[RecordedEvent]:
        """The session's last n events, oldest first; O(n) whatever the session's length."""
        return self._drive(self.context_op(n))

    def context_op(self, n: int = 20) -> Op[list[RecordedEvent]]:
        return (yield from self.store.tail_op(self.session_id, n))

    def join(self, n: int = 20) -> list[RecordedEvent]:
        """Return the last-n context and make sure the group exists.

        A new group starts right after the context returned, so nothing committed in between is
        missed; an existing group keeps its place.
        """
        return self._drive(self.join_op(n))

    def join_op(self, n: int = 20) -> Op[list[RecordedEvent]]:
        store, groups, session, group = self.store, self.groups, self.session_id, self.group
        events = yield from self.context_op(n)
        if (yield from groups.group_exists_op(session, group)):
            gone = yield from groups.group_prune_op(session, group, self.options.forget_idle_ms)
            if gone:
                log.info("forgot %d idle consumers of %s", len(gone), group)
        else:
            if events:
                newest = events[-1].cursor
            elif n:  # the session was empty: whatever it holds by now is new
                newest = CURSOR_ZERO
            else:
                latest = yield from store.tail_op(session, 1)
                newest = latest[-1].cursor if latest else CURSOR_ZERO
            yield from groups.group_create_op(session, group, newest)
        return events

    def _wanted(self, event: RecordedEvent) -> bool:
        if self.options.skip_agent is not None and event.agent == self.options.skip_agent:
            return False
        return self.options.types is None or event.type in self.options.types

    def _sort(self, found: list[Delivery]) -> Op[list[Delivery]]:
        """Dead-letter the exhausted, ack the unwanted; return what the handler should see."""
        limit = self.options.max_deliveries
        unfiltered = self.options.skip_agent is None and self.options.types is None
        if unfiltered and all(delivery.deliveries <= limit for delivery in found):
            return found  # the common batch: every event goes to the handler
        keep: list[Delivery] = []
        skipped: list[str] = []
        for delivery in found:
            if delivery.deliveries > self.options.max_deliveries:
                reason = f"not acked after {delivery.deliveries - 1} deliveries"
                yield from self.groups.group_dead_letter_op(
                    self.session_id, self.group, delivery, reason
                )
                log.warning("dead-lettered %s: %s", delivery.entry_id, reason)
            elif self._wanted(delivery.event):
                keep.append(delivery)
            else:
                skipped.append(delivery.entry_id)
        yield from self.groups.group_ack_op(self.session_id, self.group, skipped)
        return keep

    def poll(self) -> list[Delivery]:
        """One batch: first this consumer's own unacked events (after a start, or after a read
        that failed), then events taken over from idle consumers, else new events, waiting up to
        block_ms for them."""
        return self._drive(self.poll_op())

    def poll_op(self) -> Op[list[Delivery]]:
        try:
            batch = yield from self._poll()
        except LedgerError:
            # A read that failed may have delivered events to this consumer on the server; they
            # are pending with it, and only a read of its own pending events finds them again.
            self._recovered = False
            raise
        if batch:
            newest = max(d.event.cursor for d in batch)
            self._handled = max(newest, self._handled or newest)
        return batch

    def _poll(self) -> Op[list[Delivery]]:
        groups, session, group, consumer = self.groups, self.session_id, self.group, self.consumer
        count = self.options.count
        if self._handled is not None and (
            not self._recovered or time.monotonic() >= self._next_check
        ):
            yield from self._check_rewind(self._handled)
        if not self._recovered:
            yield from self.join_op(0)
            own = yield from groups.group_pending_op(session, group, consumer, count)
            self._recovered = True
            if own:
                return (yield from self._sort(own))
        if self.options.claim_idle_ms is not None:
            idle = self.options.claim_idle_ms
            taken = yield from groups.group_claim_op(session, group, consumer, idle, count)
            if taken:
                log.info("took over %d events idle >= %d ms", len(taken), idle)
                return (yield from self._sort(taken))
        block = self.options.block_ms
        found = yield from groups.group_read_op(session, group, consumer, count, block)
        return (yield from self._sort(found))

    def _check_rewind(self, handled: str) -> Op[None]:
        """Is the newest event handed out still there? A failover that lost it rewound the
        group too, which then hands out what replaced it as new. Looked at after a failed read
        and once every REWIND_CHECK_S: the store may have reconnected to a promoted replica
        without a word, and a read of new events cannot tell."""
        self._next_check = time.monotonic() + REWIND_CHECK_S
        if (yield from cursor_gone_op(self.store, self.session_id, handled)):
            self.rewinds += 1
            observer = f"{self.group}/{self.consumer}"
            yield from report_rewind_op(self.store, self.session_id, observer, handled, "an event")
            self._handled = None

    def ack(self, deliveries: Iterable[Delivery]) -> int:
        return self.groups.group_ack(self.session_id, self.group, [d.entry_id for d in deliveries])

    def run(
        self,
        handler: Handler,
        stop: threading.Event | None = None,
        *,
        ack: bool = True,
        batches: int | None = None,
        errors: Literal["leave", "raise"] = "leave",
    ) -> None:
        """Deliver events to `handler` until `stop` is set (or after `batches` batches); ack each
        batch's handled events unless `ack` is false.

        errors "leave": a handler that raises leaves its event unacked, and the run goes on; the
        event comes back through takeover (set claim_idle_ms) or this consumer's next start,
        until max_deliveries sends it to the dead-letter stream. errors "raise": the run stops
        and the error propagates, after acking what was handled before it.
        """
        stop = stop or threading.Event()
        done = 0
        while not stop.is_set() and (batches is None or done < batches):
            batch = self.poll()
            handled: list[Delivery] = []
            try:
                with self._keeping([d.entry_id for d in batch]):
                    for delivery in batch:
                        try:
                            handler(delivery.event)
                        except Exception:
                            if errors == "raise":
                                raise
                            log.exception("handler failed on %s; left unacked", delivery.entry_id)
                            continue
                        handled.append(delivery)
            finally:
                if ack:
                    self.ack(handled)
            done += 1

    @contextmanager
    def _keeping(self, entry_ids: list[str]) -> Iterator[None]:
        """Keep the batch's entries fresh while the handler works on them."""
        interval = self.options.keepalive_ms or (self.options.claim_idle_ms or 15_000) // 3
        done = threading.Event()

        def keep() -> None:
            while not done.wait(interval / 1000):
                try:
                    self.groups.group_keep(self.session_id, self.group, self.consumer, entry_ids)
                except LedgerError:
                    log.warning("could not refresh %d in-flight events", len(entry_ids))

        keeper = threading.Thread(target=keep, name=f"keep-{self.consumer}", daemon=True)
        if entry_ids:
            keeper.start()
        try:
            yield
        finally:
            done.set()
            if entry_ids:
                keeper.join()

    def stats(self) -> GroupStats:
        return self.groups.group_stats(self.session_id, self.group, self.options.forget_idle_ms)

    def dead_letters(self) -> list[dict[str, str]]:
        return self.groups.group_dead_letters(self.session_id, self.group)
