"""A stream read once and then kept up to date: what an adapter reads on every call (a thread's
checkpoints, a session's items, a run's tool calls) costs one round trip for what is new.

The view remembers the version and cursor of the last event it read. Each refresh reads from
that event on: when it is still there, unchanged, only the events after it are new; when it is
gone or another event stands at its version (the stream was deleted, trimmed or rewritten, in
this process or another), the view starts over from the beginning. Cursors are unique in a
session, so an event read again under the same version and cursor is the same event.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ledger_bus.model.ids import StreamId
from ledger_bus.model.records import AppendResult, RecordedEvent
from ledger_bus.store.base import REMEMBERED, EventStore
from ledger_bus.store.ops import Op

S = TypeVar("S")


@dataclass
class StreamView(Generic[S]):
    """`state`, folded from a stream's events by `apply`, as of the last refresh."""

    stream: StreamId
    make: Callable[[], S]
    apply: Callable[[S, RecordedEvent], None]
    version: int = 0
    cursor: str | None = None
    state: S = field(init=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.state = self.make()

    def refresh_op(self, store: EventStore) -> Op[S]:
        """The state with every event committed to the stream so far.

        Threads (a ToolNode's parallel calls) and coroutines may refresh one view at once: the
        reads happen unlocked, and what they found is applied under a lock held for no I/O, each
        event once, in version order."""
        version, cursor = self.version, self.cursor
        found = yield from store.read_stream_op(
            self.stream, max(0, version - 1), resolve_artifacts=True
        )
        if version and (not found or found[0].version != version or found[0].cursor != cursor):
            # Deleted, trimmed or rewritten since: read it all into a state of its own.
            fresh = self.make()
            last: tuple[int, str | None] = (0, None)
            for event in (yield from store.read_stream_op(self.stream, 0, resolve_artifacts=True)):
                self.apply(fresh, event)
                last = (event.version, event.cursor)
            with self._lock:
                self.state = fresh
                self.version, self.cursor = last
                return fresh
        with self._lock:
            for event in found:
                if event.version > self.version:
                    self.apply(self.state, event)
                    self.version, self.cursor = event.version, event.cursor
            return self.state

    def wrote(self, result: AppendResult, events: list[dict[str, Any]]) -> None:
        """Apply what this process has just appended (`events`, with their event ids), when it
        follows what the view holds, nothing between: the next refresh need not read it."""
        with self._lock:
            if result.deduplicated or result.first_version != self.version + 1:
                return
            for n, fields in enumerate(events):
                at = RecordedEvent(result.stream, result.first_version + n, result.cursor, fields)
                self.apply(self.state, at)
            self.version, self.cursor = result.last_version, result.cursor

    def forget(self) -> None:
        with self._lock:
            self.version, self.cursor, self.state = 0, None, self.make()


class Views(Generic[S]):
    """The views a process keeps, one per stream, forgotten together past REMEMBERED."""

    def __init__(self, make: Callable[[], S], apply: Callable[[S, RecordedEvent], None]):
        self._make, self._apply = make, apply
        self._views: dict[StreamId, StreamView[S]] = {}

    def of(self, stream: StreamId) -> StreamView[S]:
        view = self._views.get(stream)
        if view is None:
            if len(self._views) >= REMEMBERED:
                self._views.clear()
            view = self._views[stream] = StreamView(stream, self._make, self._apply)
        return view

    def forget_session(self, session_id: str) -> None:
        for stream in [s for s in self._views if s.session_id == session_id]:
            del self._views[stream]
