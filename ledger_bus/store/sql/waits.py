"""How the SQL store waits: for a pause between tries, for its turn to write, for a NOTIFY.

On a blocking engine the calling thread waits. Under asyncio the store runs on an async engine
(psycopg's AsyncConnection, aiosqlite) through SQLAlchemy's greenlet bridge: the store's code is
the same blocking-style code, run in a greenlet whose every database call is awaited on the event
loop. Its waits must be awaited there too, or one waiting coroutine would stop all the others:
`Bridged` awaits each of them on the loop from inside the greenlet.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any


class Waits:
    """Waiting with the thread: time.sleep, a lock shared by this process's threads."""

    def __init__(self) -> None:
        # Reentrant: a write that trims a bound stream writes again inside its turn.
        self._lock = threading.RLock()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def writing(self) -> AbstractContextManager[object]:
        """Held by a write transaction on SQLite (SqlStore._writing says why)."""
        return self._lock

    def notes(self, driver: Any, seconds: float) -> list[str]:
        """The payload of the next notification on `driver` (a psycopg connection that
        LISTENs), waiting up to `seconds`; [] when none came."""
        return [note.payload for note in driver.notifies(timeout=seconds, stop_after=1)]


class Bridged(Waits):
    """Waiting on the event loop, from inside SQLAlchemy's greenlet bridge: each wait is an
    awaitable handed to the loop (`await_`), so the loop's other coroutines run meanwhile."""

    def __init__(self) -> None:
        import asyncio  # noqa: PLC0415  (under asyncio only: the command line never waits this way)

        from greenlet import getcurrent  # noqa: PLC0415  (under asyncio only: the command line never waits this way)
        from sqlalchemy.util import await_only  # noqa: PLC0415  (under asyncio only: the command line never waits this way)

        self._await = await_only
        self._current = getcurrent
        self._asyncio = asyncio
        self._turn = asyncio.Lock()
        self._owner: object = None
        self._depth = 0

    def sleep(self, seconds: float) -> None:
        self._await(self._asyncio.sleep(seconds))

    def writing(self) -> AbstractContextManager[object]:
        return self._held()

    @contextmanager
    def _held(self) -> Iterator[object]:
        """The lock, reentrant for the greenlet (one store call) that holds it."""
        me = self._current()
        if self._owner is not me:
            self._await(self._turn.acquire())
            self._owner = me
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._turn.release()

    def notes(self, driver: Any, seconds: float) -> list[str]:
        async def next_note() -> list[str]:  # driver: psycopg's AsyncConnection
            return [note.payload async for note in driver.notifies(timeout=seconds, stop_after=1)]

        found: list[str] = self._await(next_note())
        return found
