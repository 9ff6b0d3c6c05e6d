"""The store under asyncio: the same operations as EventStore's, driven on an asyncio client.

An AsyncStore holds a core EventStore and runs its operations (store/steps.py): on Redis, Valkey
and Redis Cluster over `redis.asyncio`, awaiting each request, so that a thousand coroutines
share one connection pool and no thread. The SQL store runs on SQLAlchemy's async engines
(aiosqlite, psycopg's AsyncConnection): its code is written against SQLAlchemy's blocking
interface, and SQLAlchemy's greenlet bridge (`greenlet_spawn`) runs it with every database call,
and every wait of the store's own (store/sql/waits.py), awaited on the event loop. The memory
store and a Redis ledger with an archive, whose primitives are plain blocking calls, run on a
worker thread each, so the loop never blocks. The checks, the canonical bytes, the digests, the
key layout, the scripts, the statements and the decoding of replies are the core's, once.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Sequence
from typing import Any, TypeVar, cast

import redis.exceptions as rx

from ledger_bus.model.durability import Durability
from ledger_bus.model.ids import ExpectedVersion, StreamId
from ledger_bus.model.prepared import Fence, Limits
from ledger_bus.model.records import (
    AppendRecord,
    AppendResult,
    Bound,
    Deletion,
    Delivery,
    GroupStats,
    OpenAttempt,
    PendingEntry,
    RecordedEvent,
    SessionInfo,
)
from ledger_bus.store.base import (
    DEFAULT_DEDUP_WINDOW_MS,
    PAGE,
    Attempts,
    Bounds,
    Deletes,
    EventStore,
    Groups,
    Restores,
    need,
)
from ledger_bus.store.restore import restore_batches
from ledger_bus.store.steps import Op, run_async

T = TypeVar("T")


class AsyncStore:
    """EventStore's contract, every method a coroutine; `await aio.connect(url)` gives one.

    `core` is the store whose operations run here (one that lacks a capability is refused where
    the capability is used); `client`, the asyncio Redis client they run on (`requests`, what
    stands in for it to make them; `closing`, how it goes); `bridged`, whether
    the core (a SQL store on an async engine) runs through SQLAlchemy's greenlet bridge; neither,
    on worker threads with the core's own blocking client.
    """

    def __init__(
        self,
        core: EventStore,
        client: Any | None = None,
        *,
        bridged: bool = False,
        requests: Any | None = None,
        closing: Callable[[], Awaitable[None]] | None = None,
    ):
        self.core = core
        self.client = client
        self.bridged = bridged
        # What the operations' requests are made on: the client, or what stands in for it (a
        # Redis client's EVALSHAs of one turn of the loop sent as one pipeline: the Redis
        # opener's store/redis/autopipe.py).
        self.requests: Any = client if requests is None else requests
        # How the client goes, with what it opened beside it (a Sentinel's own clients): the
        # opener's, else the client's aclose.
        self._closing = closing

    @property
    def native(self) -> bool:
        """Whether the operations run on the event loop (False: on worker threads)."""
        return self.client is not None or self.bridged

    @property
    def limits(self) -> Limits:
        return self.core.limits

    @property
    def durability(self) -> Durability:
        return self.core.durability

    # The core's capabilities beside the log, each asked for where it is first used (and kept
    # once found): a core that lacks one is refused there, in one line (Unsupported).

    @functools.cached_property
    def _attempts(self) -> Attempts:
        return need(self.core, Attempts)

    @functools.cached_property
    def _groups(self) -> Groups:
        return need(self.core, Groups)

    @functools.cached_property
    def _bounds(self) -> Bounds:
        return need(self.core, Bounds)

    @functools.cached_property
    def _deletes(self) -> Deletes:
        return need(self.core, Deletes)

    @functools.cached_property
    def _restores(self) -> Restores:
        return need(self.core, Restores)

    async def drive(self, op: Op[T]) -> T:
        """Run one of the core's operations to its end."""
        if self.client is not None:
            return await run_async(op, self.requests)
        if self.bridged:
            return await bridge(self.core.run_op, op)
        return await asyncio.to_thread(self.core.run_op, op)

    # -- the contract ---------------------------------------------------------------------------

    async def append(  # noqa: PLR0913  (the contract's append: four arguments, and two keywords)
        self,
        stream: StreamId,
        expected_version: ExpectedVersion,
        append_id: str,
        events: Sequence[object],
        *,
        durability: str | Durability | None = None,
        fence: Fence | None = None,
    ) -> AppendResult:
        """EventStore.append, by the core's plan (EventStore.plan_append): its one call, where
        it has one, on the event loop's client (sent with the others of its turn)."""
        plan = self.core.plan_append(
            stream, expected_version, append_id, events, durability=durability, fence=fence
        )
        reply: object = None
        if plan.request is not None and self.client is not None:
            try:
                # on the asyncio client, a request's reply is an awaitable of it
                reply = await cast(Awaitable[object], plan.request(self.requests))
            except (rx.RedisError, OSError) as err:
                plan.call_failed(err)  # named and counted; the general path makes the append
        done = plan.finish(reply)
        return done if isinstance(done, AppendResult) else await self.drive(done)

    async def read_stream(
        self,
        stream: StreamId,
        after_version: int = 0,
        limit: int | None = None,
        *,
        resolve_artifacts: bool | None = None,
    ) -> list[RecordedEvent]:
        """EventStore.read_stream."""
        return await self.drive(
            self.core.read_stream_op(
                stream, after_version, limit, resolve_artifacts=resolve_artifacts
            )
        )

    async def scan_session(
        self,
        session_id: str,
        after_cursor: str | None = None,
        limit: int | None = None,
        *,
        resolve_artifacts: bool | None = None,
    ) -> list[RecordedEvent]:
        """EventStore.scan_session."""
        return await self.drive(
            self.core.scan_session_op(
                session_id, after_cursor, limit, resolve_artifacts=resolve_artifacts
            )
        )

    async def iter_session(
        self,
        session_id: str,
        after_cursor: str | None = None,
        page: int = PAGE,
        *,
        resolve_artifacts: bool | None = None,
    ) -> AsyncIterator[RecordedEvent]:
        """EventStore.iter_session: a session's events in commit order, a page at a time."""
        cursor = after_cursor
        while True:
            batch = await self.drive(
                self.core.scan_page_op(session_id, cursor, page, resolve_artifacts)
            )
            for event in batch:
                yield event
            if len(batch) < page:
                return
            cursor = batch[-1].cursor

    async def tail(
        self,
        session_id: str,
        n: int = 20,
        before: str | None = None,
        *,
        resolve_artifacts: bool | None = None,
    ) -> list[RecordedEvent]:
        """EventStore.tail."""
        return await self.drive(
            self.core.tail_op(session_id, n, before, resolve_artifacts=resolve_artifacts)
        )

    async def wait_session(
        self, session_id: str, after_cursor: str | None, timeout_ms: int, limit: int = PAGE
    ) -> list[RecordedEvent]:
        """EventStore.wait_session: on Redis an XREAD BLOCK that holds a connection, not a
        thread, for as long as it waits."""
        return await self.drive(
            self.core.wait_session_op(session_id, after_cursor, timeout_ms, limit)
        )

    async def watch(
        self, session_id: str, after: str, block_ms: int = 5000
    ) -> AsyncIterator[RecordedEvent]:
        """Every event of the session committed after the cursor `after`, as it commits (a
        reader on its own, as tailer.watch)."""
        cursor = after
        while True:
            batch = await self.wait_session(session_id, cursor, timeout_ms=block_ms)
            for event in batch:
                yield event
            if batch:
                cursor = batch[-1].cursor

    async def artifact(self, session_id: str, sha256: str) -> bytes:
        """EventStore.artifact."""
        return await self.drive(self.core.artifact_op(session_id, sha256))

    async def artifact_uses(self, session_id: str) -> dict[str, int]:
        """EventStore.artifact_uses."""
        return await self.drive(self._restores.artifact_uses_op(session_id))

    async def resolve(self, event: RecordedEvent) -> RecordedEvent:
        """EventStore.resolve."""
        return await self.drive(self.core.resolve_op(event))

    async def stream_version(self, stream: StreamId) -> int:
        """EventStore.stream_version."""
        return await self.drive(self.core.stream_version_op(stream))

    async def session_exists(self, session_id: str) -> bool:
        """EventStore.session_exists."""
        return await self.drive(self.core.session_exists_op(session_id))

    async def session_info(self, session_id: str, append_ids: bool = True) -> SessionInfo:
        """EventStore.session_info."""
        return await self.drive(self.core.session_info_op(session_id, append_ids))

    async def restore(self, events: Iterable[RecordedEvent]) -> int:
        """EventStore.restore."""
        written = 0
        for batch in restore_batches(events, self.core.limits):
            written += await self.drive(self._restores.restore_batch_op(batch))
        return written

    async def delete_session(self, session_id: str) -> Deletion:
        """EventStore.delete_session."""
        return await self.drive(self._deletes.delete_session_op(session_id))

    async def delete_stream(self, stream: StreamId) -> Deletion:
        """EventStore.delete_stream."""
        return await self.drive(self._deletes.delete_stream_op(stream))

    async def bound_stream(
        self,
        stream: StreamId,
        keep: int | None,
        dedup_window_ms: int = DEFAULT_DEDUP_WINDOW_MS,
        *,
        only: str | None = None,
    ) -> None:
        """EventStore.bound_stream."""
        await self.drive(self._bounds.bound_stream_op(stream, keep, dedup_window_ms, only=only))

    async def stream_bound(self, stream: StreamId) -> Bound | None:
        """EventStore.stream_bound."""
        return await self.drive(self._bounds.stream_bound_op(stream))

    async def sessions(self, limit: int | None = None) -> list[tuple[str, int]]:
        """EventStore.sessions."""
        return await self.drive(self.core.sessions_op(limit))

    async def session_count(self) -> int:
        """EventStore.session_count."""
        return await self.drive(self.core.session_count_op())

    async def now_ms(self) -> int:
        """EventStore.now_ms."""
        return await self.drive(self.core.now_ms_op())

    # -- leases -------------------------------------------------------------------------------

    async def acquire_lease(self, session_id: str, name: str, owner: str, ttl_ms: int) -> int:
        """EventStore.acquire_lease."""
        return await self.drive(self._attempts.lease_op("acquire", session_id, name, owner, ttl_ms))

    async def renew_lease(self, session_id: str, name: str, owner: str, ttl_ms: int) -> int:
        """EventStore.renew_lease."""
        return await self.drive(self._attempts.lease_op("renew", session_id, name, owner, ttl_ms))

    async def release_lease(self, session_id: str, name: str, owner: str) -> bool:
        """EventStore.release_lease."""
        return bool(
            await self.drive(self._attempts.lease_op("release", session_id, name, owner, 0))
        )

    async def lease_alive(self, session_id: str, name: str) -> bool:
        """EventStore.lease_alive."""
        return await self.drive(self._attempts.lease_alive_op(session_id, name))

    # -- open attempts --------------------------------------------------------------------------

    async def open_attempts(self, session_id: str) -> list[OpenAttempt]:
        """EventStore.open_attempts."""
        found = await self.drive(self._attempts.open_attempts_of_op([session_id]))
        return found[session_id]

    async def open_attempts_of(self, session_ids: list[str]) -> dict[str, list[OpenAttempt]]:
        """EventStore.open_attempts_of."""
        return await self.drive(self._attempts.open_attempts_of_op(session_ids))

    async def safe_to_replay(self, session_id: str, run_id: str | None, tool: str) -> bool:
        """EventStore.safe_to_replay."""
        return await self.drive(self._attempts.safe_to_replay_op(session_id, run_id, tool))

    async def sessions_with_open_attempts(
        self, buckets: Collection[int] | None = None
    ) -> list[tuple[str, int]]:
        """EventStore.sessions_with_open_attempts."""
        return await self.drive(self._attempts.sessions_with_open_attempts_op(buckets))

    async def forget_idle_session(self, session_id: str, opened_before_ms: int) -> bool:
        """EventStore.forget_idle_session."""
        return await self.drive(self._attempts.forget_idle_session_op(session_id, opened_before_ms))

    async def iter_append_ids(self, session_id: str) -> AsyncIterator[AppendRecord]:
        """EventStore.iter_append_ids."""
        for record in await self.drive(self._restores.append_ids_op(session_id)):
            yield record

    # -- consumer groups ------------------------------------------------------------------------

    async def group_create(self, session_id: str, group: str, after_cursor: str | None) -> bool:
        """EventStore.group_create."""
        return await self.drive(self._groups.group_create_op(session_id, group, after_cursor))

    async def group_exists(self, session_id: str, group: str) -> bool:
        """EventStore.group_exists."""
        return await self.drive(self._groups.group_exists_op(session_id, group))

    async def group_read(
        self, session_id: str, group: str, consumer: str, count: int, block_ms: int | None
    ) -> list[Delivery]:
        """EventStore.group_read."""
        return await self.drive(
            self._groups.group_read_op(session_id, group, consumer, count, block_ms)
        )

    async def group_pending(
        self, session_id: str, group: str, consumer: str, count: int
    ) -> list[Delivery]:
        """EventStore.group_pending."""
        return await self.drive(self._groups.group_pending_op(session_id, group, consumer, count))

    async def group_claim(
        self, session_id: str, group: str, consumer: str, min_idle_ms: int, count: int
    ) -> list[Delivery]:
        """EventStore.group_claim."""
        return await self.drive(
            self._groups.group_claim_op(session_id, group, consumer, min_idle_ms, count)
        )

    async def group_keep(
        self, session_id: str, group: str, consumer: str, entry_ids: list[str]
    ) -> None:
        """EventStore.group_keep."""
        await self.drive(self._groups.group_keep_op(session_id, group, consumer, entry_ids))

    async def group_ack(self, session_id: str, group: str, entry_ids: list[str]) -> int:
        """EventStore.group_ack."""
        return await self.drive(self._groups.group_ack_op(session_id, group, entry_ids))

    async def group_dead_letter(
        self, session_id: str, group: str, delivery: Delivery, reason: str
    ) -> None:
        """EventStore.group_dead_letter."""
        await self.drive(self._groups.group_dead_letter_op(session_id, group, delivery, reason))

    async def group_dead_letters(self, session_id: str, group: str) -> list[dict[str, str]]:
        """EventStore.group_dead_letters."""
        return await self.drive(self._groups.group_dead_letters_op(session_id, group))

    async def group_stats(
        self, session_id: str, group: str, idle_ms: int = 3_600_000
    ) -> GroupStats:
        """EventStore.group_stats."""
        return await self.drive(self._groups.group_stats_op(session_id, group, idle_ms))

    async def group_prune(self, session_id: str, group: str, idle_ms: int) -> list[str]:
        """EventStore.group_prune."""
        return await self.drive(self._groups.group_prune_op(session_id, group, idle_ms))

    async def groups(self, session_id: str, idle_ms: int = 3_600_000) -> list[GroupStats]:
        """EventStore.groups."""
        return await self.drive(self._groups.groups_op(session_id, idle_ms))

    async def group_pending_entries(
        self, session_id: str, group: str, count: int = 1000
    ) -> list[PendingEntry]:
        """EventStore.group_pending_entries."""
        return await self.drive(self._groups.group_pending_entries_op(session_id, group, count))

    async def group_delete(self, session_id: str, group: str) -> bool:
        """EventStore.group_delete."""
        return await self.drive(self._groups.group_delete_op(session_id, group))

    async def group_reset(self, session_id: str, group: str, cursor: str) -> None:
        """EventStore.group_reset."""
        await self.drive(self._groups.group_reset_op(session_id, group, cursor))

    async def group_replay_dead_letters(self, session_id: str, group: str) -> int:
        """EventStore.group_replay_dead_letters."""
        return await self.drive(self._groups.group_replay_dead_letters_op(session_id, group))

    # -- lifetime -------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Release connections; the store is not used afterwards."""
        if self._closing is not None:
            await self._closing()
        elif self.client is not None:
            await self.client.aclose()
        elif self.bridged:
            await bridge(self.core.close)
        else:
            await asyncio.to_thread(self.core.close)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def bridge(work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` in a greenlet whose database calls SQLAlchemy awaits on this loop."""
    from sqlalchemy.util import greenlet_spawn

    return await greenlet_spawn(work, *args)


__all__ = ["AsyncStore", "bridge"]
