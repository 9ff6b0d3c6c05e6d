"""The log, the one capability every store has: append, read, scan, tail, wait, versions, the
sessions index, and the artifacts its appends keep (spec 3.11), which its reads put back.

A store declares its other capabilities by deriving from them too (store/base.py: Attempts,
Groups, Bounds, Deletes, Restores); a caller that needs one asks for it with `need`, and a store
that lacks it is refused in one line (Unsupported)."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import ClassVar, Final, Self, TypeVar

from ledger_bus.model.artifacts import ArtifactRef, check_sha, refs_in, resolved
from ledger_bus.model.durability import LOCAL, Durability, parse_durability
from ledger_bus.model.errors import InvalidInput, NotFound
from ledger_bus.model.ids import (
    ExpectedVersion,
    StreamId,
    check_append_id,
    check_expected_version,
    check_name,
    parse_cursor,
)
from ledger_bus.model.prepared import Fence, Limits, PreparedAppend, check_fence
from ledger_bus.model.records import AppendResult, Delivery, RecordedEvent, SessionInfo
from ledger_bus.store.steps import Op, immediate, operation, run

PAGE: Final = 1000
REMEMBERED: Final = 10_000  # entries a per-store table keeps before it starts over
K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


def _lookup(found: dict[str, bytes]) -> Callable[[ArtifactRef], bytes]:
    return lambda ref: found[ref.sha256]


def check_limit(limit: object) -> int | None:
    """A page limit as given: an int >= 0, or None for no limit."""
    if limit is None:
        return None
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        return limit
    raise InvalidInput(f"limit must be an int >= 0 or None, got {limit!r}")


class Log(abc.ABC):
    """The log: an append-only, optimistic-concurrency event store with a per-session commit
    order, and what every store has. The public methods check their arguments and prepare appends
    once, here; a backend supplies the few atomic primitives below them (ten), and may declare the
    other capabilities (store/base.py) beside this one.
    """

    what: ClassVar[str] = "log"

    tier: ClassVar[str] = "custom"  # what kind of store, as logs and metrics name it

    def __init__(self, limits: Limits | None = None, durability: Durability = LOCAL):
        self.limits = limits or Limits()
        self.durability = durability  # what an append waits for unless it says otherwise
        # Whether reads put artifacts back into their events (spec 3.11), unless a read says.
        self.resolve_artifacts = True

    # -- running operations ---------------------------------------------------------------------
    #
    # Each method of the contract is an operation (store/steps.py), `<name>_op`, with the checks
    # and rules once; the method of the same name (`steps.operation`) runs it with this store's
    # blocking client, and AsyncStore's (`async_store.forward`) on the event loop.

    def run_op(self, op: Op[T]) -> T:
        """Run an operation to its end (a backend with a client of its own runs it there)."""
        return run(op, None)

    # -- the log ---------------------------------------------------------------------------------

    def append_op(  # noqa: PLR0913  (the contract's append: four arguments, and two keywords)
        self,
        stream: StreamId,
        expected_version: ExpectedVersion,
        append_id: str,
        events: Sequence[object],
        *,
        durability: str | Durability | None = None,
        fence: Fence | None = None,
    ) -> Op[AppendResult]:
        """Append events to a stream atomically.

        Args:
            stream: the stream to append to.
            expected_version: the stream's version as the caller last saw it, or ANY.
            append_id: unique within the stream; a retry with the same id and content returns the
                original result with `deduplicated=True`.
            events: Event models, or dicts that validate into them.
            durability: what this append waits for ("local", "replicas:N", "aof",
                "aof+replicas:N"), instead of the store's own durability.
            fence: the lease the append is made under (Attempts.acquire_lease's token): once
                that holding is over, the append is refused with LeaseLost and writes nothing.

        Returns:
            The versions and cursor the events took, and what was confirmed.

        Raises:
            InvalidEvent, VersionConflict (HistoryRewound), IdempotencyConflict, LeaseLost,
            DurabilityNotConfirmed, BackendUnavailable, BackendRefused.
        """
        expected, prepared, wanted = self._prepare(
            stream, expected_version, append_id, events, durability, fence
        )
        return (yield from self._append(stream, expected, append_id, prepared, wanted))

    append = operation(append_op)

    def _prepare(  # noqa: PLR0913  (append's arguments, each checked here)
        self,
        stream: StreamId,
        expected_version: ExpectedVersion,
        append_id: str,
        events: Sequence[object],
        durability: str | Durability | None,
        fence: Fence | None = None,
    ) -> tuple[int | None, PreparedAppend, Durability]:
        """An append's arguments checked, its events prepared (with the lease it is made under),
        and the durability it waits for."""
        if not isinstance(stream, StreamId):
            raise InvalidInput(f"stream must be a StreamId, got {stream!r}")
        expected = check_expected_version(expected_version)
        check_append_id(append_id)
        wanted = self.durability
        if durability is not None:
            wanted = (
                durability
                if isinstance(durability, Durability)
                else parse_durability(durability, self.durability.timeout_ms)
            )
        # Imported here: the validators it brings (pydantic) cost a program that only reads
        # (`ledger-bus tail`) a fifth of its start.
        from ledger_bus.model.batch import prepare_append  # noqa: PLC0415  (pydantic, loaded by the first append: a reader's start pays nothing for it)

        prepared = prepare_append(stream.session_id, stream.name, append_id, events, self.limits)
        if fence is not None:
            prepared = replace(prepared, fence=check_fence(fence))
        return expected, prepared, wanted

    def read_stream_op(
        self,
        stream: StreamId,
        after_version: int = 0,
        limit: int | None = None,
        *,
        resolve_artifacts: bool | None = None,
    ) -> Op[list[RecordedEvent]]:
        """Return a stream's events with versions above `after_version`, ascending; fields kept
        as artifacts are put back, or left as ArtifactRef values with resolve_artifacts=False."""
        if not isinstance(stream, StreamId):
            raise InvalidInput(f"stream must be a StreamId, got {stream!r}")
        after = check_expected_version(after_version)
        if after is None:
            raise InvalidInput("after_version must be an int >= 0")
        wanted = check_limit(limit)
        out: list[RecordedEvent] = []
        while wanted is None or len(out) < wanted:
            count = PAGE if wanted is None else min(PAGE, wanted - len(out))
            page = yield from self._read_stream(stream, after, count)
            out.extend(page)
            if len(page) < count:
                break
            after = page[-1].version
        return (yield from self._resolved(stream.session_id, out, resolve_artifacts))

    read_stream = operation(read_stream_op)

    def scan_session_op(
        self,
        session_id: str,
        after_cursor: str | None = None,
        limit: int | None = None,
        *,
        resolve_artifacts: bool | None = None,
    ) -> Op[list[RecordedEvent]]:
        """Return a session's events after `after_cursor`, in commit order."""
        wanted = check_limit(limit)
        out: list[RecordedEvent] = []
        cursor = after_cursor
        while wanted is None or len(out) < wanted:
            page = yield from self.scan_page_op(session_id, cursor, PAGE, resolve_artifacts)
            out.extend(page if wanted is None else page[: wanted - len(out)])
            if len(page) < PAGE:
                break
            cursor = page[-1].cursor
        return out

    scan_session = operation(scan_session_op)

    def iter_session(
        self,
        session_id: str,
        after_cursor: str | None = None,
        page: int = PAGE,
        *,
        resolve_artifacts: bool | None = None,
    ) -> Iterator[RecordedEvent]:
        """Yield a session's events after `after_cursor` in commit order, a page at a time."""
        cursor = after_cursor
        while True:
            batch = self.run_op(self.scan_page_op(session_id, cursor, page, resolve_artifacts))
            yield from batch
            if len(batch) < page:
                return
            cursor = batch[-1].cursor

    def scan_page_op(
        self, session_id: str, after_cursor: str | None, page: int, resolve: bool | None
    ) -> Op[list[RecordedEvent]]:
        """One page of a session's events after `after_cursor`: fewer than `page`, the last."""
        check_name(session_id, "session id")
        if after_cursor is not None:
            parse_cursor(after_cursor)
        batch = yield from self._scan(session_id, after_cursor, page)
        return (yield from self._resolved(session_id, batch, resolve))

    def tail_op(
        self,
        session_id: str,
        n: int = 20,
        before: str | None = None,
        *,
        resolve_artifacts: bool | None = None,
    ) -> Op[list[RecordedEvent]]:
        """Return the session's last `n` events (before the cursor `before`, when given), oldest
        first, at a cost of O(n) whatever the session's length."""
        check_name(session_id, "session id")
        if check_limit(n) is None:
            raise InvalidInput("n must be an int >= 0")
        if before is not None:
            parse_cursor(before)
        if not n:
            return []
        found = yield from self._tail(session_id, n, before)
        return (yield from self._resolved(session_id, found, resolve_artifacts))

    tail = operation(tail_op)

    def wait_session_op(
        self, session_id: str, after_cursor: str | None, timeout_ms: int, limit: int = PAGE
    ) -> Op[list[RecordedEvent]]:
        """Return events after `after_cursor`, waiting up to `timeout_ms` for the first one.

        With `after_cursor=None` only events committed after the call are returned.
        """
        check_name(session_id, "session id")
        if after_cursor is not None:
            parse_cursor(after_cursor)
        found = yield from self._wait(session_id, after_cursor, max(0, timeout_ms), limit)
        return (yield from self._resolved(session_id, found, None))

    wait_session = operation(wait_session_op)

    # -- artifacts (spec 3.11) ------------------------------------------------------------------

    def artifact_op(self, session_id: str, sha256: str) -> Op[bytes]:
        """The bytes of one of the session's artifacts, by its sha256. NotFound: none such."""
        check_name(session_id, "session id")
        data = yield from self._artifact(session_id, check_sha(sha256))
        if data is None:
            raise NotFound(f"no artifact sha256:{sha256} in session {session_id!r}")
        return data

    artifact = operation(artifact_op)

    def resolve_op(self, event: RecordedEvent) -> Op[RecordedEvent]:
        """The event with the values of its artifacts in place of their references."""
        return (yield from self._resolved(event.session_id, [event], True))[0]

    resolve = operation(resolve_op)

    def _resolved(
        self, session_id: str, events: list[RecordedEvent], resolve: bool | None
    ) -> Op[list[RecordedEvent]]:
        """`events`, their references replaced by the artifacts' values when asked to."""
        if not (self.resolve_artifacts if resolve is None else resolve):
            return events
        fetched: dict[str, bytes] = {}  # an artifact many events reference is read once
        for event in events:
            for ref in refs_in(event.fields):
                if ref.sha256 not in fetched:
                    fetched[ref.sha256] = yield from self.artifact_op(session_id, ref.sha256)
        if not fetched:
            return events
        return [
            RecordedEvent(e.stream, e.version, e.cursor, resolved(e.fields, _lookup(fetched)))
            if refs_in(e.fields)
            else e
            for e in events
        ]

    def _resolved_deliveries(self, session_id: str, found: list[Delivery]) -> Op[list[Delivery]]:
        events = yield from self._resolved(session_id, [d.event for d in found], None)
        return [
            d if d.event is e else Delivery(e, d.entry_id, d.deliveries)
            for d, e in zip(found, events, strict=True)
        ]

    def stream_version_op(self, stream: StreamId) -> Op[int]:
        """Return the number of events in a stream, 0 when it has none."""
        if not isinstance(stream, StreamId):
            raise InvalidInput(f"stream must be a StreamId, got {stream!r}")
        return (yield from self._stream_version(stream))

    stream_version = operation(stream_version_op)

    def session_exists_op(self, session_id: str) -> Op[bool]:
        """Whether any event was ever appended to the session."""
        check_name(session_id, "session id")
        return (yield from self._session_exists(session_id))

    session_exists = operation(session_exists_op)

    def session_info_op(self, session_id: str, append_ids: bool = True) -> Op[SessionInfo]:
        """Return what a session holds: its streams and versions, counts, first and last cursor.
        `append_ids=False` leaves the append ids uncounted (None): counting them costs a read
        per stream, which a caller that looks often (the web view) need not pay."""
        check_name(session_id, "session id")
        return (yield from self._session_info(session_id, append_ids))

    session_info = operation(session_info_op)

    def session_count_op(self) -> Op[int]:
        """How many sessions hold events (those `sessions()` lists)."""
        return (yield from self._session_count())

    session_count = operation(session_count_op)

    def _session_count(self) -> Op[int]:
        """Counted from `_sessions`; a backend that counts them itself overrides this."""
        return len((yield from self._sessions(None)))

    def sessions_op(self, limit: int | None = None) -> Op[list[tuple[str, int]]]:
        """Return (session id, last activity in ms) pairs, most recently active first."""
        return (yield from self._sessions(check_limit(limit)))

    sessions = operation(sessions_op)

    @staticmethod
    def _remember(table: dict[K, V], key: K, value: V) -> V:
        """Keep `value` in a per-store table that is emptied once it holds REMEMBERED entries:
        what a store keeps of the sessions and streams it met must not grow without end."""
        if len(table) >= REMEMBERED:
            table.clear()
        table[key] = value
        return value

    def now_ms_op(self) -> Op[int]:
        """The backend's clock, the one commit cursors are taken from."""
        return (yield from self._now_ms())

    now_ms = operation(now_ms_op)

    @immediate
    def _now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def close(self) -> None:  # noqa: B027  (a store with nothing to release keeps this)
        """Release connections; the store is not used afterwards."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what a backend provides ----------------------------------------------------------------

    @abc.abstractmethod
    def _append(
        self,
        stream: StreamId,
        expected: int | None,
        append_id: str,
        prepared: PreparedAppend,
        durability: Durability,
    ) -> Op[AppendResult]: ...

    @abc.abstractmethod
    def _read_stream(self, stream: StreamId, after: int, count: int) -> Op[list[RecordedEvent]]: ...

    @abc.abstractmethod
    def _scan(self, session_id: str, after: str | None, count: int) -> Op[list[RecordedEvent]]: ...

    @abc.abstractmethod
    def _tail(self, session_id: str, n: int, before: str | None) -> Op[list[RecordedEvent]]: ...

    @abc.abstractmethod
    def _wait(
        self, session_id: str, after: str | None, timeout_ms: int, count: int
    ) -> Op[list[RecordedEvent]]: ...

    @abc.abstractmethod
    def _stream_version(self, stream: StreamId) -> Op[int]: ...

    @abc.abstractmethod
    def _session_exists(self, session_id: str) -> Op[bool]: ...

    @abc.abstractmethod
    def _artifact(self, session_id: str, sha256: str) -> Op[bytes | None]: ...

    @abc.abstractmethod
    def _session_info(self, session_id: str, append_ids: bool) -> Op[SessionInfo]: ...

    @abc.abstractmethod
    def _sessions(self, limit: int | None) -> Op[list[tuple[str, int]]]: ...
