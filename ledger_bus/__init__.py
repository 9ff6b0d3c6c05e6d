"""ledger-bus: a durable, append-only event log for multi-agent systems, on Redis Streams."""

from ledger_bus.artifacts import ArtifactRef
from ledger_bus.batch import Limits
from ledger_bus.durability import Durability
from ledger_bus.errors import (
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
from ledger_bus.events import Event, Message, Mutation, ToolCall, ToolResult
from ledger_bus.ids import ANY, StreamId
from ledger_bus.records import Bound, Deletion
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
