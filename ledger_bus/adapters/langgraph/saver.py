"""LedgerSaver: LangGraph's checkpointer on any ledger store."""

from __future__ import annotations

import asyncio
import base64
import builtins
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Final, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)

from ledger_bus.adapters.calls import CallLedger
from ledger_bus.adapters.langgraph.deltas import MessageDeltas
from ledger_bus.adapters.langgraph.layout import (
    AGENT,
    CAPABILITIES,
    CHECKPOINT,
    CHECKPOINTS,
    EMPTY,
    MESSAGES,
    UNIQUE,
    VALUE,
    WRITES,
    Namespace,
    Typed,
    blob_fields,
    channel_versions,
    fold,
    is_thread,
    namespace_stream,
    thread_session,
    version_key,
    weigh,
    write_id,
)
from ledger_bus.adapters.langgraph.normalize import Writer, interrupt_events, is_messages
from ledger_bus.adapters.langgraph.runs import TaskRuns
from ledger_bus.adapters.langgraph.tools import ToolRecording
from ledger_bus.adapters.view import StreamView, Views
from ledger_bus.agent.recorder import DEFAULT_LEASE_MS
from ledger_bus.model.errors import ConcurrentRun, InvalidInput, VersionConflict
from ledger_bus.model.ids import ANY, ExpectedVersion, StreamId, derive_event_id
from ledger_bus.model.records import AppendResult
from ledger_bus.operations.retention import Retention, Sweeper
from ledger_bus.store import connect
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.store.async_urls import open_async
from ledger_bus.store.base import Bounds, Deletes, EventStore, need
from ledger_bus.store.steps import Op, Sleep

T = TypeVar("T")
DEFAULT_MAX_BYTES: Final = 256 * 1024 * 1024  # of threads kept in the process, about
WRITES_WAIT: Final = 0.5  # seconds a checkpoint waits for the writes that name its messages' runs
# How long a checkpoint waits for the process's own appends to its stream on their way (they
# are answered within a round trip; one that is retrying through an outage is not waited for),
# and the pause between looks.
LANDING_WAIT: Final = 0.05
LANDING_PAUSE: Final = 0.0002


