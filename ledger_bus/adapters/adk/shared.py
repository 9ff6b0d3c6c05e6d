"""What an ADK app's sessions share, the `app:` and `user:` state, kept so that an event and its
change of that state are seen together or not at all, and no change is lost.

The state lives in the app's ledger session (layout.py), a stream per scope, each record the
state after a change; the event lives in its own session's stream, in another hash slot, so the
two cannot be one append. So an event that changes shared state is written in two steps, the
event's own append the commit point:

1. an *intent* appended to each scope's stream it changes, at the version of the scope the
   session was read at (the Session's marker): the state after the change, the state before it,
   and the event's place (its session, the version its record will take, a nonce the record
   carries). A scope changed since the read refuses it: StaleSessionError, as for the session.
2. the event, appended to its session at the version the session was read at.

An intent is committed once its event's record stands at the version it names (the nonce
matching), and aborted once another record stands there: both final, streams being append-only.
Until then it is pending, and a reader takes the state before it; a writer that meets a pending
intent waits for it (its writer is between the two steps), and past PATIENCE_S aborts it by
taking the version the event would have taken (a writer killed between the steps). A writer that
gives up between its steps cancels its own intents with a record of the state before them.

A reader marks the version of each scope it read: the intent's when it took the intent's
outcome, the one before it when it found the intent pending, so that an append based on that
read is refused once the intent settles either way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

from google.adk.errors import StaleSessionError

from ledger_bus.adapters.adk import layout
from ledger_bus.adapters.adk.layout import ABORT, AGENT, DELTA, EVENTS
from ledger_bus.model.errors import VersionConflict
from ledger_bus.model.ids import StreamId
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import EventStore
from ledger_bus.store.steps import Op, Sleep

# ADK's database service's words, so that a caller reads one message whichever service it runs.
STALE: Final = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)
SCOPES: Final = ("app", "user")
# How long a writer waits for a pending intent to settle before it takes its event's version
# (its writer is between two appends: milliseconds, unless it was killed or stopped there).
PATIENCE_S: Final = 2.0
_POLL_S: Final = 0.005


@dataclass(frozen=True)
class Scope:
    """A scope's state as read: `version` is the one an append based on it must find."""

    version: int
    state: dict[str, Any]
    # The last record, when it is an intent that was pending as read (else None).
    pending: RecordedEvent | None = None


@dataclass(frozen=True)
class Change:
    """An event's change of the shared state, as its append writes it: the session and the
    version its record takes, the nonce it carries, and each scope's delta."""

    session: str
    version: int
    nonce: str
    deltas: dict[str, dict[str, Any]]  # scope -> delta (only the scopes it changes)


def stream_of(app_name: str, user_id: str, scope: str) -> StreamId:
    name = layout.APP_STATE if scope == "app" else layout.user_stream(user_id)
    return StreamId(layout.app_of(app_name), name)


