"""A stream read once and then kept up to date: what an adapter reads on every call (a thread's
checkpoints, a session's items, a run's tool calls) costs one round trip for what is new.

The view remembers the version and cursor of the last event it read. Each refresh reads from
that event on: when it is still there, unchanged, only the events after it are new; when it is
gone or another event stands at its version (the stream was deleted, trimmed or rewritten, in
this process or another), the view starts over from the beginning. Cursors are unique in a
session, so an event read again under the same version and cursor is the same event.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ledger_bus.model.ids import StreamId
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.records import AppendResult, RecordedEvent
from ledger_bus.store.base import REMEMBERED, EventStore
from ledger_bus.store.steps import Op

S = TypeVar("S")


def size_of(value: Any) -> int:
    """About how many bytes `value` takes in the process, with what it holds (JSON-like values:
    dicts, lists, strings, numbers): what a view keeps of an event it folded, decoded. Walked
    with a stack of its own, not by recursion: every event an adapter writes or reads is
    weighed, and the calls were a tenth of a LangGraph turn's time in the saver."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        total += sys.getsizeof(item)
        kind = type(item)
        if kind is dict:
            stack.extend(item)
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
    return total


@dataclass
class StreamView(Generic[S]):
    """`state`, folded from a stream's events by `apply`, as of the last refresh."""

    stream: StreamId
    make: Callable[[], S]
    apply: Callable[[S, RecordedEvent], None]
    weigh: Callable[[RecordedEvent], int] = lambda event: 0
    version: int = 0
    cursor: str | None = None
    state: S = field(init=False)
    weight: int = 0  # about how many bytes `state` holds, by `weigh` of what it folded
    # told each change of `weight`, while the view is one of a Views' (which keeps their sum)
    on_weight: Callable[[int], None] | None = field(default=None, repr=False)
    flying: int = 0  # appends of this process to the stream sent and not yet answered
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)
    # What this process appended, answered before an append of its own sent earlier that lands
    # before it: applied once that one is (by its first version).
    _ahead: dict[int, tuple[AppendResult, list[JSONObject]]] = field(
        init=False, repr=False, default_factory=dict
    )

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
            fresh, weight = self.make(), 0
            last: tuple[int, str | None] = (0, None)
            for event in (yield from store.read_stream_op(self.stream, 0, resolve_artifacts=True)):
                self.apply(fresh, event)
                weight += self.weigh(event)
                last = (event.version, event.cursor)
            with self._lock:
                self.state = fresh
                self._weighs(weight - self.weight)
                self.version, self.cursor = last
                self._ahead.clear()  # what it held may be of the stream as it was
                return fresh
        with self._lock:
            added = 0
            for event in found:
                if event.version > self.version:
                    self.apply(self.state, event)
                    added += self.weigh(event)
                    self.version, self.cursor = event.version, event.cursor
            self._weighs(added)
            self._apply_ahead()
            return self.state

    def sending(self) -> None:
        """This process sends an append to the stream (`answered` when it has its reply)."""
        with self._lock:
            self.flying += 1

    def answered(self) -> None:
        with self._lock:
            self.flying -= 1

    def wrote(self, result: AppendResult, events: list[JSONObject]) -> None:
        """Apply what this process has just appended (`events`, with their event ids), when it
        follows what the view holds, nothing between: the next refresh need not read it. An
        append answered before one this process sent earlier and that landed before it (threads
        race) waits for that one."""
        with self._lock:
            if result.deduplicated or result.first_version <= self.version:
                return
            self._ahead[result.first_version] = (result, events)
            self._apply_ahead()

    def _apply_ahead(self) -> None:
        while (nxt := self._ahead.pop(self.version + 1, None)) is not None:
            result, events = nxt
            for n, fields in enumerate(events):
                at = RecordedEvent(result.stream, result.first_version + n, result.cursor, fields)
                self.apply(self.state, at)
                self._weighs(self.weigh(at))
            self.version, self.cursor = result.last_version, result.cursor
        for first in [first for first in self._ahead if first <= self.version]:
            del self._ahead[first]  # read meanwhile

    def _weighs(self, change: int) -> None:
        """`weight` changes by `change` (the view's lock held)."""
        self.weight += change
        told = self.on_weight
        if told is not None and change:
            told(change)

    def forget(self) -> None:
        with self._lock:
            self.version, self.cursor, self.state = 0, None, self.make()
            self._weighs(-self.weight)
            self._ahead.clear()


class Views(Generic[S]):
    """The views a process keeps, one per stream. With `max_bytes`, the views used least
    recently are forgotten while the views together weigh more (a forgotten stream is read
    again when it is next used); past REMEMBERED views, the least recent go too."""

    def __init__(
        self,
        make: Callable[[], S],
        apply: Callable[[S, RecordedEvent], None],
        weigh: Callable[[RecordedEvent], int] | None = None,
        max_bytes: int | None = None,
    ):
        self._make, self._apply = make, apply
        self._weigh = weigh or (lambda event: 0)
        self.max_bytes = max_bytes
        self._views: OrderedDict[StreamId, StreamView[S]] = OrderedDict()
        self._lock = threading.Lock()
        # The views' weights summed, kept as they change (summing them at each use cost a
        # process holding a thousand threads a thousand additions a call).
        self._total = 0
        self._counting = threading.Lock()

    def of(self, stream: StreamId) -> StreamView[S]:
        with self._lock:
            view = self._views.get(stream)
            if view is None:
                view = StreamView(stream, self._make, self._apply, self._weigh)
                view.on_weight = self._weighed
                self._views[stream] = view
            self._views.move_to_end(stream)
            while len(self._views) > REMEMBERED:
                self._drop(next(iter(self._views)))
            if self.max_bytes is not None and self._total > self.max_bytes:
                for other in list(self._views):
                    if self._total <= self.max_bytes or other == stream:
                        break
                    self._drop(other)
            return view

    def _weighed(self, change: int) -> None:
        with self._counting:
            self._total += change

    def _drop(self, stream: StreamId) -> None:
        """Forget the view of `stream` (the lock held): its weight no longer counts, whatever a
        refresh of it still running folds."""
        view = self._views.pop(stream)
        with view._lock:
            view.on_weight = None
            self._weighed(-view.weight)

    def held(self) -> int:
        """About how many bytes the views hold."""
        with self._counting:
            return self._total

    def forget_session(self, session_id: str) -> None:
        with self._lock:
            for stream in [s for s in self._views if s.session_id == session_id]:
                self._drop(stream)
