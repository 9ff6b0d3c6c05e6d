"""The in-process store: the reference semantics every other backend is tested against."""

from __future__ import annotations

import bisect
import dataclasses
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field

from ledger_bus.model.artifacts import unpack, uses_of
from ledger_bus.model.attempts import AttemptNote, Closes, DeclaresSafe, Flags, Opens
from ledger_bus.model.durability import Durability
from ledger_bus.model.errors import IdempotencyConflict, InvalidInput, NotFound, VersionConflict
from ledger_bus.model.ids import CURSOR_ZERO, StreamId, cursor_ms, cursors_after, parse_cursor
from ledger_bus.model.prepared import Limits, PreparedAppend, lease_lost
from ledger_bus.model.records import (
    AppendRecord,
    AppendResult,
    Bound,
    Deletion,
    Delivery,
    GroupStats,
    OpenAttempt,
    PendingEntry,
    RecordedEvent,
    SessionInfo,
    StreamInfo,
)
from ledger_bus.store.attempts import LeaseStep
from ledger_bus.store.base import EventStore
from ledger_bus.store.buckets import bucket_of
from ledger_bus.store.groups import REPLAY_CONSUMER, REPLAY_IDLE_MS, dead_letter_fields
from ledger_bus.store.restore import RestoreBatch
from ledger_bus.store.steps import immediate


@dataclass
class _Pending:
    consumer: str
    deliveries: int
    since: float  # monotonic time of the last delivery (or keep)


@dataclass
class _Group:
    """A consumer group as Redis keeps one: a last-delivered position and a pending list."""

    last: str  # cursor of the last event delivered, CURSOR_ZERO before any
    pending: dict[str, _Pending] = field(default_factory=dict)  # cursor -> who holds it
    seen: dict[str, float] = field(default_factory=dict)  # consumer -> last interaction
    dead: list[dict[str, str]] = field(default_factory=list)


@dataclass
class _Session:
    cursors: list[str] = field(default_factory=list)  # the log, in commit order
    entries: list[tuple[str, int, bytes]] = field(
        default_factory=list
    )  # (stream, version, payload)
    streams: dict[str, list[int]] = field(default_factory=dict)  # stream -> log positions
    idempotency: dict[tuple[str, str], tuple[str, int, int, str]] = field(default_factory=dict)
    leases: dict[str, tuple[str, float]] = field(default_factory=dict)  # name -> (owner, expiry)
    fences: dict[str, int] = field(default_factory=dict)  # lease name -> its holding's token
    open: dict[str, OpenAttempt] = field(default_factory=dict)  # by attempt id
    safe: set[tuple[str, str]] = field(default_factory=set)  # (run, tool) declared safe
    groups: dict[str, _Group] = field(default_factory=dict)
    generation: int = 0  # deletions so far (spec 3.9)
    floor: str = CURSOR_ZERO  # new cursors sort after this one, though the log be emptied
    versions: dict[str, int] = field(default_factory=dict)  # stream -> version
    bounds: dict[str, Bound] = field(default_factory=dict)
    artifacts: dict[str, bytes] = field(default_factory=dict)  # sha256 -> bytes
    uses: dict[str, int] = field(default_factory=dict)  # sha256 -> references in the log
    # The newest cursor when the session (or a stream) was last deleted: append_id records at
    # or below it are of an earlier generation, which a bound never trims.
    deleted_at: str = CURSOR_ZERO

    def trim(self, stream: str, bound: Bound, now: int) -> None:
        """What a bounded stream does after an append, by the rules SqlStore._trim follows:
        the appends wholly older than the newest `keep` events go; the append_ids of appends
        trimmed are forgotten once the dedup window has passed."""
        records = [
            (append_id, last, cursor)
            for (name, append_id), (_, _, last, cursor) in self.idempotency.items()
            if name == stream and cursor > self.deleted_at
        ]
        upto = self.versions[stream] - bound.keep
        ends = [last for _, last, _ in records if last <= upto]
        if ends:
            dropped = {p for p in self.streams[stream] if self.entries[p][1] <= max(ends)}
            self.drop_uses([self.entries[p][2] for p in sorted(dropped)])
            self.keep_only([p for p in range(len(self.cursors)) if p not in dropped])
        oldest = min(self.entries[p][1] for p in self.streams[stream])
        for append_id, last, cursor in records:
            if last < oldest and cursor_ms(cursor) + bound.dedup_window_ms <= now:
                del self.idempotency[(stream, append_id)]

    def write(
        self, stream: StreamId, prepared: PreparedAppend, first: int, cursors: list[str]
    ) -> None:
        """Write prepared events at versions `first`.. and the given cursors, with what follows
        from them (open attempts, artifacts): an append's, or a restore's."""
        positions = self.streams.setdefault(stream.name, [])
        version = first - 1
        for payload, note, cursor in zip(prepared.payloads, prepared.notes, cursors, strict=True):
            version += 1
            positions.append(len(self.entries))
            self.cursors.append(cursor)
            self.entries.append((stream.name, version, payload))
            _note(self, stream.session_id, note, stream.name, cursor)
        self.versions[stream.name] = version
        for artifact in prepared.artifacts:
            self.artifacts.setdefault(artifact.ref.sha256, artifact.data)
        for sha, count in prepared.uses:
            self.uses[sha] = self.uses.get(sha, 0) + count

    def drop_uses(self, payloads: list[bytes]) -> None:
        """Forget the references the events of `payloads` held; an artifact none holds goes."""
        for sha, count in uses_of(unpack(p) for p in payloads).items():
            left = self.uses.get(sha, 0) - count
            if left > 0:
                self.uses[sha] = left
            else:
                self.uses.pop(sha, None)
                self.artifacts.pop(sha, None)

    def newest(self) -> str:
        return self.cursors[-1] if self.cursors else self.floor

    def keep_only(self, positions: list[int]) -> None:
        """Keep the log entries at `positions` (ascending), and what refers to them."""
        newest = self.newest()
        self.cursors = [self.cursors[p] for p in positions]
        self.floor = max(self.floor, newest)
        self.entries = [self.entries[p] for p in positions]
        self.streams = {}
        for position, (stream, _, _) in enumerate(self.entries):
            self.streams.setdefault(stream, []).append(position)
        kept = set(self.cursors)
        for group in self.groups.values():
            group.pending = {c: held for c, held in group.pending.items() if c in kept}


