"""What the web view shows, read from the store a page at a time: never the whole session.

Every function here reads (the view writes nothing to the ledger) through the asyncio store, and
returns plain data for the templates. A timeline page is the session's events before a cursor,
newest page first, read with `tail` (O(page) whatever the session's length); with a filter or a
search, older pages are read until the page is full or a bounded number of events has been
looked at, and the page says where to go on from.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Final

from ledger_bus.filters import EventFilter
from ledger_bus.model.ids import cursor_ms
from ledger_bus.model.jsontext import dumps
from ledger_bus.model.records import OpenAttempt, RecordedEvent
from ledger_bus.store.aio import AsyncStore

PAGE: Final = 100  # events a timeline page shows
SCAN_BUDGET: Final = 5_000  # events a filtered page looks at, at most, before it stops
SESSIONS_PAGE: Final = 50
SHOWN_CHARS: Final = 2_000  # of an event's gist on a timeline row; the event's page has it whole


@dataclass(frozen=True)
class SessionRow:
    session_id: str
    last_ms: int
    events: int
    streams: int
    open_attempts: int
    flagged: int
    dispatches: int = 0  # in flight on its dispatch board (live or stale)


@dataclass(frozen=True)
class SessionsPage:
    rows: list[SessionRow]
    total: int  # sessions matching the filter
    offset: int
    limit: int

    @property
    def next_offset(self) -> int | None:
        return self.offset + self.limit if self.offset + self.limit < self.total else None

    @property
    def previous_offset(self) -> int | None:
        return max(0, self.offset - self.limit) if self.offset else None


async def sessions_page(
    store: AsyncStore, offset: int = 0, limit: int = SESSIONS_PAGE, match: str = ""
) -> SessionsPage:
    """Sessions by last activity, most recent first; `match` keeps those whose id contains it.
    What each row counts is read for the rows shown only."""
    found = [(s, ms) for s, ms in await store.sessions() if match in s]
    shown = found[offset : offset + limit]
    opened = await store.open_attempts_of([s for s, _ in shown]) if shown else {}
    infos = await asyncio.gather(*(store.session_info(s) for s, _ in shown))  # together
    rows = []
    for (session_id, last_ms), info in zip(shown, infos, strict=True):
        attempts = opened.get(session_id, [])
        rows.append(
            SessionRow(
                session_id,
                last_ms,
                info.events,
                len(info.streams),
                len(attempts),
                sum(1 for a in attempts if a.flagged_cursor),
            )
        )
    return SessionsPage(rows, len(found), offset, limit)


@dataclass
class Row:
    """One line of the timeline: an event, and for a tool_call its result when the page holds
    it (then the result has no line of its own)."""

    event: RecordedEvent
    result: RecordedEvent | None = None
    badge: str | None = None  # "unresolved" or "flagged", for a call still open

    @property
    def duration_ms(self) -> int | None:
        if self.result is None:
            return None
        return cursor_ms(self.result.cursor) - cursor_ms(self.event.cursor)

    @property
    def tokens(self) -> str | None:
        """A model call's token counts, from its result's `usage` (`input_tokens` and
        `output_tokens`, or OpenAI's `prompt_tokens` and `completion_tokens`)."""
        usage = self.result.fields.get("result") if self.result is not None else None
        usage = usage.get("usage") if isinstance(usage, dict) else None
        if not isinstance(usage, dict):
            return None
        read = usage.get("input_tokens", usage.get("prompt_tokens"))
        wrote = usage.get("output_tokens", usage.get("completion_tokens"))
        if not isinstance(read, int) or not isinstance(wrote, int):
            return None
        return f"{read:,} in · {wrote:,} out tokens"

    @property
    def attempt(self) -> str | None:
        attempt = self.event.fields.get("attempt_id")
        return str(attempt) if attempt is not None else None

    def shown(self) -> str:
        """The gist as the timeline shows it: at most SHOWN_CHARS characters. The browser lays
        out a long unbroken value in a table cell in time that grows faster than its length
        (a 1 MB argument took over a minute); the whole is on the event's own page."""
        text = self.summary()
        if len(text) <= SHOWN_CHARS:
            return text
        return f"{text[:SHOWN_CHARS]}… ({len(text) - SHOWN_CHARS:,} more characters)"

    def summary(self) -> str:
        """The event's gist, as text (the template escapes it)."""
        f = self.event.fields
        kind = self.event.type
        if kind == "message":
            return str(f.get("body", ""))
        if kind == "tool_call":
            return f"{f.get('tool')}({dumps(f.get('args', {}))})"
        if kind == "tool_result":
            return f"{f.get('tool')} -> {f.get('status')}: {dumps(f.get('result'))}"
        rest = {k: v for k, v in f.items() if k not in _COMMON}
        return f"{f.get('kind')} {dumps(rest)}" if rest else str(f.get("kind"))

    def to_dict(self) -> dict[str, Any]:
        out = self.event.to_dict()
        if self.result is not None:
            out["paired_result"] = self.result.to_dict()
            out["duration_ms"] = self.duration_ms
            if self.tokens is not None:
                out["tokens"] = self.tokens
        if self.badge:
            out["badge"] = self.badge
        return out


_COMMON: Final = frozenset(
    {"type", "agent", "event_id", "run_id", "step_id", "attempt_id", "parents", "kind"}
)


@dataclass
class Timeline:
    """A page of the session's events, oldest first."""

    rows: list[Row]
    older: str | None  # the cursor to read on from (`before=`), when older events remain
    newest: str | None  # the newest cursor the page covers: the live stream goes on after it
    looked_at: int  # events read to make the page
    complete: bool  # False: the scan budget ran out before the page was full
    open_attempts: list[OpenAttempt] = field(default_factory=list)


def matches(event: RecordedEvent, keep: EventFilter, search: str) -> bool:
    """Whether the event passes the page's filters and its search (any text of the event, as
    JSON, containing the search, case-insensitively)."""
    if not keep.matches(event):
        return False
    return not search or search.casefold() in dumps(event.to_dict()).casefold()


async def timeline(
    store: AsyncStore,
    session_id: str,
    before: str | None = None,
    keep: EventFilter | None = None,
    search: str = "",
    size: int = PAGE,
    unresolved_only: bool = False,
    hidden_runs: frozenset[str] = frozenset(),
) -> Timeline:
    """The `size` newest events before `before` that pass `keep` and `search`, and are not of
    `hidden_runs` (those below the depth the tree is collapsed to)."""
    keep = keep or EventFilter()
    attempts = await store.open_attempts(session_id)
    open_by_key = {(a.attempt_id, a.cursor): a for a in attempts}

    def wanted(event: RecordedEvent) -> bool:
        if hidden_runs and event.run_id in hidden_runs:
            return False
        if unresolved_only and (event.fields.get("attempt_id"), event.cursor) not in open_by_key:
            return False
        return matches(event, keep, search)

    kept: list[RecordedEvent] = []  # newest first
    cursor, looked_at, newest = before, 0, None
    older: str | None = None
    full = False
    while True:
        chunk = await store.tail(session_id, size, cursor)
        looked_at += len(chunk)
        if newest is None and chunk:
            newest = chunk[-1].cursor
        for event in reversed(chunk):
            if wanted(event):
                kept.append(event)
                if len(kept) == size:
                    full = True
                    break
        at_start = len(chunk) < size
        if full:
            if not (at_start and kept[-1] is chunk[0]):
                older = kept[-1].cursor
            break
        if at_start:
            break
        cursor = chunk[0].cursor
        if looked_at >= SCAN_BUDGET:  # a page that filters stops here; the link goes on
            older = cursor
            break
    kept.reverse()
    return Timeline(
        _pair(kept, open_by_key),
        older,
        newest,
        looked_at,
        complete=full or older is None,
        open_attempts=attempts,
    )


def _pair(
    events: list[RecordedEvent], open_by_key: dict[tuple[Any, str], OpenAttempt]
) -> list[Row]:
    """Rows of the page: each call with its result when the page holds both."""
    rows: list[Row] = []
    calls: dict[str, Row] = {}
    for event in events:
        attempt = event.fields.get("attempt_id")
        if event.type == "tool_result" and attempt in calls:
            calls.pop(attempt).result = event
            continue
        row = Row(event)
        if event.type == "tool_call":
            calls[str(attempt)] = row
            found = open_by_key.get((attempt, event.cursor))
            if found is not None:
                row.badge = "flagged" if found.flagged_cursor else "unresolved"
        rows.append(row)
    return rows


async def one_event(store: AsyncStore, session_id: str, cursor: str) -> RecordedEvent | None:
    """The event at `cursor`, or None."""
    from ledger_bus.model.ids import previous_cursor

    found = await store.scan_session(session_id, previous_cursor(cursor), 1)
    return found[0] if found and found[0].cursor == cursor else None


@dataclass(frozen=True)
class Dot:
    x: int
    lane: int
    cursor: str
    type: str
    label: str


@dataclass(frozen=True)
class Arrow:
    x1: int
    lane1: int
    x2: int
    lane2: int


@dataclass(frozen=True)
class Swimlanes:
    """The page's events on a lane per run (x: their order on the page), and the delegations
    between lanes, for the SVG above the timeline."""

    lanes: list[str]  # run ids ("" for events outside any run), in tree order
    dots: list[Dot]
    arrows: list[Arrow]

    @property
    def width(self) -> int:
        return max(1, len(self.dots))


def swimlanes(rows: list[Row], order: list[str]) -> Swimlanes:
    """Lanes for the runs that have events on the page, in `order` (the tree's)."""
    present = {r.event.run_id or "" for r in rows}
    lanes = [run for run in order if run in present]
    lanes += sorted(present - set(lanes))
    index = {run: n for n, run in enumerate(lanes)}
    dots = [
        Dot(x, index[r.event.run_id or ""], r.event.cursor, r.event.type, r.summary()[:80])
        for x, r in enumerate(rows)
    ]
    first_of: dict[str, int] = {}
    for dot, r in zip(dots, rows, strict=True):
        first_of.setdefault(r.event.run_id or "", dot.x)
    arrows = []
    for dot, r in zip(dots, rows, strict=True):
        f = r.event.fields
        if r.event.type == "tool_call" and f.get("tool") == "delegate":
            child = (f.get("args") or {}).get("child_run")
            if child in index:
                arrows.append(Arrow(dot.x, dot.lane, first_of[child], index[child]))
    return Swimlanes(lanes, dots, arrows)
