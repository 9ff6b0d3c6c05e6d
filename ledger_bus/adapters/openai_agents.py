"""The OpenAI Agents SDK on the ledger: a Session, and function tools recorded before they run.

    from ledger_bus.agent import aio
    from ledger_bus.adapters.openai_agents import LedgerSession

    store = await aio.connect(url)
    session = LedgerSession("chat-42", store)
    agent = Agent(name="support", tools=session.record_tools([refund]))
    await Runner.run(agent, "refund order 7", session=session)

A session is a ledger session (its id, or `oa~<sha256>` for an id that is not a session id).
Its items are the stream `oa.items`: each `add_items` is one append, atomic, of an event per
item (what the item means, carrying the item: adapters/agents_items.py), with an append id made
for that one call, so the store's retry
of it after a lost reply lands once and two writers adding the same items at once add them
twice. `pop_item` appends an `agents.popped` mutation that withdraws the newest item, at the
version it read it at, so two pops at once never hand out one item; `clear_session` an
`agents.cleared` one that withdraws them all (and trims what it can of them, spec 3.12).
`get_items(limit)` folds the stream, kept up to date a round trip at a time.

Function tools: `session.record_tools(tools)` records each call as a `tool_call` in the
session's `oa.tools` stream before the tool runs and its `tool_result` after, under a lease
held while it runs. A run killed inside a tool leaves an open attempt the reconciler flags. The
model names each call, but after a crash the call is asked for again under a new id, so besides
its own id a call is matched by its tool and arguments: a call of a tool with the same arguments
as one requested and never finished stops (UnresolvedAttempt) until that attempt is resolved,
unless the tool is declared safe to replay; it is never run again silently.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import msgpack

from ledger_bus.model.extras import needs
from ledger_bus.model.jsontext import JSON, JSONObject

try:
    from agents import FunctionTool, RunHooks
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
    from agents.tool_context import ToolContext
except ImportError as err:
    raise needs(err, "ledger_bus.adapters.openai_agents") from None

from ledger_bus.adapters.agents_items import (
    ITEM,
    RESTS,
    item_events,
    model_events,
    whole_item,
)
from ledger_bus.adapters.calls import CallLedger, ToolStep, decided_text
from ledger_bus.adapters.packed import msgpack_array
from ledger_bus.adapters.view import Views, size_of
from ledger_bus.agent.recorder import DEFAULT_LEASE_MS, Capabilities
from ledger_bus.model.errors import InvalidInput, VersionConflict
from ledger_bus.model.ids import ANY, StreamId, check_name, derive_event_id
from ledger_bus.model.records import RecordedEvent
from ledger_bus.operations.retention import Retention, Sweeper
from ledger_bus.store import connect
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.store.base import Bounds, Deletes, EventStore, need
from ledger_bus.store.steps import Op, Sleep, contended

T = TypeVar("T")

AGENT: Final = "openai-agents"
ITEMS: Final = "oa.items"
RUNS: Final = "oa.runs"  # the runs of a session's agents and their model calls (run_hooks)
TOOLS: Final = "oa.tools"
POPPED: Final = "agents.popped"
CLEARED: Final = "agents.cleared"
# Every function tool call is recorded before it runs and after; recovery is best effort: the
# SDK keeps no checkpoint, so a call asked for again after a crash is matched by its tool and
# arguments, not by an id the framework keeps.
CAPABILITIES: Final = Capabilities(
    request_before_call="strict",
    record_outcome="strict",
    recovery="best_effort",
    profile="openai-agents",
)
# A pop that lost to other writers tries again for this long: each loss is another writer's
# progress, so only a session written without pause for all of it can hold a pop off.
CONFLICT_PATIENCE_S: Final = 30.0
DEFAULT_MAX_BYTES: Final = 256 * 1024 * 1024  # of items kept in the process, about, per store


def ledger_session(session_id: str) -> str:
    """The ledger session of an Agents SDK session id."""
    try:
        return check_name(session_id, "session id")
    except InvalidInput:
        return "oa~" + hashlib.sha256(session_id.encode()).hexdigest()[:40]


def _is_session(stream_names: Sequence[str]) -> bool:
    """Whether a ledger session is an Agents SDK session, by its streams (for retention)."""
    return ITEMS in stream_names


@dataclass
class _Items:
    """The items stream folded: the live items, by the version that added each."""

    # Each item packed (msgpack): what get_items and pop_item hand out is unpacked afresh, never
    # an object an earlier caller holds and may change, as SQLiteSession reads its rows anew.
    live: list[tuple[int, bytes]] = field(default_factory=list)
    # version -> the rest of the item its event stands for, and whether what the event says was
    # taken out of it, between an `agents.items` mutation and the events after it
    waiting: dict[int, tuple[Any, bool]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # call id -> its tool's name
    calls: dict[str, str] = field(default_factory=dict)  # call id -> its tool_call's event id


def _weigh(event: RecordedEvent) -> int:
    """About how many bytes a session's view keeps of an event: the part of an item it holds,
    counted as decoded (items are kept packed, in fewer)."""
    said = event.get("body", event.get("result", event.get("args")))
    return 100 + size_of(event.get("item", event.get("items"))) + size_of(said)


_SHARED: weakref.WeakKeyDictionary[EventStore, Views[_Items]] = weakref.WeakKeyDictionary()
_SHARING = threading.Lock()


def _shared_views(store: EventStore, max_bytes: int | None) -> Views[_Items]:
    with _SHARING:
        views = _SHARED.get(store)
        if views is None:
            views = _SHARED[store] = Views(_Items, _fold, _weigh, max_bytes)
        elif max_bytes is not None:
            views.max_bytes = min(views.max_bytes or max_bytes, max_bytes)
        return views


def _unpacked(packed: list[bytes]) -> list[JSON]:
    """The items `packed` holds, unpacked in one call."""
    items: list[JSON] = msgpack.unpackb(msgpack_array(packed))
    return items


def _fold(state: _Items, event: RecordedEvent) -> None:
    kind = event.get("kind")
    rest = state.waiting.pop(event.version, None)
    if rest is not None:  # an item's event: the item, put back together
        state.live.append((event.version, msgpack.packb(whole_item(event.fields, *rest))))
    if event.type == "tool_call":
        state.names[str(event.attempt_id)] = str(event["tool"])
        state.calls[str(event.attempt_id)] = event.event_id
    elif kind == RESTS:  # the rest of the items whose events follow it
        for d, held in event["items"]:
            state.waiting[event.version + abs(d)] = (held, d > 0)
    elif kind == ITEM:
        state.live.append((event.version, msgpack.packb(event["item"])))
    elif kind == POPPED:
        state.live = [(v, item) for v, item in state.live if v != event["item_version"]]
    elif kind == CLEARED:
        state.live = []
        state.waiting.clear()


class LedgerSession:
    """An Agents SDK Session (the `Session` protocol) on any ledger store.

    `store`: an aio AsyncStore, or an EventStore (run on worker threads).
    """

    capabilities: Final = CAPABILITIES
    session_settings: SessionSettings | None = None
    # Whether this session's record_tools is in use: the calls its items carry may then be
    # recorded already, and are looked up before the items' events are written.
    tools_recorded: bool = False

    def __init__(  # noqa: PLR0913  (public: keyword-only options, each with its default)
        self,
        session_id: str,
        store: EventStore | AsyncStore,
        *,
        lease_ttl_ms: int = DEFAULT_LEASE_MS,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        retention: Retention | None = None,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
    ):
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self.astore = store if isinstance(store, AsyncStore) else None
        self.store: EventStore = store.core if isinstance(store, AsyncStore) else store
        # Its items are rewritten through a bound and a session is deleted whole: a store
        # without those is refused here, in one line (its calls ask for attempts: CallLedger).
        need(self.store, Bounds)
        need(self.store, Deletes)
        self.items = StreamId(ledger_session(session_id), ITEMS)
        # The items of the sessions read in this process, shared by every LedgerSession on
        # this store (a session object made per request reads only what is new), and capped.
        self._views = _shared_views(self.store, max_bytes)
        self.calls = CallLedger(self.store, agent=AGENT, lease_ttl_ms=lease_ttl_ms)
        self._owned = False  # whether close() closes the store (a session from_url)
        # retention: sessions idle past it deleted (or archived) whole (retention.py)
        self.retention = (
            Sweeper(retention, self.store, _is_session, self.astore) if retention else None
        )

    @classmethod
    def from_url(cls, session_id: str, url: str, **options: Any) -> LedgerSession:
        """A session on the store at `url` (any URL `ledger_bus.connect` takes), as the SDK's
        RedisSession.from_url gives one; `close()` closes that store. `options`: the
        session's (lease_ttl_ms, session_settings) and connect's (prefix, timeout, ...)."""
        own = {
            k: options.pop(k)
            for k in ("lease_ttl_ms", "session_settings", "retention", "max_bytes")
            if k in options
        }
        session = cls(session_id, connect(url, **options), **own)
        session._owned = True
        return session

    def memory(self) -> int:
        """About how many bytes of items the sessions on this store keep in this process (the
        smallest `max_bytes` any of them was given caps them all)."""
        return self._views.held()

    def close(self) -> None:
        """Close the store, if this session opened it (from_url); as SQLiteSession's, not
        awaited."""
        if self._owned:
            self.store.close()

    async def _drive(self, op: Op[T]) -> T:
        if self.astore is not None:
            return await self.astore.drive(op)
        return await asyncio.to_thread(self.store.run_op, op)

    # -- the Session protocol -------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The session's items, oldest first; with `limit` (else `session_settings.limit`, as
        the SDK's own sessions take it), the newest `limit` of them."""
        state = await self._drive(self._views.of(self.items).refresh_op(self.store))
        live = state.live
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None:
            live = live[-limit:] if limit > 0 else []
        return _unpacked([packed for _, packed in live])

    async def add_items(self, items: list[Any]) -> None:
        """Append the items, in one atomic append (up to the store's events per append)."""
        if not items:
            return
        json.dumps(items)  # an item that is not JSON is a TypeError, as in the SDK's sessions
        await self._drive(self._add_op(items, _call_id("add")))
        if self.retention is not None:
            self.retention.kick()

    async def pop_item(self) -> Any | None:
        """Withdraw the newest item and return it (None when there is none)."""
        return await self._drive(self._pop_op())

    async def clear_session(self) -> None:
        """Withdraw every item; the session id can be used again at once."""
        await self._drive(self._clear_op())

    # -- operations -----------------------------------------------------------------------------

    def _add_op(self, items: list[Any], append_id: str) -> Op[None]:
        """The items, each the event that says what it means and carries it
        (adapters/agents_items.py), in one append."""
        asked = {
            str(i["call_id"])
            for i in items
            if isinstance(i, dict) and i.get("call_id") and "function_call" in str(i.get("type"))
        }
        recorded: dict[str, tuple[str, str | None]] = {}
        if asked and self.tools_recorded:  # else no call of these was recorded as it ran
            tools = StreamId(self.items.session_id, TOOLS)
            found = yield from self.calls.recorded_op(tools, asked)
            recorded = {s: (r, o.event_id if o else None) for s, (r, o) in found.items()}
        session, stream = self.items.session_id, self.items.name
        view = self._views.of(self.items)
        state = view.state
        called = {str(i.get("call_id")) for i in items if _kind(i) == "function_call"}
        if any(_kind(i) == "function_call_output" and i["call_id"] not in called for i in items):
            state = yield from view.refresh_op(self.store)  # its call came in an earlier add
        events = item_events(
            items,
            lambda n: derive_event_id(session, stream, append_id, n),
            state.names,
            {**{c: (e, None) for c, e in state.calls.items()}, **recorded},
            AGENT,
        )
        yield from self._append_op(events, append_id)

    def _append_op(self, events: list[dict[str, Any]], append_id: str) -> Op[None]:
        """Append `events` wherever the stream is: items from other writers may come between
        two calls, never inside one. `append_id` names this one call (the store's retries of
        it after a lost reply land once); two calls adding the same items are two appends."""
        yield from self.store.append_op(self.items, ANY, append_id, events)

    def _pop_op(self) -> Op[Any | None]:
        """Withdraw the newest item at the version it was read at: a writer who got there
        first (another pop, an add) makes this pop read again and take the newest then, so
        each item is handed out once."""
        view = self._views.of(self.items)
        append_id = _call_id("pop")
        deadline = time.monotonic() + CONFLICT_PATIENCE_S
        losses = 0
        while True:
            state = yield from view.refresh_op(self.store)
            if not state.live:
                return None
            item_version, packed = state.live[-1]
            event = {
                "type": "mutation",
                "agent": AGENT,
                "kind": POPPED,
                "item_version": item_version,
            }
            try:
                yield from self.store.append_op(self.items, view.version, append_id, [event])
            except VersionConflict as lost:
                if time.monotonic() > deadline:
                    raise lost
                losses += 1
                yield Sleep(contended(losses))
                continue
            return msgpack.unpackb(packed)

    def _clear_op(self) -> Op[None]:
        event = {"type": "mutation", "agent": AGENT, "kind": CLEARED}
        # Bounded to the marker while it is appended: the append trims the items before it. The
        # bound is for this append alone: killed before it is lifted, it trims nothing more.
        append_id = _call_id("clear")
        yield from self.store.bound_stream_op(self.items, 1, dedup_window_ms=0, only=append_id)
        try:
            yield from self._append_op([event], append_id)
        finally:
            yield from self.store.bound_stream_op(self.items, None)

    # -- runs and model calls ----------------------------------------------------------------------

    def run_hooks(self) -> RunHooks[Any]:
        """RunHooks for `Runner.run(..., hooks=session.run_hooks())`: each agent that runs a
        run of its own in the session's `oa.runs` stream (`run.started`, `run.finished`), the
        agent a handoff passes to a run whose parent is the run that handed off, and each model
        response its model call with its token usage."""
        return _RunRecorder(self)

    # -- function tools -------------------------------------------------------------------------

    def record_tools(
        self, tools: Sequence[FunctionTool], *, safe_to_replay: Sequence[str] = ()
    ) -> list[FunctionTool]:
        """The tools, each call of each recorded in this session before it runs and after.
        `safe_to_replay`: tools that may run again after a crash left a call unfinished."""
        safe = frozenset(safe_to_replay)
        self.tools_recorded = True
        return [self._recorded(tool, tool.name in safe) for tool in tools]

    def _recorded(self, tool: FunctionTool, safe: bool) -> FunctionTool:
        invoke = tool.on_invoke_tool
        stream = StreamId(self.items.session_id, TOOLS)

        def sync(op: Op[T]) -> T:
            return self.store.run_op(op)

        async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> object:
            args = _arguments(arguments)
            guard = self.calls.guard(stream, sync)
            done, found = await self._drive(
                guard.begin_op(
                    ToolStep(
                        context.tool_call_id, tool.name, args, safe, match_args=True, named=True
                    )
                )
            )
            if done:
                return _replayed(found)
            return await guard.finish_async(
                found, lambda: invoke(context, arguments), _outcome, self._drive
            )

        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


