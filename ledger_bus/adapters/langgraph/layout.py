"""How a LangGraph thread is kept in the ledger: a thread is a session, each checkpoint
namespace a stream of it, and a stream folds into the checkpoints, channel values and pending
writes it holds."""

from __future__ import annotations

import builtins
import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ledger_bus.adapters.view import size_of
from ledger_bus.agent.recorder import Capabilities
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.ids import StreamId, check_name
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.records import RecordedEvent

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
Blob = list[Any]  # a channel value in a checkpoint event: Typed, or a MESSAGES delta
EMPTY: Final[Typed] = ["empty", ""]  # a channel with no value at its version
# A list of messages at a channel version, kept as a delta: [MESSAGES, the version it extends
# ("": none), items], each item a message the list adds: [its event id, serde type, base64] for
# a message first written here, or the event id alone for one written before. Each message is
# written once, so a thread's bytes grow with its messages, not with its turns times them.
MESSAGES: Final = "ledger.messages"
# What the view keeps of the list's items, its delta: the version it extends, the event ids.
Delta = tuple[str, tuple[str, ...]]
MEMO: Final = 8  # lists of event ids kept made whole, the newest, per namespace
ANNOUNCED: Final = 4  # checkpoints whose tasks' writes are remembered as they are written
VALUE: Final = "value_"  # the fields a checkpoint event keeps its channel values in
UNIQUE: Final = "unique"  # a checkpoint's `versions`: written by a saver that makes them so


def thread_session(thread_id: str) -> str:
    """The session a thread lives in: its id when that is a session id, else a digest of it."""
    try:
        return check_name(thread_id, "thread id")
    except InvalidInput:
        return "lg~" + hashlib.sha256(thread_id.encode()).hexdigest()[:40]


def is_thread(stream_names: Sequence[str]) -> bool:
    """Whether a session is a LangGraph thread, by its streams (retention sweeps only these)."""
    return any(name.startswith(CHECKPOINTS) for name in stream_names)


def namespace_stream(session_id: str, ns: str) -> StreamId:
    """The stream of one checkpoint namespace of a thread."""
    if not ns:
        return StreamId(session_id, CHECKPOINTS)
    try:
        return StreamId(session_id, check_name(f"{CHECKPOINTS}.{ns}", "stream"))
    except InvalidInput:
        return StreamId(session_id, f"{CHECKPOINTS}#{hashlib.sha256(ns.encode()).hexdigest()[:40]}")


@dataclass
class Saved:
    """One checkpoint as recorded: its fields, still serialized."""

    fields: dict[str, Any]
    order: int  # position in the stream: a later record of the same id replaces an earlier one
    versions: dict[str, str] | None = None  # its channel versions (version_key), once read


@dataclass
class Namespace:
    """A namespace stream folded: checkpoints, channel values by version, pending writes."""

    thread_id: str | None = None
    ns: str = ""
    checkpoints: dict[str, Saved] = field(default_factory=dict)
    blobs: dict[tuple[str, str], Blob | Delta] = field(default_factory=dict)
    # checkpoint id -> (task id, index) -> [task id, channel, value, task path, index]
    writes: dict[str, dict[tuple[str, int], list[Any]]] = field(default_factory=dict)
    natives: dict[str, Typed] = field(default_factory=dict)  # event id -> a message, serialized
    calls: dict[str, str] = field(default_factory=dict)  # attempt id -> its tool_call's event id
    results: dict[str, RecordedEvent] = field(default_factory=dict)  # attempt id -> its result
    lists: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # made whole (MEMO)
    objects: dict[str, Any] = field(default_factory=dict)  # event id -> the message, read once
    raw: dict[str, bytes] = field(default_factory=dict)  # event id -> its serde bytes, decoded
    # attempt id -> the event ids of its request and its outcome in `lg.tools` (record_tools);
    # and of those without an outcome when last looked, the request
    recorded: dict[str, tuple[str, str]] = field(default_factory=dict)
    requested: dict[str, str] = field(default_factory=dict)
    # The version of the newest checkpoint folded; and checkpoint id ("" for none) -> the
    # stream's version when this process read it for a run, or wrote it: a run continues a
    # checkpoint only while no other checkpoint was written after that (no silent fork).
    newest: int = 0
    handed: dict[str, int] = field(default_factory=dict)
    # checkpoint id -> [(task path, value)] of the writes this process is writing for the
    # tasks run from it, for naming the runs of the next checkpoint's messages (never read as
    # pending writes: those are what the stream holds). The newest ANNOUNCED checkpoints.
    announced: dict[str, list[tuple[str, Typed]]] = field(default_factory=dict)

    def announce(self, checkpoint_id: str, task_path: str, writes: list[list[Any]]) -> None:
        found = self.announced.setdefault(checkpoint_id, [])
        found.extend((task_path, value) for _, _, value in writes)
        while len(self.announced) > ANNOUNCED:
            del self.announced[next(iter(self.announced))]

    def refs(self, channel: str, version: str) -> list[str] | None:
        """The event ids of the messages a channel holds at a version (None: not a list of
        messages kept as deltas), from the newest list made whole before it."""
        segments: list[tuple[str, ...] | list[str]] = []
        key = (channel, version)
        while True:
            whole = self.lists.get(key)
            if whole is not None:
                segments.append(whole)
                break
            delta = self.blobs.get(key)
            if not isinstance(delta, tuple):
                return None
            base, items = delta
            segments.append(items)
            if not base:
                break
            key = (channel, base)
        found = [ref for segment in reversed(segments) for ref in segment]
        if len(self.lists) >= MEMO:
            del self.lists[next(iter(self.lists))]
        self.lists[(channel, version)] = found
        return found


