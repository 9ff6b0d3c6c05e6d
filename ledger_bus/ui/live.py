"""New events for the pages that watch a session: one wait on the store per session, however
many pages are open on it, and the live stream a page reads them from.

A watcher waits on the store for the session's new events and hands each batch to every
subscriber's queue. A subscriber that joins registers first and then catches up from its own
cursor with reads of its own; what it reads there and what its queue brings overlap, and it
passes on only events past the last cursor it gave, so it misses nothing and repeats nothing.
Each event is rendered once for all of them.

What a stream costs is bounded by what it is sent, not by the session: one without a cursor
starts where the watcher is (the session's end), reading nothing of the past; one catching up
from an old cursor reads pages of about CATCH_UP_BYTES. A stream says something at least every
ping, and is asked at each row and each ping whether it may go on (its token may have been
taken out of the tokens file since it opened): when it may not, it ends there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import orjson

from ledger_bus.model.ids import CURSOR_ZERO, format_cursor, parse_cursor
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.ui import pages

WAIT_MS: Final = 10_000  # one wait of the watcher on the store
BACKLOG: Final = 1_000  # batches a subscriber may fall behind before it is let go
RENDERED: Final = 2_000  # rows kept rendered, the oldest dropped first
CATCH_UP_PAGE: Final = 500  # events a catch-up read asks for at most
CATCH_UP_BYTES: Final = 1 << 20  # and about the bytes it holds: its pages are sized by them


class Behind(Exception):
    """A subscriber fell too far behind: its stream ends, and its page reconnects from its
    last cursor."""


class Watcher:
    """The one wait on a session's new events, shared by the subscribers."""

    def __init__(self, store: AsyncStore, session_id: str):
        self.store = store
        self.session_id = session_id
        self.position: str | None = None
        self.ready = asyncio.Event()  # set once `position` is known
        self.queues: set[asyncio.Queue[list[RecordedEvent] | BaseException]] = set()
        self.rendered: OrderedDict[str, str] = OrderedDict()
        self.task: asyncio.Task[None] | None = None

    def render(self, event: RecordedEvent, make: Callable[[RecordedEvent], str]) -> str:
        html = self.rendered.get(event.cursor)
        if html is None:
            html = self.rendered[event.cursor] = make(event)
            while len(self.rendered) > RENDERED:
                self.rendered.popitem(last=False)
        return html

    async def run(self) -> None:
        try:
            # Where the shared wait starts: the session's end now. A subscriber catches up only
            # after this is known, so its own reads reach at least this far: no gap between.
            last = await self.store.tail(self.session_id, 1)
            self.position = last[0].cursor if last else None
            self.ready.set()
            while self.queues:
                found = await self.store.wait_session(self.session_id, self.position, WAIT_MS)
                if not found:
                    continue
                self.position = found[-1].cursor
                for queue in list(self.queues):
                    if queue.qsize() >= BACKLOG:
                        queue.put_nowait(Behind(f"more than {BACKLOG} batches behind"))
                        self.queues.discard(queue)
                    else:
                        queue.put_nowait(found)
        except Exception as err:  # the store failed: every subscriber ends, and reconnects
            for queue in self.queues:
                queue.put_nowait(err)
            self.queues.clear()
        finally:
            self.ready.set()  # none waits for a watcher that has stopped


