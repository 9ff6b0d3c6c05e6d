"""A stream read once and then kept up to date: what an adapter reads on every call (a thread's
checkpoints, a session's items, a run's tool calls) costs one round trip for what is new.

The view remembers the version and cursor of the last event it read. Each refresh reads from
that event on: when it is still there, unchanged, only the events after it are new; when it is
gone or another event stands at its version (the stream was deleted, trimmed or rewritten, in
this process or another), the view starts over from the beginning. Cursors are unique in a
session, so an event read again under the same version and cursor is the same event.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ledger_bus.ids import StreamId
from ledger_bus.records import RecordedEvent
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

    def __post_init__(self) -> None:
        self.state = self.make()

    def refresh_op(self, store: EventStore) -> Op[S]:
        """The state with every event committed to the stream so far."""
        after = max(0, self.version - 1)
        found = yield from store.read_stream_op(self.stream, after, resolve_artifacts=True)
        if self.version:
            if not found or found[0].version != self.version or found[0].cursor != self.cursor:
                self.version, self.cursor, self.state = 0, None, self.make()
                found = yield from store.read_stream_op(self.stream, 0, resolve_artifacts=True)
            else:
                found = found[1:]
        for event in found:
            self.apply(self.state, event)
            self.version, self.cursor = event.version, event.cursor
        return self.state

    def forget(self) -> None:
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
