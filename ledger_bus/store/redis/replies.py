"""One parser per Lua script the store calls (store/lua/), each turning the raw reply into named
fields, so that no caller reads a reply by position.

A reply comes as redis-py gives it: bulk strings as bytes (str under `decode_responses`),
integers as int, tables as lists; the scripts return no booleans, doubles or maps, so RESP2 and
RESP3 give the same shapes. A script that answers in several shapes answers with a table whose
first element is its kind ("ok", "dup", ...): each kind is a frozen dataclass whose `kind` is
that element, the vocabulary the TypeScript SDK's parsers (typescript/src/store/replies.ts)
use too. A reply of a shape a parser does not know raises UnexpectedReply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, NoReturn

from ledger_bus.model.errors import UnexpectedReply

# A session log entry as XRANGE gives it (decode_responses=False): its id, and its fields.
Entry = tuple[bytes, dict[bytes, bytes]]


def _refuse(script: str, reply: object) -> NoReturn:
    shown = repr(reply)
    if len(shown) > 200:
        shown = shown[:199] + "\u2026"
    raise UnexpectedReply(f"{script} replied {shown}: a shape this package does not know")


def _kind(script: str, reply: object, lengths: dict[str, int]) -> tuple[str, list[object]]:
    """The kind of a reply that is a table of kind first, one of `lengths`, and the table, which
    holds the length given for its kind."""
    if isinstance(reply, list) and reply:
        first = reply[0]
        kind = first.decode() if isinstance(first, bytes) else first
        if isinstance(kind, str) and lengths.get(kind) == len(reply):
            return kind, reply
    _refuse(script, reply)


def _text(script: str, table: list[object], at: int) -> str:
    value = table[at]
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    _refuse(script, table)


def _int(script: str, table: list[object], at: int) -> int:
    value = table[at]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    _refuse(script, table)


def _flag(script: str, reply: object) -> bool:
    """A reply of 1 or 0: True for 1."""
    if isinstance(reply, int) and not isinstance(reply, bool) and reply in (0, 1):
        return reply == 1
    _refuse(script, reply)


# -- kinds more than one script replies with -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Archived:
    """The session is moving (or has moved) to the archive `where`: nothing written."""

    kind: ClassVar[str] = "archived"
    where: str


@dataclass(frozen=True, slots=True)
class Conflict:
    """The stream's `version` is not the one the call expected: nothing written."""

    kind: ClassVar[str] = "conflict"
    version: int


@dataclass(frozen=True, slots=True)
class NoArtifact:
    """An artifact written before the call is gone (its TTL, a deletion): write it again."""

    kind: ClassVar[str] = "noartifact"
    key: str


@dataclass(frozen=True, slots=True)
class NoPermission:
    """The caller's ACL refuses `command` on `key`, checked before any write: nothing written."""

    kind: ClassVar[str] = "noperm"
    command: str
    key: str


@dataclass(frozen=True, slots=True)
class Changed:
    """A stream or group appeared (or went) since the caller looked at the session: look again."""

    kind: ClassVar[str] = "changed"


@dataclass(frozen=True, slots=True)
class NothingToDelete:
    """The session (or stream) holds no event; `generation`, its deletions so far."""

    kind: ClassVar[str] = "none"
    generation: int


# -- append.lua -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Appended:
    """The events are written as versions `first` to `last`, the last at `cursor` (a Redis
    entry id); `opened`, the attempts they opened; `generation`, the session's."""

    kind: ClassVar[str] = "ok"
    first: int
    last: int
    cursor: str
    opened: int
    generation: int


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The append_id was written before with the same events, as versions `first` to `last`,
    the last at `cursor`, in the session's `generation` of then: nothing written now."""

    kind: ClassVar[str] = "dup"
    first: int
    last: int
    cursor: str
    generation: int


@dataclass(frozen=True, slots=True)
class IdempotencyClash:
    """The append_id was written before with other events: nothing written."""

    kind: ClassVar[str] = "idem"


@dataclass(frozen=True, slots=True)
class Rewound:
    """The stream is at `version`, below what this writer was told it held in the same
    generation (a failover lost acknowledged events): nothing written."""

    kind: ClassVar[str] = "rewound"
    version: int


@dataclass(frozen=True, slots=True)
class Fenced:
    """The append named a lease holding that is over: the lease's current token is `token` (0:
    none drawn), and nothing was written."""

    kind: ClassVar[str] = "fenced"
    token: int


AppendReply = (
    Appended
    | Duplicate
    | IdempotencyClash
    | Archived
    | Fenced
    | Conflict
    | Rewound
    | NoArtifact
    | NoPermission
)