class SharedState:
    """The app: and user: state of an app's sessions, on `store`."""

    def __init__(self, store: EventStore):
        self.store = store

    # -- reading ----------------------------------------------------------------------------

    def read_op(self, stream: StreamId, own: tuple[str, int] | None = None) -> Op[Scope]:
        """The scope's state as a reader takes it; `own`: the reader's session and the head it
        read it at (an intent of that session's past the head is pending, as read)."""
        version = yield from self.store.stream_version_op(stream)
        if not version:
            return Scope(0, {})
        [last] = yield from self.store.read_stream_op(stream, version - 1, 1)
        return (yield from self._resolved_op(last, own))

    def _resolved_op(self, last: RecordedEvent, own: tuple[str, int] | None) -> Op[Scope]:
        f = last.fields
        intent = f.get("intent")
        if intent is None:
            return Scope(last.version, dict(f.get("state") or {}))
        session, at = str(intent["session"]), int(intent["version"])
        if own is not None and own[0] == session and at > own[1]:
            outcome = None  # committed or not, the reader's session was read before it
        else:
            outcome = yield from self._outcome_op(session, at, str(intent["nonce"]))
        if outcome is None:
            return Scope(last.version - 1, dict(f.get("before") or {}), last)
        return Scope(last.version, dict(f.get("state" if outcome else "before") or {}))

    def _outcome_op(self, session: str, at: int, nonce: str) -> Op[bool | None]:
        """An intent's outcome: True committed, False aborted, None pending."""
        found = yield from self.store.read_stream_op(StreamId(session, EVENTS), at - 1, 1)
        if not found:
            return None
        return found[0].fields.get("nonce") == nonce

    def settled_op(self, stream: StreamId) -> Op[Scope]:
        """The scope as a writer builds on it: a pending intent waited for, then aborted."""
        deadline = time.monotonic() + PATIENCE_S
        while True:
            scope = yield from self.read_op(stream)
            if scope.pending is None:
                return scope
            if time.monotonic() < deadline:
                yield Sleep(_POLL_S)
                continue
            intent = scope.pending.fields["intent"]
            # Named apart from the event's own "nonce": this record aborts the intent.
            abort = {"type": "mutation", "agent": AGENT, "kind": ABORT, "aborts": intent["nonce"]}
            at = int(intent["version"])
            events = StreamId(str(intent["session"]), EVENTS)
            try:  # its event's version taken: the intent can no longer commit
                key = f"adk-abort:{intent['nonce']}"
                yield from self.store.append_op(events, at - 1, key, [abort])
            except VersionConflict:
                pass  # something stands there already: the intent has settled
            deadline = time.monotonic() + PATIENCE_S

    # -- writing ----------------------------------------------------------------------------

    def intents_op(
        self, app_name: str, user_id: str, change: Change, read: dict[str, int]
    ) -> Op[dict[str, int]]:
        """Step 1: the change's intents, each at the scope's version as `read` (a scope missing
        from it, or at -1: as it is now). The versions they took; StaleSessionError when a
        scope changed since the read (the intents written so far cancelled)."""
        written: dict[str, int] = {}
        try:
            for scope, delta in change.deltas.items():
                stream = stream_of(app_name, user_id, scope)
                now = yield from self.settled_op(stream)
                if read.get(scope, -1) not in (-1, now.version):
                    raise StaleSessionError(STALE)
                record = {
                    "type": "mutation",
                    "agent": AGENT,
                    "kind": DELTA,
                    "delta": delta,
                    "state": {**now.state, **delta},
                    "before": now.state,
                    "intent": {
                        "session": change.session,
                        "version": change.version,
                        "nonce": change.nonce,
                    },
                }
                key = f"adk-{scope}:{change.nonce}"
                try:
                    done = yield from self.store.append_op(stream, now.version, key, [record])
                except VersionConflict:
                    raise StaleSessionError(STALE) from None
                written[scope] = done.last_version
        except BaseException:
            yield from self.cancel_op(app_name, user_id, change, written)
            raise
        return written

    def cancel_op(
        self, app_name: str, user_id: str, change: Change, written: dict[str, int]
    ) -> Op[None]:
        """Undo intents whose event will not be written: the state before each, after it. One
        that another writer built on already was settled by it (aborted)."""
        for scope, version in written.items():
            stream = stream_of(app_name, user_id, scope)
            [intent] = yield from self.store.read_stream_op(stream, version - 1, 1)
            record = {
                "type": "mutation",
                "agent": AGENT,
                "kind": DELTA,
                "delta": {},
                "state": intent.fields.get("before") or {},
                "cancels": change.nonce,
            }
            try:
                key = f"adk-cancel:{change.nonce}:{scope}"
                yield from self.store.append_op(stream, version, key, [record])
            except VersionConflict:
                pass

    def plain_op(
        self, app_name: str, user_id: str, deltas: dict[str, dict[str, Any]], key: str
    ) -> Op[None]:
        """Changes that no event carries (a session's making): each appended on the scope as
        settled, read again when another writer came first; an append id per change, so that a
        retry writes it once."""
        for scope, delta in deltas.items():
            stream = stream_of(app_name, user_id, scope)
            while True:
                now = yield from self.settled_op(stream)
                record = {
                    "type": "mutation",
                    "agent": AGENT,
                    "kind": DELTA,
                    "delta": delta,
                    "state": {**now.state, **delta},
                }
                try:
                    yield from self.store.append_op(
                        stream, now.version, f"adk-{scope}:{key}", [record]
                    )
                    break
                except VersionConflict:
                    continue
