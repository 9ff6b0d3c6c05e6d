"""What some stores offer besides the contract: capabilities as the contract's are (a store
derives from those it has), which a caller asks a store for (`need(store, ServerAdmin)`, or
`isinstance` where it goes on without), rather than asking which class it is."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar

from ledger_bus.model.records import AppendRecord, RecordedEvent

if TYPE_CHECKING:
    from ledger_bus.store.log import Log


class ArchiveSource(abc.ABC):
    """A store sessions move out of, to an archive (operations.archiving; spec 3.10): Redis."""

    what: ClassVar[str] = "archiving side (sessions move out of it)"

    @abc.abstractmethod
    def archive_state(self, session_id: str) -> tuple[str | None, bool]:
        """(the archive the session is moving or has moved to, or None; whether it has moved)."""

    @abc.abstractmethod
    def begin_archive(self, session_id: str, where: str) -> str:
        """Refuse appends to the session from now on, naming `where`; return the archive that
        is under way (another one, if an archive to elsewhere began first)."""

    @abc.abstractmethod
    def abandon_archive(self, session_id: str, where: str) -> bool:
        """Take appends again, unless the archive has finished."""

    @abc.abstractmethod
    def finish_archive(self, session_id: str, where: str, events: int) -> bool:
        """Remove the session but its tombstone, once its `events` are verified in `where`;
        False when it was finished before."""


class ArchiveTarget(abc.ABC):
    """A store sessions move into, kept whole and verifiable (operations.archiving): SQL."""

    what: ClassVar[str] = "archive side (sessions move into it)"

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """Where the archive is, as a tombstone names it (no password)."""

    @abc.abstractmethod
    def restore_moved(
        self,
        events: Iterable[RecordedEvent],
        seen: Callable[[RecordedEvent, bytes], object] | None = None,
    ) -> int:
        """Write a moved session's events as they were recorded (cursors, versions, ids);
        return how many were new."""

    @abc.abstractmethod
    def restore_append_ids(self, session_id: str, records: Iterable[AppendRecord]) -> int:
        """Keep the append_id records of a moved session; return how many were new."""

    @abc.abstractmethod
    def restore_artifact(self, session_id: str, sha256: str, data: bytes, uses: int) -> None:
        """Keep one artifact of a moved session."""

    @abc.abstractmethod
    def page_digests(self, session_id: str) -> list[tuple[int, str]]:
        """The digests of the session's events a page at a time (restore.PageDigests), to
        verify a move by."""

    @abc.abstractmethod
    def find_append_ids(
        self, session_id: str, keys: list[tuple[str, str]]
    ) -> dict[tuple[str, str], AppendRecord]:
        """The append_id records of these (stream, append_id) keys that the archive holds."""


class ServerAdmin(abc.ABC):
    """A store on a server whose memory an operator watches: Redis."""

    what: ClassVar[str] = "server to watch (memory, indexes)"

    @abc.abstractmethod
    def memory_of(self, session_ids: list[str]) -> dict[str, dict[str, int]]:
        """Bytes each session takes, by kind of key."""

    @abc.abstractmethod
    def memory_info(self) -> tuple[int, int]:
        """(used_memory, maxmemory) of the server, or of a cluster's fullest primary."""

    @abc.abstractmethod
    def check_contact(self) -> None:
        """BackendUnavailable at once when nothing at the server's address answers as the
        server: what a one-shot command checks before its first call, where the store's own
        calls would retry until their timeout."""

    @abc.abstractmethod
    def rebuild_index(self) -> int:
        """Rebuild the cross-session index from the sessions themselves; return how many."""

    @abc.abstractmethod
    def purge_sessions(self, starting_with: str) -> list[str]:
        """Remove the sessions whose ids start with `starting_with`, whole; return their ids."""


class Tiered(abc.ABC):
    """A store with an archive beside it, which serves the sessions moved there (spec 3.10):
    Redis opened with `archive=`."""

    what: ClassVar[str] = "archive it reads through"

    archive: Log  # the store the sessions moved to
