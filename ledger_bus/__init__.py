"""ledger-bus: a durable, append-only event log for multi-agent systems, on Redis Streams.

    import ledger_bus

    store = ledger_bus.connect("redis://127.0.0.1:6379/0")
    ref = ledger_bus.StreamId("task-42", "planner")
    store.append(ref, 0, "m-1", [{"type": "message", "agent": "planner", "body": "hello"}])

Every name below is public: a program imports it from here (or from `ledger_bus.aio`,
`ledger_bus.otel`, the adapters and `ledger_bus.testing`, each of which says its own). Modules
not named so are the package's inside and may move between releases.

The names are loaded when first used (PEP 562), so that a program, or the `ledger-bus` command,
pays only for the parts it uses: `import ledger_bus` itself imports nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger_bus.agent.current import CurrentCall, NoCurrentCall, current_call
    from ledger_bus.agent.recorder import (
        Attempt,
        Capabilities,
        Delegation,
        OutcomeNotRecorded,
        Recorder,
        Recovery,
        RequestNotRecorded,
        Run,
        ToolFailed,
        UnresolvedAttempt,
    )
    from ledger_bus.agent.tailer import Tailer, TailerOptions, render_context
    from ledger_bus.board.dispatches import Board
    from ledger_bus.exports.atif import atif_of, write_atif
    from ledger_bus.model.artifacts import ArtifactRef
    from ledger_bus.model.batch import append_digest
    from ledger_bus.model.canonical import JsonValueError, canonical_bytes
    from ledger_bus.model.durability import Durability
    from ledger_bus.model.errors import (
        BackendRefused,
        BackendUnavailable,
        DurabilityNotConfirmed,
        HistoryRewound,
        IdempotencyConflict,
        InvalidEvent,
        InvalidInput,
        LeaseLost,
        LedgerError,
        NotFound,
        Refused,
        SessionArchived,
        UnexpectedReply,
        Unsupported,
        VersionConflict,
    )
    from ledger_bus.model.events import Event, Message, Mutation, ToolCall, ToolResult
    from ledger_bus.model.ids import ANY, StreamId, derive_event_id
    from ledger_bus.model.keys import idempotency_key
    from ledger_bus.model.prepared import Fence, Limits
    from ledger_bus.model.records import (
        Bound,
        Deletion,
        Delivery,
        GroupStats,
        SessionInfo,
        StreamInfo,
    )
    from ledger_bus.operations.archiving import archive_session
    from ledger_bus.operations.probes import Probe, ProbeCall, Probed
    from ledger_bus.operations.reconciler import PassReport, Reconciler, ReconcilerConfig
    from ledger_bus.operations.resolve import resolve_attempt
    from ledger_bus.operations.retention import Retention
    from ledger_bus.store import AppendResult, EventStore, RecordedEvent, connect
    from ledger_bus.store.base import Attempts, Bounds, Deletes, Groups, Log, Restores, need

# The one place the version is said: pyproject.toml reads it from here, and the CLI's --version,
# the npm package and the CHANGELOG are held to it (tests/packaging/test_version.py).
__version__ = "0.1.0"

# Each public name, and the module it comes from: the modules may move, these names stay.
_WHERE = {
    # The store and what it takes and returns.
    **dict.fromkeys(["AppendResult", "EventStore", "RecordedEvent", "connect"], "ledger_bus.store"),
    # The contract's capabilities, which a store declares and a caller asks for (`need`).
    **dict.fromkeys(
        ["Attempts", "Bounds", "Deletes", "Groups", "Log", "Restores", "need"],
        "ledger_bus.store.base",
    ),
    **dict.fromkeys(["ANY", "StreamId", "derive_event_id"], "ledger_bus.model.ids"),
    **dict.fromkeys(
        ["Event", "Message", "Mutation", "ToolCall", "ToolResult"], "ledger_bus.model.events"
    ),
    **dict.fromkeys(
        ["Bound", "Deletion", "Delivery", "GroupStats", "SessionInfo", "StreamInfo"],
        "ledger_bus.model.records",
    ),
    "ArtifactRef": "ledger_bus.model.artifacts",
    "Durability": "ledger_bus.model.durability",
    **dict.fromkeys(["Fence", "Limits"], "ledger_bus.model.prepared"),
    # The errors: every one a LedgerError.
    **dict.fromkeys(
        [
            "BackendRefused",
            "BackendUnavailable",
            "DurabilityNotConfirmed",
            "HistoryRewound",
            "IdempotencyConflict",
            "InvalidEvent",
            "InvalidInput",
            "LeaseLost",
            "LedgerError",
            "NotFound",
            "Refused",
            "SessionArchived",
            "UnexpectedReply",
            "Unsupported",
            "VersionConflict",
        ],
        "ledger_bus.model.errors",
    ),
    # What another language's implementation replays the conformance vectors with.
    **dict.fromkeys(["JsonValueError", "canonical_bytes"], "ledger_bus.model.canonical"),
    "append_digest": "ledger_bus.model.batch",
    # What an agent loop calls: the recorder and the tailer.
    **dict.fromkeys(
        [
            "Attempt",
            "Capabilities",
            "Delegation",
            "OutcomeNotRecorded",
            "Recorder",
            "Recovery",
            "RequestNotRecorded",
            "Run",
            "ToolFailed",
            "UnresolvedAttempt",
        ],
        "ledger_bus.agent.recorder",
    ),
    **dict.fromkeys(["Tailer", "TailerOptions", "render_context"], "ledger_bus.agent.tailer"),
    # What a running tool asks: the call it belongs to, and that call's idempotency key.
    **dict.fromkeys(["CurrentCall", "NoCurrentCall", "current_call"], "ledger_bus.agent.current"),
    "idempotency_key": "ledger_bus.model.keys",
    # Operations: the reconciler, the dispatch board, archiving and retention.
    **dict.fromkeys(
        ["PassReport", "Reconciler", "ReconcilerConfig"], "ledger_bus.operations.reconciler"
    ),
    "resolve_attempt": "ledger_bus.operations.resolve",
    **dict.fromkeys(["Probe", "ProbeCall", "Probed"], "ledger_bus.operations.probes"),
    "Board": "ledger_bus.board.dispatches",
    "Retention": "ledger_bus.operations.retention",
    "archive_session": "ledger_bus.operations.archiving",
    # Exports: ATIF trajectories (OpenTelemetry spans, which need the [otel] extra, are
    # ledger_bus.otel's, so that `from ledger_bus import *` works without it).
    **dict.fromkeys(["atif_of", "write_atif"], "ledger_bus.exports.atif"),
}

__all__ = [
    "ANY",
    "AppendResult",
    "ArtifactRef",
    "Attempt",
    "Attempts",
    "BackendRefused",
    "BackendUnavailable",
    "Board",
    "Bound",
    "Bounds",
    "Capabilities",
    "CurrentCall",
    "Delegation",
    "Deletes",
    "Deletion",
    "Delivery",
    "Durability",
    "DurabilityNotConfirmed",
    "Event",
    "EventStore",
    "Fence",
    "GroupStats",
    "Groups",
    "HistoryRewound",
    "IdempotencyConflict",
    "InvalidEvent",
    "InvalidInput",
    "JsonValueError",
    "LeaseLost",
    "LedgerError",
    "Limits",
    "Log",
    "Message",
    "Mutation",
    "NoCurrentCall",
    "NotFound",
    "OutcomeNotRecorded",
    "PassReport",
    "Probe",
    "ProbeCall",
    "Probed",
    "Reconciler",
    "ReconcilerConfig",
    "RecordedEvent",
    "Recorder",
    "Recovery",
    "Refused",
    "RequestNotRecorded",
    "Restores",
    "Retention",
    "Run",
    "SessionArchived",
    "SessionInfo",
    "StreamId",
    "StreamInfo",
    "Tailer",
    "TailerOptions",
    "ToolCall",
    "ToolFailed",
    "ToolResult",
    "UnexpectedReply",
    "UnresolvedAttempt",
    "Unsupported",
    "VersionConflict",
    "append_digest",
    "archive_session",
    "atif_of",
    "canonical_bytes",
    "connect",
    "current_call",
    "derive_event_id",
    "idempotency_key",
    "need",
    "render_context",
    "resolve_attempt",
    "write_atif",
]


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ledger_bus' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
