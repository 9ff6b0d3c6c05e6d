"""How a LangGraph thread is kept in the ledger: a thread is a session, each checkpoint
namespace a stream of it, and a stream folds into the checkpoints, channel values and pending
writes it holds."""

from __future__ import annotations

import builtins
import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.ids import StreamId, check_name
from ledger_bus.model.records import RecordedEvent
from ledger_bus.recorder import Capabilities

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
class Saved:
    """One checkpoint as recorded: its fields, still serialized."""

    fields: dict[str, Any]
    order: int  # position in the stream: a later record of the same id replaces an earlier one


@dataclass
class Namespace:
    """A namespace stream folded: checkpoints, channel values by version, pending writes."""

    thread_id: str | None = None
    ns: str = ""
    checkpoints: dict[str, Saved] = field(default_factory=dict)
    blobs: dict[tuple[str, str], Typed] = field(default_factory=dict)
    # checkpoint id -> (task id, index) -> [task id, channel, value, task path, index]
    writes: dict[str, dict[tuple[str, int], list[Any]]] = field(default_factory=dict)


def fold(state: Namespace, event: RecordedEvent) -> None:
    if event.type != "mutation":
        return
    fields = event.fields
    kind = fields.get("kind")
    if kind == CHECKPOINT:
        state.thread_id, state.ns = fields["thread_id"], fields["checkpoint_ns"]
        for channel, version, name in fields.get("blobs", ()):
            state.blobs[(channel, version_key(version))] = fields[name]
        state.checkpoints[fields["checkpoint_id"]] = Saved(fields, event.version)
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


def channel_versions(found: dict[str, Any]) -> dict[str, str]:
    return {channel: version_key(version) for channel, version in found.items()}


def blob_fields(blobs: builtins.list[tuple[str, str, Typed]]) -> dict[str, Any]:
    """Channel values as fields of a checkpoint event: `blobs` lists (channel, version, field)
    and each value is a field of its own, so that a large value the same in many checkpoints
    is one artifact, stored once (spec 3.11), however many events hold it."""
    fields: dict[str, Any] = {"blobs": [[c, v, f"{VALUE}{n}"] for n, (c, v, _) in enumerate(blobs)]}
    for n, (_, _, typed) in enumerate(blobs):
        fields[f"{VALUE}{n}"] = typed
    return fields


def write_id(kind: str, key: str) -> str:
    """An append id of its own for each write: the store's retries of it land once, and a
    thread deleted and written again is written anew, never taken for a retry of what was
    deleted (whose append ids the store keeps, spec 3.9)."""
    return f"{kind}:{key[:200]}:{uuid.uuid4().hex}"
