"""An open call closed by hand: what an operator (or an adapter) does about a call the reconciler
flagged, and the open calls listed for them to choose from."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from ledger_bus.agent.filters import EventFilter, select
from ledger_bus.model.errors import InvalidInput, LedgerError, NotFound, Refused
from ledger_bus.model.ids import ANY, StreamId, previous_cursor
from ledger_bus.model.jsontext import JSONObject, format_time
from ledger_bus.model.records import OpenAttempt, RecordedEvent
from ledger_bus.store.base import EventStore
from ledger_bus.store.steps import Op

Outcome = Literal["unknown", "retried", "ok", "error"]


def resolve_attempt(  # noqa: PLR0913  (public: keyword-only, one per way to close it)
    store: EventStore,
    session_id: str,
    attempt_id: str,
    outcome: Outcome,
    *,
    result: Any = None,
    retry_attempt: str | None = None,
    agent: str = "operator",
) -> str:
    """Close an open attempt with an explicit terminal event; returns the cursor written.

    outcome "unknown": nobody knows whether the call took effect; "retried": it is superseded by
    `retry_attempt` (requested separately, by the adapter); "ok" / "error": the real result,
    learned some other way.
    """
    found = {a.attempt_id: a for a in store.open_attempts(session_id)}
    attempt = found.get(attempt_id)
    if attempt is None:
        raise _not_open(store, session_id, attempt_id)
    if outcome == "retried" and not retry_attempt:
        raise InvalidInput("a retried attempt names the attempt that retries it")
    value: Any = result
    if outcome == "unknown":
        value = {"outcome": "unknown", "resolved_by": agent}
    elif outcome == "retried":
        value = {"outcome": "retried", "retry_attempt": retry_attempt, "resolved_by": agent}
    event: JSONObject = {
        "type": "tool_result",
        "agent": agent,
        "tool": attempt.tool,
        "attempt_id": attempt_id,
        "status": "ok" if outcome == "ok" else "error",
        "result": value,
    }
    if attempt.run_id:
        event["run_id"] = attempt.run_id
    ref = StreamId(session_id, attempt.stream)
    return store.append(ref, ANY, f"resolve:{attempt.key}", [event]).cursor


def _not_open(store: EventStore, session_id: str, attempt_id: str) -> LedgerError:
    """Why an attempt cannot be resolved: closed already (Refused, naming its result), or never
    requested in the session (NotFound). Looked up only on this error path, by reading the
    session's calls and results."""
    if not store.session_exists(session_id):
        return NotFound(f"no such session {session_id!r}")
    closed: RecordedEvent | None = None
    requested = False
    calls = EventFilter(types=("tool_call", "tool_result"))
    for event in select(store, session_id, calls):
        if event.attempt_id == attempt_id:
            requested = requested or event.type == "tool_call"
            closed = event if event.type == "tool_result" else None
    if requested and closed is not None:
        return Refused(
            f"attempt {attempt_id!r} of session {session_id!r} is closed already: its"
            f" tool_result ({closed.get('status')}) is at {closed.cursor}"
        )
    return NotFound(f"no attempt {attempt_id!r} was requested in session {session_id!r}")


def probes_op(store: EventStore, attempts: Iterable[OpenAttempt]) -> Op[dict[str, JSONObject]]:
    """What a probe said of each flagged attempt it could not settle, as its flag records it:
    attempt key -> {"name", "state": "unknown", "reason"}. One read per flagged attempt."""
    found: dict[str, JSONObject] = {}
    for a in attempts:
        if a.flagged_cursor is None:
            continue
        flag = yield from store.scan_session_op(a.session_id, previous_cursor(a.flagged_cursor), 1)
        said = flag[0].get("probe") if flag and flag[0].cursor == a.flagged_cursor else None
        if isinstance(said, dict):
            found[a.key] = said
    return found


def open_for(
    attempts: Iterable[OpenAttempt], now_ms: int, probes: dict[str, JSONObject] | None = None
) -> list[JSONObject]:
    """Open attempts as records for output, with what a probe said of each (None: no probe
    was asked, or none could be)."""
    said = probes or {}
    return [
        {
            "session": a.session_id,
            "attempt_id": a.attempt_id,
            "run_id": a.run_id,
            "tool": a.tool,
            "stream": a.stream,
            "requested_at": format_time(a.opened_ms),
            "open_for_s": round((now_ms - a.opened_ms) / 1000, 3),
            "flagged": a.flagged_cursor is not None,
            "probe": said.get(a.key),
        }
        for a in attempts
    ]
