"""The in-process store: the reference semantics every other backend is tested against."""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field

import msgpack

from ledger_bus.batch import Limits, PreparedAppend
from ledger_bus.errors import IdempotencyConflict, VersionConflict
from ledger_bus.ids import StreamId, cursor_ms, format_cursor
from ledger_bus.store.base import (
    AppendResult,
    EventStore,
    OpenAttempt,
    RecordedEvent,
    SessionInfo,
    StreamInfo,
    parse_open,
)
from ledger_bus.store.keys import bucket_of


@dataclass
class _Session:
    cursors: list[str] = field(default_factory=list)  # the log, in commit order
    entries: list[tuple[str, int, bytes]] = field(
        default_factory=list
    )  # (stream, version, payload)
    streams: dict[str, list[int]] = field(default_factory=dict)  # stream -> log positions
    idempotency: dict[tuple[str, str], tuple[str, int, int, str]] = field(default_factory=dict)
    last_ms: int = 0
    last_seq: int = -1
    leases: dict[str, tuple[str, float]] = field(default_factory=dict)  # name -> (owner, expiry)
    open: dict[str, str] = field(default_factory=dict)  # attempt -> as in lb:{S}:open
    safe: set[str] = field(default_factory=set)  # "<run>\x1f<tool>"


def _note(state: _Session, note: str, stream: str, cursor: str) -> None:
    """Keep open attempts as store/lua/append.lua does."""
    if not note:
        return
    kind, *parts = note.split("\x1f")
    if kind == "o":
        attempt, run_id, tool = parts
        state.open[attempt] = f"{run_id}\x1f{tool}\x1f{stream}\x1f{cursor}\x1f"
    elif kind == "c":
        state.open.pop(parts[0], None)
    elif kind == "f":
        value = state.open.get(parts[0])
        if value is not None and value.endswith("\x1f"):
            state.open[parts[0]] = value + cursor
    elif kind == "s":
        state.safe.add(f"{parts[0]}\x1f{parts[1]}")


