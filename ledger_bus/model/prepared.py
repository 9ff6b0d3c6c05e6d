"""What an append carries, once prepared, and the bounds it is held to: the types a store
takes, apart from the preparing itself (ledger_bus.model.batch), so that a program that only
reads imports no validator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ledger_bus.model.artifacts import DEFAULT_MAX_ARTIFACT_BYTES, DEFAULT_THRESHOLD, Artifact
from ledger_bus.model.attempts import AttemptNote, Opens

DEFAULT_MAX_EVENT_BYTES: Final = 1024 * 1024
# One append is one Lua call, and a Lua call blocks the whole server while it runs.
DEFAULT_MAX_EVENTS_PER_APPEND: Final = 1000
DEFAULT_MAX_APPEND_BYTES: Final = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what one append may carry.

    An event whose canonical size passes `artifact_threshold` (None: never) keeps its largest
    fields as artifacts (ledger_bus.model.artifacts), each up to `max_artifact_bytes`; the byte
    limits on events and appends count what stays in the events.
    """

    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    max_events_per_append: int = DEFAULT_MAX_EVENTS_PER_APPEND
    max_append_bytes: int = DEFAULT_MAX_APPEND_BYTES
    artifact_threshold: int | None = DEFAULT_THRESHOLD
    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    """What a store writes for one append."""

    sha256: bytes  # of the RFC 8785 array of the events as given
    payloads: list[bytes]  # msgpack of each event's fields, event_id filled in
    notes: list[AttemptNote | None]  # per event, what it means for open attempts
    # The fields moved out of the events, each artifact once, and how often the payloads
    # reference each one (by sha256).
    artifacts: tuple[Artifact, ...] = ()
    uses: tuple[tuple[str, int], ...] = ()

    @property
    def digest(self) -> str:
        """The sha256 in hex, as stores other than Redis keep it."""
        return self.sha256.hex()

    @property
    def opens_attempts(self) -> bool:
        return any(type(note) is Opens for note in self.notes)