def append_reply(reply: object) -> AppendReply:
    """append.lua's reply, one of:
    {"ok", first, last, cursor, opened, generation}: Appended;
    {"dup", first, last, cursor, generation of the original}: Duplicate;
    {"idem"}: IdempotencyClash; {"archived", where}: Archived; {"fenced", token}: Fenced;
    {"conflict", actual version}: Conflict; {"rewound", actual version}: Rewound;
    {"noartifact", key}: NoArtifact; {"noperm", command, key}: NoPermission."""
    script = "append.lua"
    kind, table = _kind(script, reply, _APPEND_LENGTHS)
    if kind == "ok":
        return Appended(
            _int(script, table, 1),
            _int(script, table, 2),
            _text(script, table, 3),
            _int(script, table, 4),
            _int(script, table, 5),
        )
    if kind == "dup":
        return Duplicate(
            _int(script, table, 1),
            _int(script, table, 2),
            _text(script, table, 3),
            _int(script, table, 4),
        )
    if kind == "idem":
        return IdempotencyClash()
    if kind == "rewound":
        return Rewound(_int(script, table, 1))
    if kind == "archived":
        return Archived(_text(script, table, 1))
    if kind == "fenced":
        return Fenced(_int(script, table, 1))
    if kind == "conflict":
        return Conflict(_int(script, table, 1))
    if kind == "noartifact":
        return NoArtifact(_text(script, table, 1))
    return NoPermission(_text(script, table, 1), _text(script, table, 2))


_APPEND_LENGTHS: Final = {
    "ok": 6,
    "dup": 5,
    "idem": 1,
    "archived": 2,
    "fenced": 2,
    "conflict": 2,
    "rewound": 2,
    "noartifact": 2,
    "noperm": 3,
}


# -- restore.lua ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Restored:
    """`written` events written (0: the batch was there already), opening `opened` attempts."""

    kind: ClassVar[str] = "ok"
    written: int
    opened: int


@dataclass(frozen=True, slots=True)
class OutOfOrder:
    """The cursors do not ascend from the log's last id: nothing written."""

    kind: ClassVar[str] = "order"


RestoreReply = Restored | Archived | Conflict | OutOfOrder | NoArtifact | NoPermission

_RESTORE_LENGTHS: Final = {
    "ok": 3,
    "archived": 2,
    "conflict": 2,
    "order": 1,
    "noartifact": 2,
    "noperm": 3,
}


def restore_reply(reply: object) -> RestoreReply:
    """restore.lua's reply, one of:
    {"ok", events written, attempts opened}: Restored; {"archived", where}: Archived;
    {"conflict", the stream's version}: Conflict; {"order"}: OutOfOrder;
    {"noartifact", key}: NoArtifact; {"noperm", command, key}: NoPermission."""
    script = "restore.lua"
    kind, table = _kind(script, reply, _RESTORE_LENGTHS)
    if kind == "ok":
        return Restored(_int(script, table, 1), _int(script, table, 2))
    if kind == "order":
        return OutOfOrder()
    if kind == "archived":
        return Archived(_text(script, table, 1))
    if kind == "conflict":
        return Conflict(_int(script, table, 1))
    if kind == "noartifact":
        return NoArtifact(_text(script, table, 1))
    return NoPermission(_text(script, table, 1), _text(script, table, 2))


# -- delete_session.lua, delete_stream.lua --------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionDeleted:
    """`events` deleted with the session, which is now in its `generation`."""

    kind: ClassVar[str] = "ok"
    events: int
    generation: int


DeleteSessionReply = SessionDeleted | NothingToDelete | Changed

_DELETE_SESSION_LENGTHS: Final = {"ok": 3, "none": 2, "changed": 1}


def delete_session_reply(reply: object) -> DeleteSessionReply:
    """delete_session.lua's reply, one of:
    {"ok", events deleted, generation}: SessionDeleted;
    {"none", generation}: NothingToDelete; {"changed"}: Changed."""
    script = "delete_session.lua"
    kind, table = _kind(script, reply, _DELETE_SESSION_LENGTHS)
    if kind == "ok":
        return SessionDeleted(_int(script, table, 1), _int(script, table, 2))
    if kind == "none":
        return NothingToDelete(_int(script, table, 1))
    return Changed()


@dataclass(frozen=True, slots=True)
class MoreToDelete:
    """`deleted` events deleted by this call; the stream index still lists appends: call
    again."""

    kind: ClassVar[str] = "more"
    deleted: int


