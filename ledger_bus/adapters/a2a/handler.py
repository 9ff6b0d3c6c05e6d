"""An A2A request handler whose streams a client resumes where it left off, on any replica.

A2A's `SubscribeToTask` carries no "last event seen": a client that subscribes again gets the
task as it stands, then what follows (the SDK's handler). `LedgerRequestHandler` is that
handler, and more: each event it streams carries the version of the task it made, under
`metadata["ledger-bus.version"]` (an extension's key, which other clients pass over; read it
with `version_of`), and a `SubscribeToTask` sent with the HTTP header `Last-Event-ID: <version>`
(the name SSE gives a resume point; the client sets it, from `version_of`) is answered from the
ledger with the task's events after that version, each once, in order, and no snapshot,
whichever replica made them and whichever serves the subscription. The header reaches the
handler through the SDK's JSON-RPC and REST routes (gRPC's context carries no headers).

A subscription, with or without a resume point, is read from the ledger (the task's stream:
store.py), so what a client gets does not depend on which replica runs the agent. The versions
on a `SendStreamingMessage` stream are found by matching each event the SDK streams to the
save that wrote it (the SDK streams an event once it is saved).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, Final

from a2a.server.agent_execution.active_task import (
    INTERRUPTED_TASK_STATES,
    TERMINAL_TASK_STATES,
)
from a2a.server.agent_execution.agent_executor import AgentExecutor
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.request_handler import validate_request_params
from a2a.types.a2a_pb2 import (
    AgentCard,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict

from ledger_bus.adapters.a2a import layout
from ledger_bus.adapters.a2a.layout import TASK
from ledger_bus.adapters.a2a.normalize import state_name
from ledger_bus.adapters.a2a.store import (
    LedgerTaskEventStream,
    LedgerVersionedTaskStore,
    version_number,
)

VERSION: Final = "ledger-bus.version"  # the metadata key of an event's task version
_VERSION: Final = re.compile(r"([0-9]{1,15})(?:\.0+)?")
# Where a subscription's stream stops, as the SDK's does (its own sets): a task that ended, or
# that waits on its user.
ENDS: Final = TERMINAL_TASK_STATES | INTERRUPTED_TASK_STATES


class LedgerRequestHandler(DefaultRequestHandler):
    """a2a-sdk's request handler on a LedgerVersionedTaskStore, its streams resumable by task
    version: `LedgerRequestHandler(agent_executor=..., agent_card=card,
    task_store=LedgerVersionedTaskStore(store))` (the event stream is made on the same store when
    not given). Other options are the SDK handler's."""

    def __init__(
        self,
        *,
        agent_executor: AgentExecutor,
        agent_card: AgentCard,
        task_store: LedgerVersionedTaskStore,
        event_stream: LedgerTaskEventStream | None = None,
        **options: Any,
    ):
        stream = event_stream or LedgerTaskEventStream(
            task_store.ledger.astore or task_store.ledger.store
        )
        super().__init__(
            agent_executor=agent_executor,
            agent_card=agent_card,
            task_store=task_store,
            event_stream=stream,
            **options,
        )
        self.tasks = task_store
        self.stream = stream
        self.card = agent_card

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        asked = params.message.task_id
        after = (
            (await self.tasks.ledger.drive(self.tasks.ledger.head_op(asked))).version
            if asked
            else 0
        )
        found = _Saves(self.tasks, after)
        async for event in super().on_message_send_stream(params, context):
            yield await found.stamped(event)

    @validate_request_params
    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        if not self.card.capabilities.streaming:
            raise UnsupportedOperationError(message="Streaming is not supported by the agent")
        after = resume_point(context)
        stored = await self.tasks.get(params.id, context)
        if stored is None:
            raise TaskNotFoundError
        version = version_number(stored.version)
        if after is None:
            if (
                stored.task.status.state in TERMINAL_TASK_STATES
            ):  # nothing further (the SDK's answer)
                name = state_name(stored.task.status.state)
                message = f"Task {params.id} is in terminal state: {name}"
                raise UnsupportedOperationError(message=message)
            yield stamp(stored.task, version)
            after = version
        elif after > version:
            message = f"Last-Event-ID {after} is past task {params.id}'s last version, {version}"
            raise InvalidParamsError(message=message)
        elif after == version and stored.task.status.state in ENDS:
            return  # it had everything, up to the task's end or its question
        async with aclosing(self.stream.subscribe(params.id, after=TaskVersion(after))) as events:
            async for versioned in events:
                event, at = versioned.event, version_number(versioned.version)
                yield stamp(event, at)
                if isinstance(event, Message) or await self._ends_at(params.id, event, at):
                    return

    async def _ends_at(self, task_id: str, event: Event, at: int) -> bool:
        """Whether a subscription stops after `event` (at version `at`), as the SDK's does: at
        the task's end, or at its question to the user, unless (a resumed one) the task went
        on since."""
        if not isinstance(event, TaskStatusUpdateEvent | Task):
            return False
        if event.status.state in TERMINAL_TASK_STATES:
            return True
        if event.status.state not in ENDS:
            return False
        head = await self.tasks.ledger.drive(self.tasks.ledger.head_op(task_id))
        return head.version <= at

    async def aclose(self) -> None:
        await super().aclose()
        await self.stream.close()


def resume_point(context: ServerCallContext) -> int | None:
    """The task version a client resumes after (`Last-Event-ID`), or None."""
    headers = context.state.get("headers") or {}
    given = next((v for k, v in headers.items() if k.lower() == "last-event-id"), None)
    if given is None or given == "":
        return None
    # A version as JSON carries it: a number (`15.0` from a client that printed it as read).
    found = _VERSION.fullmatch(str(given))
    if found is None:
        raise InvalidParamsError(message=f"Last-Event-ID must be a task version, got {given!r}")
    return int(found.group(1))


def stamp(event: Event, version: int) -> Event:
    """A copy of the event carrying its task version."""
    copy = type(event)()
    copy.CopyFrom(event)
    copy.metadata.update({VERSION: version})
    return copy


def version_of(event: Event) -> int | None:
    """The task version a streamed event carries (None: none)."""
    found = event.metadata.fields.get(VERSION) if event.metadata else None
    return int(found.number_value) if found is not None else None


class _Saves:
    """The saves of a task an SDK stream's events came from, found in order: the event saved as
    streamed, else the next save of an event of its kind."""

    def __init__(self, tasks: LedgerVersionedTaskStore, after: int):
        self.tasks = tasks
        self.after = after

    async def stamped(self, event: Event) -> Event:
        task_id = event.id if isinstance(event, Task) else getattr(event, "task_id", "")
        if not task_id or isinstance(event, Message):
            return event
        ledger = self.tasks.ledger
        records = await ledger.drive(
            ledger.store.read_stream_op(layout.stream_of(task_id), self.after)
        )
        saved = [r for r in records if r.fields.get("kind") == TASK and r.fields.get("event")]
        sent = MessageToDict(to_stream_response(event))
        kind = next(iter(sent))
        found = next((r for r in saved if r.fields["event"] == sent), None) or next(
            (r for r in saved if kind in r.fields["event"]), None
        )
        if found is None:
            return event
        self.after = found.version
        return stamp(event, found.version)
