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
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from ledger_bus.model.durability import Durability
from ledger_bus.model.prepared import Limits
from ledger_bus.model.records import (
    AppendRecord,
    RecordedEvent,
)
from ledger_bus.store.base import (
    CAPABILITIES,
    PAGE,
    Attempts,
    Bounds,
    C,
    Capability,
    Deletes,
    EventStore,
    Groups,
    Log,
    Restores,
    declaring,
    unsupported,
)
from ledger_bus.store.restore import restore_batches
from ledger_bus.store.steps import Op, declared, run_async

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")


def forward(
    steps: Callable[Concatenate[S, P], Op[T]],
) -> Callable[Concatenate[AsyncStore, P], Coroutine[Any, Any, T]]:
    """A contract operation on AsyncStore, by the steps that declare it (store/steps.py's
    `operation`): `tail = forward(Log.tail_op)`. The steps are asked of the core (a backend's own
    run), once the core is found to have the capability that declares them, and driven on the
    event loop."""
    name, capability = steps.__name__, declaring(steps)

    async def forwarded(store: AsyncStore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if capability not in store.capabilities:  # as `_having` refuses it
            raise unsupported(store.core, capability)
        found: Callable[P, Op[T]] = getattr(store.core, name)
        return await store.drive(found(*args, **kwargs))

    return declared(forwarded, steps)


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
        # What the core can do, found once: asked on every call, where an abstract class's
        # isinstance would cost a call more than a set's lookup.
        self.capabilities = frozenset(c for c in CAPABILITIES if isinstance(core, c))
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

    def _having(self, capability: Callable[..., C]) -> C:
        """The core as `capability`, which it is asked for where it is first used: a core that
        lacks one is refused there, in one line (Unsupported), as `need` refuses it."""
        if capability not in self.capabilities:
            raise unsupported(self.core, cast("Capability", capability))
        return cast(C, self.core)

    def drive(self, op: Op[T]) -> Awaitable[T]:
        """Run one of the core's operations to its end (awaited: a plain function returning the
        awaitable, one coroutine less on every call)."""
        if self.client is not None:
            return run_async(op, self.requests)
        if self.bridged:
            return bridge(self.core.run_op, op)
        return asyncio.to_thread(self.core.run_op, op)

    # -- the contract: each operation forwarded to its steps, declared once (steps.operation) --

    append = forward(Log.append_op)
    read_stream = forward(Log.read_stream_op)
    scan_session = forward(Log.scan_session_op)
    tail = forward(Log.tail_op)
    wait_session = forward(Log.wait_session_op)
    artifact = forward(Log.artifact_op)
    resolve = forward(Log.resolve_op)
    stream_version = forward(Log.stream_version_op)
    session_exists = forward(Log.session_exists_op)
    session_info = forward(Log.session_info_op)
    sessions = forward(Log.sessions_op)
    session_count = forward(Log.session_count_op)
    now_ms = forward(Log.now_ms_op)
    artifact_uses = forward(Restores.artifact_uses_op)
    delete_session = forward(Deletes.delete_session_op)
    delete_stream = forward(Deletes.delete_stream_op)
    bound_stream = forward(Bounds.bound_stream_op)
    stream_bound = forward(Bounds.stream_bound_op)
    acquire_lease = forward(Attempts.acquire_lease_op)
    hold = forward(Attempts.hold_op)
    renew_lease = forward(Attempts.renew_lease_op)
    release_lease = forward(Attempts.release_lease_op)
    lease_alive = forward(Attempts.lease_alive_op)
    open_attempts = forward(Attempts.open_attempts_op)
    open_attempts_of = forward(Attempts.open_attempts_of_op)
    safe_to_replay = forward(Attempts.safe_to_replay_op)
    sessions_with_open_attempts = forward(Attempts.sessions_with_open_attempts_op)
    forget_idle_session = forward(Attempts.forget_idle_session_op)
    group_create = forward(Groups.group_create_op)
    group_exists = forward(Groups.group_exists_op)
    group_read = forward(Groups.group_read_op)
    group_pending = forward(Groups.group_pending_op)
    group_claim = forward(Groups.group_claim_op)
    group_keep = forward(Groups.group_keep_op)
    group_ack = forward(Groups.group_ack_op)
    group_dead_letter = forward(Groups.group_dead_letter_op)
    group_dead_letters = forward(Groups.group_dead_letters_op)
    group_stats = forward(Groups.group_stats_op)
    group_prune = forward(Groups.group_prune_op)
    groups = forward(Groups.groups_op)
    group_pending_entries = forward(Groups.group_pending_entries_op)
    group_delete = forward(Groups.group_delete_op)
    group_reset = forward(Groups.group_reset_op)
    group_replay_dead_letters = forward(Groups.group_replay_dead_letters_op)

    # -- what runs as more than one operation ------------------------------------------------------

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

    async def restore(self, events: Iterable[RecordedEvent]) -> int:
        """EventStore.restore."""
        written = 0
        for batch in restore_batches(events, self.core.limits):
            written += await self.drive(self._having(Restores).restore_batch_op(batch))
        return written

    async def iter_append_ids(self, session_id: str) -> AsyncIterator[AppendRecord]:
        """EventStore.iter_append_ids."""
        for record in await self.drive(self._having(Restores).append_ids_op(session_id)):
            yield record

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
