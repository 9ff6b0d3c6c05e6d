"""The records a store returns: committed events, append results, sessions, attempts, groups.

They are plain values of the model: the store makes them, the features and the command line read
them. Each knows its JSON shape (`to_dict`), which ledger_bus.model.jsonl writes a line at a time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from ledger_bus.model.ids import StreamId, cursor_ms
from ledger_bus.model.jsontext import JSONObject, dumps, format_time

_COMMON: Final = frozenset(
    {"type", "agent", "event_id", "run_id", "step_id", "attempt_id", "parents"}
)


# Fields of a mutation its one-line summary leaves out: its kind (said first) and a run's
# capabilities.
_UNSAID: Final = frozenset({"kind", "capabilities"})


def _short(value: object, width: int) -> str:
    text = value if isinstance(value, str) else dumps(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def gist(fields: dict[str, Any]) -> str:
    """What an event (its fields) says, as text, whole: a message its body, a call
    `tool(args)`, a result `tool -> status: result`, a mutation its kind and its own fields."""
    kind = fields.get("type")
    if kind == "message":
        body = fields.get("body", "")
        return body if isinstance(body, str) else dumps(body)
    if kind == "tool_call":
        return f"{fields.get('tool')}({dumps(fields.get('args', {}))})"
    if kind == "tool_result":
        return f"{fields.get('tool')} -> {fields.get('status')}: {dumps(fields.get('result'))}"
    # A run's capabilities are the same blob on every start: its event's own page has them.
    extra = {k: v for k, v in fields.items() if k not in _COMMON and k not in _UNSAID}
    return f"{fields.get('kind')} {dumps(extra) if extra else ''}".strip()


def summary(fields: dict[str, Any], width: int = 160) -> str:
    """What an event (its fields) says, in one line of text of at most `width` characters."""
    return _short(gist(fields), width)


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append committed, or had committed before when `deduplicated`."""

    stream: StreamId
    first_version: int
    last_version: int
    cursor: str
    deduplicated: bool = False
    # What was confirmed beyond the primary's memory, for a store with a durability other than
    # local (durability.py): how many replicas acknowledged, and whether the AOF was fsynced.
    durability: str = "local"
    replicas: int | None = None
    aof: bool | None = None

    def to_dict(self) -> JSONObject:
        out: JSONObject = {
            "session": self.stream.session_id,
            "stream": self.stream.name,
            "first_version": self.first_version,
            "last_version": self.last_version,
            "cursor": self.cursor,
            "deduplicated": self.deduplicated,
        }
        if self.durability != "local":
            out.update(durability=self.durability, replicas=self.replicas, aof=self.aof)
        return out


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """One committed event: its fields as appended, plus where and when it was committed."""

    stream: StreamId
    version: int
    cursor: str
    fields: dict[str, Any] = field(repr=False)

    @property
    def type(self) -> str:
        return str(self.fields["type"])

    @property
    def agent(self) -> str:
        return str(self.fields["agent"])

    @property
    def event_id(self) -> str:
        return str(self.fields["event_id"])

    @property
    def run_id(self) -> str | None:
        return self.fields.get("run_id")

    @property
    def step_id(self) -> str | None:
        return self.fields.get("step_id")

    @property
    def attempt_id(self) -> str | None:
        return self.fields.get("attempt_id")

    @property
    def parents(self) -> list[str]:
        return list(self.fields.get("parents", ()))

    @property
    def session_id(self) -> str:
        return self.stream.session_id

    @property
    def recorded_at(self) -> datetime:
        """The commit time, carried by the cursor itself."""
        return datetime.fromtimestamp(cursor_ms(self.cursor) / 1000, UTC)

    def __repr__(self) -> str:
        fields = self.fields
        what = fields.get("body") or fields.get("tool") or fields.get("kind") or ""
        text = str(what) if len(str(what)) <= 40 else str(what)[:39] + "…"
        return (
            f"RecordedEvent({self.stream} v{self.version} {self.cursor}"
            f" {fields.get('type')} by {fields.get('agent')}: {text!r})"
        )

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]

    def get(self, name: str, default: object = None) -> Any:
        return self.fields.get(name, default)

    @property
    def event(self) -> Any:
        """The event as a validated model (Message, ToolCall, ToolResult or Mutation)."""
        # Imported here: a program that only reads events needs no validator (pydantic).
        from ledger_bus.model.events import event_adapter  # noqa: PLC0415

        return event_adapter.validate_python(self.fields)

    def to_dict(self) -> dict[str, Any]:
        """The flat JSON object of an event's line: ledger keys first (session, stream, version,
        cursor, type, agent, event_id, recorded_at), then the event's own fields."""
        fields = self.fields
        out: dict[str, Any] = {
            "session": self.stream.session_id,
            "stream": self.stream.name,
            "version": self.version,
            "cursor": self.cursor,
            "type": fields["type"],
            "agent": fields["agent"],
            "event_id": fields["event_id"],
            "recorded_at": format_time(cursor_ms(self.cursor)),
        }
        for name, value in fields.items():
            out.setdefault(name, value)
        return out

    def summary(self, width: int = 160) -> str:
        """What the event says, in one line of text."""
        return summary(self.fields, width)


