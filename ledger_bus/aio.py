"""ledger-bus under asyncio: the store, the recorder and the tailer as coroutines.

    from ledger_bus import aio

    store = await aio.connect("redis://127.0.0.1:6379/0")
    recorder = aio.AsyncRecorder(store, "task-42", "planner")
    async with recorder.run() as run:
        found = await run.call("search", {"q": "redis streams"}, search)

This is the public path; the recorder and the tailer live in `ledger_bus.agent.aio`, the store
in `ledger_bus.store.async_store`.
"""

from ledger_bus.agent.aio import (
    AsyncHandler,
    AsyncRecorder,
    AsyncRun,
    AsyncStore,
    AsyncTailer,
    TailerOptions,
    connect,
)

__all__ = [
    "AsyncHandler",
    "AsyncRecorder",
    "AsyncRun",
    "AsyncStore",
    "AsyncTailer",
    "TailerOptions",
    "connect",
]
