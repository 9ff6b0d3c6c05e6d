"""An append's events, validated, canonicalised, digested and encoded once, for any backend."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final

import ormsgpack
from pydantic import ValidationError

from ledger_bus.model.artifacts import (
    REF_BYTES,
    Artifact,
    artifact_of,
    movable,
    pack,
    with_refs,
)
from ledger_bus.model.attempts import attempt_note, settled
from ledger_bus.model.canonical import (
    JsonValueError,
    canonical_bytes,
    digest_of_parts,
    fast_bytes,
    plain_value,
)
from ledger_bus.model.errors import InvalidEvent, InvalidInput
from ledger_bus.model.events import (
    DEFAULTS,
    EVENT_MODELS,
    event_fields,
    validate_all_given,
    validate_given,
)
from ledger_bus.model.ids import event_id_deriver
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.prepared import (
    DEFAULT_MAX_APPEND_BYTES,
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_EVENTS_PER_APPEND,
    Limits,
    PreparedAppend,
)
from ledger_bus.model.vocabulary import EVENT_TYPES, RESERVED_FIELDS

__all__ = [  # the limits and a prepared append, where they were always found too
    "DEFAULT_MAX_APPEND_BYTES",
    "DEFAULT_MAX_EVENTS_PER_APPEND",
    "DEFAULT_MAX_EVENT_BYTES",
    "Limits",
    "PreparedAppend",
    "append_digest",
    "prepare_append",
]

_DEFAULT_ITEMS: Final = {kind: tuple(table.items()) for kind, table in DEFAULTS.items()}
# Once validated, an event's fields hold what the vocabulary types them as (ASCII field names,
# strings, lists of strings), but for these, which hold any JSON; a mutation's own fields may
# be anything (None). Only these are looked at before the fast canonical path.
_FREE_FIELDS: Final[dict[str, tuple[str, ...] | None]] = {
    "message": (),
    "tool_call": ("args",),
    "tool_result": ("result", "settled_by"),
    "mutation": None,
}


def _given_fields(index: int, raw: object) -> JSONObject:
    """The event's fields as given, defaults left out, once validated against the vocabulary."""
    # Dicts first: they are the common input, and a model class's isinstance test is not cheap.
    if not isinstance(raw, dict):
        if isinstance(raw, EVENT_MODELS):
            return event_fields(raw)
        raise InvalidEvent(f"expected an event object, got {type(raw).__name__}", index=index)
    kind = raw.get("type")
    if kind not in EVENT_TYPES:
        raise InvalidEvent(
            f"unknown event type {kind!r}; the vocabulary is {', '.join(EVENT_TYPES)}",
            index=index,
            field="type",
        )
    if kind == "mutation":
        for name in sorted(RESERVED_FIELDS.intersection(raw)):
            raise InvalidEvent(
                "set by the ledger itself; a mutation may not carry it", index=index, field=name
            )
    try:
        # A new dict of the fields given, validated as the models validate them.
        data: dict[str, Any] = validate_given(raw)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        # loc is (type tag, field, ...) for a discriminated union.
        loc = [str(part) for part in first["loc"][1:]]
        message = first["msg"]
        if first["type"] == "missing":
            message = "required field is missing"
        elif first["type"] == "string_pattern_mismatch":
            message = "must not contain control characters"
        elif first["type"] == "extra_forbidden":
            message = f"{raw.get('type')} events have no such field"
        raise InvalidEvent(message, index=index, field=".".join(loc) or None) from None
    _drop_defaults(data)
    return data


def _drop_defaults(data: dict[str, Any]) -> None:
    """Leave out the fields given with their default value: they are not part of the event's
    canonical form."""
    for name, default in _DEFAULT_ITEMS[data["type"]]:
        if name in data and data[name] == default:
            del data[name]