class Hub:
    """The watchers of the sessions being watched."""

    def __init__(self) -> None:
        self.watchers: dict[str, Watcher] = {}

    async def events(
        self, store: AsyncStore, session_id: str, after: str | None, ping_s: float
    ) -> AsyncIterator[tuple[RecordedEvent, Watcher] | None]:
        """The session's events after `after` (None: from where the watcher is, the session's
        end), then each new one as it commits, for as long as the caller reads; None (a ping) when
        nothing came for `ping_s` seconds."""
        queue: asyncio.Queue[list[RecordedEvent] | BaseException] = asyncio.Queue()
        watcher = self._join(store, session_id, queue)
        try:
            await watcher.ready.wait()
            # Where the catch-up ends: the watcher's position now. Every batch it finds past
            # it comes on the queue (joined before this), so no read goes beyond it; and none
            # is left in flight once the last row is given, to be cut off by the page leaving
            # (a store read cancelled midway closes its connection, which the pool then opens
            # anew: a descriptor that comes and goes with the timing of clients).
            end = watcher.position
            # Written as the store writes cursors (a cursor may come unpadded), for they are
            # compared as text here.
            given = format_cursor(*parse_cursor(after)) if after else end or CURSOR_ZERO
            limit = 1  # the first page finds the events' size; the next ones are sized by it
            while end is not None and given < end:  # catch up with reads of its own
                page = await store.scan_session(session_id, given, limit)
                for event in page:
                    given = event.cursor
                    yield event, watcher
                if len(page) < limit:
                    break
                limit = _next_page(page)
            while True:
                try:
                    batch = await asyncio.wait_for(queue.get(), ping_s)
                except TimeoutError:
                    yield None
                    continue
                if isinstance(batch, BaseException):
                    raise batch
                for event in batch:
                    if event.cursor > given:
                        given = event.cursor
                        yield event, watcher
        finally:
            await self._leave(session_id, watcher, queue)

    async def rows(  # noqa: PLR0913  (the stream's session, place, filters, and its door)
        self,
        store: AsyncStore,
        session_id: str,
        after: str | None,
        shown: pages.Shown,
        rendered: Callable[[RecordedEvent], str],
        *,
        ping_s: float,
        may_go_on: Callable[[], bool],
    ) -> AsyncIterator[dict[str, str]]:
        """A page's Server-Sent Events: each event after `after` as a rendered row, or as a
        skip when the page hides it, and a comment at each ping; the id, its cursor, is where a
        reconnect resumes (the runs its tree collapses are not hidden here). Before each, it
        asks `may_go_on`: the stream ends at the first no."""
        opened: set[tuple[Any, str]] = set()
        async for item in self.events(store, session_id, after, ping_s):
            if not may_go_on():
                return
            if item is None:
                yield {"comment": "ping"}
                continue
            e, watcher = item
            if shown.unresolved and e.type == "tool_call":
                attempts = await store.open_attempts(session_id)
                opened = {(a.attempt_id, a.cursor) for a in attempts}
            visible = pages.matches(e, shown.keep, shown.search) and (
                not shown.unresolved or (e.fields.get("attempt_id"), e.cursor) in opened
            )
            # A hidden event still moves the id on: a reconnect resumes after it.
            html = watcher.render(e, rendered) if visible else "-"
            yield {"id": e.cursor, "event": "row" if visible else "skip", "data": html}

    def _join(
        self,
        store: AsyncStore,
        session_id: str,
        queue: asyncio.Queue[list[RecordedEvent] | BaseException],
    ) -> Watcher:
        """The session's watcher, with `queue` among its subscribers; started if none runs."""
        # No await until registered: subscribers arriving together find one watcher.
        watcher = self.watchers.get(session_id)
        if watcher is None or watcher.task is None or watcher.task.done():
            watcher = self.watchers[session_id] = Watcher(store, session_id)
            watcher.queues.add(queue)
            watcher.task = asyncio.ensure_future(watcher.run())
        else:
            watcher.queues.add(queue)
        return watcher

    async def _leave(
        self,
        session_id: str,
        watcher: Watcher,
        queue: asyncio.Queue[list[RecordedEvent] | BaseException],
    ) -> None:
        """`queue` unsubscribed; the watcher stopped when it was the last."""
        watcher.queues.discard(queue)
        if not watcher.queues:
            # Out of the map first: one who joins from here on starts a watcher of its own.
            if self.watchers.get(session_id) is watcher:
                del self.watchers[session_id]
            if watcher.task is not None:
                watcher.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watcher.task


def _next_page(page: list[RecordedEvent]) -> int:
    """How many events the next catch-up read asks for: as many of the size this page's were as
    make about CATCH_UP_BYTES, one at least."""
    size = sum(len(orjson.dumps(e.fields, default=str)) for e in page) // len(page)
    return max(1, min(CATCH_UP_PAGE, CATCH_UP_BYTES // max(size, 1)))