@dataclass(frozen=True, slots=True)
class StreamDeleted:
    """`deleted` events deleted by this call, the last of the stream, whose session is now in
    its `generation`."""

    kind: ClassVar[str] = "done"
    deleted: int
    generation: int


DeleteStreamReply = MoreToDelete | StreamDeleted | NothingToDelete

_DELETE_STREAM_LENGTHS: Final = {"more": 2, "done": 3, "none": 2}


def delete_stream_reply(reply: object) -> DeleteStreamReply:
    """delete_stream.lua's reply, one of:
    {"more", events deleted}: MoreToDelete; {"done", events deleted, generation}:
    StreamDeleted; {"none", generation}: NothingToDelete."""
    script = "delete_stream.lua"
    kind, table = _kind(script, reply, _DELETE_STREAM_LENGTHS)
    if kind == "more":
        return MoreToDelete(_int(script, table, 1))
    if kind == "done":
        return StreamDeleted(_int(script, table, 1), _int(script, table, 2))
    return NothingToDelete(_int(script, table, 1))


# -- archive_finish.lua, archive_abandon.lua ------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArchiveFinished:
    """The session is removed here but its tombstone, which names the archive."""

    kind: ClassVar[str] = "ok"


@dataclass(frozen=True, slots=True)
class FinishedBefore:
    """The archive was finished before: nothing done."""

    kind: ClassVar[str] = "done"


@dataclass(frozen=True, slots=True)
class MovedElsewhere:
    """The archive under way is `where` ("" for none), not the caller's: nothing done."""

    kind: ClassVar[str] = "moved"
    where: str


ArchiveFinishReply = ArchiveFinished | FinishedBefore | MovedElsewhere | Changed

_ARCHIVE_FINISH_LENGTHS: Final = {"ok": 1, "done": 1, "moved": 2, "changed": 1}


def archive_finish_reply(reply: object) -> ArchiveFinishReply:
    """archive_finish.lua's reply, one of:
    {"ok"}: ArchiveFinished; {"done"}: FinishedBefore; {"moved", where}: MovedElsewhere;
    {"changed"}: Changed."""
    script = "archive_finish.lua"
    kind, table = _kind(script, reply, _ARCHIVE_FINISH_LENGTHS)
    if kind == "ok":
        return ArchiveFinished()
    if kind == "done":
        return FinishedBefore()
    if kind == "moved":
        return MovedElsewhere(_text(script, table, 1))
    return Changed()


def archive_abandon_reply(reply: object) -> bool:
    """archive_abandon.lua's reply: 1 when the archive was given up (True), 0 when there was
    nothing to give up (False)."""
    return _flag("archive_abandon.lua", reply)


# -- the scripts of one flag ----------------------------------------------------------------


def artifact_put_reply(reply: object) -> bool:
    """artifact_put.lua's reply: 1 when the artifact is there (True), 0 when the upload is
    short and must be written again (False)."""
    return _flag("artifact_put.lua", reply)


def lease_reply(reply: object) -> int:
    """lease.lua's reply: the holding's token (acquire, renew) or 1 (release) when the owner
    holds the lease afterwards or let it go; 0 when another owner holds it or, for renew and
    release, it is gone."""
    if isinstance(reply, int) and not isinstance(reply, bool) and reply >= 0:
        return reply
    _refuse("lease.lua", reply)


def forget_session_reply(reply: object) -> bool:
    """forget_session.lua's reply: 1 when the session left the index (True), 0 when an attempt
    opened since, or it was not there (False)."""
    return _flag("forget_session.lua", reply)


# -- the scripts of a list ------------------------------------------------------------------


def prune_consumers_reply(reply: object) -> list[str]:
    """prune_consumers.lua's reply: the names of the consumers removed (none: [])."""
    script = "prune_consumers.lua"
    if not isinstance(reply, list):
        _refuse(script, reply)
    return [_text(script, reply, at) for at in range(len(reply))]


def read_stream_reply(reply: object) -> list[Entry]:
    """read_stream.lua's reply: the log entries, oldest first, as XRANGE gives them (none: []),
    each `[id, [field, value, ...]]`, its fields made a dict."""
    entries: list[Entry] = []
    if isinstance(reply, list):
        for entry in reply:
            if not (isinstance(entry, list) and len(entry) == 2):
                break
            entry_id, flat = entry
            if not (isinstance(entry_id, bytes) and isinstance(flat, list) and len(flat) % 2 == 0):
                break
            entries.append((entry_id, dict(zip(flat[::2], flat[1::2], strict=True))))
        else:
            return entries
    _refuse("read_stream.lua", reply)
