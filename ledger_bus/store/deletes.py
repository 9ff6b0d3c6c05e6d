"""Deletion (spec 3.9), a capability of a store: a session or one of its streams removed, its
append_ids kept so that a late retry of an append made before never writes its events again."""

from __future__ import annotations

import abc
from typing import ClassVar, TypeVar

from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.ids import StreamId, check_name
from ledger_bus.model.records import Deletion
from ledger_bus.store.steps import Op, operation

T = TypeVar("T")


class Deletes(abc.ABC):
    """Sessions and streams removed."""

    what: ClassVar[str] = "deletion"

    @abc.abstractmethod
    def run_op(self, op: Op[T]) -> T:
        """Run an operation to its end (the store's own driver: Log.run_op)."""

    def delete_session_op(self, session_id: str) -> Op[Deletion]:
        """Remove every event of a session, with its streams, open attempts, consumer groups and
        dead letters (spec 3.9).

        The append ids stay recorded, so a late retry of an append made before returns its
        original result (deduplicated) and never writes its events again; the session id can be
        written again, from version 1. Leases are left to expire.
        """
        check_name(session_id, "session id")
        return (yield from self._delete(session_id, None))

    delete_session = operation(delete_session_op)

    def delete_stream_op(self, stream: StreamId) -> Op[Deletion]:
        """Remove one stream's events from its session (spec 3.9), as delete_session does for a
        whole session; the other streams keep theirs, cursors included."""
        if not isinstance(stream, StreamId):
            raise InvalidInput(f"stream must be a StreamId, got {stream!r}")
        return (yield from self._delete(stream.session_id, stream.name))

    delete_stream = operation(delete_stream_op)

    # -- what a backend provides ----------------------------------------------------------------

    @abc.abstractmethod
    def _delete(self, session_id: str, stream: str | None) -> Op[Deletion]: ...
