"""What an A2A save says as the ledger's own events, for `tail`, the web view, ATIF, OTLP and
AG-UI: written in the save's append, before its `a2a.task` record.

- the task's first save: its run's `run.started` (the run `a2a/<task id>`, the agent the store
  was given), with the task's and its context's ids;
- each message new to the task (its history, its status's message): a `message` of the agent
  `user` for a user's, of the store's agent for the agent's;
- an artifact update: a `message` of the agent with the artifact's text (the `a2a.task` record
  beside it keeps the artifact whole: its id, name and parts); any other save (a plain store's,
  which the SDK hands no event, or a Task event's) says each artifact the task did not hold
  before, or the parts added to one (the whole of one whose parts changed otherwise);
- a status that changes the task's state: a `task.status` mutation, and when the state ends the
  task (completed, failed, rejected, canceled) the run's `run.finished`.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from a2a.server.events.event_queue import Event
from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from ledger_bus.adapters.a2a.layout import run_of
from ledger_bus.model.jsontext import JSONObject

USER: Final = "user"
TERMINAL: Final = {
    TaskState.TASK_STATE_COMPLETED: "ok",
    TaskState.TASK_STATE_FAILED: "error",
    TaskState.TASK_STATE_REJECTED: "error",
    TaskState.TASK_STATE_CANCELED: "cancelled",
}


def state_name(state: int) -> str:
    """A task state as A2A's JSON names it (`TASK_STATE_WORKING`)."""
    return str(TaskState.Name(state))


def normalized(prev: Task | None, task: Task, event: Event | None, agent: str) -> list[JSONObject]:
    """The ledger's events for the save of `task` over `prev` (None: its first save)."""
    run = run_of(task.id)
    out: list[JSONObject] = []
    if prev is None:
        out.append(
            {
                "type": "mutation",
                "agent": agent,
                "run_id": run,
                "kind": "run.started",
                "task_id": task.id,
                "context_id": task.context_id,
            }
        )
    seen = _message_ids(prev) if prev is not None else set()
    for message in _messages(task):
        if message.message_id not in seen:
            seen.add(message.message_id)
            out.append(_message(message, agent, run))
    if isinstance(event, TaskArtifactUpdateEvent):
        out.append(_artifact(event.artifact, agent, run))
    else:  # a save of the task itself (a plain store's, or a Task event): what it changed
        out += [_artifact(a, agent, run) for a in _new_parts(prev, task)]
    before = prev.status.state if prev is not None else TaskState.TASK_STATE_UNSPECIFIED
    if task.status.state != before:
        state = state_name(task.status.state)
        out.append(
            {
                "type": "mutation",
                "agent": agent,
                "run_id": run,
                "kind": "task.status",
                "state": state,
            }
        )
        if task.status.state in TERMINAL and before not in TERMINAL:
            status = TERMINAL[task.status.state]
            out.append(
                {
                    "type": "mutation",
                    "agent": agent,
                    "run_id": run,
                    "kind": "run.finished",
                    "status": status,
                    "state": state,
                }
            )
    return out


def text_of(parts: Any) -> str:
    """What a message or an artifact says, as text: its text parts, its data as JSON, its files
    by name."""
    said: list[str] = []
    for part in parts:
        said.append(_part_text(part))
    return "\n".join(said)


def _part_text(part: Part) -> str:
    kind = part.WhichOneof("content")
    if kind == "text":
        return part.text
    if kind == "data":
        value = MessageToDict(part.data)
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    name = part.filename or part.url or part.media_type or "file"
    return f"[{name}]"


def _new_parts(prev: Task | None, task: Task) -> list[Artifact]:
    """What the task's artifacts hold that `prev`'s did not: each new artifact whole, the parts
    added to the end of one (an artifact streamed in chunks), and one whose parts changed
    otherwise whole again."""
    before = {a.artifact_id: list(a.parts) for a in prev.artifacts} if prev is not None else {}
    found = []
    for artifact in task.artifacts:
        had, now = before.get(artifact.artifact_id, []), list(artifact.parts)
        if now == had:
            continue
        added = Artifact(artifact_id=artifact.artifact_id, name=artifact.name)
        added.parts.extend(now[len(had) :] if now[: len(had)] == had else now)
        found.append(added)
    return found


def _messages(task: Task) -> list[Message]:
    found = list(task.history)
    if task.status.HasField("message"):
        found.append(task.status.message)
    return found


def _message_ids(task: Task) -> set[str]:
    return {m.message_id for m in _messages(task)}


def _message(message: Message, agent: str, run: str) -> JSONObject:
    return {
        "type": "message",
        "agent": USER if message.role == Role.ROLE_USER else agent,
        "run_id": run,
        "body": text_of(message.parts),
    }


def _artifact(artifact: Artifact, agent: str, run: str) -> JSONObject:
    return {"type": "message", "agent": agent, "run_id": run, "body": text_of(artifact.parts)}
