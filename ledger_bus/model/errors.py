"""The one error hierarchy every backend raises; callers catch `LedgerError`."""

from __future__ import annotations

from collections.abc import Callable


class LedgerError(Exception):
    """Raised for every failure ledger-bus reports; the root of the hierarchy."""


class InvalidInput(LedgerError, ValueError):
    """Raised when an argument is malformed (a session id, a version, a cursor)."""


class InvalidEvent(InvalidInput):
    """Raised when an event breaks the vocabulary or a limit; nothing of its append is written."""

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None):
        where = []
        if index is not None:
            where.append(f"event {index}")
        if field:
            where.append(f"field {field!r}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.reason = message
        self.index = index
        self.field = field


class VersionConflict(LedgerError):
    """Raised when `expected_version` is not the stream's version; nothing is written."""

    def __init__(self, stream: str, expected: int, actual: int):
        super().__init__(f"stream {stream}: expected version {expected}, actual {actual}")
        self.stream = stream
        self.expected = expected
        self.actual = actual


class IdempotencyConflict(LedgerError):
    """Raised when an append_id already used on a stream arrives with other content."""

    def __init__(self, stream: str, append_id: str):
        super().__init__(
            f"stream {stream}: append_id {append_id!r} was already used for different events"
        )
        self.stream = stream
        self.append_id = append_id


class BackendUnavailable(LedgerError):
    """Raised when the backend cannot be reached within the configured deadline."""


class BackendRefused(LedgerError):
    """Raised when the backend answered but refused the work: memory full, no permission, wrong
    credentials, a database that does not exist. Retrying as it is will not help."""


class Refused(LedgerError):
    """Raised when a rule refuses a write that names something closed already: a checkpoint or a
    second close of a closed dispatch, a resolution of a closed attempt. Nothing was written."""


class ConcurrentRun(Refused):
    """Raised when a run would write a thread (a session) that another run wrote since this
    one read it: two runs of one thread at once would fork it. Nothing of the second was
    written."""


class SessionArchived(Refused):
    """Raised for an append to a session moved to the archive (spec 3.10): the archive holds it
    read-only now. A retry of an append the archive records returns its original result
    instead, through a store that reads the archive (connect(..., archive=URL))."""

    def __init__(self, session_id: str, archive: str):
        super().__init__(
            f"session {session_id!r} is archived in {archive}; it takes no more appends"
        )
        self.session_id = session_id
        self.archive = archive


class LeaseLost(Refused):
    """Raised when a write is made under a lease whose holding is over (it expired, or another
    process took it): nothing is written, and the writer may not write under it any more.
    `token` is the lease's current token (0: nobody has drawn one since)."""

    def __init__(self, message: str, token: int = 0):
        super().__init__(message)
        self.token = token


class NotFound(LedgerError):
    """Raised when what a call names does not exist: a session, stream, attempt or group."""


class HistoryRewound(VersionConflict):
    """Raised when a stream holds fewer events than this writer saw acknowledged: a failover
    lost acknowledged events. Nothing is written; building on the shorter history would reuse
    versions that other events held. `accept()` takes the history as it now is: the writer's
    later appends build on the shorter stream."""

    def __init__(
        self,
        stream: str,
        acknowledged: int,
        actual: int,
        accept: Callable[[], None] = lambda: None,
    ):
        LedgerError.__init__(
            self,
            f"stream {stream}: version {acknowledged} was acknowledged to this writer, the stream"
            f" now has {actual} events: history was rewound (a failover lost acknowledged"
            " events); nothing written",
        )
        self.stream = stream
        self.expected = acknowledged
        self.actual = actual
        self.accept = accept


class DurabilityNotConfirmed(LedgerError):
    """Raised when an append was written on the primary but the durability asked for (replicas,
    AOF) was not confirmed in time. Retrying with the same append_id is safe: it deduplicates and
    waits for the confirmation again. `result` is what the primary committed."""

    def __init__(self, message: str, result: object):
        super().__init__(message)
        self.result = result


class Unsupported(BackendRefused):
    """Raised when a caller asks a store for a capability it does not have (consumer groups of a
    store that keeps only the log): asking again will not help."""


class UnexpectedReply(BackendRefused):
    """Raised when a Lua script replies in a shape its parser does not know: the server runs
    other scripts than this package's. Nothing is made of the reply; asking again will not
    help."""
