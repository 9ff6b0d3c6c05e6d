"""LedgerSessionService: Google ADK's session service on the ledger (layout in layout.py).

Concurrency. Each Session handed out carries the version of its stream it was read at (ADK's
own `_storage_update_marker`); an event is appended at that version, so a runner whose session
another runner appended to since is refused with ADK's StaleSessionError and writes nothing: its
events are never interleaved into the other's turn. A Session made by hand (no marker) is
accepted where ADK's database service accepts one: when its last event is the stored last event.

Reads. `get_session(..., GetSessionConfig(num_recent_events=N))` reads the stream's tail back to
N events and the newest state checkpoint (at most CHECKPOINT_EVERY events back): O(N) however
long the session. The `app:` and `user:` state are the last records of their own
streams, each holding the state after its change.

Calls. An event asking for function calls is the calls' request (`tool_call`, attempt = ADK's
function-call id), committed before ADK runs them; the service then holds the run's lease
(`run-<run>`, renewed while the calls are out) until their responses are appended, so a process
that dies inside a tool leaves open attempts the reconciler flags. When a session is read, a
call whose outcome the ledger holds but ADK never got (`ledger-bus resolve`) is given back as
its function response, written as ADK's own event, so the agent's next model request carries
the call with its response.

app:/user: state lives in the app's ledger session; an event that changes it writes the change
as an intent its own append commits (shared.py), so the two are seen together or not at all, and
an append whose session was read before a change of a scope it changes is refused as stale.

Leases. The run's lease, held while its calls are out, fences the session's appends made for
that run: a process stopped past it (another took the run over, or it lapsed) writes nothing more
(LeaseLost), whatever it had queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from contextvars import Token
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from google.genai import types

from ledger_bus.adapters.adk import layout
from ledger_bus.adapters.adk.layout import (
    AGENT,
    CHECKPOINT,
    CHECKPOINT_EVERY,
    CREATED,
    DELETED,
    DIRECTORY,
    EVENT,
    EVENTS,
    HEADER,
)
from ledger_bus.adapters.adk.normalize import call_key, normalized, safe
from ledger_bus.adapters.adk.shared import SCOPES, STALE, Change, Own, SharedState
from ledger_bus.agent.current import CurrentCall, enter, leave
from ledger_bus.agent.recorder import DEFAULT_LEASE_MS, UnresolvedAttempt
from ledger_bus.model.errors import (
    BackendUnavailable,
    DurabilityNotConfirmed,
    IdempotencyConflict,
    LeaseLost,
    LedgerError,
    VersionConflict,
)
from ledger_bus.model.ids import ANY, StreamId
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.prepared import Fence, lease_lost
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store import connect
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.store.base import Attempts, Deletes, EventStore, need
from ledger_bus.store.steps import Op, Sleep

T = TypeVar("T")

_FIRST_PAGE: Final = 64
# How often a read of a session and its shared state is made again while the session moves.
_SHARED_READS: Final = 10


@dataclass
class _Read:
    """A stream read back from its head: the session as far as it was read."""

    head: int
    header: dict[str, Any] | None = None
    state: dict[str, Any] = field(default_factory=dict)  # session-scoped, at the head
    # The ADK events read, in order, as stored: only those handed out are validated (a read
    # back to a checkpoint passes up to CHECKPOINT_EVERY events it does not return).
    events: list[dict[str, Any]] = field(default_factory=list)
    outcomes: dict[str, RecordedEvent] = field(default_factory=dict)  # tool_results, by attempt
    checkpoint: int = 0  # the version of the newest checkpoint (or the header)
    since_checkpoint: int = 0  # ADK events after it
    # Each record read: its version -> the nonce it carries ("" for none), so that an intent of
    # this session's is resolved from the read itself (shared.py).
    placed: dict[int, str] = field(default_factory=dict)

    def at(self, shared: dict[str, int]) -> Position:
        """Where the read stands, with the versions of the shared state read beside it."""
        return Position(
            self.head, self.since_checkpoint, self.checkpoint, shared["app"], shared["user"]
        )

    @property
    def updated(self) -> float:
        """The session's last update: its last event's time, or its making's."""
        if self.events:
            return float(self.events[-1].get("timestamp", 0.0))
        return float((self.header or {}).get("created", 0.0))


