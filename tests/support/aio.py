"""The contract suite through the asyncio store: AsyncStore's own methods, each awaited on an event
loop of its own (on a `redis.asyncio` client, or a SQL store's async engine through SQLAlchemy's
greenlet bridge), called as the blocking store's are."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ledger_bus.store.async_store import AsyncStore
from ledger_bus.store.async_urls import open_async
from ledger_bus.store.base import EventStore
from ledger_bus.store.steps import Op


class Awaited:
    """An AsyncStore whose coroutines are called as plain methods: each runs on the loop and is
    awaited there. What AsyncStore does not have (a backend's own attributes, `keys`, `client`)
    is the core's; its operations run through AsyncStore.drive."""

    def __init__(self, store: AsyncStore, wait: Callable[[Any], Any]):
        self.astore = store
        self._wait = wait

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.astore, name, None)
        if found is None:
            return getattr(self.astore.core, name)
        if inspect.iscoroutinefunction(found):
            return lambda *args, **kwargs: self._wait(found(*args, **kwargs))
        if inspect.isasyncgenfunction(found):
            return lambda *args, **kwargs: iter(self._wait(_all(found(*args, **kwargs))))
        return found

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("astore", "_wait"):
            object.__setattr__(self, name, value)
        else:  # a setting the store reads (`limits`): the core's, as AsyncStore reads it
            setattr(self.astore.core, name, value)

    def run_op(self, op: Op[Any]) -> Any:
        return self._wait(self.astore.drive(op))

    def close(self) -> None:
        """The loop's owner closes the store."""

    def __enter__(self) -> Awaited:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# It stands for its core, a store of ours with every capability: a tailer or a recorder asking it
# for one (ledger_bus.store.base.need) finds it.
EventStore.register(Awaited)


async def _all(items: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in items]


@contextmanager
def driven_async(url: str, **options: Any) -> Iterator[EventStore]:
    """`aio.connect(url)`, its methods called as the blocking store's. The loop runs on a thread
    of its own, so that callers on several threads (a tailer's keepalive) share it as
    coroutines would."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()

    def wait(coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

    astore: AsyncStore = wait(open_async(url, **options))
    assert astore.native, "Redis and SQL run on the event loop, not on threads"
    try:
        yield Awaited(astore, wait)  # type: ignore[misc]
    finally:
        wait(astore.aclose())
        loop.call_soon_threadsafe(loop.stop)
        runner.join()
        loop.close()
