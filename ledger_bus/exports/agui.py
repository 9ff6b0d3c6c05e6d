"""A session as an AG-UI event stream (ag-ui-protocol), for any AG-UI front end to watch.

One stream is one AG-UI run of the thread the session is (`threadId` and `runId`: the session
id), opened by RUN_STARTED and followed for as long as the front end reads; it is never finished
by the stream, for the session may go on. What the ledger records is mapped event by event, the
same for every adapter's sessions, for they all write the ledger's own events:

- a `message`: TEXT_MESSAGE_START, TEXT_MESSAGE_CONTENT (its body), TEXT_MESSAGE_END; its role
  `user` when the agent `user` said it, else `assistant` named for its agent;
- a `tool_call`: TOOL_CALL_START, TOOL_CALL_ARGS (its arguments as JSON), TOOL_CALL_END, the
  call's id its attempt id; a `tool_result`: TOOL_CALL_RESULT (its result as JSON text), its
  status and any settlement in the event's metadata;
- a run's `run.started` or `run.resumed`: SUBAGENT_STARTED, the run a subagent of the stream's
  run (its id the run id, `#n` after it from a run id's second incarnation on, which AG-UI asks
  to be new); its `run.finished`: SUBAGENT_FINISHED, or SUBAGENT_ERROR when it failed. Every
  event of a run carries its subagent's id (`subagentRunId`);
- any other mutation: CUSTOM, named by its kind, its fields the value; a framework's own
  records (an ADK event as ADK keeps it, a LangGraph checkpoint, an A2A task) are left out.

Each mapped event has an id, `<cursor>/<n>`: the ledger event it comes from and its place among
the events made of it; it is the SSE event's id and `metadata.ledger.id`. A stream resumed
after an id (SSE's Last-Event-ID, or `?after=` an id or a bare cursor) sends what follows it,
nothing before. It opens, as every AG-UI stream must, with RUN_STARTED, and then says again what
is open at that point, each marked `metadata.ledger.reopened` and carrying the id it first had:
the runs started and not finished, and a message or call cut in the middle. A consumer that
keeps what it has by id sees every event once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    RunStartedEvent,
    StateSnapshotEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from ledger_bus.agent.filters import is_native
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.ids import cursor_ms, format_cursor, parse_cursor, quoted
from ledger_bus.model.records import RecordedEvent

STARTS: Final = ("run.started", "run.resumed")
_COMMON: Final = frozenset({"type", "agent", "event_id", "run_id", "step_id", "attempt_id", "kind"})
_OPENERS: Final = (TextMessageStartEvent, ToolCallStartEvent)


@dataclass(frozen=True)
class Position:
    """Where a stream resumes: after the ledger event at `cursor`, or inside it, after its
    mapped event `index` (None: after all of them)."""

    cursor: str
    index: int | None = None


def position(value: str | None) -> Position | None:
    """A resume point as a client gives it: `<cursor>/<n>` or `<cursor>`; None for none."""
    if not value:
        return None
    cursor, _, index = value.partition("/")
    try:
        # Written as the store writes cursors (one may come unpadded): they are compared as text.
        cursor = format_cursor(*parse_cursor(cursor))
        if index and not (index.isdigit() and len(index) < 6):
            raise ValueError(index)
    except (InvalidInput, ValueError):
        raise InvalidInput(f"not an AG-UI event id or a cursor: {quoted(value)}") from None
    return Position(cursor, int(index) if index else None)


@dataclass
class _Run:
    subagent: str
    agent: str
    opened_by: SubagentStartedEvent
    parent: str | None = None  # the ledger run it was delegated by
    parent_subagent: str | None = None  # that run's subagent then (its incarnation)


@dataclass
class Mapper:
    """The AG-UI events of one session's events, fed in commit order. It keeps what a resumed
    stream must say again: the runs open, and each run id's incarnations."""

    session_id: str
    runs: dict[str, _Run] = field(default_factory=dict)  # run id -> its open subagent
    incarnations: dict[str, int] = field(default_factory=dict)
    # A run delegated to -> the delegating run and the `delegate` call that named it.
    delegated: dict[str, tuple[str, str]] = field(default_factory=dict)

    def opening(self) -> RunStartedEvent:
        return RunStartedEvent(thread_id=self.session_id, run_id=self.session_id)

    def snapshot(self, at: str | None) -> StateSnapshotEvent:
        """What the session holds open where the stream starts: its runs still going."""
        running = {
            run: {"agent": r.agent, "subagentRunId": r.subagent} for run, r in self.runs.items()
        }
        return StateSnapshotEvent(snapshot={"session": self.session_id, "at": at, "runs": running})

    def reopened(self, before: str | None = None) -> list[BaseEvent]:
        """The runs open now, said again for a resumed stream (with `before`, an id: those
        opened up to it; one opened after it is still to be sent). A parent comes before its
        children; a parent no longer open, or open again as another incarnation, is not named,
        for the new stream never started the one the child was started under."""
        opened = {
            run: r
            for run, r in self.runs.items()
            if before is None or _order(ident_of(r.opened_by)) <= _order(before)
        }
        said: list[BaseEvent] = []
        placed: set[str] = set()

        def place(run: str, seen: frozenset[str]) -> None:
            if run in placed:
                return
            r = opened[run]
            parent = r.parent if r.parent in opened and r.parent not in seen else None
            if parent is not None and opened[parent].subagent != r.parent_subagent:
                parent = None  # restarted since: the parent it was started under has ended
            if parent is not None:
                place(parent, seen | {run})
            again = _reopen(r.opened_by)
            assert isinstance(again, SubagentStartedEvent)
            if parent is not None:
                again.parent_subagent_run_id = opened[parent].subagent
            else:
                again.parent_subagent_run_id = again.parent_tool_call_id = None
            said.append(again)
            placed.add(run)

        for run in opened:
            place(run, frozenset())
        return said

    def feed(self, event: RecordedEvent) -> list[BaseEvent]:
        """The AG-UI events of `event`, each with its id in its metadata."""
        made = self._made(event)
        at = cursor_ms(event.cursor)  # when it was committed, in ms, as AG-UI's timestamps are
        for n, one in enumerate(made):
            one.timestamp = at
            one.metadata = {**(one.metadata or {}), "ledger": {"id": f"{event.cursor}/{n}"}}
        return made

    def _made(self, event: RecordedEvent) -> list[BaseEvent]:
        if is_native(event):  # a framework's own record, kept for its resume: not for a front end
            return []
        f = event.fields
        run = f.get("run_id")
        tag: dict[str, Any] = {}
        if run:
            open_run = self.runs.get(run)
            tag = {"subagent_run_id": open_run.subagent if open_run else run}
        kind = event.type
        if kind == "message":
            return _message(event, tag)
        if kind == "tool_call":
            call = str(f["attempt_id"])
            child = (f.get("args") or {}).get("child_run") if f.get("tool") == "delegate" else None
            if run and isinstance(child, str):
                self.delegated[child] = (run, call)
            args = orjson.dumps(f.get("args", {}), option=orjson.OPT_SORT_KEYS).decode()
            return [
                ToolCallStartEvent(tool_call_id=call, tool_call_name=str(f["tool"]), **tag),
                ToolCallArgsEvent(tool_call_id=call, delta=args, **tag),
                ToolCallEndEvent(tool_call_id=call, **tag),
            ]
        if kind == "tool_result":
            return [_result(event, tag)]
        what = f.get("kind")
        if what in STARTS and run:
            return self._started(run, event)
        if what == "run.finished" and run and run in self.runs:
            return [self._finished(run, event)]
        value = {k: v for k, v in f.items() if k not in _COMMON}
        value["agent"] = event.agent
        return [CustomEvent(name=str(what), value=value, **tag)]

    def _started(self, run: str, event: RecordedEvent) -> list[BaseEvent]:
        made: list[BaseEvent] = []
        if run in self.runs:  # started again before it finished: the first one ends here
            made.append(SubagentFinishedEvent(subagent_run_id=self.runs.pop(run).subagent))
        n = self.incarnations[run] = self.incarnations.get(run, 0) + 1
        subagent = run if n == 1 else f"{run}#{n}"
        # Its parent: the run that delegated it (a `delegate` call naming it), or the one its
        # run.started names.
        by, call = self.delegated.get(run, (str(event.fields.get("parent_run") or ""), None))
        parent = self.runs.get(by)
        linked: dict[str, str] = {}
        if parent is not None:
            linked["parent_subagent_run_id"] = parent.subagent
            if call is not None:
                linked["parent_tool_call_id"] = call
        started = SubagentStartedEvent(subagent_run_id=subagent, name=event.agent, **linked)
        self.runs[run] = _Run(
            subagent,
            event.agent,
            started,
            by if parent is not None else None,
            parent.subagent if parent is not None else None,
        )
        made.append(started)
        return made

    def _finished(self, run: str, event: RecordedEvent) -> BaseEvent:
        subagent = self.runs.pop(run).subagent
        status = event.fields.get("status")
        if status == "error":
            said = event.fields.get("error") or event.fields.get("state") or "the run failed"
            return SubagentErrorEvent(subagent_run_id=subagent, message=str(said))
        return SubagentFinishedEvent(subagent_run_id=subagent)