def _note(state: _Session, session_id: str, note: AttemptNote | None, stream: str, at: str) -> None:
    """Keep open attempts by the ledger's rules: a call opens its attempt, a result closes it, a
    flag marks only the attempt whose call it names, once."""
    match note:
        case Opens(attempt_id, run_id, tool):
            state.open[attempt_id] = OpenAttempt(
                session_id, attempt_id, run_id or None, tool, stream, at, None
            )
        case Closes(attempt_id):
            state.open.pop(attempt_id, None)
        case Flags(attempt_id, call):
            found = state.open.get(attempt_id)
            if (
                found is not None
                and found.flagged_cursor is None
                and (call is None or parse_cursor(call) == parse_cursor(found.cursor))
            ):
                state.open[attempt_id] = dataclasses.replace(found, flagged_cursor=at)
        case DeclaresSafe(run_id, tool):
            state.safe.add((run_id, tool))


class MemoryStore(EventStore):
    """Keeps everything in this process; safe to share between threads."""

    tier = "memory"

    def __init__(self, limits: Limits | None = None):
        super().__init__(limits)
        self._sessions_by_id: dict[str, _Session] = {}
        self._open_index: dict[str, int] = {}
        self._changed = threading.Condition()

    def _session(self, session_id: str) -> _Session:
        return self._sessions_by_id.setdefault(session_id, _Session())

    def _record(self, session_id: str, state: _Session, position: int) -> RecordedEvent:
        stream, version, payload = state.entries[position]
        return RecordedEvent(
            stream=StreamId(session_id, stream),
            version=version,
            cursor=state.cursors[position],
            fields=unpack(payload),
        )

    @immediate
    def _append(
        self,
        stream: StreamId,
        expected: int | None,
        append_id: str,
        prepared: PreparedAppend,
        durability: Durability,
    ) -> AppendResult:
        if not durability.local:
            raise InvalidInput(
                f"memory:// keeps nothing beyond this process: durability {durability}"
            )
        with self._changed:
            # A session is made only by an append that writes: one refused leaves no trace.
            state = self._sessions_by_id.get(stream.session_id) or _Session()
            fence = prepared.fence
            if fence is not None:  # first of all (append.lua)
                token = state.fences.get(fence.lease, 0)
                holder = self._holder(stream.session_id, fence.lease)
                if token != fence.token or holder != fence.owner:
                    raise lease_lost(fence, token)
            prior = state.idempotency.get((stream.name, append_id))
            if prior is not None:
                digest, first, last, cursor = prior
                if digest != prepared.digest:
                    raise IdempotencyConflict(str(stream), append_id)
                return AppendResult(stream, first, last, cursor, deduplicated=True)
            version = state.versions.get(stream.name, 0)
            if expected is not None and expected != version:
                raise VersionConflict(str(stream), expected, version)
            now = time.time_ns() // 1_000_000
            self._sessions_by_id.setdefault(stream.session_id, state)
            if prepared.opens_attempts:
                self._open_index[stream.session_id] = now
            cursors = cursors_after(state.newest(), now, len(prepared.payloads))
            first = version + 1
            state.write(stream, prepared, first, cursors)
            version = state.versions[stream.name]
            result = AppendResult(stream, first, version, state.cursors[-1])
            state.idempotency[(stream.name, append_id)] = (
                prepared.digest,
                first,
                version,
                result.cursor,
            )
            bound = state.bounds.get(stream.name)
            if bound is not None and bound.applies_to(append_id):
                state.trim(stream.name, bound, now)
            self._changed.notify_all()
            return result

    @immediate
    def _restore_batch(self, batch: RestoreBatch) -> int:
        stream = batch.stream
        with self._changed:
            state = self._sessions_by_id.get(stream.session_id) or _Session()
            newest = state.newest()
            cursors = batch.cursors
            if cursors[-1] <= newest:
                return 0  # written by an earlier run of the same restore
            if cursors[0] <= newest:
                raise InvalidInput(
                    f"{batch.events[0]!r}: events to restore must come in commit order"
                )
            version = state.versions.get(stream.name)
            if version is not None and version != batch.first_version - 1:
                raise VersionConflict(str(stream), batch.first_version - 1, version)
            self._sessions_by_id.setdefault(stream.session_id, state)
            if batch.prepared.opens_attempts:
                self._open_index[stream.session_id] = time.time_ns() // 1_000_000
            state.write(stream, batch.prepared, batch.first_version, cursors)
            self._changed.notify_all()
            return len(cursors)

    @immediate
    def _read_stream(self, stream: StreamId, after: int, count: int) -> list[RecordedEvent]:
        with self._changed:
            state = self._sessions_by_id.get(stream.session_id)
            if state is None:
                return []
            positions = state.streams.get(stream.name, [])
            start = bisect.bisect_right(positions, after, key=lambda p: state.entries[p][1])
            positions = positions[start : start + count]
            return [self._record(stream.session_id, state, p) for p in positions]

    @immediate
    def _scan(self, session_id: str, after: str | None, count: int) -> list[RecordedEvent]:
        return self._scan_now(session_id, after, count)

    def _scan_now(self, session_id: str, after: str | None, count: int) -> list[RecordedEvent]:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            if state is None:
                return []
            start = 0 if after is None else bisect.bisect_right(state.cursors, after)
            stop = min(len(state.cursors), start + count)
            return [self._record(session_id, state, p) for p in range(start, stop)]

    @immediate
    def _tail(self, session_id: str, n: int, before: str | None) -> list[RecordedEvent]:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            if state is None:
                return []
            end = len(state.cursors)
            if before is not None:
                end = bisect.bisect_left(state.cursors, before)
            return [self._record(session_id, state, p) for p in range(max(0, end - n), end)]

    @immediate
    def _wait(
        self, session_id: str, after: str | None, timeout_ms: int, count: int
    ) -> list[RecordedEvent]:
        deadline = time.monotonic() + timeout_ms / 1000
        with self._changed:
            if after is None:
                cursors = self._session(session_id).cursors
                after = cursors[-1] if cursors else CURSOR_ZERO
            while True:
                found = self._scan_now(session_id, after, count)
                remaining = deadline - time.monotonic()
                if found or remaining <= 0:
                    return found
                self._changed.wait(remaining)

    @immediate
    def _stream_version(self, stream: StreamId) -> int:
        with self._changed:
            state = self._sessions_by_id.get(stream.session_id)
            return state.versions.get(stream.name, 0) if state else 0

    @immediate
    def _session_exists(self, session_id: str) -> bool:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            return state is not None and bool(state.cursors)

    @immediate
    def _delete(self, session_id: str, stream: str | None) -> Deletion:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            if state is None:
                return Deletion(session_id, stream, 0, 0)
            gone = len(state.cursors if stream is None else state.streams.get(stream, ()))
            if not gone:
                return Deletion(session_id, stream, 0, state.generation)
            state.generation += 1
            if stream is None:
                # What idempotency needs stays (spec 3.9); everything else goes.
                # Leases and their tokens too, as Redis keeps them (lease.lua): a holder goes on
                # holding, and tokens only grow.
                self._sessions_by_id[session_id] = _Session(
                    idempotency=state.idempotency,
                    leases=state.leases,
                    fences=state.fences,
                    generation=state.generation,
                    floor=state.newest(),
                    deleted_at=state.newest(),
                )
                self._open_index.pop(session_id, None)
            else:
                state.deleted_at = state.newest()
                for table in (state.versions, state.bounds):
                    table.pop(stream, None)
                dropped = set(state.streams[stream])
                state.drop_uses([state.entries[p][2] for p in sorted(dropped)])
                state.keep_only([p for p in range(len(state.cursors)) if p not in dropped])
                state.open = {a: o for a, o in state.open.items() if o.stream != stream}
            self._changed.notify_all()
            return Deletion(session_id, stream, gone, state.generation)

    @immediate
    def _set_bound(self, stream: StreamId, bound: Bound | None) -> None:
        with self._changed:
            bounds = self._session(stream.session_id).bounds
            if bound is None:
                bounds.pop(stream.name, None)
            else:
                bounds[stream.name] = bound

    @immediate
    def _bound(self, stream: StreamId) -> Bound | None:
        with self._changed:
            state = self._sessions_by_id.get(stream.session_id)
            return None if state is None else state.bounds.get(stream.name)

    @immediate
    def _artifact(self, session_id: str, sha256: str) -> bytes | None:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            return None if state is None else state.artifacts.get(sha256)

    @immediate
    def _artifact_uses(self, session_id: str) -> dict[str, int]:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            return {} if state is None else dict(state.uses)

    @immediate
    def _append_ids(self, session_id: str) -> list[AppendRecord]:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            found = list(state.idempotency.items()) if state else []
        return [
            AppendRecord(stream, append_id, digest, first, last, cursor)
            for (stream, append_id), (digest, first, last, cursor) in found
        ]

    @immediate
    def _session_info(self, session_id: str, append_ids: bool) -> SessionInfo:
        with self._changed:
            state = self._sessions_by_id.get(session_id) or _Session()
            return SessionInfo(
                session_id=session_id,
                events=len(state.cursors),
                streams=[StreamInfo(n, state.versions[n]) for n in sorted(state.streams)],
                first_cursor=state.cursors[0] if state.cursors else None,
                last_cursor=state.cursors[-1] if state.cursors else None,
                append_ids=len(state.idempotency) if append_ids else None,
            )

    @immediate
    def _sessions(self, limit: int | None) -> list[tuple[str, int]]:
        with self._changed:
            found = [
                (sid, cursor_ms(s.cursors[-1]))
                for sid, s in self._sessions_by_id.items()
                if s.cursors
            ]
        found.sort(key=lambda item: (-item[1], item[0]))
        return found if limit is None else found[:limit]

    @immediate
    def _lease_holder(self, session_id: str, name: str) -> str | None:
        return self._holder(session_id, name)

    def _holder(self, session_id: str, name: str) -> str | None:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            held = state.leases.get(name) if state else None
            if held is None or held[1] <= time.monotonic():
                return None
            return held[0]

    @immediate
    def _lease(self, op: LeaseStep, session_id: str, name: str, owner: str, ttl_ms: int) -> int:
        with self._changed:
            state = self._session(session_id)
            holder = self._holder(session_id, name)
            if op == "acquire" and holder not in (None, owner):
                return 0
            if op != "acquire" and holder != owner:
                return 0
            if op == "release":
                del state.leases[name]
                return 1
            if holder is None:  # a new holding (lease.lua)
                state.fences[name] = state.fences.get(name, 0) + 1
            state.leases[name] = (owner, time.monotonic() + ttl_ms / 1000)
            return state.fences[name]

    @immediate
    def _open_attempts(self, session_ids: list[str]) -> dict[str, list[OpenAttempt]]:
        with self._changed:
            found = {}
            for session_id in session_ids:
                state = self._sessions_by_id.get(session_id)
                found[session_id] = list(state.open.values()) if state else []
            return found

    @immediate
    def _safe_to_replay(self, session_id: str, run_id: str, tool: str) -> bool:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            return state is not None and (run_id, tool) in state.safe

    @immediate
    def _open_sessions(self, buckets: Collection[int]) -> list[tuple[str, int]]:
        with self._changed:
            return sorted((s, ms) for s, ms in self._open_index.items() if bucket_of(s) in buckets)

    @immediate
    def _forget_open_session(self, session_id: str, opened_before_ms: int) -> bool:
        with self._changed:
            if self._open_index.get(session_id, opened_before_ms) < opened_before_ms:
                del self._open_index[session_id]
                return True
            return False

    # -- consumer groups: the semantics of Redis consumer groups on the session log -------------

    def _group(self, session_id: str, group: str) -> tuple[_Session, _Group]:
        state = self._sessions_by_id.get(session_id)
        found = state.groups.get(group) if state else None
        if state is None or found is None:
            raise NotFound(f"no consumer group {group!r} on session {session_id!r}")
        return state, found

    def _deliver(
        self, session_id: str, state: _Session, found: _Group, consumer: str, cursors: list[str]
    ) -> list[Delivery]:
        """Hand `cursors` to `consumer`: each becomes (or stays) pending with it, counted."""
        now = time.monotonic()
        if cursors or consumer in found.seen:
            found.seen[consumer] = now  # like Redis: a read that finds nothing creates nobody
        out = []
        for cursor in cursors:
            held = found.pending.get(cursor)
            if held is None:
                held = found.pending[cursor] = _Pending(consumer, 0, now)
            held.consumer, held.since = consumer, now
            held.deliveries += 1
            position = bisect.bisect_left(state.cursors, cursor)
            out.append(Delivery(self._record(session_id, state, position), cursor, held.deliveries))
        return out

    @immediate
    def _group_create(self, session_id: str, group: str, after: str | None) -> bool:
        with self._changed:
            state = self._session(session_id)
            if group in state.groups:
                return False
            start = after if after is not None else (state.cursors[-1] if state.cursors else None)
            state.groups[group] = _Group(start or CURSOR_ZERO)
            return True

    @immediate
    def _group_exists(self, session_id: str, group: str) -> bool:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            return state is not None and group in state.groups

    @immediate
    def _group_read(
        self, session_id: str, group: str, consumer: str, count: int, block_ms: int | None
    ) -> list[Delivery]:
        deadline = time.monotonic() + (block_ms or 0) / 1000
        with self._changed:
            while True:
                state, found = self._group(session_id, group)
                start = bisect.bisect_right(state.cursors, found.last)
                fresh = state.cursors[start : start + count]
                remaining = deadline - time.monotonic()
                if fresh or block_ms is None or remaining <= 0:
                    break
                self._changed.wait(remaining)
            if fresh:
                found.last = fresh[-1]
            return self._deliver(session_id, state, found, consumer, fresh)

    @immediate
    def _group_pending(
        self, session_id: str, group: str, consumer: str, count: int
    ) -> list[Delivery]:
        with self._changed:
            state, found = self._group(session_id, group)
            mine = sorted(c for c, held in found.pending.items() if held.consumer == consumer)
            return self._deliver(session_id, state, found, consumer, mine[:count])

    @immediate
    def _group_claim(
        self, session_id: str, group: str, consumer: str, min_idle_ms: int, count: int
    ) -> list[Delivery]:
        with self._changed:
            state, found = self._group(session_id, group)
            oldest = time.monotonic() - min_idle_ms / 1000
            idle = sorted(c for c, held in found.pending.items() if held.since <= oldest)
            return self._deliver(session_id, state, found, consumer, idle[:count])

    @immediate
    def _group_keep(self, session_id: str, group: str, consumer: str, entry_ids: list[str]) -> None:
        with self._changed:
            _, found = self._group(session_id, group)
            now = time.monotonic()
            found.seen[consumer] = now
            for cursor in entry_ids:
                held = found.pending.get(cursor)
                if held is not None:
                    held.consumer, held.since = consumer, now

    @immediate
    def _group_ack(self, session_id: str, group: str, entry_ids: list[str]) -> int:
        with self._changed:
            _, found = self._group(session_id, group)
            return sum(found.pending.pop(cursor, None) is not None for cursor in entry_ids)

    @immediate
    def _group_dead_letter(
        self, session_id: str, group: str, delivery: Delivery, reason: str
    ) -> None:
        with self._changed:
            _, found = self._group(session_id, group)
            found.dead.append(dead_letter_fields(delivery, reason))
            found.pending.pop(delivery.entry_id, None)

    @immediate
    def _group_dead_letters(self, session_id: str, group: str) -> list[dict[str, str]]:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            found = state.groups.get(group) if state else None
            return [dict(letter) for letter in found.dead] if found else []

    def _idle_consumers(self, found: _Group, idle_ms: int) -> list[str]:
        holding = {held.consumer for held in found.pending.values()}
        oldest = time.monotonic() - idle_ms / 1000
        return [c for c, seen in found.seen.items() if c not in holding and seen <= oldest]

    @immediate
    def _group_stats(self, session_id: str, group: str, idle_ms: int) -> GroupStats:
        return self._stats(session_id, group, idle_ms)

    def _stats(self, session_id: str, group: str, idle_ms: int) -> GroupStats:
        with self._changed:
            state, found = self._group(session_id, group)
            idle = len(self._idle_consumers(found, idle_ms))
            lag = len(state.cursors) - bisect.bisect_right(state.cursors, found.last)
            return GroupStats(
                group=group,
                consumers=len(found.seen) - idle,
                idle_consumers=idle,
                pending=len(found.pending),
                lag=lag,
                last_delivered=found.last,
            )

    @immediate
    def _group_prune(self, session_id: str, group: str, idle_ms: int) -> list[str]:
        with self._changed:
            _, found = self._group(session_id, group)
            removed = self._idle_consumers(found, idle_ms)
            for consumer in removed:
                del found.seen[consumer]
            return removed

    @immediate
    def _groups(self, session_id: str, idle_ms: int) -> list[GroupStats]:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            names = list(state.groups) if state else []
        return [self._stats(session_id, name, idle_ms) for name in names]

    @immediate
    def _group_pending_entries(self, session_id: str, group: str, count: int) -> list[PendingEntry]:
        with self._changed:
            _, found = self._group(session_id, group)
            now = time.monotonic()
            return [
                PendingEntry(
                    cursor, cursor, held.consumer, int((now - held.since) * 1000), held.deliveries
                )
                for cursor, held in sorted(found.pending.items())[:count]
            ]

    @immediate
    def _group_delete(self, session_id: str, group: str) -> bool:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            return state is not None and state.groups.pop(group, None) is not None

    @immediate
    def _group_reset(self, session_id: str, group: str, cursor: str) -> None:
        with self._changed:
            self._group(session_id, group)[1].last = cursor

    @immediate
    def _group_replay(self, session_id: str, group: str) -> int:
        with self._changed:
            state, found = self._group(session_id, group)
            since = time.monotonic() - REPLAY_IDLE_MS / 1000
            replayed = 0
            for letter in found.dead:
                cursor = letter["cursor"]
                if bisect.bisect_left(state.cursors, cursor) < len(state.cursors):
                    found.pending[cursor] = _Pending(REPLAY_CONSUMER, 0, since)
                    replayed += 1
            found.dead.clear()
            return replayed