def _all_given_fields(events: Sequence[object], limits: Limits) -> list[dict[str, Any]]:
    """`_given_fields` of each event, in one call to the validator when the events are a list
    of dicts that all validate (the common case); else event by event, which names the first
    event at fault."""
    if type(events) is list:
        try:
            fields: list[dict[str, Any]] = validate_all_given(events)
        except ValidationError:
            pass
        else:
            for data in fields:
                if data["type"] == "mutation" and not RESERVED_FIELDS.isdisjoint(data):
                    break  # refused by name: see _given_fields
                _drop_defaults(data)
            else:
                return fields
    fields = []
    for index, raw in enumerate(events):
        try:
            fields.append(_given_fields(index, raw))
        except InvalidEvent:
            _checked(fields, limits)  # a fault in an earlier event is the first fault
            raise
    return fields


def prepare_append(
    session_id: str, stream: str, append_id: str, events: Sequence[object], limits: Limits
) -> PreparedAppend:
    """Validate and encode the events of one append, or raise InvalidEvent naming the first fault.

    The digest covers the events as the caller gave them (RFC 8785 over their set fields); the
    event ids the ledger generates for events without one are filled in afterwards.
    """
    if isinstance(events, dict | str | bytes) or not isinstance(events, Sequence):
        raise InvalidInput("events must be a list of events")
    if not events:
        raise InvalidEvent("an append needs at least one event")
    if len(events) > limits.max_events_per_append:
        raise InvalidEvent(
            f"{len(events)} events in one append; the limit is {limits.max_events_per_append}"
        )
    fields = _all_given_fields(events, limits)
    digest, moved = _digest(fields, limits)
    derive = event_id_deriver(session_id, stream, append_id)
    for index, data in enumerate(fields):
        if "event_id" not in data:
            data["event_id"] = derive(index)
    notes = settled([attempt_note(data) for data in fields])
    if not moved:
        try:
            # ormsgpack packs a small event faster than msgpack does, to the same bytes
            # (tests/contract/test_canonical_json.py holds them equal); a subclass of float it
            # refuses.
            packed = [ormsgpack.packb(data) for data in fields]
        except TypeError:
            packed = [pack(data) for data in fields]
        return PreparedAppend(digest, packed, notes)
    payloads: list[bytes] = []
    artifacts: dict[str, Artifact] = {}
    uses: dict[str, int] = {}
    for index, data in enumerate(fields):
        out = moved.get(index)
        if out is None:
            payloads.append(pack(data))
            continue
        payloads.append(pack(with_refs(data, {name: a.ref for name, a in out.items()})))
        for artifact in out.values():
            artifacts.setdefault(artifact.ref.sha256, artifact)
            uses[artifact.ref.sha256] = uses.get(artifact.ref.sha256, 0) + 1
    return PreparedAppend(digest, payloads, notes, tuple(artifacts.values()), tuple(uses.items()))


def append_digest(events: Sequence[object], limits: Limits | None = None) -> str:
    """Return the sha256 (hex) by which an append of `events` is deduplicated.

    It is the digest of the RFC 8785 array of the events as given, each validated and with the
    fields given at their default value left out; what the ledger fills in itself (event ids,
    commit times) is not part of it. Raises InvalidEvent where an append of them would.
    """
    return prepare_append("", "", "", events, limits or Limits()).digest


Moved = dict[int, dict[str, Artifact]]


def _canonical_events(fields: list[dict[str, Any]]) -> bytes:
    """canonical_bytes(fields), looking only at the fields validation leaves free (the hot
    path's check walks what it must, not the whole of every event)."""
    for data in fields:
        free = _FREE_FIELDS[data["type"]]
        if free is None:
            if not plain_value(data, 1):
                return canonical_bytes(fields)
            continue
        for name in free:
            if name in data and not plain_value(data[name], 2):
                return canonical_bytes(fields)
    return fast_bytes(fields) or canonical_bytes(fields)