def ident_of(event: BaseEvent) -> str:
    """A mapped event's id, whether or not it is said again."""
    return str(((event.metadata or {}).get("ledger") or {}).get("id", ""))


def _order(found: str) -> tuple[str, int]:
    cursor, _, n = found.partition("/")
    return cursor, int(n or 1 << 30)


def resumed_inside(made: list[BaseEvent], index: int) -> list[BaseEvent]:
    """What a stream resumed after the `index`th event made of one ledger event sends of it:
    the opener of a message or call cut there, said again, then the rest."""
    rest = made[index + 1 :]
    if rest and index >= 0 and isinstance(made[0], _OPENERS):
        return [_reopen(made[0]), *rest]
    return rest


def _reopen(event: BaseEvent) -> BaseEvent:
    again = event.model_copy(deep=True)
    ledger = dict((again.metadata or {}).get("ledger", {}))
    ledger["reopened"] = True
    again.metadata = {**(again.metadata or {}), "ledger": ledger}
    return again


def _message(event: RecordedEvent, tag: dict[str, Any]) -> list[BaseEvent]:
    message = event.event_id
    role = "user" if event.agent == "user" else "assistant"
    named = {} if role == "user" else {"name": event.agent}
    return [
        TextMessageStartEvent(message_id=message, role=role, **named, **tag),
        TextMessageContentEvent(message_id=message, delta=str(event.fields.get("body", "")), **tag),
        TextMessageEndEvent(message_id=message, **tag),
    ]


def _result(event: RecordedEvent, tag: dict[str, Any]) -> BaseEvent:
    f = event.fields
    result = f.get("result")
    content = result if isinstance(result, str) else orjson.dumps(result).decode()
    meta: dict[str, Any] = {"status": f.get("status")}
    if f.get("settled_by"):
        meta["settledBy"] = f["settled_by"]
    return ToolCallResultEvent(
        message_id=event.event_id,
        tool_call_id=str(f["attempt_id"]),
        content=content,
        role="tool",
        metadata={"call": meta},
        **tag,
    )


def wire(event: BaseEvent) -> str:
    """An event as AG-UI's JSON has it: camelCase, no field that is not set."""
    return event.model_dump_json(by_alias=True, exclude_none=True)


def ident(event: BaseEvent) -> str | None:
    """A mapped event's id as sent (None for the stream's own RUN_STARTED and snapshot, and for
    an event said again: it keeps the id it was first sent with)."""
    if ((event.metadata or {}).get("ledger") or {}).get("reopened"):
        return None
    return ident_of(event) or None
