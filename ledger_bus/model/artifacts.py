"""Large event fields kept apart from their events, as content-addressed artifacts (spec 3.11).

An event whose canonical JSON passes `Limits.artifact_threshold` keeps its largest content fields
(a message's `body`, a call's `args`, a result's `result`, a mutation's own fields) out of its
payload: each becomes an artifact, its bytes stored once per session under their sha256, and the
payload holds a reference in its place, a msgpack extension value no JSON value can be. A string
is kept as its UTF-8 text, anything else as its RFC 8785 JSON; the media type says which. Reads
put the values back, unless asked for the references.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgpack
import orjson

from ledger_bus.model.canonical import canonical_bytes
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.jsontext import JSONObject

EXT_CODE: Final = 1  # the msgpack extension type of a reference in a payload
TEXT: Final = "text/plain; charset=utf-8"
JSON: Final = "application/json"
DEFAULT_THRESHOLD: Final = 64 * 1024
DEFAULT_MAX_ARTIFACT_BYTES: Final = 64 * 1024 * 1024
# Fields that say what an event is rather than what it carries: never moved out.
_FRAME: Final = frozenset(
    {"type", "agent", "event_id", "run_id", "step_id", "attempt_id", "parents", "tool", "status"}
)
# What a reference costs in an event's canonical size, about: a field moved out must save more.
REF_BYTES: Final = 160


@dataclass(frozen=True, slots=True)
class ArtifactRef:
    """Where a field's value went: the sha256 (hex) of its bytes, their size and media type."""

    sha256: str
    size: int
    media_type: str

    def to_dict(self) -> JSONObject:
        """The reference as JSON shows it (`--refs`)."""
        return {
            "artifact": f"sha256:{self.sha256}",
            "size": self.size,
            "media_type": self.media_type,
        }

    def value_of(self, data: bytes) -> Any:
        """The field's value from the artifact's bytes."""
        return data.decode("utf-8") if self.media_type == TEXT else orjson.loads(data)


@dataclass(frozen=True, slots=True)
class Artifact:
    """An artifact to store: its reference and its bytes."""

    ref: ArtifactRef
    data: bytes


def artifact_of(value: object, canonical: bytes | None = None) -> Artifact:
    """The artifact of a field's value; `canonical`, its RFC 8785 bytes when known."""
    if isinstance(value, str):
        data, media_type = value.encode("utf-8"), TEXT
    else:
        data, media_type = (canonical if canonical is not None else canonical_bytes(value)), JSON
    return Artifact(ArtifactRef(hashlib.sha256(data).hexdigest(), len(data), media_type), data)


def movable(fields: Mapping[str, object]) -> list[str]:
    """The fields of an event that may be moved out; a mutation's `kind` names it, and stays."""
    frame = _FRAME | {"kind"} if fields.get("type") == "mutation" else _FRAME
    return [name for name in fields if name not in frame]


# -- references in payloads -----------------------------------------------------------------------


def _pack_ref(ref: ArtifactRef) -> msgpack.ExtType:
    return msgpack.ExtType(EXT_CODE, msgpack.packb([ref.sha256, ref.size, ref.media_type]))


def _ext_hook(code: int, data: bytes) -> object:
    if code == EXT_CODE:
        sha256, size, media_type = msgpack.unpackb(data)
        return ArtifactRef(sha256, size, media_type)
    return msgpack.ExtType(code, data)


def _default(value: object) -> object:
    if isinstance(value, ArtifactRef):
        return _pack_ref(value)
    raise TypeError(f"cannot pack {type(value).__name__}")


def pack(fields: dict[str, Any]) -> bytes:
    """An event's payload: its fields in msgpack, references as extension values."""
    return msgpack.packb(fields, use_bin_type=True, default=_default)  # type: ignore[no-any-return]


def with_refs(fields: dict[str, Any], refs: dict[str, ArtifactRef]) -> dict[str, Any]:
    """The fields with the values of `refs` (by field name) replaced by their references."""
    return {name: refs.get(name, value) for name, value in fields.items()}


def unpack(payload: bytes) -> dict[str, Any]:
    """An event's fields from its payload, references as ArtifactRef values."""
    return msgpack.unpackb(payload, ext_hook=_ext_hook)  # type: ignore[no-any-return]


def refs_in(fields: Mapping[str, object]) -> list[ArtifactRef]:
    """The references among an event's fields."""
    return [value for value in fields.values() if type(value) is ArtifactRef]


def resolved(fields: dict[str, Any], fetch: Callable[[ArtifactRef], bytes]) -> JSONObject:
    """The fields with each reference replaced by its value."""
    return {
        name: value.value_of(fetch(value)) if type(value) is ArtifactRef else value
        for name, value in fields.items()
    }


def uses_of(payloads: Iterable[Mapping[str, object]]) -> dict[str, int]:
    """How many references to each artifact (by sha256) the events hold."""
    counts: dict[str, int] = {}
    for fields in payloads:
        for ref in refs_in(fields):
            counts[ref.sha256] = counts.get(ref.sha256, 0) + 1
    return counts


def check_sha(text: str) -> str:
    """An artifact's sha256 as the stores key it: 64 lowercase hex digits ("sha256:" allowed)."""
    digest = text.removeprefix("sha256:").lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise InvalidInput(f"not a sha256: {text!r}")
    return digest