def _digest(fields: list[dict[str, Any]], limits: Limits) -> tuple[bytes, Moved]:
    """The sha256 of the RFC 8785 array of the events as given, once every size limit is
    checked, and the fields moved out to artifacts (by event index, then field name).

    The array is canonicalised in one call, which gives the same bytes as joining its elements'
    canonical forms; each event is done alone only to name one at fault, or when some event may
    exceed its own limit or the artifact threshold.
    """
    small = limits.max_event_bytes
    if limits.artifact_threshold is not None:
        small = min(small, limits.artifact_threshold)
    try:
        whole = _canonical_events(fields)
    except JsonValueError:
        whole = None
    if whole is not None and len(fields) == 1 and len(whole) > small:
        # One event: the array's digest is at hand, and the event's size is the array's less
        # its brackets. Large results come one to an append; neither is made twice.
        _, moved = _checked(fields, limits, [len(whole) - 2])
        return hashlib.sha256(whole).digest(), moved
    if whole is None or len(whole) > small:
        parts, moved = _checked(fields, limits)
        return bytes.fromhex(digest_of_parts(parts)), moved
    if len(whole) - len(fields) - 1 > limits.max_append_bytes:  # less brackets and commas
        raise InvalidEvent(f"the append exceeds {limits.max_append_bytes} bytes in all")
    return hashlib.sha256(whole).digest(), {}


def _checked(
    fields: list[dict[str, Any]], limits: Limits, sizes: list[int] | None = None
) -> tuple[list[bytes], Moved]:
    """Each event's canonical bytes, checked against the limits, and the fields moved out: the
    largest fields of each event above the artifact threshold, until it is below it.
    InvalidEvent names the first event at fault. With `sizes` (the events' canonical sizes,
    known already) no bytes are made, and none returned."""
    parts: list[bytes] = []
    moved: Moved = {}
    total = 0
    threshold = limits.artifact_threshold
    for index, data in enumerate(fields):
        if sizes is not None:
            size = sizes[index]
        else:
            try:
                part = canonical_bytes(data)
            except JsonValueError as err:
                raise InvalidEvent(err.message, index=index, field=err.where or None) from None
            parts.append(part)
            size = len(part)
        if threshold is not None and size > threshold:
            out, size = _move_out(index, data, size, threshold, limits)
            if out:
                moved[index] = out
        if size > limits.max_event_bytes:
            kept = " outside its artifacts" if index in moved else ""
            raise InvalidEvent(
                f"{size} bytes of canonical JSON{kept}; the limit is {limits.max_event_bytes}",
                index=index,
            )
        total += size
        if total > limits.max_append_bytes:
            raise InvalidEvent(f"the append exceeds {limits.max_append_bytes} bytes in all")
    return parts, moved


def _move_out(
    index: int, data: dict[str, Any], size: int, threshold: int, limits: Limits
) -> tuple[dict[str, Artifact], int]:
    """The artifacts of an event's largest fields, taken until the event is below `threshold`,
    and the event's canonical size (about) once they are out."""
    sized: list[tuple[int, str, Any, bytes | None]] = []
    for name in movable(data):
        value = data[name]
        # A string's artifact is its UTF-8 text, about its canonical size: not canonicalised.
        canonical = None if isinstance(value, str) else canonical_bytes(value)
        if canonical is not None:
            length = len(canonical)
        else:  # isascii() reads a flag; encode() would copy the text
            length = (len(value) if value.isascii() else len(value.encode())) + 2
        sized.append((length + len(name), name, value, canonical))
    sized.sort(key=lambda item: item[0], reverse=True)
    out: dict[str, Artifact] = {}
    for field_size, name, value, canonical in sized:
        if size <= threshold or field_size <= REF_BYTES:
            break
        artifact = artifact_of(value, canonical)
        if artifact.ref.size > limits.max_artifact_bytes:
            raise InvalidEvent(
                f"{artifact.ref.size} bytes; the limit of an artifact is"
                f" {limits.max_artifact_bytes}",
                index=index,
                field=name,
            )
        out[name] = artifact
        size -= field_size - REF_BYTES
    return out, size
