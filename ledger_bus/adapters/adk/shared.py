"""What an ADK app's sessions share, the `app:` and `user:` state, kept so that an event and its
change of that state are seen together or not at all, and no change is lost.

The state lives in the app's ledger session (layout.py), a stream per scope, each record the
state after a change; the event lives in its own session's stream, in another hash slot, so the
two cannot be one append. So an event that changes shared state is written in two steps, the
event's own append the commit point:

1. an *intent* appended to each scope's stream it changes: the state after the change, the
   state before it, and the event's place (its session, the version its record will take, a
   nonce the record carries);
2. the event, appended to its session at the version the session was read at.
An intent is committed once its event's record stands at its place (the nonce matching), and
aborted once another record does, or once its session no longer reaches the place (deleted, or
rewound by a failover): final either way. Until then it is pending, and every reader takes the
state before it. A writer that meets a pending intent waits for it (its writer is between two
appends), and once the intent is PATIENCE_S old aborts it by taking the place (a writer killed
or stopped between its steps); a writer that gives up between its steps cancels its own intents
with a record of the state before them. Before a session is deleted, an intent of it still last
in a scope is followed by the state it resolves to (a seal), so that the deletion, which takes
the evidence of its outcome, changes no state.

A reader marks the version of each scope as it read it (the one before a pending intent), and an
event that changes a scope is refused as stale (StaleSessionError) when a change of that scope
came after the marked version: a record with a delta (cancels and seals have none), but for an
intent its own writer cancelled.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Final

from google.adk.errors import StaleSessionError

from ledger_bus.adapters.adk import layout
from ledger_bus.adapters.adk.layout import ABORT, AGENT, DELTA, EVENTS
from ledger_bus.model.errors import LedgerError, VersionConflict
from ledger_bus.model.ids import StreamId
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import EventStore
from ledger_bus.store.steps import Op, Sleep

# ADK's database service's words, so that a caller reads one message whichever service it runs.
STALE: Final = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)
SCOPES: Final = ("app", "user")
# How old a pending intent may grow before a writer that meets it takes its event's place (its
# writer is between two appends: milliseconds, unless it was killed or stopped there).
PATIENCE_MS: Final = 2_000
_POLL_S: Final = 0.005
# How many changes a writer looks back over for one to its scope since its read; further back,
# it is stale whatever they were.
_LOOK_BACK: Final = 100


@dataclass(frozen=True)
class Scope:
    """A scope's state as read: `version` is what an event based on it must find since."""

    version: int
    state: JSONObject
    # The last record, when it is an intent that was pending as read (else None).
    pending: RecordedEvent | None = None


@dataclass(frozen=True)
class Change:
    """An event's change of the shared state, as its append writes it: the session and the
    version its record takes, the nonce it carries, and each scope's delta."""

    session: str
    version: int
    nonce: str
    deltas: dict[str, JSONObject]  # scope -> delta (only the scopes it changes)


@dataclass(frozen=True)
class Own:
    """A reader's session as it read it: its ledger session, its head, and the nonces of the
    records it read by version (those it did not read are looked for in the store)."""

    session: str
    head: int
    placed: dict[int, str]


@dataclass
class _Outcomes:
    """Intents' outcomes found in one read, each looked for once: an event's intents in two
    scopes are seen alike (both before, or both after)."""

    found: dict[tuple[str, int, str], bool | None] = field(default_factory=dict)


def stream_of(app_name: str, user_id: str, scope: str) -> StreamId:
    name = layout.APP_STATE if scope == "app" else layout.user_stream(user_id)
    return StreamId(layout.app_of(app_name), name)


def _intent(record: RecordedEvent) -> tuple[str, int, str] | None:
    found = record.fields.get("intent")
    if found is None:
        return None
    return str(found["session"]), int(found["version"]), str(found["nonce"])


