"""Picking events out of a session: by type, agent, stream, run, and a window of time or cursors.

What the store can narrow itself it does: the window is a cursor range of the session log, and a
tail filtered by one stream reads that stream's last versions. The rest is tested event by event
as pages arrive, so a filtered scan streams, and a filtered tail reads backwards only until it
has its N events (or leaves the window).
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from ledger_bus.model.durations import duration_seconds
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.ids import (
    CURSOR_PATTERN,
    StreamId,
    format_cursor,
    parse_cursor,
    previous_cursor,
)
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import PAGE, EventStore

_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")
# The kinds of mutation that are a framework's native record, kept for its own resume.
NATIVE_PREFIXES: Final = ("langgraph.", "agents.", "pi.", "agentgo.", "adk.", "a2a.")
NATIVE_KINDS: Final = frozenset({"native.checkpoint"})


def is_native(event: RecordedEvent) -> bool:
    """Whether an event is a framework's native record (NATIVE_PREFIXES, NATIVE_KINDS)."""
    if event.type != "mutation":
        return False
    kind = str(event.get("kind", ""))
    return kind in NATIVE_KINDS or kind.startswith(NATIVE_PREFIXES)


def parse_bound(text: str, end: bool = False, now_ms: int | None = None) -> str:
    """A cursor from a cursor, an ISO 8601 time (`2026-11-30T12:00:00Z`, with an offset, or
    naive as UTC), a date, or a duration ago (`1h`, `30m`, `7d`, `90s`; now: `now_ms`, else the
    clock). `end`: the bound closes a window, so a time means its last cursor and a date the end
    of that day."""
    if CURSOR_PATTERN.fullmatch(text):
        ms, seq = parse_cursor(text)
        return format_cursor(ms, seq)
    ago = duration_seconds(text)
    if ago is not None:
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        return format_cursor(max(0, now - round(ago * 1000)), 999_999 if end else 0)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"not a cursor, ISO 8601 time, date or duration ago: {text!r} (e.g."
            " 2026-11-30T12:00:00Z, or 1h)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    ms = int(moment.timestamp() * 1000)
    if end and _DATE.fullmatch(text):
        ms += 86_400_000 - 1
    return format_cursor(ms, 999_999 if end else 0)


@dataclass(frozen=True)
class EventFilter:
    """Which events to keep; an empty collection keeps every value. `since` and `until` are
    cursors, both inclusive."""

    types: Collection[str] = ()
    agents: Collection[str] = ()
    streams: Collection[str] = ()
    runs: Collection[str] = ()
    since: str | None = None
    until: str | None = None
    # Whether the frameworks' native records (a LangGraph checkpoint, an Agents SDK item, a
    # run's snapshot) are kept: their events say what they hold, in the ledger's own terms.
    native: bool = True

    def __post_init__(self) -> None:
        for bound in (self.since, self.until):
            if bound is not None:
                parse_cursor(bound)

    def matches(self, event: RecordedEvent) -> bool:
        return (
            (not self.types or event.type in self.types)
            and (not self.agents or event.agent in self.agents)
            and (not self.streams or event.stream.name in self.streams)
            and (not self.runs or event.run_id in self.runs)
            and (self.since is None or event.cursor >= self.since)
            and (self.until is None or event.cursor <= self.until)
            and (self.native or not is_native(event))
        )

    @property
    def everything(self) -> bool:
        return not (self.types or self.agents or self.streams or self.runs) and not (
            self.since or self.until or not self.native
        )


def select(
    store: EventStore, session_id: str, keep: EventFilter, after: str | None = None
) -> Iterator[RecordedEvent]:
    """The session's events that `keep` keeps, in commit order, after the cursor `after`."""
    if keep.since is not None:
        start = previous_cursor(keep.since)
        after = start if after is None else max(after, start)
    for event in store.iter_session(session_id, after):
        if keep.until is not None and event.cursor > keep.until:
            return
        if keep.matches(event):
            yield event


def select_tail(
    store: EventStore, session_id: str, n: int, keep: EventFilter
) -> list[RecordedEvent]:
    """The last `n` events that `keep` keeps, oldest first."""
    if not n:
        return []
    if keep.everything:
        return store.tail(session_id, n)
    only = _one_stream(keep)
    if only is not None:  # the stream's own last versions: O(n) however long the session
        ref = StreamId(session_id, only)
        last = store.stream_version(ref)
        return store.read_stream(ref, max(0, last - n), n)
    found: list[RecordedEvent] = []
    before = None if keep.until is None else _after(keep.until)
    # Pages that start near n and grow: most tails keep most of what they read, and a read
    # costs what it reads (a tail of 20 read as one page of PAGE cost 20 times its answer); a
    # filter that keeps little reaches whole pages after a few.
    size = min(PAGE, max(2 * n, 32))
    while len(found) < n:
        page = store.tail(session_id, size, before)
        size = min(PAGE, size * 4)
        if not page:
            break
        for event in reversed(page):
            if keep.since is not None and event.cursor < keep.since:
                return found[::-1]
            if keep.matches(event):
                found.append(event)
                if len(found) == n:
                    break
        before = page[0].cursor
    return found[::-1]


def _one_stream(keep: EventFilter) -> str | None:
    """The stream, when the filter is exactly one stream and nothing else."""
    if len(keep.streams) != 1 or keep.types or keep.agents or keep.runs or not keep.native:
        return None
    if keep.since or keep.until:
        return None
    return next(iter(keep.streams))


def _after(cursor: str) -> str:
    """The smallest cursor above `cursor`: reading before it includes `cursor` itself."""
    ms, seq = parse_cursor(cursor)
    return format_cursor(ms, seq + 1) if seq < 999_999 else format_cursor(ms + 1, 0)
