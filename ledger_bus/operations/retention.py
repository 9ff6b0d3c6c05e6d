"""Retention for the adapters: a thread or session idle past a time is deleted, or archived,
whole, through the life cycle (docs/lifecycle.md).

The Agents SDK's RedisSession gives each key a Redis TTL; the keys of one session expire one by
one, so a session can be cut in half. Here a session goes whole or not at all: deleted with
its streams, open attempts and groups at once (spec 3.9), or moved to the archive and its
reads sent there. A session with an open attempt stays, for the reconciler and the operator.

An adapter given a `Retention` sweeps its own sessions (a LangGraph saver the threads, a
LedgerSession the sessions of the Agents SDK: `owns` tells them by their streams) at most once
per `every` seconds, off the path of the caller: on a thread of its own for a blocking store,
a task for an asyncio one. `sweep()` runs one now and says what it did.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ledger_bus.model.errors import InvalidInput, LedgerError, NotFound, Refused
from ledger_bus.model.ids import cursor_ms
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.operations.archiving import archive_session
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.store.base import EventStore
from ledger_bus.store.steps import Op

Owns = Callable[[Sequence[str]], bool]  # from a session's stream names: whether it is ours


@dataclass(frozen=True)
class Retention:
    """Delete (or, with `archive_to`, archive) the adapter's sessions with no append for
    `idle_after` seconds; look at most every `every` seconds."""

    idle_after: float
    archive_to: EventStore | None = None
    every: float = 600.0

    def __post_init__(self) -> None:
        if not self.idle_after > 0:
            raise InvalidInput(f"retention idle_after must be above 0 s, got {self.idle_after}")
        if not self.every >= 0:
            raise InvalidInput(f"retention every must be 0 s or more, got {self.every}")


def idle_op(store: EventStore, idle_after: float, owns: Owns) -> Op[list[tuple[str, int]]]:
    """The sessions `owns` takes for its own with no append for `idle_after` seconds, the
    quietest first, with their event counts."""
    now = yield from store.now_ms_op()
    quiet_since = now - int(idle_after * 1000)
    found: list[tuple[str, int]] = []
    for session, last_ms in reversed((yield from store.sessions_op())):
        if last_ms >= quiet_since:
            break
        info = yield from store.session_info_op(session)
        # The index of last activity may lag a second behind (docs/lifecycle.md): the
        # session's own last event decides.
        last = cursor_ms(info.last_cursor) if info.last_cursor else 0
        if last < quiet_since and owns([s.name for s in info.streams]):
            found.append((session, info.events))
    return found


def expire_op(store: EventStore, idle_after: float, owns: Owns) -> Op[list[JSONObject]]:
    """Delete each idle session of ours that has no open attempt; say what became of each."""
    done: list[JSONObject] = []
    for session, events in (yield from idle_op(store, idle_after, owns)):
        open_now = (yield from store.open_attempts_of_op([session]))[session]
        if open_now:
            done.append({"session": session, "skipped": f"{len(open_now)} open attempt(s)"})
            continue
        yield from store.delete_session_op(session)
        done.append({"session": session, "deleted": events})
    return done


def archive_idle_owned(
    store: EventStore, archive_to: EventStore, idle_after: float, owns: Owns
) -> list[JSONObject]:
    """Archive each idle session of ours (archiving.py refuses one with an open attempt)."""
    done: list[JSONObject] = []
    for session, _ in store.run_op(idle_op(store, idle_after, owns)):
        try:
            done.append(archive_session(store, archive_to, session).to_dict())
        except (Refused, NotFound) as err:
            done.append({"session": session, "skipped": str(err)})
    return done


class Sweeper:
    """An adapter's retention: `kick()` on each write starts a sweep when one is due."""

    def __init__(
        self,
        retention: Retention,
        store: EventStore,
        owns: Owns,
        astore: AsyncStore | None = None,
    ):
        if retention.archive_to is not None and astore is not None and astore.native:
            raise InvalidInput(
                "retention with archive_to runs on a blocking store: give the adapter an"
                " EventStore, or run `ledger-bus archive --idle-after` from a timer"
            )
        self.retention, self.store, self.owns, self.astore = retention, store, owns, astore
        self._next = time.monotonic() + retention.every
        self._running = threading.Lock()
        self._task: asyncio.Task[Any] | None = None  # held: a task nobody holds may be lost
        self.last: list[JSONObject] = []  # what the last sweep did
        self.failed: LedgerError | None = None  # why the last sweep stopped, if it did

    def sweep(self) -> list[dict[str, Any]]:
        """Sweep now, blocking (on a blocking store)."""
        r = self.retention
        if r.archive_to is not None:
            return archive_idle_owned(self.store, r.archive_to, r.idle_after, self.owns)
        return self.store.run_op(expire_op(self.store, r.idle_after, self.owns))

    async def asweep(self) -> list[JSONObject]:
        """Sweep now, on the adapter's asyncio store (or a worker thread)."""
        r = self.retention
        if self.astore is not None and self.astore.native:
            found: list[JSONObject] = await self.astore.drive(
                expire_op(self.store, r.idle_after, self.owns)
            )
            return found
        return await asyncio.to_thread(self.sweep)

    def kick(self) -> None:
        """Start a sweep off the caller's path, when one is due and none is running."""
        now = time.monotonic()
        if now < self._next or not self._running.acquire(blocking=False):
            return
        self._next = now + self.retention.every
        if self.astore is not None and self.astore.native:
            self._task = asyncio.get_running_loop().create_task(self._swept(self.asweep()))
        else:
            threading.Thread(target=self._swept_sync, name="ledger-retention", daemon=True).start()

    def _swept_sync(self) -> None:
        try:
            self.last, self.failed = self.sweep(), None
        except LedgerError as err:  # the next sweep tries again; the adapter's writes go on
            self.failed = err
        finally:
            self._running.release()

    async def _swept(self, sweep: Any) -> None:
        try:
            self.last, self.failed = await sweep, None
        except LedgerError as err:
            self.failed = err
        finally:
            self._running.release()
