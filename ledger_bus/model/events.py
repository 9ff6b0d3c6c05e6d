"""The fixed vocabulary of four event types.

Extending the vocabulary is a deliberate, versioned change to every reader (spec/ledger-v1.md), so
the models are strict: no coercion, no unknown fields except on `mutation`, whose fields are the
session state it records.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator
from pydantic_core import CoreConfig, SchemaValidator, core_schema

from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.vocabulary import RESERVED_FIELDS

NonEmpty = Annotated[str, Field(min_length=1)]
# Ids, agent and tool names: no control characters (C0, DEL, C1), so they print on one line and
# stores can join them with a control character in their attempt bookkeeping.
Ident = Annotated[str, Field(min_length=1, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")]

# Fields whose default value is left out of an event's canonical form (spec: "Canonical content"):
# the common fields on every type, `args` and `result` only on the types that define them. A
# mutation's own fields are its data and are kept whatever their value, `result: null` included.
_COMMON_DEFAULTS: Final[dict[str, Any]] = {
    "event_id": None,
    "run_id": None,
    "step_id": None,
    "attempt_id": None,
    "parents": [],
}
DEFAULTS: Final[dict[str, dict[str, Any]]] = {
    "message": _COMMON_DEFAULTS,
    "tool_call": {**_COMMON_DEFAULTS, "args": {}, "idempotency_key": None},
    "tool_result": {**_COMMON_DEFAULTS, "result": None, "settled_by": None},
    "mutation": _COMMON_DEFAULTS,
}


class _EventBase(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    agent: Ident
    event_id: Ident | None = None
    run_id: Ident | None = None
    step_id: Ident | None = None
    attempt_id: Ident | None = None
    parents: list[Ident] = Field(default_factory=list)


class Message(_EventBase):
    """An agent said something."""

    type: Literal["message"] = "message"
    body: str


class ToolCall(_EventBase):
    """A tool or model call was requested; committed before the call runs."""

    type: Literal["tool_call"] = "tool_call"
    tool: Ident
    args: dict[str, Any] = Field(default_factory=dict)
    attempt_id: Ident
    # The logical call's key, the same for every attempt at it (model/keys.py): what the tool
    # hands the system it acts on so that a second attempt does not act twice.
    idempotency_key: Ident | None = None


class ToolResult(_EventBase):
    """A requested call ended; the terminal event paired with its call by `attempt_id`."""

    type: Literal["tool_result"] = "tool_result"
    tool: Ident
    attempt_id: Ident
    status: Literal["ok", "error"]
    result: Any = None
    # Set when a reconciler's probe, not the call itself, found how the call ended: the probe,
    # its evidence, when and by whom (operations/probes.py).
    settled_by: dict[str, Any] | None = None


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


def _given_schema(model: type[BaseModel]) -> core_schema.TypedDictSchema:
    """The model's fields as a typed dict's: the same checks (taken from the model's own core
    schema, so the two cannot drift apart), but a field left out stays out, and no model object
    is made. `type` comes first, then the fields in the model's order."""
    schema: Any = model.__pydantic_core_schema__
    while schema["type"] != "model":  # Mutation's is wrapped in its after-validator
        schema = schema["schema"]
    fields: dict[str, core_schema.TypedDictField] = {}
    for name, field in sorted(schema["schema"]["fields"].items(), key=lambda f: f[0] != "type"):
        inner, required = field["schema"], True
        if inner["type"] == "default":
            inner, required = inner["schema"], name == "type"
        fields[name] = core_schema.typed_dict_field(inner, required=required)
    extra = schema["config"].get("extra_fields_behavior", "forbid")
    # Strict through and through: the fields' own schemas come out of the model without the
    # model's config (strict=True), so the typed dict says it again for them; without it bytes
    # pass for strings (b"x" for an agent).
    return core_schema.typed_dict_schema(
        fields, extra_behavior=extra, strict=True, config=CoreConfig(strict=True)
    )


# Validates an event given as a dict into a new dict of the fields given, in a fixed order, at
# about 0.7 of the cost of making the model (a hundred-event append validates a hundred). Its
# errors are the models' (same types, same locations). Mutation's after-validator is not part of
# it: a mutation given as a dict has its reserved fields refused before (batch.py).
_GIVEN: Final = core_schema.tagged_union_schema(
    {model.model_fields["type"].default: _given_schema(model) for model in EVENT_MODELS},
    discriminator="type",
)
validate_given: Final = SchemaValidator(_GIVEN).validate_python
# The same for a whole list of events in one call, which spares a hundred-event append a
# hundred calls into the validator and the Python around each (its validation 215 against 174
# us in one run). Only for a list whose events all validate: the first fault is named event by
# event (batch.py).
validate_all_given: Final = SchemaValidator(
    core_schema.list_schema(_GIVEN, strict=True)
).validate_python


def event_fields(event: BaseModel) -> JSONObject:
    """Return the event as given: its set fields, without defaults, ready for canonicalisation.

    Defaults are left out so that an event spelled with `parents=[]` and one without parents have
    one canonical form, and so that the `event_id` the ledger generates is never part of it.
    """
    fields = event.model_dump()
    kind: str = fields["type"]
    for name, default in DEFAULTS[kind].items():
        if name in fields and fields[name] == default:
            del fields[name]
    return fields
