"""A session's events read for one answer of the MCP server, bounded in bytes as well as in
events: a tail of twenty events of a megabyte each would hold twenty megabytes in the server
for each caller, and give an agent's context more than it can take.

Events are read with their artifacts left as references (a field above 64 KiB is kept apart,
and its reference says its size), so what an event weighs is known before its large fields are
read; those of the events kept are read then. The first event is always kept, whatever it
weighs (the ledger's own limits bound it); after it, no event that would take the answer past
its budget. The answer says so, and where to read on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import orjson

from ledger_bus.agent.filters import EventFilter
from ledger_bus.model.artifacts import ArtifactRef, refs_in, resolved
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import PAGE, EventStore

BUDGET: Final = 1 << 20  # bytes of events one tail or one wait gives, about (one event at least)
FIRST_PAGE: Final = 32  # events a read of the newest asks for first; then four times more


def weight(event: RecordedEvent) -> int:
    """About the bytes of an event as JSON, its artifacts by their size (not read)."""
    refs = refs_in(event.fields)
    return len(orjson.dumps(event.fields, default=_unread)) + sum(ref.size for ref in refs)


def _unread(value: object) -> object:
    if isinstance(value, ArtifactRef):
        return None  # counted by its size instead
    raise TypeError(type(value).__name__)


def with_artifacts(store: EventStore, events: list[RecordedEvent]) -> list[RecordedEvent]:
    """The events with their artifacts read back in place of their references."""
    return [_whole(store, event) if refs_in(event.fields) else event for event in events]


def _whole(store: EventStore, event: RecordedEvent) -> RecordedEvent:
    session = event.stream.session_id

    def fetch(ref: ArtifactRef) -> bytes:
        return store.artifact(session, ref.sha256)

    return RecordedEvent(event.stream, event.version, event.cursor, resolved(event.fields, fetch))


def newest(  # noqa: PLR0913  (the session, where, how many, which, and the budget)
    store: EventStore,
    session: str,
    n: int,
    keep: EventFilter,
    before: str | None,
    budget: int = BUDGET,
) -> tuple[list[RecordedEvent], bool]:
    """The last `n` events `keep` keeps before the cursor `before` (None: the newest), oldest
    first, as many of them as `budget` holds; and whether it held fewer than were there."""
    kept: list[RecordedEvent] = []  # newest first
    total, size = 0, min(PAGE, max(2 * n, FIRST_PAGE))
    while len(kept) < n:
        page = store.tail(session, size, before, resolve_artifacts=False)
        for event in reversed(page):
            if not keep.matches(event):
                continue
            weighs = weight(event)
            if kept and total + weighs > budget:
                return with_artifacts(store, kept[::-1]), True
            kept.append(event)
            total += weighs
            if len(kept) == n:
                break
        if len(page) < size:
            break
        before, size = page[0].cursor, min(PAGE, size * 4)
    return with_artifacts(store, kept[::-1]), False


def following(
    store: EventStore,
    session: str,
    first: RecordedEvent,
    shown: Callable[[RecordedEvent], bool],
    budget: int = BUDGET,
) -> tuple[list[RecordedEvent], bool]:
    """`first` and the events committed after it, in commit order, as many as `budget` holds
    of those `shown` keeps (the others weigh nothing, are given as read, and PAGE of events
    in all end a read); and whether some that were there were left for the next read."""
    found, total, size = [first], weight(first), FIRST_PAGE
    while len(found) < PAGE:
        size = min(size, PAGE - len(found))
        page = store.scan_session(session, found[-1].cursor, size, resolve_artifacts=False)
        for event in page:
            weighs = weight(event) if shown(event) else 0
            if total + weighs > budget:
                return _shown_whole(store, found, shown), True
            found.append(event)
            total += weighs
        if len(page) < size:
            return _shown_whole(store, found, shown), False
        size = min(PAGE, size * 4)
    return _shown_whole(store, found, shown), True


def _shown_whole(
    store: EventStore, found: list[RecordedEvent], shown: Callable[[RecordedEvent], bool]
) -> list[RecordedEvent]:
    """`found` (its first read whole already), the rest of those shown with their artifacts."""
    rest = [with_artifacts(store, [e])[0] if shown(e) else e for e in found[1:]]
    return [found[0], *rest]
