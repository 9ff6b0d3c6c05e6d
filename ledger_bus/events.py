"""The fixed vocabulary of four event types.

Extending the vocabulary is a deliberate, versioned change to every reader (spec/ledger-v1.md), so
the models are strict: no coercion, no unknown fields except on `mutation`, whose fields are the
session state it records.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

EVENT_TYPES: Final = ("message", "tool_call", "tool_result", "mutation")

# Names the ledger sets on every recorded event; a mutation field may not shadow them.
RESERVED_FIELDS: Final = frozenset({"session", "stream", "version", "cursor", "recorded_at"})

NonEmpty = Annotated[str, Field(min_length=1)]

# Fields whose default value is left out of an event's canonical form (spec: "Canonical content").
DEFAULTS: Final[dict[str, Any]] = {
    "event_id": None,
    "run_id": None,
    "step_id": None,
    "attempt_id": None,
    "parents": [],
    "args": {},
    "result": None,
}


class _EventBase(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    agent: NonEmpty
    event_id: NonEmpty | None = None
    run_id: NonEmpty | None = None
    step_id: NonEmpty | None = None
    attempt_id: NonEmpty | None = None
    parents: list[NonEmpty] = Field(default_factory=list)


class Message(_EventBase):
    """An agent said something."""

    type: Literal["message"] = "message"
    body: str


class ToolCall(_EventBase):
    """A tool or model call was requested; committed before the call runs."""

    type: Literal["tool_call"] = "tool_call"
    tool: NonEmpty
    args: dict[str, Any] = Field(default_factory=dict)
    attempt_id: NonEmpty


class ToolResult(_EventBase):
    """A requested call ended; the terminal event paired with its call by `attempt_id`."""

    type: Literal["tool_result"] = "tool_result"
    tool: NonEmpty
    attempt_id: NonEmpty
    status: Literal["ok", "error"]
    result: Any = None


class Mutation(_EventBase):
    """Session state changed; `kind` names how, any other fields carry what."""

    model_config = ConfigDict(extra="allow")

    type: Literal["mutation"] = "mutation"
    kind: NonEmpty

    @model_validator(mode="after")
    def _no_reserved_fields(self) -> Mutation:
        clash = RESERVED_FIELDS.intersection(self.__pydantic_extra__ or ())
        if clash:
            raise ValueError(f"field {sorted(clash)[0]!r} is set by the ledger itself")
        return self


Event = Annotated[Message | ToolCall | ToolResult | Mutation, Field(discriminator="type")]
EVENT_MODELS: Final = (Message, ToolCall, ToolResult, Mutation)

event_adapter: Final[TypeAdapter[Message | ToolCall | ToolResult | Mutation]] = TypeAdapter(Event)


def event_fields(event: BaseModel) -> dict[str, Any]:
    """Return the event as given: its set fields, without defaults, ready for canonicalisation.

    Defaults are left out so that an event spelled with `parents=[]` and one without parents have
    one canonical form, and so that the `event_id` the ledger generates is never part of it.
    """
    return event.model_dump(exclude_defaults=True) | {"type": event.type}  # type: ignore[attr-defined]