def _kind(item: object) -> str | None:
    return item.get("type") if isinstance(item, dict) else None


def _arguments(text: str) -> JSONObject:
    """A call's arguments as recorded: its JSON object, or the text as the model sent it."""
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {"raw": text}
    return found if isinstance(found, dict) else {"value": found}


def _outcome(value: object) -> tuple[str, Any]:
    """A tool's output as recorded: JSON where it is JSON, else its text."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return "ok", str(value)
    return "ok", value


def _replayed(recorded: RecordedEvent) -> object:
    """A call's recorded outcome as its function tool's output: the value of an ok outcome
    (the tool's own, or one an operator decided with `ledger-bus resolve --ok`), else a text
    the model reads as a failure that was not retried."""
    result = recorded.get("result")
    if recorded.get("status") == "ok":
        return result
    return f"error: {decided_text(result)}"


def _call_id(kind: str) -> str:
    """The append id of one call of the session: made once, kept across its retries."""
    return f"oa:{kind}:{uuid.uuid4().hex}"


__all__ = ["CAPABILITIES", "LedgerSession", "ledger_session"]


class _RunRecorder(RunHooks[Any]):
    """LedgerSession.run_hooks: a Runner's agents as runs, their model calls with usage."""

    def __init__(self, session: LedgerSession):
        self.session = session
        self.stream = StreamId(session.items.session_id, RUNS)
        self.runs: dict[int, tuple[str, str]] = {}  # id(agent) -> (run id, run.started's id)
        # id(agent) -> the run that handed off to it: its id and its run.started's event id
        self.handed: dict[int, tuple[str, str]] = {}

    async def _write(self, events: list[JSONObject]) -> list[str]:
        key = _call_id("run")
        session, name = self.stream.session_id, self.stream.name
        ids = [derive_event_id(session, name, key, n) for n in range(len(events))]
        await self.session._drive(self.session.store.append_op(self.stream, ANY, key, events))
        return ids

    async def on_agent_start(self, context: object, agent: Any) -> None:
        if id(agent) in self.runs:
            return
        run_id = uuid.uuid4().hex[:16]
        parent = self.handed.pop(id(agent), None)
        started = {"type": "mutation", "agent": str(agent.name), "kind": "run.started"}
        event: JSONObject = {**started, "run_id": run_id}
        if parent is not None:
            event.update(parent_run=parent[0], parents=[parent[1]])
        (event_id,) = await self._write([event])
        self.runs[id(agent)] = (run_id, event_id)

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        """The run that hands off ends there; the next agent's run follows from it."""
        found = self.runs.pop(id(from_agent), None)
        if found is not None:
            self.handed[id(to_agent)] = found
            finished = {"type": "mutation", "agent": str(from_agent.name), "kind": "run.finished"}
            handed = {"status": "ok", "handed_to": str(to_agent.name)}
            await self._write([{**finished, "run_id": found[0], **handed}])

    async def on_llm_end(self, context: Any, agent: Any, response: object) -> None:
        run_id = self.runs.get(id(agent), (None, ""))[0]
        model = agent.model if isinstance(agent.model, str) else getattr(agent.model, "model", None)
        attempt = f"model:{getattr(response, 'response_id', None) or uuid.uuid4().hex}"
        call, result = model_events(str(agent.name), run_id, model, response, attempt)
        key = _call_id("model")
        call_id = derive_event_id(self.stream.session_id, self.stream.name, key, 0)
        events = [call, {**result, "parents": [call_id]}]
        await self.session._drive(self.session.store.append_op(self.stream, ANY, key, events))

    async def on_agent_end(self, context: object, agent: Any, output: object) -> None:
        found = self.runs.pop(id(agent), None)
        if found is not None:
            finished = {"type": "mutation", "agent": str(agent.name), "kind": "run.finished"}
            await self._write([{**finished, "run_id": found[0], "status": "ok"}])
