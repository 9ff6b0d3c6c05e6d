"""ledger-bus: a durable, append-only event log for multi-agent systems, on Redis Streams."""

from ledger_bus.model.artifacts import ArtifactRef
from ledger_bus.model.batch import Limits
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
from ledger_bus.model.records import Bound, Deletion
from ledger_bus.store import AppendResult, EventStore, RecordedEvent, connect

__version__ = "0.1.0"

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