class MemoryStore(EventStore):
    """Keeps everything in this process; safe to share between threads."""

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
            fields=msgpack.unpackb(payload),
        )

    def _append(
        self, stream: StreamId, expected: int | None, append_id: str, prepared: PreparedAppend
    ) -> AppendResult:
        with self._changed:
            state = self._session(stream.session_id)
            prior = state.idempotency.get((stream.name, append_id))
            if prior is not None:
                digest, first, last, cursor = prior
                if digest != prepared.digest:
                    raise IdempotencyConflict(str(stream), append_id)
                return AppendResult(stream, first, last, cursor, deduplicated=True)
            positions = state.streams.get(stream.name, [])
            version = len(positions)
            if expected is not None and expected != version:
                raise VersionConflict(str(stream), expected, version)
            now = time.time_ns() // 1_000_000
            if prepared.opens_attempts:
                self._open_index[stream.session_id] = now
            for payload, note in zip(prepared.payloads, prepared.notes, strict=True):
                # Like a Redis stream id: the clock, but never below the last id.
                if now > state.last_ms:
                    state.last_ms, state.last_seq = now, 0
                else:
                    state.last_seq += 1
                version += 1
                positions.append(len(state.entries))
                cursor = format_cursor(state.last_ms, state.last_seq)
                state.cursors.append(cursor)
                state.entries.append((stream.name, version, payload))
                _note(state, note, stream.name, cursor)
            state.streams[stream.name] = positions
            first = version - len(prepared.payloads) + 1
            result = AppendResult(stream, first, version, state.cursors[-1])
            state.idempotency[(stream.name, append_id)] = (
                prepared.digest,
                first,
                version,
                result.cursor,
            )
            self._changed.notify_all()
            return result

    def _read_stream(self, stream: StreamId, after: int, count: int) -> list[RecordedEvent]:
        with self._changed:
            state = self._sessions_by_id.get(stream.session_id)
            if state is None:
                return []
            positions = state.streams.get(stream.name, [])[after : after + count]
            return [self._record(stream.session_id, state, p) for p in positions]

    def _scan(self, session_id: str, after: str | None, count: int) -> list[RecordedEvent]:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            if state is None:
                return []
            start = 0 if after is None else bisect.bisect_right(state.cursors, after)
            stop = min(len(state.cursors), start + count)
            return [self._record(session_id, state, p) for p in range(start, stop)]

    def _tail(self, session_id: str, n: int) -> list[RecordedEvent]:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            if state is None:
                return []
            start = max(0, len(state.cursors) - n)
            return [self._record(session_id, state, p) for p in range(start, len(state.cursors))]

    def _wait(
        self, session_id: str, after: str | None, timeout_ms: int, count: int
    ) -> list[RecordedEvent]:
        deadline = time.monotonic() + timeout_ms / 1000
        with self._changed:
            if after is None:
                cursors = self._session(session_id).cursors
                after = cursors[-1] if cursors else format_cursor(0, 0)
            while True:
                found = self._scan(session_id, after, count)
                remaining = deadline - time.monotonic()
                if found or remaining <= 0:
                    return found
                self._changed.wait(remaining)

    def _stream_version(self, stream: StreamId) -> int:
        with self._changed:
            state = self._sessions_by_id.get(stream.session_id)
            return len(state.streams.get(stream.name, ())) if state else 0

    def _session_info(self, session_id: str) -> SessionInfo:
        with self._changed:
            state = self._sessions_by_id.get(session_id) or _Session()
            return SessionInfo(
                session_id=session_id,
                events=len(state.cursors),
                streams=[StreamInfo(n, len(p)) for n, p in sorted(state.streams.items())],
                first_cursor=state.cursors[0] if state.cursors else None,
                last_cursor=state.cursors[-1] if state.cursors else None,
                append_ids=len(state.idempotency),
            )

    def _sessions(self, limit: int | None) -> list[tuple[str, int]]:
        with self._changed:
            found = [
                (sid, cursor_ms(s.cursors[-1]))
                for sid, s in self._sessions_by_id.items()
                if s.cursors
            ]
        found.sort(key=lambda item: (-item[1], item[0]))
        return found if limit is None else found[:limit]

    def _lease_holder(self, session_id: str, name: str) -> str | None:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            held = state.leases.get(name) if state else None
            if held is None or held[1] <= time.monotonic():
                return None
            return held[0]

    def _lease(self, op: str, session_id: str, name: str, owner: str, ttl_ms: int) -> bool:
        with self._changed:
            state = self._session(session_id)
            holder = self._lease_holder(session_id, name)
            if op == "acquire" and holder not in (None, owner):
                return False
            if op != "acquire" and holder != owner:
                return False
            if op == "release":
                del state.leases[name]
            else:
                state.leases[name] = (owner, time.monotonic() + ttl_ms / 1000)
            return True

    def _open_attempts(self, session_ids: list[str]) -> dict[str, list[OpenAttempt]]:
        with self._changed:
            found = {}
            for session_id in session_ids:
                state = self._sessions_by_id.get(session_id)
                items = list(state.open.items()) if state else []
                found[session_id] = [parse_open(session_id, a, value) for a, value in items]
            return found

    def _safe_to_replay(self, session_id: str, run_id: str, tool: str) -> bool:
        with self._changed:
            state = self._sessions_by_id.get(session_id)
            return state is not None and f"{run_id}\x1f{tool}" in state.safe

    def _open_sessions(self, buckets: Collection[int]) -> list[tuple[str, int]]:
        with self._changed:
            return sorted((s, ms) for s, ms in self._open_index.items() if bucket_of(s) in buckets)

    def _forget_open_session(self, session_id: str, opened_before_ms: int) -> bool:
        with self._changed:
            if self._open_index.get(session_id, opened_before_ms) < opened_before_ms:
                del self._open_index[session_id]
                return True
            return False
