"""What the web view shows, read from the store a page at a time: never the whole session.

Every function here reads (the view writes nothing to the ledger) through the asyncio store, and
returns plain data for the templates. A timeline page is the session's events before a cursor,
newest page first, read with `tail` (O(page) whatever the session's length); with a filter or a
search, older pages are read until the page is full or a bounded number of events has been
looked at, and the page says where to go on from.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from ledger_bus.agent.filters import EventFilter
from ledger_bus.agent.names import SEARCHED, digested, sessions_named
from ledger_bus.model.durations import duration_text
from ledger_bus.model.ids import cursor_ms, previous_cursor
from ledger_bus.model.jsontext import dumps
from ledger_bus.model.records import OpenAttempt, RecordedEvent, gist
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.ui.folds import RunNode

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
    store: AsyncStore,
    offset: int = 0,
    limit: int = SESSIONS_PAGE,
    match: str = "",
    visible: Callable[[str], bool] | None = None,
) -> SessionsPage:
    """Sessions by last activity, most recent first; `match` keeps those whose id contains it
    and those a framework knows by it (names.sessions_named: an ADK session by its session id,
    a LangGraph thread by its thread id), `visible` those a token's identity may read. What
    each row counts is read for the rows shown only."""
    listed = await store.sessions()
    named = set(sessions_named(match, [s for s, _ in listed])) if match else set()
    found = [
        (s, ms)
        for s, ms in listed
        if (match in s or s in named) and (visible is None or visible(s))
    ]
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


async def named_sessions(
    s: AsyncStore, name: str, readable: Callable[[str], bool] | None = None
) -> list[str]:
    """The sessions `readable` keeps that a user may mean by `name` (names.sessions_named),
    among the most recently active (names.SEARCHED) and those named by its digest."""
    known = [found for found, _ in await s.sessions(SEARCHED)]
    known += [found for found in digested(name) if await s.session_exists(found)]
    return sessions_named(name, [found for found in known if readable is None or readable(found)])


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
        return tokens_of(self.result)

    @property
    def duration(self) -> str | None:
        ms = self.duration_ms
        return duration_text(ms) if ms is not None else None

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
        return gist(self.event.fields)

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


def tokens_of(result: RecordedEvent | None) -> str | None:
    """A model call's token counts, from its result's `usage` (`input_tokens` and
    `output_tokens`, or OpenAI's `prompt_tokens` and `completion_tokens`)."""
    usage = result.fields.get("result") if result is not None else None
    usage = usage.get("usage") if isinstance(usage, dict) else None
    if not isinstance(usage, dict):
        return None
    read = usage.get("input_tokens", usage.get("prompt_tokens"))
    wrote = usage.get("output_tokens", usage.get("completion_tokens"))
    if not isinstance(read, int) or not isinstance(wrote, int):
        return None
    return f"{read:,} in · {wrote:,} out tokens"


def attention(attempts: list[OpenAttempt]) -> list[OpenAttempt]:
    """Open calls as the page lists them, first on it: the flagged ones first (the reconciler
    found their process gone), then the unresolved; the oldest first in each."""
    return sorted(attempts, key=lambda a: (a.flagged_cursor is None, a.opened_ms))


@dataclass
class Timeline:
    """A page of the session's events, oldest first."""

    rows: list[Row]
    older: str | None  # the cursor to read on from (`before=`), when older events remain
    newest: str | None  # the newest cursor the page covers: the live stream goes on after it
    looked_at: int  # events read to make the page
    complete: bool  # False: the scan budget ran out before the page was full
    open_attempts: list[OpenAttempt] = field(default_factory=list)


@dataclass(frozen=True)
class Shown:
    """What a page shows of a session: the events its filters keep and its search finds, only
    the calls still open with `unresolved`, none of `hidden_runs` (the runs below the depth its
    tree is collapsed to)."""

    keep: EventFilter = field(default_factory=EventFilter)
    search: str = ""
    unresolved: bool = False
    hidden_runs: frozenset[str] = frozenset()


EVERYTHING: Final = Shown()


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
    shown: Shown = Shown(),
    size: int = PAGE,
) -> Timeline:
    """The `size` newest events before `before` that the page shows."""
    keep, search, hidden_runs = shown.keep, shown.search, shown.hidden_runs
    unresolved_only = shown.unresolved
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
    found = await store.scan_session(session_id, previous_cursor(cursor), 1)
    return found[0] if found and found[0].cursor == cursor else None


@dataclass(frozen=True)
class RunSpan:
    """A run as the trace view draws it: a span on the time axis, in the runs tree."""

    run: str
    agent: str
    parent: str | None
    depth: int
    status: str  # running, ok, error, died
    started_ms: int
    ended_ms: int | None  # None while it runs (or died running)
    objective: str | None


def runs_between(nodes: list[RunNode], low: int = 0, high: int = 0) -> list[RunSpan]:
    """The runs (in tree order) as spans; with `low`/`high` (ms, 0 for open-ended), those that
    ran within that while, and every run above one of them, so the tree reads whole."""
    spans = [
        RunSpan(
            n.run_id,
            n.agent,
            n.parent,
            n.depth,
            n.status,
            cursor_ms(n.started),
            cursor_ms(n.ended) if n.ended else None,
            n.objective,
        )
        for n in nodes
    ]
    if not low and not high:
        return spans
    ran = []
    for span in spans:
        ended = span.ended_ms if span.ended_ms is not None else span.started_ms
        if span.status == "running" or span.ended_ms is None:
            ended = max(ended, high or ended)
        if (not high or span.started_ms <= high) and (not low or ended >= low):
            ran.append(span.run)
    kept = _and_above(ran, {s.run: s.parent for s in spans})
    return [s for s in spans if s.run in kept]


RUNS_SHOWN: Final = 50  # runs the runs tree lists, the newest (and the runs above them)


def newest_runs(nodes: list[RunNode], limit: int = RUNS_SHOWN) -> list[RunNode]:
    """The `limit` runs that started last, and every run above one of them, in tree order: a
    session of thousands of runs lists what is happening now, not its whole history (the
    trace's windows, and the timeline filtered by run, reach the rest)."""
    if len(nodes) <= limit:
        return nodes
    newest = sorted(nodes, key=lambda n: n.started, reverse=True)[:limit]
    kept = _and_above([n.run_id for n in newest], {n.run_id: n.parent for n in nodes})
    return [n for n in nodes if n.run_id in kept]


def _and_above(runs: list[str], parent: dict[str, str | None]) -> set[str]:
    """`runs` and every run above one of them, so that a tree of them reads whole."""
    kept: set[str] = set()
    for found in runs:
        run: str | None = found
        while run is not None and run not in kept:
            kept.add(run)
            run = parent.get(run)
    return kept
