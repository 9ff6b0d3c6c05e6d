"""The lease and open-attempt methods of EventStore, on the primitives a backend provides:
how a live run is told from a crashed one, and what the reconciler works from."""

from __future__ import annotations

import abc
from collections.abc import Collection
from typing import ClassVar, Literal, TypeVar

from ledger_bus.model.ids import check_name
from ledger_bus.model.prepared import Fence
from ledger_bus.model.records import OpenAttempt
from ledger_bus.store.buckets import INDEX_BUCKETS
from ledger_bus.store.steps import Op, operation

T = TypeVar("T")
# What a lease operation does: each backend runs the three as one primitive.
LeaseStep = Literal["acquire", "renew", "release"]


class Attempts(abc.ABC):
    """Leases and open attempts, a capability of a store: what the recorder, the reconciler and
    the adapters' recovery work from."""

    what: ClassVar[str] = "leases and open attempts"

    @abc.abstractmethod
    def run_op(self, op: Op[T]) -> T:
        """Run an operation to its end (the store's own driver: Log.run_op)."""

    # -- leases: how a live run is told from a crashed one ---------------------------------------

    def acquire_lease_op(self, session_id: str, name: str, owner: str, ttl_ms: int) -> Op[int]:
        """Take (or keep) the lease `name` for `owner`: the holding's fencing token (>= 1; a
        new holding draws a greater one than any before it), which appends made under the
        lease name in a Fence; 0 when another owner holds it."""
        check_name(session_id, "session id")
        check_name(name, "lease name")
        return (yield from self._lease("acquire", session_id, name, owner, ttl_ms))

    acquire_lease = operation(acquire_lease_op)

    def hold_op(self, session_id: str, name: str, owner: str, ttl_ms: int) -> Op[Fence | None]:
        """acquire_lease, as the fence appends under the holding are made with; None when
        another owner holds the lease."""
        token = yield from self.acquire_lease_op(session_id, name, owner, ttl_ms)
        return Fence(name, owner, token) if token else None

    hold = operation(hold_op)

    def renew_lease_op(self, session_id: str, name: str, owner: str, ttl_ms: int) -> Op[int]:
        """Extend a lease `owner` holds: its token, unchanged; 0 when it expired or passed to
        another owner (the holding is over: appends under its fence are refused)."""
        return (yield from self._lease("renew", session_id, name, owner, ttl_ms))

    renew_lease = operation(renew_lease_op)

    def release_lease_op(self, session_id: str, name: str, owner: str) -> Op[bool]:
        """Drop a lease `owner` holds; False when it was not theirs (any more)."""
        return bool((yield from self._lease("release", session_id, name, owner, 0)))

    release_lease = operation(release_lease_op)

    def lease_alive_op(self, session_id: str, name: str) -> Op[bool]:
        """Whether anyone holds the lease `name` now."""
        return (yield from self._lease_holder(session_id, name)) is not None

    lease_alive = operation(lease_alive_op)

    # -- open attempts: what the reconciler works from -------------------------------------------

    def open_attempts_op(self, session_id: str) -> Op[list[OpenAttempt]]:
        """The session's requested calls without a result, oldest first; O(open attempts)."""
        check_name(session_id, "session id")
        return (yield from self.open_attempts_of_op([session_id]))[session_id]

    open_attempts = operation(open_attempts_op)

    def open_attempts_of_op(self, session_ids: list[str]) -> Op[dict[str, list[OpenAttempt]]]:
        """open_attempts of many sessions at once (one round trip on Redis)."""
        found = yield from self._open_attempts(session_ids)
        return {s: sorted(found.get(s, ()), key=lambda a: a.cursor) for s in session_ids}

    open_attempts_of = operation(open_attempts_of_op)

    def safe_to_replay_op(self, session_id: str, run_id: str | None, tool: str) -> Op[bool]:
        """Whether the run declared the tool safe to replay (unsafe is the default)."""
        if run_id is None:
            return False
        return (yield from self._safe_to_replay(session_id, run_id, tool))

    safe_to_replay = operation(safe_to_replay_op)

    def sessions_with_open_attempts_op(
        self, buckets: Collection[int] | None = None
    ) -> Op[list[tuple[str, int]]]:
        """Sessions that may have open attempts, with when one last opened (ms); from an index,
        never a scan of the keyspace. `buckets` picks some of INDEX_BUCKETS; None, all."""
        chosen = range(INDEX_BUCKETS) if buckets is None else buckets
        return (yield from self._open_sessions(chosen))

    sessions_with_open_attempts = operation(sessions_with_open_attempts_op)

    def forget_idle_session_op(self, session_id: str, opened_before_ms: int) -> Op[bool]:
        """Drop a session from the open-attempts index if it has none open and opened none since
        `opened_before_ms`; True when dropped."""
        if (yield from self._open_attempts([session_id])).get(session_id):
            return False
        return (yield from self._forget_open_session(session_id, opened_before_ms))

    forget_idle_session = operation(forget_idle_session_op)

    # -- what a backend provides ----------------------------------------------------------------

    @abc.abstractmethod
    def _lease(
        self, op: LeaseStep, session_id: str, name: str, owner: str, ttl_ms: int
    ) -> Op[int]: ...

    @abc.abstractmethod
    def _lease_holder(self, session_id: str, name: str) -> Op[str | None]: ...

    @abc.abstractmethod
    def _open_attempts(self, session_ids: list[str]) -> Op[dict[str, list[OpenAttempt]]]: ...

    @abc.abstractmethod
    def _safe_to_replay(self, session_id: str, run_id: str, tool: str) -> Op[bool]: ...

    @abc.abstractmethod
    def _open_sessions(self, buckets: Collection[int]) -> Op[list[tuple[str, int]]]: ...

    @abc.abstractmethod
    def _forget_open_session(self, session_id: str, opened_before_ms: int) -> Op[bool]: ...