class SharedState:
    """The app: and user: state of an app's sessions, on `store`."""

    def __init__(self, store: EventStore):
        self.store = store

    # -- reading ----------------------------------------------------------------------------

    def read_op(
        self,
        app_name: str,
        user_id: str,
        own: Own | None = None,
        scopes: tuple[str, ...] = SCOPES,
    ) -> Op[dict[str, Scope]]:
        """The scopes' state as a reader takes it; `own`: the reader's session and the head it
        read it at (an intent of that session past the head is pending, as read). The last
        records are read first and each event's intents resolved once, so that a reader never
        sees one scope of an event's change and not the other."""
        last = {}
        for scope in scopes:
            last[scope] = yield from self._last_op(stream_of(app_name, user_id, scope))
        outcomes = _Outcomes()
        read = {}
        for scope, record in last.items():
            read[scope] = yield from self._resolved_op(record, own, outcomes)
        return read

    def _last_op(self, stream: StreamId) -> Op[RecordedEvent | None]:
        version = yield from self.store.stream_version_op(stream)
        if not version:
            return None
        found = yield from self.store.read_stream_op(stream, version - 1, 1)
        return found[0] if found else None

    def _resolved_op(
        self, last: RecordedEvent | None, own: Own | None, outcomes: _Outcomes
    ) -> Op[Scope]:
        if last is None:
            return Scope(0, {})
        f = last.fields
        intent = _intent(last)
        if intent is None:
            return Scope(last.version, dict(f.get("state") or {}))
        session, at, nonce = intent
        if own is not None and own.session == session and at > own.head:
            outcome = None  # committed or not, the reader's session was read before it
        elif own is not None and own.session == session and at in own.placed:
            outcome = own.placed[at] == nonce  # the place was read with the session
        else:
            if intent not in outcomes.found:
                outcomes.found[intent] = yield from self._outcome_op(*intent)
            outcome = outcomes.found[intent]
        if outcome is None:
            return Scope(last.version - 1, dict(f.get("before") or {}), last)
        return Scope(last.version, dict(f.get("state" if outcome else "before") or {}))

    def _outcome_op(self, session: str, at: int, nonce: str) -> Op[bool | None]:
        """An intent's outcome: True committed, False aborted, None pending."""
        events = StreamId(session, EVENTS)
        found = yield from self.store.read_stream_op(events, at - 1, 1)
        if found and found[0].version == at:
            return found[0].fields.get("nonce") == nonce
        # Its session short of the place's eve: deleted, or rewound, since; the event that was
        # to take it was refused, or is gone with the session.
        if (yield from self.store.stream_version_op(events)) < at - 1:
            return False
        return None

    # -- writing ----------------------------------------------------------------------------

    def settled_op(self, stream: StreamId, marked: int = -1) -> Op[Scope]:
        """The scope as a writer builds on it: a pending intent waited for until it is
        PATIENCE_MS old, then aborted. `marked`: the version the writer read it at (-1: none),
        which a pending intent past it makes stale at once (it is a change since, whatever
        becomes of it)."""
        while True:
            last = yield from self._last_op(stream)
            scope = yield from self._resolved_op(last, None, _Outcomes())
            if scope.pending is None:
                return scope
            session, at, nonce = _intent(scope.pending) or ("", 0, "")
            now = yield from self.store.now_ms_op()
            if now - int(scope.pending.recorded_at.timestamp() * 1000) < PATIENCE_MS:
                if marked != -1 and scope.pending.version > marked:
                    raise StaleSessionError(STALE)  # a change since the read, whatever its fate
                yield Sleep(_POLL_S)
                continue
            abort = {"type": "mutation", "agent": AGENT, "kind": ABORT, "aborts": nonce}
            try:  # its event's place taken: the intent can no longer commit
                key = f"adk-abort:{nonce}"
                yield from self.store.append_op(StreamId(session, EVENTS), at - 1, key, [abort])
            except VersionConflict:
                pass  # something stands there already (or the session fell short of it)

    def intents_op(
        self, app_name: str, user_id: str, change: Change, read: dict[str, int]
    ) -> Op[dict[str, int]]:
        """Step 1: the change's intents, on each scope as settled. StaleSessionError when a
        scope changed since the version `read` marks (-1: not known, taken as it is now); the
        intents written so far are cancelled. Returns the versions the intents took."""
        written: dict[str, int] = {}
        try:
            for scope, delta in change.deltas.items():
                stream = stream_of(app_name, user_id, scope)
                marked = read.get(scope, -1)
                now = yield from self.settled_op(stream, marked)
                if marked != -1 and (yield from self._changed_since_op(stream, marked, now)):
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
        except (StaleSessionError, LedgerError):
            yield from self.cancel_op(app_name, user_id, change, written)
            raise
        return written

    def _changed_since_op(self, stream: StreamId, marked: int, now: Scope) -> Op[bool]:
        """Whether a change of the scope (a record with a delta) came after `marked`."""
        if now.version == marked:
            return False
        if now.version - marked > _LOOK_BACK or now.version < marked:
            return True
        since = yield from self.store.read_stream_op(stream, marked, now.version - marked)
        # An intent its writer took back (its cancel among them) changed nothing; one aborted
        # otherwise counts, as finding that out would cost a read of its place.
        cancelled = {record.fields.get("cancels") for record in since}
        return any(
            record.fields.get("delta") and (_intent(record) or ("", 0, ""))[2] not in cancelled
            for record in since
        )

    def cancel_op(
        self, app_name: str, user_id: str, change: Change, written: dict[str, int]
    ) -> Op[None]:
        """Undo intents whose event was refused: the state before each, after it (delta-less:
        no change, for a reader's marker). One another writer built on already was settled by
        it (aborted: its place holds no record of this nonce)."""
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
                pass  # another writer came after it, having settled it

    def seal_op(self, app_name: str, user_id: str, session: str) -> Op[None]:
        """Before `session` is deleted: an intent of it still last in a scope (its outcome read
        from the session, which is about to go) followed by the state it resolves to, as a
        plain record, so that a committed change stays committed."""
        for scope in SCOPES:
            stream = stream_of(app_name, user_id, scope)
            last = yield from self._last_op(stream)
            intent = _intent(last) if last is not None else None
            if last is None or intent is None or intent[0] != session:
                continue
            now = yield from self._resolved_op(last, None, _Outcomes())
            if now.pending is not None:
                now = yield from self.settled_op(stream)  # aborted, or committed meanwhile
                if now.version != last.version:
                    continue  # another writer came after it, having settled it
            record = {
                "type": "mutation",
                "agent": AGENT,
                "kind": DELTA,
                "delta": {},
                "state": now.state,
                "seals": intent[2],
            }
            with contextlib.suppress(VersionConflict):
                yield from self.store.append_op(
                    stream, last.version, f"adk-seal:{intent[2]}", [record]
                )

    def plain_op(
        self, app_name: str, user_id: str, deltas: dict[str, JSONObject], key: str
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
