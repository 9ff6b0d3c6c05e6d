"""The contract suite through the asyncio driver: a store whose every method runs its operation
as ledger_bus.aio does (on a `redis.asyncio` client, or a SQL store's async engine through
SQLAlchemy's greenlet bridge), awaited on an event loop of its own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ledger_bus.store.aio import AsyncStore, open_async
from ledger_bus.store.base import EventStore
from ledger_bus.store.ops import Op


@contextmanager
def driven_async(url: str, **options: Any) -> Iterator[EventStore]:
    """The core of `aio.connect(url)`, its blocking methods each awaiting its operation on the
    asyncio client, as AsyncStore's coroutines do. The loop runs on a thread of its own, so that
    callers on several threads (a tailer's keepalive) share it as coroutines would."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()

    def wait(coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

    astore: AsyncStore = wait(open_async(url, **options))
    assert astore.native, "Redis and SQL run on the event loop, not on threads"
    core = astore.core

    def drive(op: Op[Any]) -> Any:
        return wait(astore.drive(op))

    core.run_op = drive  # type: ignore[method-assign]
    core.close = lambda: None  # type: ignore[method-assign]
    try:
        yield core
    finally:
        wait(astore.aclose())
        loop.call_soon_threadsafe(loop.stop)
        runner.join()
        loop.close()
