"""ledger-bus: a durable, append-only event log for multi-agent systems, on Redis Streams.

The names below are loaded when first used (PEP 562), so that a program, or the `ledger-bus`
command, pays only for the parts it uses: `import ledger_bus` itself imports nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger_bus.model.artifacts import ArtifactRef
    from ledger_bus.model.durability import Durability
    from ledger_bus.model.errors import (
        BackendRefused,
        BackendUnavailable,
        DurabilityNotConfirmed,
        HistoryRewound,
        IdempotencyConflict,
        InvalidEvent,
        InvalidInput,
        LedgerError,
        NotFound,
        Refused,
        SessionArchived,
        VersionConflict,
    )
    from ledger_bus.model.events import Event, Message, Mutation, ToolCall, ToolResult
    from ledger_bus.model.ids import ANY, StreamId
    from ledger_bus.model.prepared import Limits
    from ledger_bus.model.records import Bound, Deletion
    from ledger_bus.store import AppendResult, EventStore, RecordedEvent, connect

__version__ = "0.1.0"

# Each public name, and the module it comes from.
_WHERE = {
    "ArtifactRef": "ledger_bus.model.artifacts",
    "Limits": "ledger_bus.model.prepared",
    "Durability": "ledger_bus.model.durability",
    **dict.fromkeys(
        [
            "BackendRefused",
            "BackendUnavailable",
            "DurabilityNotConfirmed",
            "HistoryRewound",
            "IdempotencyConflict",
            "InvalidEvent",
            "InvalidInput",
            "LedgerError",
            "NotFound",
            "Refused",
            "SessionArchived",
            "VersionConflict",
        ],
        "ledger_bus.model.errors",
    ),
    **dict.fromkeys(
        ["Event", "Message", "Mutation", "ToolCall", "ToolResult"], "ledger_bus.model.events"
    ),
    **dict.fromkeys(["ANY", "StreamId"], "ledger_bus.model.ids"),
    **dict.fromkeys(["Bound", "Deletion"], "ledger_bus.model.records"),
    **dict.fromkeys(["AppendResult", "EventStore", "RecordedEvent", "connect"], "ledger_bus.store"),
}

__all__ = [
    "ANY",
    "AppendResult",
    "ArtifactRef",
    "BackendRefused",
    "BackendUnavailable",
    "Bound",
    "Deletion",
    "Durability",
    "DurabilityNotConfirmed",
    "Event",
    "EventStore",
    "HistoryRewound",
    "IdempotencyConflict",
    "InvalidEvent",
    "InvalidInput",
    "LedgerError",
    "Limits",
    "Message",
    "Mutation",
    "NotFound",
    "RecordedEvent",
    "Refused",
    "SessionArchived",
    "StreamId",
    "ToolCall",
    "ToolResult",
    "VersionConflict",
    "connect",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ledger_bus' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
