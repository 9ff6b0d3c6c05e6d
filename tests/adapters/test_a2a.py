"""A2A on the ledger (ledger_bus.adapters.a2a): a2a-sdk's task stores and event stream, held to
the SDK's in-memory store over the same scenario, to real replicas of the SDK's server on one
Redis (one killed in the middle of a task), and to writers in two processes at once."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("a2a.server.cluster")

import httpx
from a2a.auth.user import User
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution.agent_executor import AgentExecutor
from a2a.server.agent_execution.context import RequestContext
from a2a.server.cluster import ConcurrentTaskModificationError, TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event, EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore
from a2a.server.tasks.task_store import TaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types import (
    Artifact,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import InvalidParamsError
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict, ParseDict

from ledger_bus.adapters.a2a import (
    LedgerRequestHandler,
    LedgerTaskEventStream,
    LedgerTaskStore,
    LedgerVersionedTaskStore,
    session_of,
    version_of,
)
from ledger_bus.adapters.a2a.normalize import normalized
from ledger_bus.adapters.a2a.store import streamed as sent_to_subscribers
from ledger_bus.demo.server import free_port
from ledger_bus.exports.atif import atif_of
from ledger_bus.exports.otel import spans_of
from ledger_bus.exports.trajectory import Builder
from ledger_bus.store.base import EventStore
from tests.support.a2a_replica import Counter, card

ROOT = Path(__file__).resolve().parents[2]


class Named(User):
    def __init__(self, name: str):
        self.name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.name


ANN = ServerCallContext(user=Named("ann"))
BOB = ServerCallContext(user=Named("bob"))


def task(task_id: str, state: int = TaskState.TASK_STATE_SUBMITTED, **more: Any) -> Task:
    more.setdefault("context_id", "ctx")
    return Task(id=task_id, status=TaskStatus(state=state), **more)  # type: ignore[arg-type]


def said(text: str, task_id: str = "", context_id: str = "", message_id: str = "") -> Message:
    return Message(
        role=Role.ROLE_USER,
        message_id=message_id or uuid.uuid4().hex,
        parts=[Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )


# -- the same scenario on the SDK's in-memory store and on the ledger's -------------------------


async def store_scenario(store: TaskStore) -> list[Any]:
    """What a server asks of its task store, and what it gets back, each step as JSON."""
    seen: list[Any] = []

    def keep(found: Any) -> None:
        seen.append(MessageToDict(found) if found is not None else None)

    for n in range(5):
        made = task(f"t{n}", context_id="c-even" if n % 2 == 0 else "c-odd")
        made.status.timestamp.FromSeconds(1_700_000_000 + n * 7 % 5)
        await store.save(made, ANN)
    await store.save(task("bob-1"), BOB)
    worked = task("t1", TaskState.TASK_STATE_WORKING, history=[said("hi", message_id="m-hi")])
    await store.save(worked, ANN)
    keep(await store.get("t1", ANN))
    keep(await store.get("t1", BOB))  # another owner's: not there
    keep(await store.get("nope", ANN))
    for params in (
        ListTasksRequest(),
        ListTasksRequest(page_size=2),
        ListTasksRequest(context_id="c-even"),
        ListTasksRequest(status=TaskState.TASK_STATE_WORKING),
    ):
        keep(await store.list(params, ANN))
    first = await store.list(ListTasksRequest(page_size=2), ANN)
    keep(await store.list(ListTasksRequest(page_size=2, page_token=first.next_page_token), ANN))
    keep(await store.list(ListTasksRequest(), BOB))
    await store.delete("t2", BOB)  # not bob's: nothing happens
    await store.delete("t2", ANN)
    await store.delete("t2", ANN)  # gone already: nothing happens
    keep(await store.get("t2", ANN))
    keep(await store.list(ListTasksRequest(), ANN))
    await store.save(task("t2", TaskState.TASK_STATE_WORKING), ANN)  # made again
    keep(await store.get("t2", ANN))
    return seen


def test_the_ledger_s_task_store_answers_as_the_sdk_s_in_memory_store_does(
    store: EventStore,
) -> None:
    theirs = asyncio.run(store_scenario(InMemoryTaskStore()))
    ours = asyncio.run(store_scenario(LedgerTaskStore(store)))
    assert ours == theirs


async def served_run(task_store: Any, event_stream: Any = None) -> tuple[list[Any], Any]:
    """A message streamed through the SDK's own request handler to the counting agent: what the
    client is sent (each event's JSON, ids and times left out), and the task as it ends."""
    handler = DefaultRequestHandler(
        agent_executor=Counter("one", ticks=3, tick_s=0.0),
        task_store=task_store,
        agent_card=card(1),
        event_stream=event_stream,
    )
    sent = []
    request = SendMessageRequest(message=said("count to 3"))
    async for event in handler.on_message_send_stream(request, ANN):
        sent.append(event)
    task_id = sent[0].id
    stored = await handler.on_get_task(GetTaskRequest(id=task_id), ANN)
    return [plain(to_stream_response(e)) for e in sent], plain(stored)


def plain(found: Any) -> Any:
    """A proto's JSON with what differs from run to run (ids, times) made alike."""
    data = json.dumps(MessageToDict(found), sort_keys=True)
    for key in ("id", "taskId", "contextId", "messageId", "timestamp"):
        data = _blank(data, key)
    return json.loads(data)


def _blank(data: str, key: str) -> str:
    return re.sub(rf'"{key}": "[^"]*"', f'"{key}": "-"', data)


def test_a_task_served_on_the_ledger_streams_and_ends_as_on_the_sdk_s_in_memory_store(
    store: EventStore,
) -> None:
    theirs = asyncio.run(served_run(InMemoryTaskStore()))
    plain_ours = asyncio.run(served_run(LedgerTaskStore(store)))
    versioned = asyncio.run(
        served_run(LedgerVersionedTaskStore(store), LedgerTaskEventStream(store))
    )
    assert plain_ours == theirs
    assert versioned == theirs
    events, final = theirs
    sent = [next(iter(e)) for e in events]
    assert sent == ["task", "statusUpdate", *["artifactUpdate", "statusUpdate"] * 3, "statusUpdate"]
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"


# -- every update kept, and read as any session --------------------------------------------------


def test_every_update_is_kept_and_the_task_reads_as_a_session(memory_store: EventStore) -> None:
    tasks = LedgerVersionedTaskStore(memory_store, agent="counter")
    _, final = asyncio.run(served_run(tasks, LedgerTaskEventStream(memory_store)))
    (listed,) = asyncio.run(tasks.list(ListTasksRequest(), ANN)).tasks
    saves = asyncio.run(tasks.history(listed.id, ANN))
    # each save is there, in order, with the event that made it: the task, working, three ticks
    # (an artifact and a status each), completed
    kinds = [next(iter(_payload(s.event))) for s in saves if s.event is not None]
    assert kinds == [
        "task",
        "statusUpdate",
        *["artifactUpdate", "statusUpdate"] * 3,
        "statusUpdate",
    ]
    assert saves[-1].task is not None
    assert plain(saves[-1].task) == final
    # and the ledger's own events say it as any session: a run of the agent, from the user's
    # message to its end, its words and its artifacts as messages
    session = session_of(listed.id)
    events = list(memory_store.scan_session(session))
    said_ = [(e.agent, e.fields["body"]) for e in events if e.type == "message"]
    assert said_[0] == ("user", "count to 3")
    assert ("counter", "tick 2") in said_
    assert ("counter", "tick 2 by one") in said_
    kinds_ = [e.fields.get("kind") for e in events if e.type == "mutation"]
    assert kinds_[0] == "run.started"
    assert "run.finished" in kinds_
    builder = Builder(session)
    for e in events:
        builder.add(e)
    runs = [r for r in builder.tree().runs.values() if r.run_id]
    assert [(r.agent, r.status) for r in runs] == [("counter", "ok")]
    # and the exports read it as any session: an ATIF trajectory of the conversation, spans of
    # the agent's run
    atif = atif_of(memory_store, session)
    words = json.dumps(atif)
    assert "count to 3" in words
    assert "tick 3 by one" in words
    assert "a2a.task" not in words, "A2A's own records are not the conversation"
    spans = list(spans_of(memory_store, session))
    assert any(s.name == "invoke_agent counter" for s in spans), [s.name for s in spans]


def test_a_plain_store_s_saves_say_their_new_artifacts_too(memory_store: EventStore) -> None:
    # Given the SDK's handler on a plain LedgerTaskStore, which the SDK hands no events
    tasks = LedgerTaskStore(memory_store, agent="counter")
    asyncio.run(served_run(tasks))
    (listed,) = asyncio.run(tasks.list(ListTasksRequest(), ANN)).tasks
    # Then each artifact the task gained is said, once, as its agent's message
    events = list(memory_store.scan_session(session_of(listed.id)))
    said = [e.fields["body"] for e in events if e.type == "message" and e.agent == "counter"]
    assert [b for b in said if " by " in b] == ["tick 1 by one", "tick 2 by one", "tick 3 by one"]
    saves = asyncio.run(tasks.history(listed.id, ANN))
    assert all(s.event is None for s in saves)


def _payload(event: Event) -> dict[str, Any]:
    return dict(MessageToDict(to_stream_response(event)))


# -- versions: a stale save refused, nothing lost ------------------------------------------------


def test_a_stale_save_is_refused_and_writes_nothing(memory_store: EventStore) -> None:
    tasks = LedgerVersionedTaskStore(memory_store)

    async def scenario() -> None:
        v1 = await tasks.save(task("t"), prev_version=TaskVersion.MISSING, context=ANN)
        stored = await tasks.get("t", ANN)
        assert stored is not None
        assert stored.version == v1
        working = task("t", TaskState.TASK_STATE_WORKING)
        v2 = await tasks.save(working, prev=stored.task, prev_version=v1, context=ANN)
        assert v2.is_after(v1)
        with pytest.raises(ConcurrentTaskModificationError):
            await tasks.save(task("t", TaskState.TASK_STATE_FAILED), prev_version=v1, context=ANN)
        with pytest.raises(ConcurrentTaskModificationError):  # a first write of a task there
            await tasks.save(task("t"), prev_version=TaskVersion.MISSING, context=ANN)
        after = await tasks.get("t", ANN)
        assert after is not None
        assert after.version == v2
        assert after.task.status.state == TaskState.TASK_STATE_WORKING

    asyncio.run(scenario())
    records = [
        e for e in memory_store.scan_session(session_of("t")) if e.fields.get("kind") == "a2a.task"
    ]
    assert len(records) == 2


WRITER = """
import asyncio, sys
from a2a.server.cluster import ConcurrentTaskModificationError
from a2a.types import Artifact, Part
import ledger_bus
from ledger_bus.adapters.a2a import LedgerTaskStore, LedgerVersionedTaskStore
from tests.adapters.test_a2a import ANN

url, prefix, who, n, mode = sys.argv[1:6]

async def main() -> None:
    store = ledger_bus.connect(url, prefix=prefix)
    if mode == "versioned":
        tasks = LedgerVersionedTaskStore(store)
        refused = 0
        for i in range(int(n)):
            while True:  # read, add one's artifact, save at the version read; again if refused
                stored = await tasks.get("shared", ANN)
                changed = type(stored.task)()
                changed.CopyFrom(stored.task)
                mine = Artifact(artifact_id=f"{who}-{i}", parts=[Part(text=who)])
                changed.artifacts.append(mine)
                try:
                    at = stored.version
                    await tasks.save(changed, prev=stored.task, prev_version=at, context=ANN)
                    break
                except ConcurrentTaskModificationError:
                    refused += 1
        print("refused", refused)
    else:
        tasks = LedgerTaskStore(store)
        for i in range(int(n)):
            mine = (await tasks.get("shared", ANN))
            mine.metadata.update({"by": who, "n": i})
            await tasks.save(mine, ANN)

asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["versioned", "plain"])
def test_saves_of_one_task_from_two_processes_at_once_lose_nothing(
    redis_url: str, prefix: str, redis_store: EventStore, mode: str
) -> None:
    n = 40
    asyncio.run(
        LedgerTaskStore(redis_store).save(task("shared", TaskState.TASK_STATE_WORKING), ANN)
    )
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, redis_url, prefix, who, str(n), mode],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("a", "b")
    ]
    outputs = [w.communicate(timeout=120) for w in writers]
    assert [w.returncode for w in writers] == [0, 0], outputs
    saves = asyncio.run(LedgerTaskStore(redis_store).history("shared", ANN))
    assert len(saves) == 1 + 2 * n, "every save is on the record, none written over unseen"
    final = saves[-1].task
    assert final is not None
    if mode == "versioned":
        # each writer's every artifact is in the task: a refused save wrote nothing, and was made
        # again on the task as the other left it
        assert sorted(a.artifact_id for a in final.artifacts) == sorted(
            f"{who}-{i}" for who in "ab" for i in range(n)
        )
        assert all(len(s.task.artifacts) == k for k, s in enumerate(saves) if s.task)
    else:
        # a plain save is a whole task, the last one's: each one of them is still in the record
        bys = [(s.task.metadata["by"], int(s.task.metadata["n"])) for s in saves[1:] if s.task]
        assert sorted(bys) == sorted((who, i) for who in "ab" for i in range(n))


# -- two replicas of the SDK's server on one Redis, one killed in the middle of a task ----------


@contextmanager
def replica(
    redis_url: str, prefix: str, name: str, log: Path
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    command = [sys.executable, "-m", "tests.support.a2a_replica", "--port", str(port),
               "--url", redis_url, "--prefix", prefix, "--name", name, "--ticks", "12",
               "--tick-s", "0.3"]  # fmt: skip
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=out, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("ready"), log.read_text()
        yield f"http://127.0.0.1:{port}/a2a/jsonrpc", process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        assert process.stdout is not None
        process.stdout.close()


async def streamed(
    client: httpx.AsyncClient, url: str, method: str, params: Any, after: int | None = None
) -> AsyncIterator[StreamResponse]:
    body = {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": method,
        "params": MessageToDict(params),
    }
    headers = {"A2A-Version": "1.0", "Accept": "text/event-stream"}
    if after is not None:
        headers["Last-Event-ID"] = str(after)
    async with client.stream("POST", url, json=body, headers=headers, timeout=60) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data = json.loads(line[5:])
                assert "error" not in data, data
                yield ParseDict(data["result"], StreamResponse())


async def called(client: httpx.AsyncClient, url: str, method: str, params: Any) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": method,
        "params": MessageToDict(params),
    }
    response = await client.post(url, json=body, headers={"A2A-Version": "1.0"}, timeout=30)
    data = response.json()
    assert "error" not in data, data
    result: dict[str, Any] = data["result"]
    return result


def ticks_of(events: list[StreamResponse]) -> tuple[list[int], list[int]]:
    """The ticks the events bring: by their artifacts, and by their status messages."""
    made = [
        int(e.artifact_update.artifact.artifact_id.split("-")[1])
        for e in events
        if e.HasField("artifact_update")
    ]
    told = [
        int(t.split()[1])
        for e in events
        if e.HasField("status_update") and e.status_update.status.HasField("message")
        for t in [e.status_update.status.message.parts[0].text]
        if t.startswith("tick ")
    ]
    return made, told


def payload(event: StreamResponse) -> Any:
    return getattr(event, str(event.WhichOneof("payload")))


def versions(events: list[StreamResponse]) -> list[int | None]:
    return [version_of(payload(e)) for e in events]


async def until_done(events: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    return [e async for e in events]


@pytest.mark.timeout(180)
def test_a_replica_killed_mid_task_loses_no_update_and_the_other_streams_the_rest_once(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    async def scenario() -> tuple[list[StreamResponse], ...]:
        with (
            replica(redis_url, prefix, "a", tmp_path / "a.log") as (a, process_a),
            replica(redis_url, prefix, "b", tmp_path / "b.log") as (b, _),
        ):
            async with httpx.AsyncClient() as client:
                # Given a client streaming a task from replica a
                from_a: list[StreamResponse] = []
                asked = SendMessageRequest(message=said("count"))
                async for event in streamed(client, a, "SendStreamingMessage", asked):
                    from_a.append(event)
                    if ticks_of(from_a)[1][-1:] == [3]:
                        break
                task_id = from_a[0].task.id
                last = versions(from_a)[-1]
                # When a is killed in the middle of it
                process_a.send_signal(signal.SIGKILL)
                process_a.wait(timeout=10)
                # and the client subscribes again through b after the last event it had (and
                # another without saying where it was, as A2A's own clients do)
                again = SubscribeToTaskRequest(id=task_id)
                resumed = streamed(client, b, "SubscribeToTask", again, last)
                plain = streamed(client, b, "SubscribeToTask", again)
                snapshot = await anext(plain)
                # and b is asked to go on with the task
                go_on = SendMessageRequest(
                    message=said("go on", task_id=task_id, context_id=from_a[0].task.context_id),
                    configuration=SendMessageConfiguration(return_immediately=True),
                )
                await called(client, b, "SendMessage", go_on)
                from_b, after_snapshot = await asyncio.gather(
                    until_done(resumed), until_done(plain)
                )
                final = ParseDict(
                    await called(client, b, "GetTask", GetTaskRequest(id=task_id)), Task()
                )
        return from_a, from_b, [snapshot, *after_snapshot], [final]

    from_a, from_b, from_plain, (final,) = asyncio.run(scenario())
    # Then every event a streamed carries its task version
    assert ticks_of(from_a) == ([1, 2, 3], [1, 2, 3])
    assert None not in versions(from_a)
    # and the resumed subscription sends every later update once, in order, from the first a
    # did not send (one a saved before it died included) to the task's end: together with what
    # a sent, each of the task's updates on the ledger, once (all but the save the SDK makes of
    # the user's "go on", which it streams to no one)
    (session,) = [name for name, _ in redis_store.sessions() if name.startswith("a2a~")]
    saved = [e.version for e in redis_store.scan_session(session) if sent_to_subscribers(e)]
    assert versions(from_a) + versions(from_b) == saved
    made, told = ticks_of(from_a + from_b)
    assert made == told == list(range(1, 13))
    assert from_b[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    # and a subscription that says nothing of where it was gets the task as it stands (every
    # update a sent in it), then each later update once, none the snapshot holds
    held = sorted(int(x.artifact_id.split("-")[1]) for x in from_plain[0].task.artifacts)
    assert held[:3] == [1, 2, 3]
    assert held == list(range(1, len(held) + 1))
    later, _ = ticks_of(from_plain[1:])
    assert later == list(range(len(held) + 1, 13)), (held, later)
    # and the task ends with each tick once
    assert [x.artifact_id for x in final.artifacts] == [f"tick-{n}" for n in range(1, 13)]
    assert final.status.state == TaskState.TASK_STATE_COMPLETED


def test_a_resumed_subscription_of_a_task_that_ended_sends_what_was_missed_then_ends(
    memory_store: EventStore,
) -> None:
    tasks = LedgerVersionedTaskStore(memory_store, agent="counter")
    handler = LedgerRequestHandler(
        agent_executor=Counter("one", ticks=3, tick_s=0.0), agent_card=card(1), task_store=tasks
    )

    async def scenario() -> None:
        asked = SendMessageRequest(message=said("count"))
        sent = [e async for e in handler.on_message_send_stream(asked, ANN)]
        found = [version_of(e) for e in sent]
        stamped = [v for v in found if v is not None]
        assert stamped == found, "each event carries its version"
        assert stamped == sorted(stamped)
        task_id = sent[0].id

        def resumed_after(after: str) -> ServerCallContext:
            return ServerCallContext(user=ANN.user, state={"headers": {"last-event-id": after}})

        async def resubscribed(after: str) -> list[Any]:
            asked = SubscribeToTaskRequest(id=task_id)
            return [e async for e in handler.on_subscribe_to_task(asked, resumed_after(after))]

        # A client that had the first four events gets the rest, then the stream ends
        rest = await resubscribed(str(stamped[3]))
        assert [version_of(e) for e in rest] == stamped[4:]
        # one that had them all gets nothing more
        assert await resubscribed(str(stamped[-1])) == []
        # and a resume point that is not a version is refused in one line
        with pytest.raises(InvalidParamsError, match="Last-Event-ID must be a task version"):
            await resubscribed("yesterday")

    asyncio.run(scenario())


def test_bad_versions_are_refused_in_one_line(memory_store: EventStore) -> None:
    tasks = LedgerVersionedTaskStore(memory_store)
    with pytest.raises(TypeError, match="integer versions"):
        asyncio.run(tasks.save(task("t"), prev_version=TaskVersion("x"), context=ANN))


def test_the_extra_is_named_when_a2a_sdk_is_missing() -> None:
    code = (
        "import sys; sys.modules['a2a'] = None\n"
        "try:\n import ledger_bus.adapters.a2a\nexcept ModuleNotFoundError as e: print(e)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert "pip install 'ledger-bus[a2a]'" in out.stdout, out


def test_a_store_opened_from_a_url_reads_what_another_saved(redis_url: str, prefix: str) -> None:
    async def scenario() -> None:
        plain = LedgerTaskStore.from_url(redis_url, prefix=prefix, agent="counter")
        versioned = LedgerVersionedTaskStore.from_url(redis_url, prefix=prefix)
        await plain.save(task("t", TaskState.TASK_STATE_WORKING), ANN)
        stored = await versioned.get("t", ANN)
        assert stored is not None
        assert stored.task.status.state == TaskState.TASK_STATE_WORKING
        await plain.close()
        await versioned.close()

    asyncio.run(scenario())


class Asker(AgentExecutor):
    """Asks its user which one, and once answered makes the answer and completes."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        if context.current_task is None:
            assert context.message is not None
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
            question = updater.new_agent_message([Part(text="which one?")])
            await updater.update_status(TaskState.TASK_STATE_INPUT_REQUIRED, message=question)
            return
        await updater.start_work()
        await updater.add_artifact([Part(text="the second")], artifact_id="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


def test_a_subscription_goes_on_past_a_question_the_user_answered(
    memory_store: EventStore,
) -> None:
    tasks = LedgerVersionedTaskStore(memory_store)
    handler = LedgerRequestHandler(agent_executor=Asker(), agent_card=card(1), task_store=tasks)

    def kinds(events: list[Any]) -> list[str]:
        return [next(iter(MessageToDict(to_stream_response(e)))) for e in events]

    async def scenario() -> None:
        # Given a task that asked its user a question
        asked = SendMessageRequest(message=said("pick one"))
        first = [e async for e in handler.on_message_send_stream(asked, ANN)]
        assert first[-1].status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        task_id, context_id = first[0].id, first[0].context_id
        # and a client subscribed while it waits
        waiting = handler.on_subscribe_to_task(SubscribeToTaskRequest(id=task_id), ANN)
        snapshot = await anext(waiting)
        assert snapshot.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        rest = asyncio.ensure_future(until_done(waiting))
        # When the user answers
        answer = SendMessageRequest(message=said("the second", task_id, context_id))
        [e async for e in handler.on_message_send_stream(answer, ANN)]
        # Then the subscription gets the work, the artifact and the end, not the save of the
        # user's message (the SDK streams none of it)
        assert kinds(await rest) == ["statusUpdate", "artifactUpdate", "statusUpdate"]
        # and a client resuming after the task's first event gets every event after it, past
        # the question it was answered, to the end
        context = ServerCallContext(
            user=ANN.user, state={"headers": {"Last-Event-ID": f"{version_of(first[0])}.0"}}
        )
        again = SubscribeToTaskRequest(id=task_id)
        resumed = [e async for e in handler.on_subscribe_to_task(again, context)]
        assert kinds(resumed) == ["statusUpdate", "statusUpdate", "artifactUpdate", "statusUpdate"]
        assert resumed[-1].status.state == TaskState.TASK_STATE_COMPLETED
        # and resume points that are none, or past the task's last version, are refused
        end = version_of(resumed[-1])
        assert end is not None
        for bad in ("²", "yesterday", str(end + 5)):
            refused = ServerCallContext(user=ANN.user, state={"headers": {"last-event-id": bad}})
            with pytest.raises(InvalidParamsError):
                [e async for e in handler.on_subscribe_to_task(again, refused)]

    asyncio.run(scenario())


def test_a_task_s_changed_artifact_is_said_whole_and_an_added_part_alone() -> None:
    made = Artifact(artifact_id="a1", name="draft", parts=[Part(text="draft")])
    before = task("t", TaskState.TASK_STATE_WORKING, artifacts=[made])
    grown = task("t", TaskState.TASK_STATE_WORKING, artifacts=[made])
    grown.artifacts[0].parts.append(Part(text="more"))
    changed = task("t", TaskState.TASK_STATE_WORKING)
    changed.artifacts.append(Artifact(artifact_id="a1", parts=[Part(text="final")]))
    said_of = [
        [e["body"] for e in normalized(before, after, None, "w") if e["type"] == "message"]
        for after in (grown, changed, before)
    ]
    assert said_of == [["more"], ["final"], []]