@dataclass(frozen=True)
class Position:
    """Where a Session stands in its stream, kept as ADK's storage marker: the version it was
    read (or written) at, the ADK events since the newest state checkpoint, and its version; and
    the versions of its app's and user's state as read (shared.py; -1: not known)."""

    version: int
    since: int
    checkpoint: int
    app: int = -1
    user: int = -1

    def marker(self) -> str:
        return f"{self.version}/{self.since}/{self.checkpoint}/{self.app}/{self.user}"

    @classmethod
    def of(cls, marker: str) -> Position:
        return cls(*(int(part) for part in marker.split("/")))

    def shared(self) -> dict[str, int]:
        return {"app": self.app, "user": self.user}


def _dump(event: Event) -> JSONObject:
    """The event as ADK's database service stores it."""
    return event.model_dump(mode="json", exclude_none=True)


def _handed(  # noqa: PLR0913  (a Session's fields, each its own)
    app_name: str,
    user_id: str,
    session_id: str,
    state: JSONObject,
    updated: float,
    at: Position,
    events: list[Event] | None = None,
) -> Session:
    """A Session as the service hands it out: marked with where it stands in its stream."""
    session = Session(
        id=session_id,
        app_name=app_name,
        user_id=user_id,
        state=state,
        events=events or [],
        last_update_time=updated,
    )
    session._storage_update_marker = at.marker()
    return session


def _prefixed(app: JSONObject, user: JSONObject) -> JSONObject:
    """The app's and a user's state as ADK merges them into a session's: prefixed."""
    return {
        **{State.APP_PREFIX + k: v for k, v in app.items()},
        **{State.USER_PREFIX + k: v for k, v in user.items()},
    }


def _apply(state: JSONObject, delta: JSONObject) -> None:
    """A delta on the session-scoped state: its keys without a scope's prefix, each replaced."""
    for key, value in delta.items():
        if not key.startswith((State.APP_PREFIX, State.USER_PREFIX, State.TEMP_PREFIX)):
            state[key] = value


def _fold(records: list[RecordedEvent], head: int) -> _Read:
    """A stream's records (its tail, or all of it) as what the session is at the head."""
    read = _Read(head)
    for record in records:
        f = record.fields
        kind = f.get("kind")
        if kind == HEADER:
            read.header = f
        if kind in (HEADER, CHECKPOINT):
            read.state = dict(f.get("state") or {})
            read.checkpoint = record.version
    for record in records:
        f = record.fields
        read.placed[record.version] = str(f.get("nonce") or "")
        if f.get("kind") == EVENT:
            read.events.append(f["event"])
            if record.version > read.checkpoint:
                _apply(read.state, (f["event"].get("actions") or {}).get("state_delta") or {})
                read.since_checkpoint += 1
        elif record.type == "tool_result":
            read.outcomes[str(f.get("attempt_id"))] = record
    return read


def _checkpoint_of(records: list[RecordedEvent]) -> int | None:
    """The version of the newest checkpoint (or the header) these records hold or name (an
    event names the checkpoint its state follows); None when they say nothing of it."""
    for record in reversed(records):
        kind = record.fields.get("kind")
        if kind in (HEADER, CHECKPOINT):
            return record.version
        if kind == EVENT and "checkpoint" in record.fields:
            return int(record.fields["checkpoint"])
    return None


def _enough(records: list[RecordedEvent], want: int | None, after: float | None) -> bool:
    """Whether the records hold `want` ADK events, and one from before `after`."""
    events = [r for r in records if r.fields.get("kind") == EVENT]
    if want is not None and len(events) < want:
        return False
    if after is not None:
        return bool(events) and float(events[0].fields["event"].get("timestamp", 0.0)) < after
    return True


