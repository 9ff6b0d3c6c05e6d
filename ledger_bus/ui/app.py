"""The web view's server: a Starlette app over the asyncio store, read-only.

Pages are rendered on the server (Jinja2, every string escaped), with a little plain JavaScript
for the live part: a session's newest page listens on Server-Sent Events whose id is the ledger
cursor, so a browser that reconnects (EventSource sends Last-Event-ID) resumes after the last
event it has, with no duplicate and no gap.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import json
import re
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from ledger_bus.access.hosts import LocalOnly
from ledger_bus.access.limits import Limits, OverLimit, Quota
from ledger_bus.access.tokens import Identifies
from ledger_bus.agent.filters import EventFilter, is_native
from ledger_bus.exports.atif import write_events
from ledger_bus.model.environment import is_loopback
from ledger_bus.model.errors import (
    BackendUnavailable,
    InvalidInput,
    LedgerError,
    NotFound,
    Refused,
    Unsupported,
)
from ledger_bus.model.extras import needs
from ledger_bus.model.ids import (
    CURSOR_ZERO,
    check_name,
    cursor_ms,
    format_cursor,
    parse_cursor,
    quoted,
)
from ledger_bus.model.jsontext import format_time
from ledger_bus.model.records import RecordedEvent, SessionInfo
from ledger_bus.operations.resolve import probes_op
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.ui import pages
from ledger_bus.ui.folds import Folds
from ledger_bus.ui.gate import TokenGate, door_of, identity_of
from ledger_bus.ui.live import Hub
from ledger_bus.ui.words import counted

TEMPLATES: Final = Path(__file__).resolve().parent / "templates"
STATIC: Final = Path(__file__).resolve().parent / "static"
READ_PAGE: Final = 1_000  # events read at a time for the whole session's trajectory
SPOOLED: Final = 8 << 20  # bytes of a trajectory kept in memory before it goes to a file
WINDOW: Final = 1_000  # events a trace window reads: the trace of any session paints this much
NATIVE_READ: Final = 20  # times a window's size, the native records a window passes over
MAX_WINDOW: Final = 10_000
PING_S: Final = 15.0  # a comment on a quiet stream, so proxies and browsers keep it open
REFRESH_MS: Final = 3_000  # how often an open page fetches its panels again

Opener = Callable[[], Awaitable[AsyncStore]]


# Characters that reorder the text around them (bidi embeddings, overrides and isolates, and
# the marks): `invoice\u202eevil\u202cfdp.exe` would read "invoicelivefdp.exe". Shown by name.
_BIDI: Final = {
    ord(c): f"\u27e8U+{ord(c):04X}\u27e9" for c in "\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
}
_BIDI.update({ord(c): f"\u27e8U+{ord(c):04X}\u27e9" for c in "\u2066\u2067\u2068\u2069\u061c"})


def shown(value: object) -> object:
    """What a template prints of a value: text an agent wrote with its bidi controls made
    visible (markup the view made itself passes as it is)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return value.translate(_BIDI)
    return value


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html"], default_for_string=True, default=True),
        finalize=shown,
    )
    env.filters["time"] = format_time
    env.filters["clock"] = clock_time
    env.filters["cursor_time"] = lambda cursor: format_time(cursor_ms(cursor))
    env.globals["tokens_of"] = pages.tokens_of
    env.globals["counted"] = counted
    env.filters["session_path"] = session_path
    return env


async def trace_window(
    s: AsyncStore, session_id: str, size: int, before: str | None
) -> tuple[list[RecordedEvent], str | None]:
    """The newest `size` events before `before` that are not a framework's native record (a
    LangGraph thread is mostly checkpoints, which a trace does not draw), and where the window
    before them ends (None: the session begins in this one). Native records are read and passed
    over, at most NATIVE_READ times `size` of them, so that a window costs O(size)."""
    kept: list[RecordedEvent] = []
    read = 0
    while True:
        page = await s.tail(session_id, size, before)
        read += len(page)
        kept[:0] = [event for event in page if not is_native(event)]
        if len(kept) >= size:
            kept = kept[-size:]
            return kept, kept[0].cursor
        if len(page) < size:
            return kept, None
        before = page[0].cursor
        if read >= NATIVE_READ * size:
            return kept, before


