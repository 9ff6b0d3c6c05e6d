"""A LangGraph thread's messages as the ledger's own events, for timelines and trajectories.

Each message a checkpoint adds is written once, in the checkpoint's append, before it:

- a HumanMessage, a `message` of the agent `user` (a SystemMessage, of `system`);
- an AIMessage, the model call that made it (a `tool_call` and `tool_result` of the tool
  `model`, whose result holds the model's name, its token usage, why it stopped and the ids of
  the tool calls it asked for), the
  `message` of the node that called the model, and each tool call it asks for, a requested
  `tool_call` whose attempt is the tool call's id;
- a ToolMessage, the `tool_result` of that attempt, `error` when the tool failed;
- an interrupt, an `interrupt.asked` mutation of the node that asked, with its value; the value
  a `Command(resume=...)` gives back, an `interrupt.resumed` mutation of `user`.

Each carries the run of the node execution (LangGraph's task) that wrote it, and its node as the
agent. A node execution is a run: its `run.started` and `run.finished` are written with the
task's writes (LangGraph hands the saver a task when it has run), named by the checkpoint it ran
from and its node (`<checkpoint id>.<node>`), or for a `Send`, by its place among the step's
sends (`<checkpoint id>.send<i>`): names the saver can give a task from either side, its
writes or the checkpoint that follows them, which LangGraph writes on threads of their own in
no fixed order. A subgraph's runs name the run of the node that ran the subgraph as their
parent (`parent_run`), and a Send's run the run that sent it.

The messages themselves stay in the checkpoint, in the saver's serde, as the input to
LangGraph's own resume.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ledger_bus.adapters.langgraph.layout import AGENT
from ledger_bus.model.jsontext import JSONObject

INTERRUPT: Final = "__interrupt__"  # LangGraph's channels of interrupts and resumes
RESUME: Final = "__resume__"
ERROR: Final = "__error__"  # a task's error
TASKS: Final = "__pregel_tasks"  # the sends a task writes
PULL: Final = "__pregel_pull"  # a task path's kinds: a node the edges ran, a Send
PUSH: Final = "__pregel_push"

MODEL: Final = "model"  # the tool a model call is recorded as (spec: model calls are tool calls)


def is_messages(value: object) -> bool:
    """Whether a channel value is a list of messages (a MessagesState's `messages`)."""
    return (
        isinstance(value, list) and bool(value) and all(isinstance(m, BaseMessage) for m in value)
    )


def text_of(message: BaseMessage) -> str:
    """What a message says, as text (its text blocks, for a message of blocks)."""
    return str(message.text)


def _plain(value: object) -> Any:
    """`value` as JSON the ledger takes: what is not JSON becomes its text."""
    try:
        return json.loads(json.dumps(value, allow_nan=False, default=str))
    except ValueError:
        return str(value)


def _usage(message: AIMessage) -> dict[str, Any]:
    """The model call's record: the model, its token usage, why it stopped."""
    meta: Mapping[str, object] = message.response_metadata or {}
    found: JSONObject = {}
    model = meta.get("model_name") or meta.get("model")
    if model:
        found["model"] = str(model)
    usage = message.usage_metadata
    if usage:
        found["usage"] = _plain(dict(usage))
    elif isinstance(meta.get("token_usage"), dict):
        found["usage"] = _plain(meta["token_usage"])
    for key in ("finish_reason", "stop_reason"):
        if meta.get(key):
            found["finish_reason"] = str(meta[key])
            break
    return found


class Writer:
    """The events of one append's new messages, numbered as the append will number them (so
    each one's event id is known before it is written: `event_id(index)`)."""

    def __init__(
        self,
        event_id: Any,
        calls: dict[str, str],
        requested: dict[str, str],
        recorded: dict[str, str],
        *,
        requests_calls: bool = True,
    ):
        self.events: list[JSONObject] = []
        self.unplaced = 0  # new messages whose run no task's writes named
        self._event_id = event_id
        # attempt id -> event id of its tool_call, in this thread so far (a ToolMessage's
        # result names its call as a parent)
        self.calls = calls
        # attempt id -> event id of its request, and of its outcome, recorded as the tool ran
        # (record_tools): not written again
        self.requested = requested
        self.recorded = recorded
        # False where the tools record their calls as they run (record_tools): the request
        # of a call is theirs, written before the tool runs, and only theirs
        self.requests_calls = requests_calls

    def _add(self, event: dict[str, Any]) -> str:
        self.events.append({k: v for k, v in event.items() if v is not None})
        return str(self._event_id(len(self.events) - 1))

    def message(self, message: BaseMessage, run_id: str | None, node: str | None) -> str:
        """Write the events of `message`; return the event id that names it."""
        if isinstance(message, HumanMessage):
            return self._add(
                {"type": "message", "agent": "user", "body": text_of(message), "run_id": run_id}
            )
        if isinstance(message, SystemMessage):
            return self._add(
                {"type": "message", "agent": "system", "body": text_of(message), "run_id": run_id}
            )
        agent = node or AGENT
        if isinstance(message, AIMessage):
            return self._ai(message, run_id, agent)
        if isinstance(message, ToolMessage):
            attempt = str(message.tool_call_id)
            if attempt in self.recorded:
                return self.recorded[attempt]
            call = self.calls.get(attempt)
            return self._add(
                {
                    "type": "tool_result",
                    "agent": agent,
                    "run_id": run_id,
                    "tool": message.name or "tool",
                    "attempt_id": attempt,
                    "status": "error" if message.status == "error" else "ok",
                    "result": _plain(message.content),
                    "parents": [call] if call else None,
                }
            )
        return self._add(
            {"type": "message", "agent": agent, "body": text_of(message), "run_id": run_id}
        )

    def _ai(self, message: AIMessage, run_id: str | None, agent: str) -> str:
        attempt = f"model:{message.id}" if message.id else None
        said = {"type": "message", "agent": agent, "body": text_of(message), "run_id": run_id}
        if attempt is None:
            named = self._add(said)
        else:
            cost = _usage(message)
            asked = [str(c["id"]) for c in message.tool_calls if c.get("id")]
            if asked:  # the calls it asked for, by attempt (a recorded tool's may come first)
                cost["tool_calls"] = asked
            call = self._add(
                {
                    "type": "tool_call",
                    "agent": agent,
                    "run_id": run_id,
                    "tool": MODEL,
                    "attempt_id": attempt,
                    "args": {"model": cost["model"]} if "model" in cost else {},
                }
            )
            self._add(
                {
                    "type": "tool_result",
                    "agent": agent,
                    "run_id": run_id,
                    "tool": MODEL,
                    "attempt_id": attempt,
                    "status": "ok",
                    "result": cost,
                    "parents": [call],
                }
            )
            named = self._add({**said, "parents": [call]})
        for tool_call in message.tool_calls if self.requests_calls else ():
            if not tool_call.get("id") or str(tool_call["id"]) in self.requested:
                continue
            self.calls[str(tool_call["id"])] = self._add(
                {
                    "type": "tool_call",
                    "agent": agent,
                    "run_id": run_id,
                    "tool": tool_call["name"] or "tool",
                    "attempt_id": str(tool_call["id"]),
                    "args": _plain(tool_call.get("args") or {}),
                    "parents": [named],
                }
            )
        return named


def interrupt_events(
    writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
) -> list[JSONObject]:
    """The interrupts a task's writes raise, and the resume the graph's loop writes."""
    node = node_of(task_path)
    events: list[JSONObject] = []
    for channel, value in writes:
        if channel == INTERRUPT:
            for interrupt in value if isinstance(value, list | tuple) else [value]:
                events.append(
                    {
                        "type": "mutation",
                        "agent": node or AGENT,
                        "kind": "interrupt.asked",
                        "run_id": task_id or None,
                        "interrupt_id": str(getattr(interrupt, "id", "")),
                        "value": _plain(getattr(interrupt, "value", interrupt)),
                    }
                )
        elif channel == RESUME and not node:  # the loop's; a task's own repeats what it took
            events.append(
                {
                    "type": "mutation",
                    "agent": "user",
                    "kind": "interrupt.resumed",
                    "value": _plain(value),
                }
            )
    return [{k: v for k, v in e.items() if v is not None} for e in events]


def _path_parts(task_path: str | Sequence[object]) -> builtins.list[str]:
    """A task path's first two parts as text: from the string a task's writes carry
    ("~__pregel_pull, agent", "~__pregel_push, 0000000001, 0000000000") or the tuple in a
    task's metadata (`langgraph_path`)."""
    if isinstance(task_path, str):
        return [p.strip().lstrip("~") for p in task_path.split(",")][:2]
    return [str(p) for p in task_path[:2]]


def node_of(task_path: str | Sequence[object]) -> str | None:
    """The node a task ran, from its path (a node its edges ran); None where it says none."""
    parts = _path_parts(task_path)
    if len(parts) == 2 and parts[0] == PULL and parts[1] != "__start__":
        return parts[1]
    return None


def send_of(task_path: str | Sequence[object]) -> int | None:
    """The place of a Send's task among its step's sends, from its path; None for others."""
    parts = _path_parts(task_path)
    if len(parts) == 2 and parts[0] == PUSH and parts[1].isdigit():
        return int(parts[1])
    return None


def task_run(checkpoint_id: str, task_path: str | Sequence[object]) -> str | None:
    """The run id of a node execution: the checkpoint it ran from and its node, or its place
    among the step's sends. None for LangGraph's own writes (the input, a resume)."""
    node = node_of(task_path)
    if node is not None:
        return f"{checkpoint_id}.{node}"
    sent = send_of(task_path)
    if sent is not None:
        return f"{checkpoint_id}.send{sent}"
    return None


def task_status(writes: Sequence[tuple[str, Any]]) -> str:
    """How a task's run ended, by its writes: `error`, `interrupted` or `ok`."""
    channels = {channel for channel, _ in writes}
    if ERROR in channels:
        return "error"
    if INTERRUPT in channels:
        return "interrupted"
    return "ok"