@dataclass(frozen=True, slots=True, order=True)
class StreamInfo:
    """A stream of a session and its version."""

    name: str
    version: int


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What a session holds, for `ledger-bus inspect`."""

    session_id: str
    events: int
    streams: list[StreamInfo]
    first_cursor: str | None
    last_cursor: str | None
    append_ids: int | None  # None when asked not to count them (session_info(..., False))

    def to_dict(self) -> dict[str, Any]:
        """What `ledger-bus inspect` prints."""

        def at(cursor: str | None) -> str | None:
            return format_time(cursor_ms(cursor)) if cursor else None

        return {
            "session": self.session_id,
            "events": self.events,
            "streams": {s.name: s.version for s in self.streams},
            "append_ids": self.append_ids,
            "first_cursor": self.first_cursor,
            "last_cursor": self.last_cursor,
            "first_at": at(self.first_cursor),
            "last_at": at(self.last_cursor),
        }


@dataclass(frozen=True, slots=True)
class AppendRecord:
    """What a store keeps of one append for idempotency (rule 1 of spec 3.1): moved with its
    session, so that a retry deduplicates wherever the session lives."""

    stream: str
    append_id: str
    digest: str
    first_version: int
    last_version: int
    cursor: str


@dataclass(frozen=True, slots=True)
class Bound:
    """What a bounded stream keeps (spec 3.12): at least its newest `keep` events, older ones
    trimmed a whole append at a time; and each trimmed append's append_id for `dedup_window_ms`
    after it committed, so a retry within that window still deduplicates."""

    keep: int
    dedup_window_ms: int
    # Trim only at appends whose append_id begins with this (a rewrite's own appends), so that
    # a bound its writer never lifted (killed inside the rewrite) trims nothing else.
    only: str | None = None

    def applies_to(self, append_id: str) -> bool:
        return self.only is None or append_id.startswith(self.only)

    def to_dict(self) -> JSONObject:
        found: JSONObject = {"keep": self.keep, "dedup_window_ms": self.dedup_window_ms}
        if self.only is not None:
            found["only"] = self.only
        return found


@dataclass(frozen=True, slots=True)
class Deletion:
    """What `delete_session` or `delete_stream` removed.

    `generation` counts the deletions the session has seen, this one included: what is written
    to the session (or stream) from now on is its next generation, starting at version 1.
    """

    session_id: str
    stream: str | None  # None: the whole session
    events: int
    generation: int

    def to_dict(self) -> JSONObject:
        return {
            "session": self.session_id,
            "stream": self.stream,
            "deleted_events": self.events,
            "generation": self.generation,
        }


@dataclass(frozen=True, slots=True)
class OpenAttempt:
    """A tool_call whose tool_result has not been committed."""

    session_id: str
    attempt_id: str
    run_id: str | None
    tool: str
    stream: str
    cursor: str  # of the tool_call: its commit time is when the attempt opened
    flagged_cursor: str | None  # of the reconcile.unresolved mutation, once flagged

    @property
    def opened_ms(self) -> int:
        return cursor_ms(self.cursor)

    @property
    def key(self) -> str:
        """`<attempt_id>@<cursor of its tool_call>`: names this attempt alone, even where the
        same attempt id was requested again after this one closed."""
        return f"{self.attempt_id}@{self.cursor}"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One session log entry handed to a consumer: the event, and how often it was handed out."""

    event: RecordedEvent
    entry_id: str  # what acks it; opaque to callers
    deliveries: int


@dataclass(frozen=True, slots=True)
class GroupStats:
    """Where a group stands: events not yet delivered (lag), delivered but not acked (pending),
    its consumers live (active within the idle window, or holding entries) and idle apart."""

    group: str
    consumers: int
    idle_consumers: int
    pending: int
    lag: int
    last_delivered: str

    def to_dict(self) -> JSONObject:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class PendingEntry:
    """An event a group handed out and has not had acked: who holds it, since when, how often."""

    entry_id: str
    cursor: str
    consumer: str
    idle_ms: int
    deliveries: int

    def to_dict(self) -> JSONObject:
        return asdict(self)
