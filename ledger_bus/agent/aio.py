"""ledger-bus under asyncio: the store, the recorder and the tailer as coroutines (public as
`ledger_bus.aio`).

    from ledger_bus import aio

    store = await aio.connect("redis://127.0.0.1:6379/0")
    recorder = aio.AsyncRecorder(store, "task-42", "planner")
    async with recorder.run() as run:
        found = await run.call("search", {"q": "redis streams"}, search)

Each class here drives the operations of its blocking counterpart (store/steps.py) on an asyncio
client: the checks, the event ids, the lease and recovery rules and the group semantics are
those of EventStore, Recorder and Tailer, written once. On Redis, Valkey and Redis Cluster the
calls run on `redis.asyncio`; on SQLite and PostgreSQL, on SQLAlchemy's async engines; on the
memory store, on worker threads.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal

from ledger_bus.agent.current import calling
from ledger_bus.agent.recorder import (
    DEFAULT_LEASE_MS,
    Attempt,
    Capabilities,
    Delegation,
    Recorder,
    Run,
    failure,
)
from ledger_bus.agent.tailer import Tailer, TailerOptions
from ledger_bus.model.errors import LedgerError
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.records import Delivery, GroupStats, RecordedEvent
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.store.async_urls import open_async

log = logging.getLogger("ledger_bus.aio")

AsyncHandler = Callable[[RecordedEvent], object]  # may return an awaitable, which is awaited


async def connect(url: str | None = None, **options: Any) -> AsyncStore:
    """ledger_bus.connect, for asyncio: the same URLs and options, an AsyncStore."""
    return await open_async(url, **options)


async def _settle(value: object) -> object:
    """A tool's or handler's value, awaited when it is awaitable (async functions)."""
    return await value if inspect.isawaitable(value) else value


class AsyncRecorder:
    """Recorder, for asyncio: records runs of one agent in one session."""

    def __init__(
        self,
        store: AsyncStore,
        session_id: str,
        agent: str,
        *,
        durable: bool = True,
        lease_ttl_ms: int = DEFAULT_LEASE_MS,
    ):
        self.store = store
        self.core = Recorder(
            store.core, session_id, agent, durable=durable, lease_ttl_ms=lease_ttl_ms
        )

    @property
    def capabilities(self) -> Capabilities:
        return self.core.capabilities

    def run(
        self,
        run_id: str | None = None,
        *,
        parents: list[str] | None = None,
        resume: bool = False,
        lease_wait_ms: int = 0,
        acknowledged: int = 0,
        **fields: Any,
    ) -> AsyncRun:
        """Recorder.run: a run, used as `async with`, holding its lease while the block runs."""
        return AsyncRun(
            self.store,
            self.core.run(
                run_id,
                parents=parents,
                resume=resume,
                lease_wait_ms=lease_wait_ms,
                acknowledged=acknowledged,
                **fields,
            ),
        )


class AsyncRun:
    """Run, for asyncio; its lease is renewed by a task while the block runs."""

    def __init__(self, store: AsyncStore, run: Run):
        self.store = store
        self.core = run
        self._renewer: asyncio.Task[None] | None = None

    @property
    def run_id(self) -> str:
        return self.core.run_id

    @property
    def version(self) -> int:
        return self.core.version

    @property
    def restored_state(self) -> JSONObject | None:
        return self.core.restored_state

    async def __aenter__(self) -> AsyncRun:
        await self.store.drive(self.core.acquire_op())
        self._renewer = asyncio.create_task(self._renew(), name=f"lease-{self.run_id}")
        try:
            await self.store.drive(self.core.start_op())
        except BaseException:
            await self._stop_renewing_and_release()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.store.drive(self.core.finish_op(err))
        finally:
            await self._stop_renewing_and_release()

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.core.recorder.lease_ttl_ms / 3000)
            if not await self.store.drive(self.core.renew_op()):
                return

    async def _stop_renewing_and_release(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            await asyncio.gather(self._renewer, return_exceptions=True)
        await self.store.drive(self.core.release_op())

    async def message(self, body: str, **ids: Any) -> str:
        """Run.message."""
        return await self.store.drive(
            self.core.say_or_replay_op({"type": "message", "body": body, **ids})
        )

    async def mutate(self, kind: str, **fields: Any) -> str:
        """Run.mutate."""
        event = {"type": "mutation", "kind": kind, **fields}
        return await self.store.drive(self.core.say_or_replay_op(event))

    async def snapshot(self, state: dict[str, Any]) -> None:
        """Run.snapshot."""
        await self.store.drive(self.core.snapshot_op(state))

    async def call(
        self,
        tool: str,
        args: dict[str, Any],
        fn: Callable[..., Any],
        *,
        safe_to_replay: bool = False,
        step: str | None = None,
    ) -> Any:  # the tool's own result, or on a replay the JSON recorded of it
        """Run.call: `fn(**args)` (awaited when it is a coroutine function), its request
        committed before it runs and its result after; on resume, the recorded result."""
        done, found = await self.store.drive(
            self.core.begin_call_op(tool, args, safe_to_replay, step)
        )
        if done:
            return found
        return await self.finish_call(found, lambda: fn(**args))

    async def begin_call(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        safe_to_replay: bool = False,
        step: str | None = None,
    ) -> tuple[bool, Any]:
        """The first half of `call`, for a caller that runs the tool itself (an adapter): (True,
        the recorded value) for a step done before, else (False, an Attempt) whose request is
        committed; run the tool, then `end_call`."""
        found: tuple[bool, Any] = await self.store.drive(
            self.core.begin_call_op(tool, args, safe_to_replay, step)
        )
        return found

    async def end_call(self, attempt: Attempt, status: str, value: object) -> None:
        """The second half of `call`: its outcome, "ok" or "error"."""
        await self.store.drive(self.core.end_call_op(attempt, status, value))

    async def finish_call(self, attempt: Attempt, run: Callable[[], Any]) -> Any:
        """Run the tool of a begun call, recording its outcome; its exception propagates."""
        try:
            with calling(self.core.current_call(attempt)):
                value = await _settle(run())
        except Exception as err:
            await self.end_call(attempt, "error", failure(err))
            raise
        await self.end_call(attempt, "ok", value)
        return value

    async def delegate(
        self, agent: str, objective: str, child_run_id: str | None = None
    ) -> Delegation:
        """Run.delegate."""
        return await self.store.drive(self.core.delegate_op(agent, objective, child_run_id))

    async def finish_delegation(self, delegation: Delegation, status: str, result: object) -> None:
        """Run.finish_delegation."""
        await self.store.drive(self.core.finish_delegation_op(delegation, status, result))


class AsyncTailer:
    """Tailer, for asyncio: one consumer of one group on one session, at least once."""

    def __init__(
        self,
        store: AsyncStore,
        session_id: str,
        group: str,
        consumer: str,
        options: TailerOptions | None = None,
    ):
        self.store = store
        self.core = Tailer(store.core, session_id, group, consumer, options or TailerOptions())

    @property
    def rewinds(self) -> int:
        return self.core.rewinds

    async def context(self, n: int = 20) -> list[RecordedEvent]:
        """Tailer.context."""
        return await self.store.drive(self.core.context_op(n))

    async def join(self, n: int = 20) -> list[RecordedEvent]:
        """Tailer.join."""
        return await self.store.drive(self.core.join_op(n))

    async def poll(self) -> list[Delivery]:
        """Tailer.poll."""
        return await self.store.drive(self.core.poll_op())

    async def ack(self, deliveries: list[Delivery]) -> int:
        """Tailer.ack."""
        core = self.core
        ids = [d.entry_id for d in deliveries]
        return await self.store.group_ack(core.session_id, core.group, ids)

    async def stats(self) -> GroupStats:
        core = self.core
        return await self.store.group_stats(
            core.session_id, core.group, core.options.forget_idle_ms
        )

    async def dead_letters(self) -> list[dict[str, str]]:
        return await self.store.group_dead_letters(self.core.session_id, self.core.group)

    async def run(
        self,
        handler: AsyncHandler,
        stop: asyncio.Event | None = None,
        *,
        ack: bool = True,
        batches: int | None = None,
        errors: Literal["leave", "raise"] = "leave",
    ) -> None:
        """Tailer.run: deliver events to `handler` (a function or a coroutine function) until
        `stop` is set, or after `batches` batches; the same ack and error rules."""
        stop = stop or asyncio.Event()
        done = 0
        while not stop.is_set() and (batches is None or done < batches):
            batch = await self.poll()
            handled: list[Delivery] = []
            keeper = self._keep([d.entry_id for d in batch]) if batch else None
            try:
                for delivery in batch:
                    try:
                        await _settle(handler(delivery.event))
                    except Exception:
                        if errors == "raise":
                            raise
                        log.exception("handler failed on %s; left unacked", delivery.entry_id)
                        continue
                    handled.append(delivery)
            finally:
                if keeper is not None:
                    keeper.cancel()
                    await asyncio.gather(keeper, return_exceptions=True)
                if ack:
                    await self.ack(handled)
            done += 1

    def _keep(self, entry_ids: list[str]) -> asyncio.Task[None]:
        """Keep the batch's entries fresh while the handler works on them (Tailer._keeping)."""
        core = self.core
        interval = core.options.keepalive_ms or (core.options.claim_idle_ms or 15_000) // 3

        async def keep() -> None:
            while True:
                await asyncio.sleep(interval / 1000)
                try:
                    await self.store.group_keep(
                        core.session_id, core.group, core.consumer, entry_ids
                    )
                except LedgerError:
                    log.warning("could not refresh %d in-flight events", len(entry_ids))

        return asyncio.create_task(keep(), name=f"keep-{core.consumer}")


__all__ = [
    "AsyncHandler",
    "AsyncRecorder",
    "AsyncRun",
    "AsyncStore",
    "AsyncTailer",
    "TailerOptions",
    "connect",
]