def create_app(  # noqa: PLR0913  (public: each a part of how the view is served)
    open_store: Opener,
    location: str = "",
    clock: Callable[[], datetime] | None = None,
    refresh_ms: int = REFRESH_MS,
    tokens: Identifies | None = None,
    *,
    host: str | None = None,
    limits: Limits | None = None,
) -> Starlette:
    """The app; `open_store` gives the asyncio store at first use, `location` names it on pages,
    `clock` is the time the dispatch board's windows are judged by (now, unless given). With
    `tokens`, every request needs one of them and sees the sessions its identity may read.
    `host` is the address it listens on: on loopback, a request must name a local host and
    come from no other site's page (ledger_bus/access/hosts.py; None: the embedder's to say).
    `limits` bound what one token holds at once (its live streams; one count for all without
    tokens)."""
    now = clock or (lambda: datetime.now(UTC))
    view = View(open_store, location, now, refresh_ms, limits or Limits())
    routes = [
        Route("/", view.sessions),
        Route("/s/{session}", view.session),
        Route("/s/{session}/e/{cursor}", view.event),
        Route("/s/{session}/panels", view.panels),
        Route("/s/{session}/live", view.live),
        Route("/s/{session}/trajectory", view.trajectory),
        Route("/s/{session}/runs", view.runs),
        Route("/s/{session}/ag-ui", view.agui),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    # The host first: a page of another site learns nothing, not even that a token is asked.
    middleware = [] if host is None or not is_loopback(host) else [Middleware(LocalOnly)]
    if tokens is not None:
        middleware.append(Middleware(TokenGate, tokens=tokens))
    return Starlette(
        routes=routes,
        lifespan=view.lifespan,
        middleware=middleware,
        exception_handlers={LedgerError: view.failed, Exception: view.failed},
    )


class View:
    """The routes of one app, and what they share: the store (opened at first use), the
    templates, the folds of runs and boards, and the hub of live streams."""

    def __init__(
        self,
        open_store: Opener,
        location: str,
        now: Callable[[], datetime],
        refresh_ms: int,
        limits: Limits,
    ):
        self.open_store = open_store
        self.location = location
        self.now = now
        self.refresh_ms = refresh_ms
        self.env = environment()
        self.folds = Folds()
        self.hub = Hub()
        self.row_macro = self.env.get_template("_row.html").module.row  # type: ignore[attr-defined]
        self.held: AsyncStore | None = None
        self.opening = asyncio.Lock()
        self.streams = Quota(limits.streams, "live streams")  # open ones, by token

    @asynccontextmanager
    async def lifespan(self, _: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if self.held is not None:
                held, self.held = self.held, None
                await held.aclose()

    async def store(self) -> AsyncStore:
        # Opened at first use: a store that is down gives a page, not a crash at start-up. Once:
        # requests arriving together wait for the one that opens it.
        async with self.opening:
            if self.held is None:
                self.held = await self.open_store()
            return self.held

    def render(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(location=self.location, **values)
        return HTMLResponse(html, status_code=status)

    async def sessions(self, request: Request) -> Response:
        match = request.query_params.get("q", "")
        offset = _int(request, "offset", 0)
        s = await self.store()
        who = identity_of(request.scope)
        page = await pages.sessions_page(
            s, offset, pages.SESSIONS_PAGE, match, None if who is None else who.reads
        )
        moment = self.now()
        boards = await asyncio.gather(
            *(self.folds.board(s, r.session_id, moment) for r in page.rows)
        )
        for n, (r, board) in enumerate(zip(page.rows, boards, strict=True)):
            flying = sum(1 for d in board if d.where != "other")
            page.rows[n] = dataclasses.replace(r, dispatches=flying)
        if request.query_params.get("format") == "json":
            return JSONResponse({"total": page.total, "sessions": [vars(r) for r in page.rows]})
        return self.render("sessions.html", page=page, match=match)

    async def session(self, request: Request) -> Response:
        s = await self.store()
        try:
            session_id = _session(request)
        except (InvalidInput, Refused):  # no name of a session it may read: a framework's?
            return await self.named(request, s)
        shown = _filters(request)
        before = _cursor(request.query_params.get("before"))
        depth = _int(request, "depth", -1)
        try:
            info = await existing(s, session_id)
        except NotFound:
            return await self.named(request, s)
        runs = await self.folds.runs(s, info)
        hidden = frozenset(n.run_id for n in runs if depth >= 0 and n.depth > depth)
        shown = dataclasses.replace(shown, hidden_runs=hidden)
        page = await pages.timeline(s, session_id, before, shown, pages.PAGE)
        if request.query_params.get("format") == "json":
            return JSONResponse(
                {
                    "session": session_id,
                    "older": page.older,
                    "events": [r.to_dict() for r in page.rows],
                }
            )
        board, groups, probes = await asyncio.gather(
            self.folds.board(s, session_id, self.now()),
            s.groups(session_id),
            s.drive(probes_op(s.core, page.open_attempts)),
        )
        return self.render(
            "session.html",
            session=session_id,
            info=info,
            page=page,
            runs=pages.newest_runs(runs),
            all_runs=len(runs),
            depth=depth if depth >= 0 else None,
            open_attempts=pages.attention(page.open_attempts),
            probes=probes,
            board=board,
            groups=groups,
            refresh_ms=self.refresh_ms,
            filters=shown.keep,
            search=shown.search,
            unresolved=shown.unresolved,
            before=before,
            live=before is None,
            window=WINDOW,
            **_session_links(request, session_id, page),
        )

    async def named(self, request: Request, s: AsyncStore) -> Response:
        """The page of the one session a framework knows by the name the path gives (ADK's
        session id, a LangGraph thread's id: ledger_bus/agent/names.py), among those the
        request may read: a redirect to it; a page naming each when there are several. The
        error the name met as a session's own name, when none is named so."""
        name = _segment(request)
        who = identity_of(request.scope)
        meant = [
            found
            for found in await pages.named_sessions(s, name, None if who is None else who.reads)
            if found != name
        ]
        if len(meant) == 1:
            query = f"?{request.url.query}" if request.url.query else ""
            return RedirectResponse(session_path(meant[0]) + query, status_code=307)
        if not meant:
            _session(request)  # raises what the name itself meets: invalid, refused
            raise NotFound(f"no session {name!r} in this ledger")
        return self.render(
            "error.html",
            404,
            title="Not found",
            message=f"no session {name!r} in this ledger; a framework knows these by that name:",
            sessions=meant,
        )

    async def panels(self, request: Request) -> Response:
        session_id = _session(request)
        s = await self.store()
        info = await existing(s, session_id)
        runs, attempts, board, groups = await asyncio.gather(
            self.folds.runs(s, info),
            s.open_attempts(session_id),
            self.folds.board(s, session_id, self.now()),
            s.groups(session_id),
        )
        probes = await s.drive(probes_op(s.core, attempts))
        return self.render(
            "_panels.html",
            session=session_id,
            runs=pages.newest_runs(runs),
            all_runs=len(runs),
            open_attempts=pages.attention(attempts),
            probes=probes,
            board=board,
            groups=groups,
        )

    async def event(self, request: Request) -> Response:
        session_id = _session(request)
        cursor = _cursor(request.path_params["cursor"])
        assert cursor is not None
        found = await pages.one_event(await self.store(), session_id, cursor)
        if found is None:
            raise NotFound(f"no event at {cursor} in session {session_id!r}")
        data = found.to_dict()
        if request.query_params.get("format") == "json":
            return JSONResponse(data)
        ms, seq = parse_cursor(cursor)
        return self.render(
            "event.html",
            session=session_id,
            event=found,
            text=json.dumps(data, indent=2, ensure_ascii=False, default=str),
            after_cursor=format_cursor(ms, seq + 1),
        )

    async def trajectory(self, request: Request) -> Response:
        """The session as an ATIF trajectory (what `ledger-bus export --format atif` writes),
        for anyone who reads the view's JSON; with `window=N`, of the newest N events before
        `before` alone: the trace view's pages, O(N) whatever the session's length."""
        session_id = _session(request)
        size = _int(request, "window", 0)
        before = _cursor(request.query_params.get("before"))
        if size > MAX_WINDOW:
            raise InvalidInput(f"window must be at most {MAX_WINDOW:,} events: {size}")
        s = await self.store()
        await existing(s, session_id)
        if size:
            return await window_trajectory(s, session_id, size, before)
        return await whole_trajectory(s, session_id)

    async def runs(self, request: Request) -> Response:
        """The session's runs in tree order, with when each started and ended (ms); with
        `from` and `to` (ms), those that ran in that while and the runs above them."""
        session_id = _session(request)
        s = await self.store()
        nodes = await self.folds.runs(s, await existing(s, session_id))
        low, high = _int(request, "from", 0), _int(request, "to", 0)
        return JSONResponse([vars(n) for n in pages.runs_between(nodes, low, high)])

    async def live(self, request: Request) -> Response:
        session_id = _session(request)
        shown = _filters(request)
        after = _cursor(request.headers.get("last-event-id") or request.query_params.get("after"))
        s = await self.store()
        await existing(s, session_id)  # a page of it would be a 404: so is its stream

        def rendered(e: RecordedEvent) -> str:
            return str(self.row_macro(pages.Row(e), session_id))

        key, may_go_on = door_of(request.scope)
        who = identity_of(request.scope)
        # Given back when the stream ends, however it ends.
        release = self.streams.take(key, "this view" if who is None else who.agent)
        rows = self.hub.rows(
            s, session_id, after, shown, rendered, ping_s=PING_S, may_go_on=may_go_on
        )
        # Its own pings, not sse-starlette's: each is a moment to look at the token again.
        return HeldStream(rows, release, ping=0)

    async def agui(self, request: Request) -> Response:
        """The session as an AG-UI event stream (ledger_bus/exports/agui.py): from its start,
        or after `Last-Event-ID` / `?after=`; with `?snapshot=1`, a state snapshot first (and,
        with no place to resume from, the stream starts at the session's end)."""
        agui = _agui()
        session_id = _session(request)
        start = agui.position(
            request.headers.get("last-event-id") or request.query_params.get("after")
        )
        snapshot = request.query_params.get("snapshot", "") in ("1", "true", "yes")
        s = await self.store()
        await existing(s, session_id)
        key, may_go_on = door_of(request.scope)
        who = identity_of(request.scope)
        release = self.streams.take(key, "this view" if who is None else who.agent)
        events = self._agui_events(s, session_id, start, snapshot, may_go_on)
        # AG-UI's client splits events on a bare blank line, not on sse-starlette's CRLF.
        return HeldStream(events, release, ping=0, sep="\n")

    async def _agui_events(
        self,
        s: AsyncStore,
        session_id: str,
        start: Any,  # agui.Position | None
        snapshot: bool,
        may_go_on: Callable[[], bool],
    ) -> AsyncIterator[dict[str, str]]:
        agui = _agui()
        mapper = agui.Mapper(session_id)
        first: list[Any] = [mapper.opening()]
        after: str | None = None
        if start is not None or snapshot:
            # What comes before the start is fed to the mapper, unsaid: the runs open there.
            inside: list[Any] = []
            async for e in s.iter_session(session_id):
                if start is not None and e.cursor > start.cursor:
                    break
                made = mapper.feed(e)
                after = e.cursor
                if start is not None and e.cursor == start.cursor and start.index is not None:
                    inside = agui.resumed_inside(made, start.index)
            if start is not None:
                after = start.cursor
            if snapshot:
                first.append(mapper.snapshot(after))
            before = None
            if start is not None:
                before = start.cursor if start.index is None else f"{start.cursor}/{start.index}"
            first += mapper.reopened(before) + inside
        for event in first:
            yield _sse(agui, event)
        async for item in self.hub.events(s, session_id, after or CURSOR_ZERO, PING_S):
            if not may_go_on():
                return
            if item is None:
                yield {"comment": "ping"}
                continue
            for event in mapper.feed(item[0]):
                yield _sse(agui, event)

    async def failed(self, request: Request, exc: Exception) -> Response:
        status, title = _status_of(exc)
        message = str(exc) if isinstance(exc, LedgerError) else f"{type(exc).__name__}: {exc}"
        if (
            request.url.path.endswith(("/live", "/ag-ui"))
            or request.query_params.get("format") == "json"
        ):
            return JSONResponse({"error": message}, status_code=status)
        return self.render("error.html", status, title=title, message=message)


async def existing(s: AsyncStore, session_id: str) -> SessionInfo:
    """What the session holds, read once for the page; NotFound when it holds nothing."""
    info = await s.session_info(session_id, append_ids=False)
    if not info.events:
        raise NotFound(f"no session {session_id!r} in this ledger")
    return info


def _session_links(request: Request, session_id: str, page: pages.Timeline) -> dict[str, Any]:
    """The links of a session's page, each keeping the page's filters."""
    query = _query(request, before=None)
    base = session_path(session_id)
    return {
        "query": query,
        "panels_url": f"{base}/panels",
        "live_url": f"{base}/live?{_join(query)}",
        "live_after": page.newest or "",
        "older_url": f"{base}?{_join(query, before=page.older)}",
        "newest_url": f"{base}?{_join(query)}",
        "export_url": f"{base}?{_join(_query(request), format='json')}",
        "trajectory_url": f"{base}/trajectory",
        "runs_url": f"{base}/runs",
    }


async def window_trajectory(
    s: AsyncStore, session_id: str, size: int, before: str | None
) -> Response:
    """The trajectory of the newest `size` events before `before`, saying which, and where
    the window before it ends."""
    events, older = await trace_window(s, session_id, size, before)
    window = {
        "first": events[0].cursor if events else None,
        "last": events[-1].cursor if events else None,
        "older": older,
    }
    out = io.StringIO()
    write_events(session_id, lambda: events, out, window)
    return Response(out.getvalue(), media_type="application/json")


async def whole_trajectory(s: AsyncStore, session_id: str) -> Response:
    """The whole session, as the export writes it: read twice a page at a time from a thread
    (the writer keeps its older steps in a file of its own), written to a file that is then
    sent; never the session in memory."""
    loop = asyncio.get_running_loop()

    def pages_of_session() -> Iterator[RecordedEvent]:
        after: str | None = None
        while True:
            asked = s.scan_session(session_id, after, READ_PAGE)
            found = asyncio.run_coroutine_threadsafe(asked, loop).result()
            yield from found
            if len(found) < READ_PAGE:
                return
            after = found[-1].cursor

    # Closed by chunks() once sent (a file the response outlives this function with).
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOLED, mode="w+", encoding="utf-8")  # noqa: SIM115
    try:
        await asyncio.to_thread(write_events, session_id, pages_of_session, spool)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)

    def chunks() -> Iterator[str]:
        with spool:
            while chunk := spool.read(1 << 16):
                yield chunk

    return StreamingResponse(chunks(), media_type="application/json")


def clock_time(cursor: str) -> str:
    """An event's time of day as the timeline's time column shows it (UTC, to the ms); its
    date and its cursor are in the cell's title and on the event's own page."""
    return format_time(cursor_ms(cursor))[11:23]


class HeldStream(EventSourceResponse):
    """An event stream that gives back what it held (its place among its token's streams)
    once it has ended, whichever way."""

    def __init__(self, content: Any, release: Callable[[], None], **options: Any):
        super().__init__(content, **options)
        self.release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.release()


def _agui() -> Any:
    """ledger_bus.exports.agui, imported when a stream asks for it: it needs AG-UI's models, an
    extra of its own (`ledger-bus[ag-ui]`); the rest of the view does not."""
    try:
        from ledger_bus.exports import agui  # noqa: PLC0415  (the extra, asked for here)
    except ImportError as err:
        raise Unsupported(str(needs(err, "the AG-UI stream"))) from None
    return agui


def _sse(agui: Any, event: Any) -> dict[str, str]:
    found = agui.ident(event)
    return {"data": agui.wire(event), **({"id": found} if found else {})}


def _status_of(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, NotFound):
        return 404, "Not found"
    if isinstance(exc, OverLimit):
        return 429, "Too many at once"
    if isinstance(exc, InvalidInput):
        return 400, "Bad request"
    if isinstance(exc, Refused):
        return 403, "Forbidden"
    if isinstance(exc, BackendUnavailable):
        return 503, "The store is not answering"
    if isinstance(exc, Unsupported):
        return 501, "Not installed here"
    return 500, "Something went wrong"


# A session id that is safe as it is in a path segment; any other goes as `~` + base64url.
_PLAIN_SEGMENT: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def session_path(session_id: str) -> str:
    """The path of a session's page. Its id is one path segment whatever it holds: servers
    and browsers decode `%2F` back to `/` and resolve `..` before routing, so an id such as
    `team/alpha`, `..` or `victim/panels` would open another page; such an id goes in
    base64url behind a `~` (`/s/~dGVhbS9hbHBoYQ`), which no plain id begins with."""
    if _PLAIN_SEGMENT.fullmatch(session_id):
        return f"/s/{session_id}"
    encoded = base64.urlsafe_b64encode(session_id.encode("utf-8", "surrogatepass"))
    return f"/s/~{encoded.decode().rstrip('=')}"


def _segment(request: Request) -> str:
    """The name the path gives, as session_path wrote it (not yet checked)."""
    segment: str = request.path_params["session"]
    if segment.startswith("~"):
        try:
            data = base64.urlsafe_b64decode(segment[1:] + "=" * (-len(segment[1:]) % 4))
            segment = data.decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            raise InvalidInput(f"not a session's path: {quoted(segment)}") from None
    return segment


def _session(request: Request) -> str:
    session_id = check_name(_segment(request), "session id")
    who = identity_of(request.scope)
    if who is not None:
        who.may_read(session_id)  # another team's session is refused, whether it exists or not
    return session_id


def _cursor(value: str | None) -> str | None:
    if not value:
        return None
    try:
        parse_cursor(value)
    except (InvalidInput, ValueError):
        raise InvalidInput(f"not a cursor: {quoted(value)}") from None
    return value


def _int(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or len(raw) > 15:
        raise InvalidInput(f"{name} must be a whole number below 10**15: {quoted(raw)}")
    return int(raw)


def _filters(request: Request) -> pages.Shown:
    q = request.query_params

    def one(name: str) -> tuple[str, ...]:
        value = q.get(name, "")
        return (value,) if value else ()

    keep = EventFilter(
        types=one("type"),
        agents=one("agent"),
        runs=one("run"),
        streams=one("stream"),
        native=q.get("native") == "1",  # a framework's native records: hidden unless asked
    )
    return pages.Shown(keep, q.get("q", ""), q.get("unresolved") == "1")


def _query(request: Request, **drop: Any) -> dict[str, str]:
    """The page's filter parameters (not its place in the session)."""
    kept = ("type", "agent", "run", "stream", "q", "unresolved", "native")
    return {k: v for k, v in request.query_params.items() if k in kept and v and k not in drop}


def _join(query: dict[str, str], **more: str | None) -> str:
    return urlencode({**query, **{k: v for k, v in more.items() if v is not None}})
