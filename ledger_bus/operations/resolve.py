"""An open call closed by hand: what an operator (or an adapter) does about a call the reconciler
flagged, and the open calls listed for them to choose from."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any, Final, Literal

from ledger_bus.agent.filters import EventFilter, select
from ledger_bus.model.errors import InvalidInput, LedgerError, NotFound, Refused
from ledger_bus.model.ids import ANY, StreamId, previous_cursor
from ledger_bus.model.jsontext import JSONObject, format_time
from ledger_bus.model.prepared import Fence
from ledger_bus.model.records import OpenAttempt, RecordedEvent
from ledger_bus.store.base import EventStore
from ledger_bus.store.steps import Op

Outcome = Literal["unknown", "retried", "ok", "error"]
RESOLVE_LEASE_MS: Final = 30_000  # held for a few round trips; lapses on its own if we die
# How long a decision waits for the call's run lease: a killed process's lapses within its TTL
# (10 s by default); a live run's, or a reconciler's probing, is waited out no longer.
RESOLVE_WAIT_S: Final = 15.0


def resolve_attempt(  # noqa: PLR0913  (public: keyword-only, one per way to close it)
    store: EventStore,
    session_id: str,
    attempt_id: str,
    outcome: Outcome,
    *,
    result: Any = None,
    retry_attempt: str | None = None,
    agent: str = "operator",
    lease_wait_s: float = RESOLVE_WAIT_S,
) -> str:
    """Close an open attempt with an explicit terminal event; returns the cursor written.

    outcome "unknown": nobody knows whether the call took effect; "retried": it is superseded by
    `retry_attempt` (requested separately, by the adapter); "ok" / "error": the real result,
    learned some other way.

    The call's run lease is taken while the decision is written (and the write made under it):
    a run that holds it is alive, or a reconciler is asking a probe about the call. The lease is
    waited for up to `lease_wait_s` (a killed process's lapses within its TTL), then the
    decision is refused (Refused) rather than written beside theirs.
    """
    if outcome == "retried" and not retry_attempt:
        raise InvalidInput("a retried attempt names the attempt that retries it")
    found = {a.attempt_id: a for a in store.open_attempts(session_id)}
    attempt = found.get(attempt_id)
    if attempt is None:
        raise _not_open(store, session_id, attempt_id)
    fence: Fence | None = None
    if attempt.run_id:
        lease, owner = f"run-{attempt.run_id}", f"{agent}-{uuid.uuid4().hex}"
        deadline = time.monotonic() + lease_wait_s
        while not (fence := store.hold(session_id, lease, owner, RESOLVE_LEASE_MS)):
            if time.monotonic() >= deadline:
                raise Refused(
                    f"attempt {attempt_id!r} of session {session_id!r} is not resolved: its run"
                    f" holds its lease (run-{attempt.run_id}): it is alive, or a reconciler is"
                    " settling it"
                )
            time.sleep(0.1)
    try:
        return _decide(store, attempt, outcome, result, retry_attempt, agent, fence)
    finally:
        if fence is not None:
            store.release_lease(session_id, fence.lease, fence.owner)


def _decide(  # noqa: PLR0913  (the decision's parts, each said once)
    store: EventStore,
    attempt: OpenAttempt,
    outcome: Outcome,
    result: Any,
    retry_attempt: str | None,
    agent: str,
    fence: Fence | None,
) -> str:
    """Write the decision, once the attempt is seen still open under the lease."""
    session_id, attempt_id = attempt.session_id, attempt.attempt_id
    still = {a.key for a in store.open_attempts(session_id)}
    if attempt.key not in still:  # settled or resolved while the lease was being taken
        raise _not_open(store, session_id, attempt_id)
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
    return store.append(ref, ANY, f"resolve:{attempt.key}", [event], fence=fence).cursor


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
