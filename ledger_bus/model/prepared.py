"""What an append carries, once prepared, and the bounds it is held to: the types a store
takes, apart from the preparing itself (ledger_bus.model.batch), so that a program that only
reads imports no validator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ledger_bus.model.artifacts import DEFAULT_MAX_ARTIFACT_BYTES, DEFAULT_THRESHOLD, Artifact
from ledger_bus.model.attempts import AttemptNote, Opens
from ledger_bus.model.errors import InvalidInput, LeaseLost
from ledger_bus.model.ids import check_name, quoted

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
class Fence:
    """A lease as its holder holds it: an append made under it (`append(..., fence=...)`) is
    refused with LeaseLost, atomically and writing nothing, once the holding is over: the lease
    expired, or another owner took it and drew a newer token. Each acquisition by a new holding
    draws the next token of the lease (`acquire_lease` returns it), so tokens only grow."""

    lease: str  # the lease's name, within the session of the stream appended to
    owner: str  # who holds it
    token: int  # the holding's token, as acquire_lease returned it


def check_fence(fence: object) -> Fence:
    """Return `fence` when it is a Fence a store can check, else raise InvalidInput."""
    if not isinstance(fence, Fence):
        raise InvalidInput(f"fence must be a ledger_bus.Fence, got {quoted(fence)}")
    check_name(fence.lease, "lease name")
    # The owner is any token the holder chose (a uuid, a host and pid); the lease names it whole.
    check_name(fence.owner, "lease owner")
    if type(fence.token) is not int or fence.token < 1:
        raise InvalidInput(f"a fence's token is an int >= 1, got {quoted(fence.token)}")
    return fence


def lease_lost(fence: Fence, token: int) -> LeaseLost:
    """The refusal of an append made under `fence` once the lease's current token is `token`
    (0: nobody holds the lease, nor has since it lapsed)."""
    now = f"another holding took it (token {token})" if token > fence.token else "it expired"
    return LeaseLost(
        f"lease {fence.lease}: the holding of {fence.owner} (token {fence.token}) is over,"
        f" {now}; nothing written",
        token,
    )


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
    # The lease the append is made under, checked on the server with the write; not part of the
    # content (a retry of an append recorded under it still returns its result).
    fence: Fence | None = None

    @property
    def digest(self) -> str:
        """The sha256 in hex, as stores other than Redis keep it."""
        return self.sha256.hex()

    @property
    def opens_attempts(self) -> bool:
        return any(type(note) is Opens for note in self.notes)