class _Guard(BasePlugin):
    """LedgerSessionService.guard's plugin: it also gives each tool it lets run its call
    (`ledger_bus.current_call()`, the call's idempotency key among it) while it runs."""

    def __init__(self, service: LedgerSessionService, safe: frozenset[str]):
        super().__init__(name="ledger_bus_guard")
        self.service = service
        self.safe = safe
        self._calling: dict[str, Token[CurrentCall | None]] = {}  # function call id -> its set

    async def before_tool_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any
    ) -> JSONObject | None:
        refused = self._refused(tool, tool_args, tool_context)
        if refused is None:
            # Set here and reset after the tool: ADK awaits this callback, then the tool, in one
            # task, so the tool sees it (a context variable set in an awaited coroutine stays).
            session = tool_context.session
            ledger = layout.session_of(session.app_name, session.user_id, session.id)
            call_id = tool_context.function_call_id or ""
            call = CurrentCall(
                tool.name,
                ledger,
                layout.run_of(tool_context.invocation_id, tool_context.agent_name),
                safe(call_id),
                safe(call_id),
                call_key(ledger, tool_context.invocation_id, tool_context.agent_name, call_id),
                dict(tool_args),
            )
            self._calling[call_id] = enter(call)
        return refused

    async def after_tool_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, result: Any
    ) -> JSONObject | None:
        self._done(tool_context)
        return None

    async def on_tool_error_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, error: Exception
    ) -> JSONObject | None:
        self._done(tool_context)
        return None

    def _done(self, tool_context: Any) -> None:
        token = self._calling.pop(tool_context.function_call_id or "", None)
        if token is not None:
            leave(token)

    def _refused(
        self, tool: Any, tool_args: dict[str, Any], tool_context: Any
    ) -> JSONObject | None:
        """Why the tool may not run (its response), or None."""
        if tool.name in self.safe:
            return None
        events = tool_context.session.events
        answered = {r.id for e in events for r in e.get_function_responses()}
        mine = {c for out in self.service._out.values() for c in out.calls}
        current = tool_context.function_call_id
        for event in events:
            for call in event.get_function_calls():
                if not call.id or call.id in answered or call.id in mine:
                    continue  # answered, or asked for in this process and running now
                replayed = call.id == current  # a resumed invocation running its call again
                same = call.name == tool.name and dict(call.args or {}) == tool_args
                if replayed or (same and event.invocation_id != tool_context.invocation_id):
                    return {"error": f"not run: {UnresolvedAttempt(call.id, tool.name)}"}
        return None


@dataclass
class _Out:
    """A run whose function calls are out, its lease held while they are."""

    ledger: str
    calls: set[str]
    fence: Fence | None


