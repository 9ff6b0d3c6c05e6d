"""LangGraph on the ledger: a checkpointer, and tool calls recorded before they run.

    from ledger_bus.adapters.langgraph import LedgerSaver, record_tools

    saver = LedgerSaver(ledger_bus.connect(url))            # or await aio.connect(url)
    tools = ToolNode([search], **record_tools(saver))      # wrap_tool_call / awrap_tool_call
    graph = builder.compile(checkpointer=saver)

A thread is a session (its id, or `lg~<sha256>` for an id that is not a session id), so on a
Redis Cluster all of a thread lives in one slot. Each checkpoint namespace is a stream of the
session (`lg.ckpt`, `lg.ckpt.<ns>`): a `langgraph.checkpoint` mutation per checkpoint, with the
channel values that changed at it, and a `langgraph.writes` mutation per task's pending writes.
Values are the saver's serde bytes, base64, a field each; a large one is kept as an artifact
(spec 3.11), stored once however many checkpoints hold it. Reads fold the stream into a view
that is brought up to date by reading what was appended since (adapters/view.py): a get_tuple
is one read.

Deleting and pruning, in an append-only log: delete_thread deletes the session (its tool calls
too); prune("delete") deletes the namespace streams; prune("keep_latest") and delete_for_runs
append what stays as self-contained checkpoints and trim everything before them in that append
(a bounded stream, spec 3.12).

Tool calls: `record_tools(saver)` gives ToolNode's wrappers, which record each call of a tool as
a `tool_call` (requested) in the thread's `lg.tools` stream before the tool runs and its
`tool_result` after, holding a lease while it runs. A process killed inside a tool leaves an
open attempt the reconciler flags; resuming the thread returns a recorded result instead of
running the tool again, and stops (UnresolvedAttempt) at a call that was requested and never
finished, unless the tool is declared safe to replay.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import hashlib
import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar, cast

from ledger_bus.model.extras import needs

try:
    from langchain_core.messages import ToolMessage
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
except ImportError as err:
    raise needs(err, "ledger_bus.adapters.langgraph") from None

from ledger_bus.adapters.calls import CallLedger, decided_text
from ledger_bus.adapters.view import Views
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.ids import ANY, StreamId, check_name
from ledger_bus.model.records import RecordedEvent
from ledger_bus.recorder import DEFAULT_LEASE_MS, Capabilities
from ledger_bus.store.aio import AsyncStore
from ledger_bus.store.base import EventStore
from ledger_bus.store.ops import Op

T = TypeVar("T")

AGENT: Final = "langgraph"
CHECKPOINTS: Final = "lg.ckpt"
TOOLS: Final = "lg.tools"
CHECKPOINT: Final = "langgraph.checkpoint"
WRITES: Final = "langgraph.writes"
# LangGraph sees every checkpoint and write it makes, and every tool call a ToolNode runs; it
# says nothing of calls made inside a node's own code, which a Recorder run can record.
CAPABILITIES: Final = Capabilities(
    request_before_call="strict",
    record_outcome="strict",
    recovery="strict",
    profile="langgraph",
)

Typed = list[str]  # [serde type, base64 of its bytes]
EMPTY: Final[Typed] = ["empty", ""]  # a channel with no value at its version
VALUE: Final = "value_"  # the fields a checkpoint event keeps its channel values in
UNIQUE: Final = "unique"  # a checkpoint's `versions`: written by a saver that makes them so


def thread_session(thread_id: str) -> str:
    """The session a thread lives in: its id when that is a session id, else a digest of it."""
    try:
        return check_name(thread_id, "thread id")
    except InvalidInput:
        return "lg~" + hashlib.sha256(thread_id.encode()).hexdigest()[:40]


def namespace_stream(session_id: str, ns: str) -> StreamId:
    """The stream of one checkpoint namespace of a thread."""
    if not ns:
        return StreamId(session_id, CHECKPOINTS)
    try:
        return StreamId(session_id, check_name(f"{CHECKPOINTS}.{ns}", "stream"))
    except InvalidInput:
        return StreamId(session_id, f"{CHECKPOINTS}#{hashlib.sha256(ns.encode()).hexdigest()[:40]}")


@dataclass
class _Saved:
    """One checkpoint as recorded: its fields, still serialized."""

    fields: dict[str, Any]
    order: int  # position in the stream: a later record of the same id replaces an earlier one


@dataclass
class _Namespace:
    """A namespace stream folded: checkpoints, channel values by version, pending writes."""

    thread_id: str | None = None
    ns: str = ""
    checkpoints: dict[str, _Saved] = field(default_factory=dict)
    blobs: dict[tuple[str, str], Typed] = field(default_factory=dict)
    # checkpoint id -> (task id, index) -> [task id, channel, value, task path, index]
    writes: dict[str, dict[tuple[str, int], list[Any]]] = field(default_factory=dict)


def _fold(state: _Namespace, event: RecordedEvent) -> None:
    if event.type != "mutation":
        return
    fields = event.fields
    kind = fields.get("kind")
    if kind == CHECKPOINT:
        state.thread_id, state.ns = fields["thread_id"], fields["checkpoint_ns"]
        for channel, version, name in fields.get("blobs", ()):
            state.blobs[(channel, version_key(version))] = fields[name]
        state.checkpoints[fields["checkpoint_id"]] = _Saved(fields, event.version)
    elif kind == WRITES:
        found = state.writes.setdefault(fields["checkpoint_id"], {})
        for idx, channel, value in fields["writes"]:
            key = (fields["task_id"], idx)
            if idx >= 0 and key in found:
                continue  # the first write of a task at an index stands, as in LangGraph's own
            found[key] = [fields["task_id"], channel, value, fields.get("task_path", ""), idx]


def version_key(version: object) -> str:
    """A channel version as this saver keeps it: LangGraph's own form, `<32-digit counter>.<16
    characters of a random draw>`, unique per write, so that two branches forked from one
    checkpoint never share a (channel, version) pair. A thread written when this saver numbered
    versions 1, 2, 3 reads its whole numbers in that form, with a draw of zero: ordered as
    before, and below every version written after them."""
    text = str(version)
    if text.isdigit():
        return f"{int(text):032}.{0.0:016}"
    return text


def _versions(found: dict[str, Any]) -> dict[str, str]:
    return {channel: version_key(version) for channel, version in found.items()}


class LedgerSaver(BaseCheckpointSaver[str]):
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
    ):
        super().__init__(serde=serde)
        self.astore = store if isinstance(store, AsyncStore) else None
        self.store: EventStore = store.core if isinstance(store, AsyncStore) else store
        self._views: Views[_Namespace] = Views(_Namespace, _fold)
        # lease_ttl_ms: how long a tool call's lease outlives its process (recorded tools).
        self.calls = CallLedger(self.store, agent=AGENT, lease_ttl_ms=lease_ttl_ms)

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

    def _dump(self, value: Any) -> Typed:
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
        return self._sync(self._put_op(config, checkpoint, metadata, new_versions))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._async(self._put_op(config, checkpoint, metadata, new_versions))

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
        blobs = [
            (
                channel,
                version_key(version),
                self._dump(values[channel]) if channel in values else EMPTY,
            )
            for channel, version in new_versions.items()
        ]
        event = {
            "type": "mutation",
            "agent": AGENT,
            "kind": CHECKPOINT,
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": configurable.get("checkpoint_id"),
            "graph_run_id": str(merged.get("run_id", "")),
            "checkpoint": self._dump(rest),
            "metadata": self._dump(merged),
            # Versions as get_next_version makes them (or as the caller gave them): read back
            # as they were put.
            "versions": UNIQUE,
            **_blob_fields(blobs),
        }
        stream = namespace_stream(thread_session(thread_id), ns)
        yield from self.store.append_op(stream, ANY, _append_id("c", checkpoint["id"]), [event])
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

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
        append_id = _append_id("w", f"{configurable['checkpoint_id']}:{task_id}")
        yield from self.store.append_op(stream, ANY, append_id, [event])

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(self._get_tuple_op(config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._async(self._get_tuple_op(config))

    def _get_tuple_op(self, config: RunnableConfig) -> Op[CheckpointTuple | None]:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        stream = namespace_stream(thread_session(thread_id), ns)
        state = yield from self._views.of(stream).refresh_op(self.store)
        wanted = get_checkpoint_id(config)
        if wanted is None:
            if not state.checkpoints:
                return None
            wanted = max(state.checkpoints)
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
        self, thread_id: str, ns: str, state: _Namespace, fields: dict[str, Any]
    ) -> CheckpointTuple:
        checkpoint = self._load(fields["checkpoint"])
        if fields.get("versions") != UNIQUE:
            # Written when this saver numbered versions 1, 2, 3: read in today's form, since
            # LangGraph compares versions and a whole number beside a string would not compare.
            checkpoint["channel_versions"] = _versions(checkpoint.get("channel_versions", {}))
            checkpoint["versions_seen"] = {
                node: _versions(seen) for node, seen in checkpoint.get("versions_seen", {}).items()
            }
        values = {}
        for channel, version in checkpoint.get("channel_versions", {}).items():
            typed = state.blobs.get((channel, version_key(version)))
            if typed is not None and typed[0] != "empty":
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
            events = self._whole(state, list(state.checkpoints), str(target))
            copy = StreamId(target_session, stream.name)
            for start in range(0, len(events), self._chunk()):
                chunk = events[start : start + self._chunk()]
                yield from self.store.append_op(copy, ANY, _append_id("copy", str(source)), chunk)

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

    def _rewrite_op(
        self, stream: StreamId, state: _Namespace, kept: builtins.list[str]
    ) -> Op[None]:
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
        events = self._whole(state, sorted(kept), state.thread_id)
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

    def _whole(
        self, state: _Namespace, ids: builtins.list[str], thread_id: str
    ) -> builtins.list[dict[str, Any]]:
        """The checkpoints `ids` as events that hold every channel value they need, each
        followed by its pending writes, for `thread_id`."""
        events: builtins.list[dict[str, Any]] = []
        for checkpoint_id in ids:
            fields = state.checkpoints[checkpoint_id].fields
            versions = self._load(fields["checkpoint"]).get("channel_versions", {})
            blobs = [
                (channel, version_key(version), typed)
                for channel, version in versions.items()
                if (typed := state.blobs.get((channel, version_key(version)))) is not None
            ]
            kept = {
                k: v
                for k, v in fields.items()
                if k not in ("event_id", "blobs") and not k.startswith(VALUE)
            }
            events.append({**kept, "thread_id": thread_id, **_blob_fields(blobs)})
            by_task: dict[str, builtins.list[builtins.list[Any]]] = {}
            for task_id, channel, value, task_path, idx in state.writes.get(
                checkpoint_id, {}
            ).values():
                by_task.setdefault(f"{task_id}\x1f{task_path}", []).append([idx, channel, value])
            for key, writes in by_task.items():
                task_id, _, task_path = key.partition("\x1f")
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

    # -- tool calls ---------------------------------------------------------------------------

    def record_tools(self, *, safe_to_replay: Sequence[str] = ()) -> dict[str, Any]:
        """ToolNode's `wrap_tool_call` and `awrap_tool_call`, recording each call of a tool in
        the thread's session (`lg.tools`) before it runs and its result after; on a resumed
        thread, a call whose result is recorded returns it instead of running the tool again.
        `safe_to_replay`: the tools that may run again after a crash left their call unfinished
        (the others stop the resume: UnresolvedAttempt)."""
        safe = frozenset(safe_to_replay)

        def wrap(request: Any, execute: Callable[[Any], Any]) -> Any:
            call = request.tool_call
            guard = self._guard(request)
            done, found = self._sync(
                guard.begin_op(call["id"], call["name"], call["args"], call["name"] in safe)
            )
            if done:
                return self._replayed(found, call)
            return guard.finish_sync(found, lambda: execute(request), self._outcome)

        async def awrap(request: Any, execute: Callable[[Any], Any]) -> Any:
            call = request.tool_call
            guard = self._guard(request)
            done, found = await self._async(
                guard.begin_op(call["id"], call["name"], call["args"], call["name"] in safe)
            )
            if done:
                return self._replayed(found, call)
            return await guard.finish_async(
                found, lambda: execute(request), self._outcome, self._async
            )

        return {"wrap_tool_call": wrap, "awrap_tool_call": awrap}

    def _outcome(self, value: Any) -> tuple[str, Any]:
        """What a tool returned, as its recorded result: a ToolMessage's content, name and
        status (readable in the ledger); anything else (a Command) in the saver's serde."""
        if isinstance(value, ToolMessage):
            status = "error" if value.status == "error" else "ok"
            return status, {"content": value.content, "name": value.name, "status": value.status}
        return "ok", {"serde": self._dump(value)}

    def _replayed(self, recorded: RecordedEvent, call: dict[str, Any]) -> Any:
        """A call's recorded outcome as the tool returned it. An outcome someone else decided
        (`ledger-bus resolve --ok VALUE`, `--error VALUE`) is a ToolMessage of that value,
        successful or not; a tool that raised, or an outcome nobody knows, an error one."""
        result = recorded.get("result")
        if recorded.agent == AGENT and isinstance(result, dict):
            if "serde" in result:
                return self._load(result["serde"])
            if "content" in result:
                return ToolMessage(
                    content=result["content"],
                    name=result.get("name") or call["name"],
                    tool_call_id=call["id"],
                    status=result.get("status", "success"),
                )
        return ToolMessage(
            content=decided_text(result),
            name=call["name"],
            tool_call_id=call["id"],
            status="success" if recorded.get("status") == "ok" else "error",
        )

    def _guard(self, request: Any) -> Any:
        config = request.runtime.config if request.runtime is not None else {}
        thread_id = str(config.get("configurable", {}).get("thread_id", ""))
        if not thread_id:
            raise InvalidInput("a recorded tool runs in a graph with a thread_id in its config")
        return self.calls.guard(StreamId(thread_session(thread_id), TOOLS), self._sync)


def record_tools(saver: LedgerSaver, *, safe_to_replay: Sequence[str] = ()) -> dict[str, Any]:
    """`saver.record_tools(...)`: keyword arguments for ToolNode (wrap_tool_call and
    awrap_tool_call) that record its tool calls in the saver's store."""
    return saver.record_tools(safe_to_replay=safe_to_replay)


def _blob_fields(blobs: builtins.list[tuple[str, str, Typed]]) -> dict[str, Any]:
    """Channel values as fields of a checkpoint event: `blobs` lists (channel, version, field)
    and each value is a field of its own, so that a large value the same in many checkpoints
    is one artifact, stored once (spec 3.11), however many events hold it."""
    fields: dict[str, Any] = {"blobs": [[c, v, f"{VALUE}{n}"] for n, (c, v, _) in enumerate(blobs)]}
    for n, (_, _, typed) in enumerate(blobs):
        fields[f"{VALUE}{n}"] = typed
    return fields


def _append_id(kind: str, key: str) -> str:
    """An append id of its own for each write: the store's retries of it land once, and a
    thread deleted and written again is written anew, never taken for a retry of what was
    deleted (whose append ids the store keeps, spec 3.9)."""
    return f"{kind}:{key[:200]}:{uuid.uuid4().hex}"


__all__ = [
    "CAPABILITIES",
    "LedgerSaver",
    "namespace_stream",
    "record_tools",
    "thread_session",
]
