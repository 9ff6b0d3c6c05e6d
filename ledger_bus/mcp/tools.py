"""What the MCP server's tools do: each a thin call into the library, after the caller's
identity was checked. Nothing here is a second implementation of a rule: appends, the board and
resolutions are the library's own, with their validation, idempotency and refusals.

The tools' answers are typed `dict[str, Any]`, not model/jsontext.py's JSONObject: the MCP SDK
reads a tool's return annotation for its output schema, and makes none of a recursive alias (the
tools then answer no structured content)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from typing import Any, Final, cast

from ledger_bus.access.identity import Identity
from ledger_bus.agent.filters import (
    NATIVE_KINDS,
    NATIVE_PREFIXES,
    EventFilter,
    is_native,
)
from ledger_bus.agent.names import find_session, named_sessions
from ledger_bus.agent.tailer import render_context
from ledger_bus.board.dispatches import ASSIGNEE, OPENER, Board
from ledger_bus.mcp import reads
from ledger_bus.model.errors import InvalidInput, NotFound, Refused
from ledger_bus.model.ids import ANY, CURSOR_ZERO, StreamId, check_name, parse_cursor
from ledger_bus.model.records import RecordedEvent
from ledger_bus.operations.reconciler import FLAG_KIND
from ledger_bus.operations.resolve import Outcome, probes_op, resolve_attempt
from ledger_bus.store.base import Attempts, EventStore, need

POSTS: Final = "posts-"  # an agent's posts: the stream posts-<agent> of the session
TAIL: Final = 20  # events a tail gives unless asked for another count
MAX_TAIL: Final = 500
MAX_WAIT_S: Final = 30.0
OUTCOMES: Final = ("ok", "error", "unknown")
# What an agent posting through MCP may not say: the kinds and the ids of the ledger's, the
# runs', the board's and the frameworks' own records.
OWN_KINDS: Final = frozenset({FLAG_KIND, "tool.declared"})
OWN_PREFIXES: Final = ("run.", "dispatch.", "reconcile.", *NATIVE_PREFIXES)
OWN_FIELDS: Final = frozenset({"event_id", "run_id", "step_id", "attempt_id", "parents"})
# What a read of a session with no event says next: how a session comes to be.
STARTS: Final = (
    " (nothing was ever posted to it: a post starts it, and a wait with no cursor waits for its"
    " first event)"
)


def sessions(store: EventStore, who: Identity, limit: int) -> list[dict[str, Any]]:
    """The sessions the caller may read, most recently active first: `limit` of them, looked
    for among more of the store's as long as others' crowd them out."""
    _bounded(limit, 1, 1000, "limit")
    looked = limit
    while True:
        found = store.sessions(looked)
        mine = [(session, last) for session, last in found if who.reads(session)]
        if len(mine) >= limit or len(found) < looked:
            return [{"session": s, "last_active_ms": last} for s, last in mine[:limit]]
        looked *= 4


def tail(  # noqa: PLR0913  (the session, and one argument per filter and place)
    store: EventStore,
    who: Identity,
    session: str,
    n: int,
    types: list[str],
    agents: list[str],
    before: str | None = None,
) -> dict[str, Any]:
    """The session's last n events (those of `types` and `agents` when given; before the
    cursor `before`, when given), as many as one answer's bytes hold, as the context an agent
    reads and as events, and the cursor to wait after."""
    _bounded(n, 0, MAX_TAIL, "n")
    if before is not None:
        _cursor(before, "before")
    # The head first, and the tail up to it: an event committed in between is after the
    # cursor given, for the next wait, and not lost between the two.
    session, head = _located(store, who, session)
    keep = EventFilter(types=tuple(types), agents=tuple(agents), native=False, until=head)
    events: list[RecordedEvent] = []
    cut = False
    if head != CURSOR_ZERO and n:
        events, cut = reads.newest(store, session, n, keep, before)
    # Cut short by the budget: the events before the first given are the next tail's.
    return {**_read(events, head), "truncated": cut, "before": events[0].cursor if cut else None}


def wait(
    store: EventStore, who: Identity, session: str, after: str | None, timeout_s: float
) -> dict[str, Any]:
    """What committed after the cursor `after` (none: the session's newest now), waiting up to
    timeout_s for the first, as much as one answer's bytes hold; with the cursor to wait after
    next, which moves past the frameworks' native records too, though they are left out."""
    if not 0 <= timeout_s <= MAX_WAIT_S:
        raise InvalidInput(f"timeout_s must be between 0 and {MAX_WAIT_S:g}, got {timeout_s!r}")
    session = _awaited(store, who, session)
    if after is None:
        after = _head(store, session)
    # The first alone is waited for; what follows it is read within the answer's budget.
    first = store.wait_session(session, after, int(timeout_s * 1000), 1)
    if not first:
        return {**_read([], after), "truncated": False}
    found, cut = reads.following(store, session, first[0], lambda e: not is_native(e))
    shown = [e for e in found if not is_native(e)]
    return {**_read(shown, found[-1].cursor), "truncated": cut}


def _found(store: EventStore, who: Identity, name: str) -> str:
    """The session `name` names for the caller, among its own sessions: that session, or the
    one a framework knows by that id (an ADK session id, a LangGraph thread id). NotFound,
    as on the command line, when none holds an event (naming those it may mean); Refused for
    another team's session; InvalidInput for a name no session can have."""
    try:
        return find_session(store, name, who.reads, then=STARTS)
    except NotFound:
        who.may_read(name)  # another team's, or no name at all, is said so first
        raise


def _located(store: EventStore, who: Identity, name: str) -> tuple[str, str]:
    """The session `name` names for the caller (_found), and the cursor of its newest event."""
    if _readable(who, name):
        head = _head(store, name)
        if head != CURSOR_ZERO:  # it holds events: no lookup beyond the one read
            return name, head
    found = _found(store, who, name)
    return found, _head(store, found)


def _awaited(store: EventStore, who: Identity, name: str) -> str:
    """The session a wait on `name` waits on: that session, the one a framework knows by
    that id, or, while none holds an event, `name` itself (its first event is waited for).
    NotFound when `name` may mean several."""
    if _readable(who, name) and store.session_exists(name):
        return name
    meant = named_sessions(store, name, who.reads)
    if len(meant) == 1:
        return meant[0]
    if meant:
        _found(store, who, name)  # NotFound, naming each
    who.may_read(name)
    return name


def _readable(who: Identity, name: str) -> bool:
    try:
        check_name(name, "session id")
    except InvalidInput:
        return False
    return who.reads(name)


def _cursor(value: str, name: str) -> None:
    try:
        parse_cursor(value)
    except (InvalidInput, ValueError):
        raise InvalidInput(f"{name} must be a cursor, got {value!r}") from None


def _head(store: EventStore, session: str) -> str:
    """The cursor of the session's newest event (native records too); the zero cursor for a
    session without one."""
    newest = store.tail(session, 1)
    return newest[-1].cursor if newest else CURSOR_ZERO


def _read(events: list[RecordedEvent], cursor: str) -> dict[str, Any]:
    """What a tail or a wait gives: the events as context lines and as events, and the cursor
    to wait after next."""
    return {
        "context": render_context(events),
        "events": [e.to_dict() for e in events],
        "cursor": cursor,
    }


def post(  # noqa: PLR0913  (one argument per part of an event)
    store: EventStore,
    who: Identity,
    session: str,
    body: str | None,
    kind: str | None,
    fields: dict[str, Any] | None,
    append_id: str | None,
) -> dict[str, Any]:
    """A message (body) or a mutation (kind, fields) from the caller, appended to its own
    stream posts-<agent>; a retry with the same append_id is deduplicated."""
    who.may_write(session)
    if (body is None) == (kind is None):
        raise InvalidInput("a post is a message (body) or a mutation (kind), not both or neither")
    if body is not None and fields:
        raise InvalidInput("a message has a body and no other fields")
    _own_vocabulary(kind, fields or {})
    event: dict[str, Any]
    if body is not None:
        event = {"type": "message", "body": body}
    else:
        event = {**(fields or {}), "type": "mutation", "kind": kind}
    event["agent"] = who.agent  # the identity's, whatever the request says
    if append_id is None:
        append_id = f"mcp-{uuid.uuid4().hex}"
    check_name(append_id, "append_id")
    done = store.append(StreamId(session, POSTS + who.agent), ANY, append_id, [event])
    return done.to_dict()


def _own_vocabulary(kind: str | None, fields: dict[str, Any]) -> None:
    """Refuse a post that would speak for the ledger, a framework or another run: the kinds
    their records have (a call flagged, a tool declared safe to replay, a run's start, the
    board's records, a framework's native state) and the ids that tie an event to a run, a
    step or a call."""
    if kind is not None and (
        kind in OWN_KINDS or kind in NATIVE_KINDS or kind.startswith(OWN_PREFIXES)
    ):
        raise InvalidInput(
            f"kind {kind!r} is the ledger's own or a framework's: a post may not use it"
        )
    taken = sorted(set(fields) & OWN_FIELDS)
    if taken:
        raise InvalidInput(
            f"a post may not set {', '.join(taken)}: the ledger and the runs set those"
        )


def open_calls(store: EventStore, who: Identity, session: str) -> list[dict[str, Any]]:
    """The calls requested and not finished in the session (flagged ones say so, and what a
    probe said of them when one was asked and could not tell)."""
    session = _found(store, who, session)
    attempts = need(store, Attempts).open_attempts(session)
    said = store.run_op(probes_op(store, attempts))
    return [
        {**dataclasses.asdict(a), "flagged": a.flagged_cursor is not None, "probe": said.get(a.key)}
        for a in attempts
    ]


def resolve(  # noqa: PLR0913  (public: one argument per part of a resolution)
    store: EventStore,
    who: Identity,
    session: str,
    attempt_id: str,
    outcome: str,
    result: Any,
) -> dict[str, Any]:
    """Close an open call: ok or error with its result, or unknown (operators only)."""
    if who.role != "operator":
        who.may_operate(session)  # a role refused is said so, whether the session is there or not
    if outcome not in OUTCOMES:
        raise InvalidInput(f"an outcome is one of {', '.join(OUTCOMES)}, got {outcome!r}")
    session = _found(store, who, session)
    who.may_operate(session)
    decided = cast("Outcome", outcome)
    cursor = resolve_attempt(store, session, attempt_id, decided, result=result, agent=who.agent)
    return {"session": session, "attempt_id": attempt_id, "outcome": outcome, "cursor": cursor}


def board_open(  # noqa: PLR0913  (one argument per part of a dispatch)
    store: EventStore,
    who: Identity,
    session: str,
    role: str,
    objective: str,
    fields: dict[str, Any] | None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """Dispatch work: a new record on the session's board, its id minted, opened `by` the
    caller; a retry under the same request_id gives the dispatch the first call opened.

    Its agent (the spawn-log's: who takes the work on) is none when the work is handed over, to
    be filled in when it returns; or the caller's own, when it takes the work on itself. It
    names no other agent: the caller holds no other's token, and the record would say that
    agent took on work it never saw."""
    who.may_write(session)
    given = dict(fields or {})
    opener = given.pop(OPENER, who.agent)
    if opener != who.agent:
        raise Refused(
            f"a dispatch is opened by its caller: {who.agent} may not open one as {opener!r}"
        )
    if given.get(ASSIGNEE) not in (None, who.agent):
        raise Refused(
            f"a dispatch's {ASSIGNEE} is who takes the work on: {who.agent} may name itself, or"
            f" leave it to be filled in when the work returns, not {given[ASSIGNEE]!r}"
        )
    dispatch_id = Board(store, session).open(
        role, objective, _now(), {**given, OPENER: who.agent}, request_id
    )
    return {"session": session, "id": dispatch_id}


def board_close(
    store: EventStore, who: Identity, session: str, dispatch_id: str, outcome: str
) -> dict[str, Any]:
    """Close a dispatch with its outcome (which begins with a closed word: done, failed, ...).
    The caller is its agent from then on when it had none and another opened it: the work
    returned by the one that did it."""
    who.may_write(session)
    return Board(store, session).close(dispatch_id, outcome, _now(), returned_by=who.agent)


def board_list(store: EventStore, who: Identity, session: str) -> list[dict[str, Any]]:
    """The dispatches in flight, each marked live (< 24 h) or stale (24-48 h)."""
    session = _found(store, who, session)
    return [
        {"window": where, **record} for where, record in Board(store, session).in_flight(_now())
    ]


def _bounded(value: int, low: int, high: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{name} must be an int from {low} to {high}, got {value!r}")


def _now() -> datetime:
    return datetime.now(UTC)