class LedgerSaver(MessageDeltas, TaskRuns, ToolRecording, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on any ledger store (Redis, Valkey, Redis Cluster, SQLite,
    PostgreSQL, memory), sync and async.

    `store` is an EventStore (async methods run it on worker threads) or an aio AsyncStore
    (its sync methods then work only where the AsyncStore runs on threads: SQL, memory).
    """

    capabilities: Final = CAPABILITIES

    def __init__(
        self,
        store: EventStore | AsyncStore,
        *,
        serde: Any = None,
        lease_ttl_ms: int = DEFAULT_LEASE_MS,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
        retention: Retention | None = None,
    ):
        super().__init__(serde=serde)
        self.astore = store if isinstance(store, AsyncStore) else None
        self.store: EventStore = store.core if isinstance(store, AsyncStore) else store
        # A thread's checkpoints are a bounded stream and a thread is deleted whole: a store
        # without those is refused here, in one line (its calls ask for attempts: CallLedger).
        need(self.store, Bounds)
        need(self.store, Deletes)
        # retention: threads idle past it deleted (or archived) whole (retention.py)
        self.retention = (
            Sweeper(retention, self.store, is_thread, self.astore) if retention else None
        )
        # max_bytes: about how much of the threads it read the saver keeps in this process;
        # past it, the threads used least recently are read again when next used.
        self._views: Views[Namespace] = Views(Namespace, fold, weigh, max_bytes)
        # lease_ttl_ms: how long a tool call's lease outlives its process (recorded tools).
        self.calls = CallLedger(self.store, agent=AGENT, lease_ttl_ms=lease_ttl_ms)

    def memory(self) -> int:
        """About how many bytes of threads the saver keeps in this process (max_bytes)."""
        return self._views.held()

    @classmethod
    def from_conn_string(cls, url: str, **options: Any) -> SaverContext:
        """A saver on the store at `url` (any URL `ledger_bus.connect` takes), closed with the
        block, as LangGraph's savers give theirs: `with LedgerSaver.from_conn_string(url) as
        saver` on a blocking store, `async with` on an asyncio one. `options`: the saver's
        (serde, lease_ttl_ms) and connect's (prefix, timeout, durability, ...)."""
        return SaverContext(cls, url, options)

    # -- drivers ------------------------------------------------------------------------------

    def _sync(self, op: Op[T]) -> T:
        if self.astore is not None and self.astore.native:
            raise InvalidInput(
                "this saver runs on an asyncio store: use the graph's async methods"
                " (ainvoke, astream), or give it a blocking store"
            )
        return self.store.run_op(op)

    async def _async(self, op: Op[T]) -> T:
        if self.astore is not None:
            return await self.astore.drive(op)
        return await asyncio.to_thread(self.store.run_op, op)

    # -- serialization ------------------------------------------------------------------------

    def _dump(self, value: object) -> Typed:
        kind, data = self.serde.dumps_typed(value)
        return [kind, base64.b64encode(data).decode()]

    def _load(self, typed: Typed) -> Any:
        return self.serde.loads_typed((typed[0], base64.b64decode(typed[1])))

    # -- the base capabilities ----------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        saved = self._sync(self._put_op(config, checkpoint, metadata, new_versions))
        if self.retention is not None:
            self.retention.kick()
        return saved

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        saved = await self._async(self._put_op(config, checkpoint, metadata, new_versions))
        if self.retention is not None:
            self.retention.kick()
        return saved

    def _put_op(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Op[RunnableConfig]:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        values = checkpoint.get("channel_values", {})
        rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        merged = get_checkpoint_metadata(config, metadata)
        stream = namespace_stream(thread_session(thread_id), ns)
        append_id = write_id("c", checkpoint["id"])
        parent = configurable.get("checkpoint_id")
        lists = [c for c in new_versions if is_messages(values.get(c))]
        view = self._views.of(stream)
        state = None
        if lists:  # what the thread holds so far, to write only the messages that are new
            state = view.state
            if parent not in state.checkpoints:
                state = yield from view.refresh_op(self.store)
        # A step of the graph's loop, on a thread whose tasks' writes are saved (not so with
        # durability="exit"): its tasks' writes name the runs of its messages.
        stepped = merged.get("source") == "loop" and state is not None and bool(state.writes)
        pause, waited = 0.002, 0.0
        while True:
            writer, blobs = yield from self._values_op(
                config, checkpoint, new_versions, stream, append_id, state, lists
            )
            if not writer.unplaced or not stepped or waited >= WRITES_WAIT:
                break
            # A new message of a step no task's writes hold yet: LangGraph writes a step's
            # writes and the checkpoint after it on threads of their own, so they may still be
            # on their way. Wait for them a while, to name the run that wrote each message.
            state = yield from view.refresh_op(self.store)
            if waited:
                yield Sleep(pause)
                pause = min(pause * 2, 0.05)
            waited += pause
        event = {
            "type": "mutation",
            "agent": AGENT,
            "kind": CHECKPOINT,
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": parent,
            "graph_run_id": str(merged.get("run_id", "")),
            "checkpoint": self._dump(rest),
            "metadata": self._dump(merged),
            # Versions as get_next_version makes them (or as the caller gave them): read back
            # as they were put.
            "versions": UNIQUE,
            **blob_fields(blobs),
        }
        # The view takes the checkpoint: the next one's parent, without reading it back.
        yield from self._continue_op(stream, thread_id, parent, append_id, [*writer.events, event])
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _values_op(  # noqa: PLR0913  (put's checkpoint, where it goes, and what it knows)
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        stream: StreamId,
        append_id: str,
        state: Namespace | None,
        lists: builtins.list[str],
    ) -> Op[tuple[Writer, builtins.list[tuple[str, str, Any]]]]:
        """The checkpoint's new channel values, a message list as a delta whose new messages
        the returned writer holds as events (the checkpoint's append, numbered from 0)."""
        configurable = config["configurable"]
        values = checkpoint.get("channel_values", {})
        requests: dict[str, str] = {}
        outcomes: dict[str, str] = {}
        if state is not None and self.tools_recorded:
            requests, outcomes = yield from self._recorded_op(
                state, stream.session_id, [m for c in lists for m in values[c]]
            )
        writer = Writer(
            lambda index: derive_event_id(stream.session_id, stream.name, append_id, index),
            {**state.calls, **requests} if state is not None else {},
            requests,
            outcomes,
            requests_calls=not self.tools_recorded,
        )
        blobs: builtins.list[tuple[str, str, Any]] = []
        for channel, version in new_versions.items():
            if state is not None and channel in lists:
                parent = configurable.get("checkpoint_id")
                seen = checkpoint.get("versions_seen", {})
                inner = bool(configurable.get("checkpoint_ns", ""))
                typed = self._messages(state, writer, channel, values[channel], parent, seen, inner)
            else:
                typed = self._dump(values[channel]) if channel in values else EMPTY
            blobs.append((channel, version_key(version), typed))
        return writer, blobs

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._sync(self._put_writes_op(config, writes, task_id, task_path))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._async(self._put_writes_op(config, writes, task_id, task_path))

    def _put_writes_op(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Op[None]:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        event = {
            "type": "mutation",
            "agent": AGENT,
            "kind": WRITES,
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": configurable["checkpoint_id"],
            "task_id": task_id,
            "task_path": task_path,
            "writes": [
                [WRITES_IDX_MAP.get(channel, idx), channel, self._dump(value)]
                for idx, (channel, value) in enumerate(writes)
            ],
        }
        stream = namespace_stream(thread_session(thread_id), ns)
        # Said before it is written: the checkpoint LangGraph writes after this step, on a
        # thread of its own, names its messages' runs by the tasks' writes.
        self._views.of(stream).state.announce(
            str(configurable["checkpoint_id"]), task_path, event["writes"]
        )
        append_id = write_id("w", f"{configurable['checkpoint_id']}:{task_id}")
        # Interrupts and resumes, once: where the thread's own graph sees them (a subgraph's
        # interrupt reaches its parent's task too).
        said = [] if ns else interrupt_events(writes, task_id, task_path)
        runs = yield from self._task_events_op(config, stream, task_id, task_path, writes)
        yield from self._append_op(stream, append_id, [*runs[:1], event, *said, *runs[1:]])

    def _append_op(
        self,
        stream: StreamId,
        append_id: str,
        events: builtins.list[Any],
        expected: ExpectedVersion = ANY,
    ) -> Op[AppendResult]:
        """Append to a namespace's stream; its view takes what was written (with the event ids
        the store gives), so that the next read need not read it back."""
        view = self._views.of(stream)
        view.sending()
        try:
            written = yield from self.store.append_op(stream, expected, append_id, events)
            for n, fields in enumerate(events):
                fields.setdefault(
                    "event_id", derive_event_id(stream.session_id, stream.name, append_id, n)
                )
            view.wrote(written, events)
        finally:
            view.answered()
        return written

    def _landed_op(self, view: StreamView[Namespace]) -> Op[None]:
        """Wait a while for this process's appends to `view`'s stream that are on their way
        (LangGraph writes a step's task writes and its checkpoint on threads of their own): a
        checkpoint appended at the version the view holds then meets no conflict of the
        process's own making, and one that met it need read nothing back."""
        deadline = time.monotonic() + LANDING_WAIT
        while view.flying and time.monotonic() < deadline:
            yield Sleep(LANDING_PAUSE)

    def _continue_op(
        self,
        stream: StreamId,
        thread_id: str,
        parent: str | None,
        append_id: str,
        events: builtins.list[Any],
    ) -> Op[None]:
        """Append a checkpoint that continues `parent`, unless another checkpoint was written
        to its namespace after this process read `parent` for the run (or wrote it): two runs
        of one thread at once would fork it without a word (ConcurrentRun). A fork on purpose,
        from a checkpoint the run asked for by its id, continues what it read then."""
        view = self._views.of(stream)
        while True:
            state = view.state
            since = state.handed.get(parent or "")
            if since is None:  # not read here for a run: nothing to hold it to
                written = yield from self._append_op(stream, append_id, events)
                break
            if state.newest > since:
                raise ConcurrentRun(
                    f"thread {thread_id!r}: another run wrote a checkpoint after this run read"
                    f" {parent or 'the thread'}; two runs of one thread at once would fork it."
                    " Nothing of this run's step was written: run it again on the thread as it"
                    " stands, or fork on purpose from a checkpoint named by its checkpoint_id"
                )
            yield from self._landed_op(view)
            try:
                written = yield from self._append_op(stream, append_id, events, view.version)
                break
            except VersionConflict as conflict:  # appended to since the view was read: by whom?
                yield from self._landed_op(view)
                if view.version != conflict.actual:  # not by this process alone
                    yield from view.refresh_op(self.store)
        view.state.handed[events[-1]["checkpoint_id"]] = written.last_version

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(self._get_tuple_op(config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._async(self._get_tuple_op(config))

    def _get_tuple_op(self, config: RunnableConfig) -> Op[CheckpointTuple | None]:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        stream = namespace_stream(thread_session(thread_id), ns)
        view = self._views.of(stream)
        state = yield from view.refresh_op(self.store)
        wanted = get_checkpoint_id(config)
        if wanted is None:
            # A run reads the thread's latest checkpoint, then continues it: no other
            # checkpoint may come after it meanwhile (_continue_op).
            latest = max(state.checkpoints) if state.checkpoints else ""
            state.handed[latest] = view.version
            if not latest:
                return None
            wanted = latest
        else:
            state.handed[wanted] = view.version
        saved = state.checkpoints.get(wanted)
        if saved is None:
            return None
        return self._tuple(thread_id, ns, state, saved.fields)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from self._sync(self._list_op(config, filter, before, limit))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for found in await self._async(self._list_op(config, filter, before, limit)):
            yield found

    def _list_op(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Op[builtins.list[CheckpointTuple]]:
        if config is None:
            sessions = [s for s, _ in (yield from self.store.sessions_op())]
        else:
            sessions = [thread_session(str(config["configurable"]["thread_id"]))]
        wanted_ns = None if config is None else config["configurable"].get("checkpoint_ns")
        wanted_id = None if config is None else get_checkpoint_id(config)
        before_id = None if before is None else get_checkpoint_id(before)
        out: builtins.list[CheckpointTuple] = []
        for session in sessions:
            for stream in (yield from self._namespaces_op(session)):
                state = yield from self._views.of(stream).refresh_op(self.store)
                if state.thread_id is None or (wanted_ns is not None and state.ns != wanted_ns):
                    continue
                for checkpoint_id in sorted(state.checkpoints, reverse=True):
                    if wanted_id and checkpoint_id != wanted_id:
                        continue
                    if before_id and checkpoint_id >= before_id:
                        continue
                    fields = state.checkpoints[checkpoint_id].fields
                    if filter:
                        metadata = self._load(fields["metadata"])
                        if not all(metadata.get(k) == v for k, v in filter.items()):
                            continue
                    if limit is not None and len(out) >= limit:
                        return out
                    out.append(self._tuple(state.thread_id, state.ns, state, fields))
        return out

    def _namespaces_op(self, session_id: str) -> Op[builtins.list[StreamId]]:
        """The checkpoint streams of a thread's session."""
        if not (yield from self.store.session_exists_op(session_id)):
            return []
        info = yield from self.store.session_info_op(session_id)
        return [
            StreamId(session_id, s.name)
            for s in info.streams
            if s.name == CHECKPOINTS or s.name.startswith((f"{CHECKPOINTS}.", f"{CHECKPOINTS}#"))
        ]

    def _tuple(
        self, thread_id: str, ns: str, state: Namespace, fields: dict[str, Any]
    ) -> CheckpointTuple:
        checkpoint = self._load(fields["checkpoint"])
        if fields.get("versions") != UNIQUE:
            # Written when this saver numbered versions 1, 2, 3: read in today's form, since
            # LangGraph compares versions and a whole number beside a string would not compare.
            checkpoint["channel_versions"] = channel_versions(
                checkpoint.get("channel_versions", {})
            )
            checkpoint["versions_seen"] = {
                node: channel_versions(seen)
                for node, seen in checkpoint.get("versions_seen", {}).items()
            }
        values = {}
        for channel, version in checkpoint.get("channel_versions", {}).items():
            key = version_key(version)
            typed = state.blobs.get((channel, key))
            if isinstance(typed, tuple):
                values[channel] = self._message_list(state, state.refs(channel, key) or [])
            elif typed is not None and typed[0] != "empty":
                values[channel] = self._load(typed)
        checkpoint_id = fields["checkpoint_id"]
        parent = fields.get("parent_checkpoint_id")
        writes = sorted(
            state.writes.get(checkpoint_id, {}).values(), key=lambda w: (w[3], w[0], w[4])
        )
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint=cast(Checkpoint, {**checkpoint, "channel_values": values}),
            metadata=self._load(fields["metadata"]),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=[(w[0], w[1], self._load(w[2])) for w in writes],
        )

    def delete_thread(self, thread_id: str) -> None:
        self._sync(self._delete_thread_op(thread_id))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._async(self._delete_thread_op(thread_id))

    def _delete_thread_op(self, thread_id: str) -> Op[None]:
        session = thread_session(str(thread_id))
        yield from self.store.delete_session_op(session)
        self._views.forget_session(session)

    # -- the extended capabilities ------------------------------------------------------------

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._sync(self._delete_for_runs_op(run_ids))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._async(self._delete_for_runs_op(run_ids))

    def _delete_for_runs_op(self, run_ids: Sequence[str]) -> Op[None]:
        gone = {str(r) for r in run_ids}
        for session, _ in (yield from self.store.sessions_op()):
            for stream in (yield from self._namespaces_op(session)):
                state = yield from self._views.of(stream).refresh_op(self.store)
                doomed = [
                    cid
                    for cid, saved in state.checkpoints.items()
                    if saved.fields.get("graph_run_id") in gone
                ]
                if doomed:
                    kept = [cid for cid in state.checkpoints if cid not in doomed]
                    yield from self._rewrite_op(stream, state, kept)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._sync(self._copy_thread_op(source_thread_id, target_thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._async(self._copy_thread_op(source_thread_id, target_thread_id))

    def _copy_thread_op(self, source: str, target: str) -> Op[None]:
        target_session = thread_session(str(target))
        for stream in (yield from self._namespaces_op(thread_session(str(source)))):
            state = yield from self._views.of(stream).refresh_op(self.store)
            events = self._self_contained(state, list(state.checkpoints), str(target))
            copy = StreamId(target_session, stream.name)
            for start in range(0, len(events), self._chunk()):
                chunk = events[start : start + self._chunk()]
                yield from self.store.append_op(copy, ANY, write_id("copy", str(source)), chunk)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._sync(self._prune_op(thread_ids, strategy))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._async(self._prune_op(thread_ids, strategy))

    def _prune_op(self, thread_ids: Sequence[str], strategy: str) -> Op[None]:
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInput(f"prune strategy must be keep_latest or delete, got {strategy!r}")
        for thread_id in thread_ids:
            for stream in (yield from self._namespaces_op(thread_session(str(thread_id)))):
                state = yield from self._views.of(stream).refresh_op(self.store)
                if strategy == "delete" or not state.checkpoints:
                    yield from self.store.delete_stream_op(stream)
                    self._views.of(stream).forget()
                elif len(state.checkpoints) > 1:
                    yield from self._rewrite_op(stream, state, [max(state.checkpoints)])

    def _rewrite_op(self, stream: StreamId, state: Namespace, kept: builtins.list[str]) -> Op[None]:
        """Leave only the `kept` checkpoints (and their writes) in the stream: appended again,
        each with every channel value it needs, while the stream is bounded to them, so that
        the append that completes them trims everything before it (spec 3.12). The bound is
        for the rewrite's own appends: a process killed before it is lifted leaves the old
        checkpoints with copies of the kept ones (the same state), and a bound that trims no
        checkpoint written after."""
        if not kept:
            yield from self.store.delete_stream_op(stream)
            self._views.of(stream).forget()
            return
        assert state.thread_id is not None
        events = self._self_contained(state, sorted(kept), state.thread_id)
        # The bound is for the last append alone: one before it would trim kept checkpoints
        # that are not yet appended again, and a kill there would lose them.
        rewrite = f"r:{uuid.uuid4().hex}"
        last = f"{rewrite}:last"
        yield from self.store.bound_stream_op(stream, len(events), dedup_window_ms=0, only=last)
        try:
            starts = range(0, len(events), self._chunk())
            for start in starts:
                chunk = events[start : start + self._chunk()]
                append_id = last if start == starts[-1] else f"{rewrite}:{start}"
                yield from self.store.append_op(stream, ANY, append_id, chunk)
        finally:
            yield from self.store.bound_stream_op(stream, None)

    def _self_contained(
        self, state: Namespace, ids: builtins.list[str], thread_id: str
    ) -> builtins.list[dict[str, Any]]:
        """The checkpoints `ids` as events that hold every channel value they need, each
        followed by its pending writes, for `thread_id`."""
        events: builtins.list[dict[str, Any]] = []
        for checkpoint_id in ids:
            fields = state.checkpoints[checkpoint_id].fields
            versions = self._load(fields["checkpoint"]).get("channel_versions", {})
            blobs = []
            for channel, version in versions.items():
                key = version_key(version)
                found = state.blobs.get((channel, key))
                if isinstance(found, tuple):  # self-contained: every message inline
                    refs = state.refs(channel, key) or []
                    found = [MESSAGES, "", [[ref, *state.natives[ref]] for ref in refs]]
                if found is not None:
                    blobs.append((channel, key, found))
            kept = {
                k: v
                for k, v in fields.items()
                if k not in ("event_id", "blobs") and not k.startswith(VALUE)
            }
            events.append({**kept, "thread_id": thread_id, **blob_fields(blobs)})
            by_task: dict[tuple[str, str], builtins.list[builtins.list[Any]]] = {}
            for task_id, channel, value, task_path, idx in state.writes.get(
                checkpoint_id, {}
            ).values():
                by_task.setdefault((task_id, task_path), []).append([idx, channel, value])
            for (task_id, task_path), writes in by_task.items():
                events.append(
                    {
                        "type": "mutation",
                        "agent": AGENT,
                        "kind": WRITES,
                        "thread_id": thread_id,
                        "checkpoint_ns": state.ns,
                        "checkpoint_id": checkpoint_id,
                        "task_id": task_id,
                        "task_path": task_path,
                        "writes": writes,
                    }
                )
        return events

    def _chunk(self) -> int:
        return max(1, self.store.limits.max_events_per_append)

    def get_next_version(self, current: str | int | None, channel: None) -> str:
        """The version after `current`, as LangGraph's own savers make it: a counter one up and
        a random part, so that a version is never written twice, on any branch."""
        if current is None:
            counter = 0
        elif isinstance(current, int):
            counter = current
        else:
            counter = int(str(current).split(".")[0])
        return f"{counter + 1:032}.{random.random():016}"


def record_tools(saver: LedgerSaver, *, safe_to_replay: Sequence[str] = ()) -> dict[str, Any]:
    """`saver.record_tools(...)`: keyword arguments for ToolNode (wrap_tool_call and
    awrap_tool_call) that record its tool calls in the saver's store."""
    return saver.record_tools(safe_to_replay=safe_to_replay)


_SAVER_OPTIONS: Final = ("serde", "lease_ttl_ms", "max_bytes", "retention")


class SaverContext:
    """LedgerSaver.from_conn_string: a context manager, blocking or asyncio."""

    def __init__(self, kind: type[LedgerSaver], url: str, options: dict[str, Any]):
        self._kind, self._url = kind, url
        self._saver_options = {k: v for k, v in options.items() if k in _SAVER_OPTIONS}
        self._store_options = {k: v for k, v in options.items() if k not in _SAVER_OPTIONS}
        self._store: EventStore | None = None
        self._astore: AsyncStore | None = None

    def __enter__(self) -> LedgerSaver:
        self._store = connect(self._url, **self._store_options)
        return self._kind(self._store, **self._saver_options)

    def __exit__(self, *exc: object) -> None:
        if self._store is not None:
            self._store.close()

    async def __aenter__(self) -> LedgerSaver:
        self._astore = await open_async(self._url, **self._store_options)
        return self._kind(self._astore, **self._saver_options)

    async def __aexit__(self, *exc: object) -> None:
        if self._astore is not None:
            await self._astore.aclose()