class LedgerSessionService(BaseSessionService):
    """A Google ADK session service on any ledger store.

    `store`: an aio AsyncStore, or an EventStore (run on worker threads). It must have leases
    and open attempts, and deletion: Unsupported, in one line, when it has not.
    """

    def __init__(self, store: EventStore | AsyncStore, *, lease_ttl_ms: int = DEFAULT_LEASE_MS):
        self.astore = store if isinstance(store, AsyncStore) else None
        self.store: EventStore = store.core if isinstance(store, AsyncStore) else store
        need(self.store, Attempts)
        need(self.store, Deletes)
        self.lease_ttl_ms = lease_ttl_ms
        self.owner = uuid.uuid4().hex
        self.shared = SharedState(self.store)
        # Runs whose function calls are out, each with its ledger session, the calls not
        # answered yet, and the run's lease as held here (None: another process holds it).
        self._out: dict[str, _Out] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._locks: dict[tuple[int, str], tuple[asyncio.Lock, list[int]]] = {}
        self._owned = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> LedgerSessionService:
        """A service on the store at `url` (any URL `ledger_bus.connect` takes); `close()` closes
        that store. `options`: the service's (lease_ttl_ms) and connect's (prefix, ...)."""
        own = {k: options.pop(k) for k in ("lease_ttl_ms",) if k in options}
        service = cls(connect(url, **options), **own)
        service._owned = True
        return service

    async def close(self) -> None:
        """Let the leases of calls still out go, and close the store if this service opened it."""
        if self._renewer is not None:
            self._renewer.cancel()
        for run, out in list(self._out.items()):
            await self._drive(self.store.release_lease_op(out.ledger, f"run-{run}", self.owner))
        self._out.clear()
        if self._owned:
            self.store.close()

    def guard(self, *, safe_to_replay: Iterable[str] = ()) -> BasePlugin:
        """An app's plugin (`App(..., plugins=[service.guard()])`) that will not run a tool
        again with the arguments of a call a crash left without an outcome: ADK leaves such a
        call out of the model's request, and a model that asks for it again would run it twice
        unknowingly. The tool is not run; its response says why (an `error`, as ADK's tools
        report one), so the agent can tell its user, and the session goes on. Once an operator
        resolves the first call (`ledger-bus resolve`), its outcome is given back to the agent.
        A tool named in `safe_to_replay` runs again."""
        return _Guard(self, frozenset(safe_to_replay))

    async def _drive(self, op: Op[T]) -> T:
        if self.astore is not None:
            return await self.astore.drive(op)
        return await asyncio.to_thread(self.store.run_op, op)

    # -- sessions ---------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        session_id = (session_id.strip() if session_id else None) or str(uuid.uuid4())
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        made = time.time()
        header = {
            "type": "mutation",
            "agent": AGENT,
            "kind": HEADER,
            "app_name": app_name,
            "user_id": user_id,
            "session_id": session_id,
            "state": deltas["session"],
            "created": made,
        }
        ledger = layout.session_of(app_name, user_id, session_id)
        version, (shared, read) = await self._drive(
            self._create_op(app_name, ledger, header, deltas)
        )
        state = {**deltas["session"], **shared}
        at = Position(version, 0, version, read["app"], read["user"])
        return _handed(app_name, user_id, session_id, state, made, at)

    def _create_op(
        self, app_name: str, ledger: str, header: dict[str, Any], deltas: dict[str, Any]
    ) -> Op[tuple[int, tuple[JSONObject, dict[str, int]]]]:
        app = layout.app_of(app_name)
        made = uuid.uuid4().hex  # a session made again after a delete is another append
        # Listed first: a crash before the header leaves a listing that reads as no session.
        listed = {k: header[k] for k in ("user_id", "session_id")}
        entry = {"type": "mutation", "agent": AGENT, "kind": CREATED, "ledger": ledger, **listed}
        if (yield from self.store.stream_version_op(StreamId(ledger, EVENTS))):
            raise AlreadyExistsError(f"Session with id {header['session_id']} already exists.")
        yield from self.store.append_op(StreamId(app, DIRECTORY), ANY, f"adk-made:{made}", [entry])
        # The shared state before the header: a create that fails between the two is made
        # again by a retry (the session is not there yet), its changes the same once more.
        shared = {scope: deltas[scope] for scope in SCOPES if deltas.get(scope)}
        yield from self.shared.plain_op(app_name, str(header["user_id"]), shared, f"made:{made}")
        try:
            done = yield from self.store.append_op(
                StreamId(ledger, EVENTS), 0, f"adk-made:{made}", [header]
            )
        except VersionConflict:
            raise AlreadyExistsError(
                f"Session with id {header['session_id']} already exists."
            ) from None
        own = Own(ledger, done.last_version, {})
        return done.last_version, (
            yield from self._shared_op(app_name, str(header["user_id"]), own)
        )

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        session_id = session_id.strip() if session_id else session_id
        ledger = layout.session_of(app_name, user_id, session_id)
        want = config.num_recent_events if config else None
        after = config.after_timestamp if config else None
        found = await self._drive(self._get_op(app_name, user_id, ledger, want, after))
        if found is None:
            return None
        read, (shared, versions) = found
        raw = read.events
        if want is not None:
            raw = raw[-want:] if want else []
        if after is not None:
            kept = len(raw)
            while kept and raw[kept - 1].get("timestamp", 0.0) >= after:
                kept -= 1
            raw = raw[kept:]
        events = [Event.model_validate(e) for e in raw]
        state = {**read.state, **shared}
        at = read.at(versions)
        return _handed(app_name, user_id, session_id, state, read.updated, at, events)

    def _get_op(
        self, app_name: str, user_id: str, ledger: str, want: int | None, after: float | None
    ) -> Op[tuple[_Read, tuple[JSONObject, dict[str, int]]] | None]:
        """The session read (its tail: enough for `want` events after `after`), with the calls
        an operator resolved given back as their responses first; and its app's and user's
        state."""
        stream = StreamId(ledger, EVENTS)
        read = yield from self._read_op(stream, want, after)
        for _ in range(3):  # another reader giving the same responses back at once: read again
            given = self._given_back(read) if read is not None else []
            if read is None or not given:
                break
            with contextlib.suppress(VersionConflict, IdempotencyConflict):
                yield from self._give_back_op(stream, read, given)
            read = yield from self._read_op(stream, want, after)
        if read is None:
            return None
        for n in range(_SHARED_READS):
            shared = yield from self._shared_op(
                app_name, user_id, Own(ledger, read.head, read.placed)
            )
            # Unmoved meanwhile, the session committed nothing whose change the shared state
            # read could hold (another session's writer may have built on this one's intent,
            # committed just after the session was read): read again until it stands still.
            # Still moving after that (writers at it without a pause), the last read is handed
            # out: an append based on it is refused anyway, the session having moved on.
            if n == _SHARED_READS - 1 or (
                (yield from self.store.stream_version_op(stream)) == read.head
            ):
                break
            yield Sleep(0.001 * (n + 1))  # writers between their steps: let them through
            again = yield from self._read_op(stream, want, after)
            if again is None:
                return None
            read = again
        return read, shared

    def _read_op(self, stream: StreamId, want: int | None, after: float | None) -> Op[_Read | None]:
        """The stream read back from its head until it holds `want` ADK events (all of them when
        None), the first before `after`, and the newest state checkpoint: each event names the
        checkpoint its state follows, so once the events are read the rest is one read."""
        if want is None and after is None:  # all of it: its head is its last record's version
            whole = yield from self.store.read_stream_op(stream)
            return _fold(whole, whole[-1].version) if whole else None
        head = yield from self.store.stream_version_op(stream)
        if head == 0:
            return None
        size, lower = _FIRST_PAGE + 4 * (want or 0), head
        records: list[RecordedEvent] = []
        while lower > 0:
            target = max(0, lower - size)
            records = (
                yield from self.store.read_stream_op(stream, target, lower - target)
            ) + records
            lower = target
            checkpoint = _checkpoint_of(records)
            if not _enough(records, want, after):
                size *= 2
            elif checkpoint is None:
                size *= 2  # nothing in the page says where the state starts: read on
            elif checkpoint > lower:
                break
            else:
                size = lower - checkpoint + 1  # down to the checkpoint, and no further
        return _fold(records, head)

    # -- calls ------------------------------------------------------------------------------

    @staticmethod
    def _given_back(read: _Read) -> list[tuple[JSONObject, JSONObject, RecordedEvent]]:
        """The calls read that ADK has no response for and the ledger has an outcome for: the
        event that asked (as stored), the call, the outcome."""
        parts = [(e, p) for e in read.events for p in (e.get("content") or {}).get("parts") or []]
        answered = {p["function_response"].get("id") for _, p in parts if "function_response" in p}
        found = []
        for event, part in parts:
            call = part.get("function_call") or {}
            if call.get("id") and call["id"] not in answered and call["id"] in read.outcomes:
                found.append((event, call, read.outcomes[call["id"]]))
        return found

    def _give_back_op(
        self,
        stream: StreamId,
        read: _Read,
        given: list[tuple[JSONObject, JSONObject, RecordedEvent]],
    ) -> Op[None]:
        version = read.head
        for asked, call, outcome in given:
            value = outcome.fields.get("result")
            response = value if isinstance(value, dict) else {"result": value}
            if outcome.fields.get("status") == "error" and "error" not in response:
                response = {"error": value}
            answer = types.FunctionResponse(id=call["id"], name=call.get("name"), response=response)
            # Made alike by any reader that gives it back (its id, its time: the resolution's),
            # so that two at once write it once.
            event = Event(
                id=f"adk-given-{call['id']}",
                timestamp=outcome.recorded_at.timestamp(),
                invocation_id=asked.get("invocation_id", ""),
                author=asked.get("author", ""),
                branch=asked.get("branch"),
                content=types.Content(role="user", parts=[types.Part(function_response=answer)]),
            )
            # Its outcome is on the record already (the resolution): the event alone.
            records = [{"type": "mutation", "agent": AGENT, "kind": EVENT, "event": _dump(event)}]
            key = f"adk-given:{call['id']}"
            done = yield from self.store.append_op(stream, version, key, records)
            version = done.last_version

    async def _hold(self, ledger: str, event: Event) -> None:
        """The run's lease held while its calls are out; let go once all are answered. A
        long-running call is not held: its answer may come from another process, much later."""
        for response in event.get_function_responses():
            for out in self._out.values():
                out.calls.discard(response.id or "")
        await self._let_go([r for r, out in self._out.items() if not out.calls])
        waiting = event.long_running_tool_ids or set()
        calls = {c.id for c in event.get_function_calls() if c.id and c.id not in waiting}
        if not calls:
            return
        run = layout.run_of(event.invocation_id, event.author or AGENT)
        if run not in self._out:
            lease = f"run-{run}"
            # Not taken: another live process holds the run, and this one writes unfenced, as
            # any writer of the session may (its appends are still refused when stale).
            fence = await self._drive(
                self.store.hold_op(ledger, lease, self.owner, self.lease_ttl_ms)
            )
            self._out[run] = _Out(ledger, set(), fence)
        self._out[run].calls.update(calls)
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew())

    async def _let_go(self, runs: Iterable[str]) -> None:
        for run in runs:
            found = self._out.pop(run, None)
            if found is not None and found.fence is not None:
                lease = self.store.release_lease_op(found.ledger, f"run-{run}", self.owner)
                await self._drive(lease)
        if not self._out and self._renewer is not None:
            self._renewer.cancel()  # nothing out: no task left behind on the caller's loop
            self._renewer = None

    async def _renew(self) -> None:
        while self._out:
            await asyncio.sleep(self.lease_ttl_ms / 3000)
            for run, out in list(self._out.items()):
                if out.fence is None:
                    continue
                ttl = self.lease_ttl_ms
                # The store away for a moment: the next renewal tries again. A renewal that
                # finds the lease lost needs no answer here: the run's next append is refused.
                with contextlib.suppress(LedgerError):
                    await self._drive(
                        self.store.renew_lease_op(out.ledger, f"run-{run}", self.owner, ttl)
                    )

    # -- events -----------------------------------------------------------------------------

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        ledger = layout.session_of(session.app_name, session.user_id, session.id)
        # One append at a time per session in this process, as ADK's database service has it:
        # a second event of one Session (a background tool's response) waits for the first's
        # version instead of being refused as stale.
        async with self._one_at_a_time(ledger):
            records = self._records(session, event)
            run = layout.run_of(event.invocation_id, event.author or AGENT)
            out = self._out.get(run)
            fence = out.fence if out is not None else None
            try:
                at = await self._drive(self._append_op(session, ledger, event, records, fence))
            except (StaleSessionError, LeaseLost):
                # This run is over here: its calls still out are left to the reconciler (or to
                # the process that took the run over).
                await self._let_go([run])
                raise
            await self._hold(ledger, event)
            session.last_update_time = event.timestamp
            session._storage_update_marker = at.marker()
            return self._commit_event_to_session(session, event)

    @contextlib.asynccontextmanager
    async def _one_at_a_time(self, ledger: str) -> AsyncIterator[None]:
        """The session's lock in this process, kept while someone holds or waits for it (a
        server's sessions come and go: their locks do not pile up)."""
        key = (id(asyncio.get_running_loop()), ledger)  # a lock belongs to one loop
        held = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        held[1][0] += 1
        try:
            async with held[0]:
                yield
        finally:
            held[1][0] -= 1
            if not held[1][0]:
                self._locks.pop(key, None)

    def _records(self, session: Session, event: Event) -> list[dict[str, Any]]:
        """The event's append: its record, then what it says (normalize.py)."""
        author = event.author or AGENT
        ours = [e for e in session.events if e.invocation_id == event.invocation_id]
        starts = not any(e.author == author for e in ours)
        parent = next(
            (
                layout.run_of(e.invocation_id, e.author)
                for e in reversed(ours)
                if e.actions and e.actions.transfer_to_agent == author
            ),
            None,
        )
        stored = _dump(event)
        native = {"type": "mutation", "agent": AGENT, "kind": EVENT, "event": stored}
        # What the event says, read from it as stored: JSON, whatever the tools returned.
        said = Event.model_validate(stored)
        ledger = layout.session_of(session.app_name, session.user_id, session.id)
        return [native, *normalized(said, starts=starts, parent_run=parent, session_id=ledger)]

    def _append_op(
        self,
        session: Session,
        ledger: str,
        event: Event,
        records: list[dict[str, Any]],
        fence: Fence | None,
    ) -> Op[Position]:
        stream = StreamId(ledger, EVENTS)
        marker = session._storage_update_marker
        at = Position.of(marker) if marker else (yield from self._unmarked_op(stream, session))
        records[0]["checkpoint"] = at.checkpoint  # the state this event's delta follows
        checkpoints = at.since + 1 >= CHECKPOINT_EVERY
        if checkpoints:
            read = yield from self._read_op(stream, 0, None)
            if read is None or read.head != at.version:
                raise StaleSessionError(STALE)
            state = dict(read.state)
            _apply(state, records[0]["event"].get("actions", {}).get("state_delta") or {})
            records = [
                *records,
                {"type": "mutation", "agent": AGENT, "kind": CHECKPOINT, "state": state},
            ]
        delta = _session_util.extract_json_safe_state_delta(
            dict(event.actions.state_delta) if event.actions else {}
        )
        change = Change(
            ledger,
            at.version + 1,  # the event's record is its append's first
            uuid.uuid4().hex,
            {scope: delta[scope] for scope in SCOPES if delta.get(scope)},
        )
        shared = at.shared()
        written: dict[str, int] = {}
        if change.deltas:
            if fence is not None:  # a holder whose holding is over writes no intent either
                yield from self._still_held_op(ledger, fence)
            records[0]["nonce"] = change.nonce  # what commits the change's intents
            written = yield from self.shared.intents_op(
                session.app_name, session.user_id, change, shared
            )
            # A scope this Session never read (made by hand) stays unmarked: its state in the
            # Session is not the one the intent followed.
            shared.update({scope: v for scope, v in written.items() if shared[scope] != -1})
        try:
            done = yield from self.store.append_op(
                stream, at.version, f"adk-event:{event.id}", records, fence=fence
            )
        except (BackendUnavailable, DurabilityNotConfirmed):
            # The event may stand (it does, unconfirmed): its intents are left to be settled by
            # whoever meets them, as a writer killed here leaves them.
            raise
        except LedgerError as refused:  # nothing stands at the intents' place from this append
            yield from self.shared.cancel_op(session.app_name, session.user_id, change, written)
            if isinstance(refused, VersionConflict):
                if refused.actual == 0:
                    raise SessionNotFoundError(f"Session {session.id} not found.") from None
                raise StaleSessionError(STALE) from None
            raise
        if checkpoints:  # the checkpoint is the append's last record
            return Position(done.last_version, 0, done.last_version, shared["app"], shared["user"])
        return Position(
            done.last_version, at.since + 1, at.checkpoint, shared["app"], shared["user"]
        )

    def _still_held_op(self, ledger: str, fence: Fence) -> Op[None]:
        """LeaseLost unless this process still holds the run's lease as `fence` names it."""
        token = yield from self.store.renew_lease_op(
            ledger, fence.lease, fence.owner, self.lease_ttl_ms
        )
        if token != fence.token:
            raise lease_lost(fence, token)

    def _unmarked_op(self, stream: StreamId, session: Session) -> Op[Position]:
        """A Session made by hand is at the head when its last event is the stored last one
        (its shared state taken as it is now)."""
        read = yield from self._read_op(stream, 1, None)
        if read is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        stored = read.events[-1].get("id") if read.events else None
        mine = session.events[-1].id if session.events else None
        if stored != mine:
            raise StaleSessionError(STALE)
        return read.at({"app": -1, "user": -1})

    # -- what sessions share (shared.py) ----------------------------------------------------

    def _shared_op(
        self, app_name: str, user_id: str, own: Own | None = None
    ) -> Op[tuple[JSONObject, dict[str, int]]]:
        """The app's and the user's state, prefixed as ADK hands them out, and the versions read
        (`own`: the reader's session and its head, as SharedState.read_op takes them)."""
        read = yield from self.shared.read_op(app_name, user_id, own)
        versions = {scope: read[scope].version for scope in SCOPES}
        return _prefixed(read["app"].state, read["user"].state), versions

    async def get_user_state(self, *, app_name: str, user_id: str) -> JSONObject:
        read = await self._drive(self.shared.read_op(app_name, user_id, scopes=("user",)))
        return read["user"].state

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        found = await self._drive(self._list_op(app_name, user_id))
        sessions = [
            _handed(
                app_name, user, session_id, {**read.state, **state}, read.updated, read.at(versions)
            )
            for (user, session_id), read, (state, versions) in found
        ]
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    def _list_op(
        self, app_name: str, user_id: str | None
    ) -> Op[list[tuple[tuple[str, str], _Read, tuple[JSONObject, dict[str, int]]]]]:
        live: dict[tuple[str, str], str] = {}
        listing = StreamId(layout.app_of(app_name), DIRECTORY)
        for record in (yield from self.store.read_stream_op(listing)):
            f = record.fields
            key = (str(f["user_id"]), str(f["session_id"]))
            if f.get("kind") == CREATED:
                live[key] = str(f["ledger"])
            elif f.get("kind") == DELETED:
                live.pop(key, None)
        found = []
        # By user: the app's state read once, each user's once.
        shared: dict[str, tuple[JSONObject, dict[str, int]]] = {}
        app = (yield from self.shared.read_op(app_name, "", scopes=("app",)))["app"]
        for key, ledger in live.items():
            if user_id is not None and key[0] != user_id:
                continue
            read = yield from self._read_op(StreamId(ledger, EVENTS), 0, None)
            if read is None:
                continue
            if key[0] not in shared:
                user = (yield from self.shared.read_op(app_name, key[0], scopes=("user",)))["user"]
                versions = {"app": app.version, "user": user.version}
                shared[key[0]] = (_prefixed(app.state, user.state), versions)
            found.append((key, read, shared[key[0]]))
        return found

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        session_id = session_id.strip() if session_id else session_id
        await self._drive(self._delete_op(app_name, user_id, session_id))

    def _delete_op(self, app_name: str, user_id: str, session_id: str) -> Op[None]:
        ledger = layout.session_of(app_name, user_id, session_id)
        if not (yield from self.store.stream_version_op(StreamId(ledger, EVENTS))):
            return  # as ADK's services: deleting what is not there is no error
        entry = {
            "type": "mutation",
            "agent": AGENT,
            "kind": DELETED,
            "user_id": user_id,
            "session_id": session_id,
        }
        listing = StreamId(layout.app_of(app_name), DIRECTORY)
        yield from self.store.append_op(listing, ANY, f"adk-deleted:{uuid.uuid4().hex}", [entry])
        yield from self.shared.seal_op(app_name, user_id, ledger)
        yield from self.store.delete_session_op(ledger)