def fold(state: Namespace, event: RecordedEvent) -> None:
    if event.type == "tool_call":
        state.calls[str(event.attempt_id)] = event.event_id
        return
    if event.type == "tool_result":
        state.results[str(event.attempt_id)] = event
        return
    if event.type != "mutation":
        return
    fields = event.fields
    kind = fields.get("kind")
    if kind == CHECKPOINT:
        _fold_checkpoint(state, event)
    elif kind == WRITES:
        found = state.writes.setdefault(fields["checkpoint_id"], {})
        for idx, channel, value in fields["writes"]:
            key = (fields["task_id"], idx)
            if idx >= 0 and key in found:
                continue  # the first write of a task at an index stands, as in LangGraph's own
            found[key] = [fields["task_id"], channel, value, fields.get("task_path", ""), idx]


def _fold_checkpoint(state: Namespace, event: RecordedEvent) -> None:
    fields = event.fields
    state.thread_id, state.ns = fields["thread_id"], fields["checkpoint_ns"]
    for channel, version, name in fields.get("blobs", ()):
        value = fields[name]
        if value[0] == MESSAGES:
            refs = []
            for item in value[2]:
                if isinstance(item, list):
                    state.natives[item[0]] = [item[1], item[2]]
                    refs.append(item[0])
                else:
                    refs.append(item)
            state.blobs[(channel, version_key(version))] = (value[1], tuple(refs))
        else:
            state.blobs[(channel, version_key(version))] = value
    state.checkpoints[fields["checkpoint_id"]] = Saved(fields, event.version)
    state.newest = max(state.newest, event.version)


def weigh(event: RecordedEvent) -> int:
    """About how many bytes a thread's view keeps of an event: its fields as decoded (a
    checkpoint's and a write's stay whole), and a new message twice more once read (its bytes
    and one parsed copy)."""
    total = size_of(event.fields)
    if event.fields.get("kind") == CHECKPOINT:
        for _, _, name in event.fields.get("blobs", ()):
            value = event.fields[name]
            if value[0] == MESSAGES:
                total += sum(2 * len(item[2]) for item in value[2] if isinstance(item, list))
    return total


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


def channel_versions(found: JSONObject) -> dict[str, str]:
    return {channel: version_key(version) for channel, version in found.items()}


def blob_fields(blobs: builtins.list[tuple[str, str, Blob]]) -> JSONObject:
    """Channel values as fields of a checkpoint event: `blobs` lists (channel, version, field)
    and each value is a field of its own, so that a large value the same in many checkpoints
    is one artifact, stored once (spec 3.11), however many events hold it."""
    fields: JSONObject = {"blobs": [[c, v, f"{VALUE}{n}"] for n, (c, v, _) in enumerate(blobs)]}
    for n, (_, _, typed) in enumerate(blobs):
        fields[f"{VALUE}{n}"] = typed
    return fields


def write_id(kind: str, key: str) -> str:
    """An append id of its own for each write: the store's retries of it land once, and a
    thread deleted and written again is written anew, never taken for a retry of what was
    deleted (whose append ids the store keeps, spec 3.9)."""
    return f"{kind}:{key[:200]}:{uuid.uuid4().hex}"
