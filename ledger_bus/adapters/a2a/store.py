"""A2A's task store and cross-replica event stream on the ledger (layout in layout.py).

- `LedgerTaskStore`: a2a-sdk's `TaskStore`, for a server in one process. Its saves carry no
  version (the SDK's `TaskStore` has none): each is appended on top of the last, the last save
  is the task, and every one is kept (the task's history is its stream).
- `LedgerVersionedTaskStore`: the SDK's `VersionedTaskStore`, for its cluster mode (replicas
  behind one address). Its version is the task's stream version; a save at a version another
  writer moved past is refused with the SDK's `ConcurrentTaskModificationError`, and writes
  nothing; the SDK then reads the task again and decides. A cancel overwrites a task that has
  not ended, as the SDK's contract asks.
- `LedgerTaskEventStream`: the SDK's `TaskEventStream`. The events are written by the versioned
  store, in the same append as the task they made (as the SDK's database stream has them), so
  `publish` writes nothing; `subscribe` reads the task's stream after a version and then waits
  on the ledger for what comes next, from any replica, nothing missed and nothing twice.

Each takes any ledger store: an `AsyncStore` (`ledger_bus.aio`), or an `EventStore`, whose calls
run on worker threads.
"""

from __future__ import annotations

import asyncio
import builtins
import uuid
from collections.abc import AsyncGenerator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from a2a.server.cluster.event_stream import TaskEventStream, VersionedEvent
from a2a.server.cluster.task_store import (
    ConcurrentTaskModificationError,
    StoredTask,
    VersionedTaskStore,
)
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.owner_resolver import OwnerResolver, resolve_user_scope
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_store import TaskStore
from a2a.types.a2a_pb2 import (
    ListTasksRequest,
    ListTasksResponse,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict, ParseDict

from ledger_bus.adapters.a2a import layout
from ledger_bus.adapters.a2a.layout import AGENT, DELETED, MADE, TASK
from ledger_bus.adapters.a2a.normalize import TERMINAL, normalized
from ledger_bus.model.errors import VersionConflict
from ledger_bus.model.ids import ANY, CURSOR_ZERO
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store import connect
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.store.base import EventStore
from ledger_bus.store.steps import Op

T = TypeVar("T")

# The events a head read looks back over in the session's tail before it reads the whole
# stream: the task's record is the last of its own append, so one is almost always enough.
_TAIL: Final = 8
# One wait on the ledger of a subscription on a blocking store (on a worker thread): short, so
# that a subscription closed by its reader lets its thread go soon.
_WAIT_MS: Final = 1_000
# The subscriptions a stream on a blocking store serves at once, each on a thread while it waits
# (more wait their turn); an asyncio store's waits need none.
WAITERS: Final = 64


@dataclass(frozen=True)
class Head:
    """A task's stream as last written: its version, and its last record (None: never made)."""

    version: int
    record: RecordedEvent | None

    @property
    def live(self) -> bool:
        return self.record is not None and self.record.fields.get("kind") == TASK

    @property
    def owner(self) -> str:
        return str(self.record.fields.get("owner", "")) if self.record is not None else ""

    def task(self) -> Task:
        assert self.record is not None
        return task_from(self.record.fields["task"])


@dataclass(frozen=True)
class Saved:
    """One save of a task, as its stream keeps it: its version, the task as saved (None: the
    task deleted there), and the A2A event that made it (None: a save of the task itself)."""

    version: int
    task: Task | None
    event: Event | None


def streamed(record: RecordedEvent) -> bool:
    """Whether a record of a task's stream holds an event the SDK streams to subscribers: every
    event saved but a Task after the task's first save (the SDK saves a user's message so, and
    streams none of it; it streams a Task event only when it makes the task)."""
    data = record.fields.get("event")
    if record.fields.get("kind") != TASK or not isinstance(data, dict):
        return False
    return "task" not in data or bool(record.fields.get("made"))


def _is_record(event: RecordedEvent) -> bool:
    """Whether an event of a task's stream is a save or a deletion of the task."""
    return event.type == "mutation" and event.fields.get("kind") in (TASK, DELETED)


def task_from(data: JSONObject) -> Task:
    task = Task()
    ParseDict(data, task, ignore_unknown_fields=True)
    return task


def event_from(data: JSONObject) -> Event:
    """An A2A event as its StreamResponse's JSON has it. (The SDK's own
    `stream_response_to_event` lives in its database stream's module, which needs SQLAlchemy.)"""
    response = ParseDict(data, StreamResponse(), ignore_unknown_fields=True)
    which = response.WhichOneof("payload")
    if which is None:
        raise ValueError("a recorded A2A event has no payload")
    found: Event = getattr(response, which)
    return found


class _Ledger:
    """What the three share: the store, how its calls are made, and the reads and writes of a
    task's stream."""

    def __init__(self, store: EventStore | AsyncStore, agent: str):
        self.astore = store if isinstance(store, AsyncStore) else None
        self.store: EventStore = store.core if isinstance(store, AsyncStore) else store
        self.agent = agent
        self.owned = False

    async def drive(self, op: Op[T]) -> T:
        if self.astore is not None:
            return await self.astore.drive(op)
        return await asyncio.to_thread(self.store.run_op, op)

    async def close(self) -> None:
        """Close the store, when this opened it (`from_url`)."""
        if self.owned:
            if self.astore is not None:
                await self.astore.aclose()
            else:
                self.store.close()

    def head_op(self, task_id: str) -> Op[Head]:
        stream = layout.stream_of(task_id)
        found = yield from self.store.tail_op(stream.session_id, _TAIL)
        mine = [e for e in found if e.stream == stream]
        if not mine:
            version = yield from self.store.stream_version_op(stream)
            if not version:
                return Head(0, None)
            mine = yield from self.store.read_stream_op(stream)
        records = [e for e in mine if _is_record(e)]
        if not records and mine[0].version > 1:  # the stream's record is further back: read it
            mine = yield from self.store.read_stream_op(stream)
            records = [e for e in mine if _is_record(e)]
        return Head(mine[-1].version, records[-1] if records else None)

    def append_op(  # noqa: PLR0913  (a save: what, after what, at which version, whose, its id)
        self,
        task: Task,
        event: Event | None,
        prev: Task | None,
        expected: int,
        owner: str,
        append_id: str,
    ) -> Op[int]:
        """The save of `task` at the stream version `expected`; its new version."""
        if prev is None:  # the task made: listed first, so that no task is made unlisted
            entry = {"type": "mutation", "agent": self.agent, "kind": MADE, "task_id": task.id}
            yield from self.store.append_op(
                layout.directory_of(owner), ANY, f"a2a-made:{task.id}", [entry]
            )
        record: JSONObject = {
            "type": "mutation",
            "agent": self.agent,
            "run_id": layout.run_of(task.id),
            "kind": TASK,
            "owner": owner,
            "task": MessageToDict(task),
        }
        if event is not None:
            record["event"] = MessageToDict(to_stream_response(event))
        if prev is None:
            record["made"] = True  # the task's first save (or its first since it was deleted)
        events = [*normalized(prev, task, event, self.agent), record]
        done = yield from self.store.append_op(
            layout.stream_of(task.id), expected, append_id, events
        )
        return done.last_version

    def delete_op(self, task_id: str, owner: str) -> Op[None]:
        append_id = f"a2a-delete:{uuid.uuid4().hex}"
        while True:
            head = yield from self.head_op(task_id)
            if not head.live or head.owner != owner:
                return
            gone = {"type": "mutation", "agent": self.agent, "kind": DELETED, "owner": owner}
            try:
                yield from self.store.append_op(
                    layout.stream_of(task_id), head.version, append_id, [gone]
                )
                return
            except VersionConflict:
                continue

    def history_op(self, task_id: str, owner: str) -> Op[list[Saved]]:
        records = yield from self.store.read_stream_op(layout.stream_of(task_id))
        saved = []
        for r in records:
            if r.fields.get("kind") == TASK and r.fields.get("owner") == owner:
                data = r.fields.get("event")
                event = event_from(data) if data is not None else None
                saved.append(Saved(r.version, task_from(r.fields["task"]), event))
            elif r.fields.get("kind") == DELETED and r.fields.get("owner") == owner:
                saved.append(Saved(r.version, None, None))
        return saved

    def list_op(self, owner: str) -> Op[list[Task]]:
        entries = yield from self.store.read_stream_op(layout.directory_of(owner))
        ids = dict.fromkeys(
            str(e.fields["task_id"]) for e in entries if e.fields.get("kind") == MADE
        )
        tasks = []
        for task_id in ids:
            head = yield from self.head_op(task_id)
            if head.live and head.owner == owner:
                tasks.append(head.task())
        return tasks

    async def listed(self, tasks: list[Task], params: ListTasksRequest) -> ListTasksResponse:
        """The page of `tasks` `params` asks for, filtered, ordered and cut as the SDK's own
        stores do it: by its in-memory store, handed the tasks, so the two cannot differ."""
        page = InMemoryTaskStore(owner_resolver=_everyone, use_copying=False)
        for task in tasks:
            await page.save(task, _ALL)
        return await page.list(params, _ALL)


_ALL: Final = ServerCallContext()


def _everyone(_: ServerCallContext) -> str:
    return ""


class LedgerTaskStore(TaskStore):
    """a2a-sdk's TaskStore on the ledger: `DefaultRequestHandler(..., task_store=LedgerTaskStore(
    store))`. Each save is appended on top of the last (the last save is the task; every one
    stays in its `history`); `get` gives the task as last saved, `list` the owner's tasks,
    `delete` ends it (its history stays). `agent` names the agent in the ledger's own events of
    its tasks."""

    def __init__(
        self,
        store: EventStore | AsyncStore,
        *,
        agent: str = AGENT,
        owner_resolver: OwnerResolver = resolve_user_scope,
    ):
        self.ledger = _Ledger(store, agent)
        self.owner_resolver = owner_resolver

    @classmethod
    def from_url(cls, url: str, **options: Any) -> LedgerTaskStore:
        """A task store on the store at `url` (any URL `ledger_bus.connect` takes); `close()`
        closes it. `options`: the store's (agent, owner_resolver) and connect's."""
        return _opened(cls, url, options)

    async def close(self) -> None:
        await self.ledger.close()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        owner = self.owner_resolver(context)
        await self.ledger.drive(self._save_op(task, owner))

    def _save_op(self, task: Task, owner: str) -> Op[None]:
        append_id = f"a2a-save:{uuid.uuid4().hex}"
        while True:
            head = yield from self.ledger.head_op(task.id)
            prev = head.task() if head.live and head.owner == owner else None
            try:
                yield from self.ledger.append_op(task, None, prev, head.version, owner, append_id)
                return
            except VersionConflict:  # saved meanwhile by another: on top of that save
                continue

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        owner = self.owner_resolver(context)
        head = await self.ledger.drive(self.ledger.head_op(task_id))
        return head.task() if head.live and head.owner == owner else None

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        tasks = await self.ledger.drive(self.ledger.list_op(self.owner_resolver(context)))
        return await self.ledger.listed(tasks, params)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self.ledger.drive(self.ledger.delete_op(task_id, self.owner_resolver(context)))

    async def history(self, task_id: str, context: ServerCallContext) -> builtins.list[Saved]:
        """Every save of the task, oldest first: each status and artifact update with the task
        it made (the owner's saves only)."""
        owner = self.owner_resolver(context)
        return await self.ledger.drive(self.ledger.history_op(task_id, owner))


class LedgerVersionedTaskStore(VersionedTaskStore):
    """a2a-sdk's VersionedTaskStore on the ledger, for replicas behind one address:
    `DefaultRequestHandler(..., task_store=LedgerVersionedTaskStore(store),
    event_stream=LedgerTaskEventStream(store))`."""

    def __init__(
        self,
        store: EventStore | AsyncStore,
        *,
        agent: str = AGENT,
        owner_resolver: OwnerResolver = resolve_user_scope,
    ):
        # The same tasks as a plain TaskStore (its listing, deletion, history), on one ledger.
        self._plain = LedgerTaskStore(store, agent=agent, owner_resolver=owner_resolver)
        self.ledger = self._plain.ledger
        self.owner_resolver = owner_resolver

    @classmethod
    def from_url(cls, url: str, **options: Any) -> LedgerVersionedTaskStore:
        """As LedgerTaskStore.from_url."""
        return _opened(cls, url, options)

    @property
    def as_task_store(self) -> LedgerTaskStore:
        """The same tasks as a plain TaskStore."""
        return self._plain

    async def close(self) -> None:
        await self.ledger.close()

    async def save(
        self,
        task: Task,
        *,
        event: Event | None = None,
        prev: Task | None = None,
        prev_version: TaskVersion,
        context: ServerCallContext,
    ) -> TaskVersion:
        del prev  # the stored task is read instead (see _save_op)
        owner = self.owner_resolver(context)
        version = await self.ledger.drive(self._save_op(task, event, prev_version, owner))
        return TaskVersion(version)

    def _save_op(
        self, task: Task, event: Event | None, prev_version: TaskVersion, owner: str
    ) -> Op[int]:
        append_id = f"a2a-save:{uuid.uuid4().hex}"
        if task.status.state == TaskState.TASK_STATE_CANCELED:
            # A cancel lands on any version of a task that has not ended (the SDK's contract).
            while True:
                head = yield from self.ledger.head_op(task.id)
                if not head.live or head.owner != owner or head.task().status.state in TERMINAL:
                    raise ConcurrentTaskModificationError(task.id)
                try:
                    return (
                        yield from self.ledger.append_op(
                            task, event, head.task(), head.version, owner, append_id
                        )
                    )
                except VersionConflict:
                    continue
        if prev_version.is_missing:  # a first write: refused when the task is there already
            head = yield from self.ledger.head_op(task.id)
            if head.live:
                raise ConcurrentTaskModificationError(task.id)
            expected, before = head.version, None
        else:
            # What changed is said against the task as stored at that version, not `prev`: the
            # SDK hands the task it changed in place as both. A head past the version is the
            # conflict the append would meet: refused here, nothing written.
            expected = version_number(prev_version)
            head = yield from self.ledger.head_op(task.id)
            if head.version != expected or not head.live or head.owner != owner:
                raise ConcurrentTaskModificationError(task.id)
            before = head.task()
        try:
            return (
                yield from self.ledger.append_op(task, event, before, expected, owner, append_id)
            )
        except VersionConflict:
            raise ConcurrentTaskModificationError(task.id) from None

    async def get(self, task_id: str, context: ServerCallContext) -> StoredTask | None:
        owner = self.owner_resolver(context)
        head = await self.ledger.drive(self.ledger.head_op(task_id))
        if not head.live or head.owner != owner:
            return None
        return StoredTask(head.task(), TaskVersion(head.version))

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        return await self._plain.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self._plain.delete(task_id, context)

    async def history(self, task_id: str, context: ServerCallContext) -> builtins.list[Saved]:
        """As LedgerTaskStore.history."""
        return await self._plain.history(task_id, context)


class LedgerTaskEventStream(TaskEventStream):
    """a2a-sdk's TaskEventStream on the ledger: a task's events as its versioned saves wrote
    them, read by any replica."""

    def __init__(self, store: EventStore | AsyncStore):
        self.ledger = _Ledger(store, AGENT)
        # On a store that blocks, each subscription waits on a thread, of a pool of the stream's
        # own: the waits do not hold the threads the saves and reads run on.
        self._waits: ThreadPoolExecutor | None = None
        if self.ledger.astore is None or not self.ledger.astore.native:
            self._waits = ThreadPoolExecutor(WAITERS, thread_name_prefix="a2a-subscription")

    async def close(self) -> None:
        """Let the pool of threads its subscriptions wait on go (a blocking store's)."""
        if self._waits is not None:
            self._waits.shutdown(wait=False, cancel_futures=True)

    async def _wait(self, session_id: str, cursor: str) -> list[RecordedEvent]:
        op = self.ledger.store.wait_session_op(session_id, cursor, _WAIT_MS)
        if self._waits is None:
            return await self.ledger.drive(op)
        return await asyncio.get_running_loop().run_in_executor(
            self._waits, self.ledger.store.run_op, op
        )

    async def publish(self, task_id: str, event: VersionedEvent) -> None:
        """Nothing to do: the event was written with the save that applied it."""
        del task_id, event

    async def subscribe(
        self, task_id: str, *, after: TaskVersion
    ) -> AsyncGenerator[VersionedEvent, None]:
        """The task's events of versions after `after`, then each as it is saved, until the
        reader stops."""
        stream = layout.stream_of(task_id)
        version = 0 if after.is_missing else version_number(after)
        # Where the waits start is taken before the read: whatever commits after the read is
        # past it, so none falls between the two.
        last = await self.ledger.drive(self.ledger.store.tail_op(stream.session_id, 1))
        cursor = last[0].cursor if last else CURSOR_ZERO
        found = await self.ledger.drive(self.ledger.store.read_stream_op(stream, version))
        while True:
            for record in found:
                if record.stream != stream or record.version <= version:
                    continue
                version = record.version
                cursor = max(cursor, record.cursor)
                if streamed(record):
                    event = event_from(record.fields["event"])
                    yield VersionedEvent(event=event, version=TaskVersion(version))
            found = await self._wait(stream.session_id, cursor)
            if found:
                cursor = max(cursor, found[-1].cursor)

    async def destroy(self, task_id: str) -> None:
        """Nothing to let go: the task's stream is its record, and stays."""
        del task_id


Opened = TypeVar("Opened", LedgerTaskStore, LedgerVersionedTaskStore)


def _opened(kind: type[Opened], url: str, options: dict[str, Any]) -> Opened:
    """A store of `kind` on the store at `url`, which it closes (`close()`)."""
    own = {k: options.pop(k) for k in ("agent", "owner_resolver") if k in options}
    made = kind(connect(url, **options), **own)
    made.ledger.owned = True
    return made


def version_number(version: TaskVersion) -> int:
    """A ledger task's version as the number it is (the SDK's versions are opaque to it)."""
    value = version._value
    if not isinstance(value, int):
        raise TypeError(
            f"a ledger task's versions are integer versions (its stream's), got {value!r}"
        )
    return value
