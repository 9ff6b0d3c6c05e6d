"""The Redis Streams store: atomic Lua appends, stream indexes, one session log per session."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import resources
from typing import Any, Final, TypeVar, cast

import msgpack
import redis
import redis.exceptions as rx

from ledger_bus.batch import Limits, PreparedAppend
from ledger_bus.errors import BackendUnavailable, IdempotencyConflict, VersionConflict
from ledger_bus.ids import StreamId, cursor_ms, format_cursor
from ledger_bus.store.base import AppendResult, EventStore, RecordedEvent, SessionInfo, StreamInfo
from ledger_bus.store.keys import Keys

T = TypeVar("T")
# XRANGE and XREAD entries as redis-py returns them with decode_responses=False.
Entries = list[tuple[bytes, dict[bytes, bytes]]]

DEFAULT_TIMEOUT: Final = 10.0
# How often the cross-session index is refreshed for one session by one store, at most: it is an
# index of last activity, not a second record, and refreshing it on every append would cost a
# second round trip.
INDEX_REFRESH_MS: Final = 1000
# Replies that mean "not now" rather than "never": a failover, a loading replica, a busy script.
_TRANSIENT: Final = ("LOADING", "BUSY", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN")


def _script(name: str) -> str:
    return resources.files("ledger_bus.store").joinpath(f"lua/{name}.lua").read_text("utf-8")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _redis_cursor(cursor: str) -> str:
    ms, seq = cursor.split("-")
    return f"{int(ms)}-{int(seq)}"


def _ledger_cursor(entry_id: bytes | str) -> str:
    ms, seq = _text(entry_id).split("-")
    return format_cursor(int(ms), int(seq))


class RedisStore(EventStore):
    """An EventStore on one Redis (or Valkey) server, 7.0 or newer.

    Every call is retried with backoff on a lost connection until `timeout` seconds have passed,
    then raises BackendUnavailable. Retrying an append is safe: the append_id makes it land once.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "lb",
        limits: Limits | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ):
        super().__init__(limits)
        self.client = client
        self.keys = Keys(prefix)
        self.timeout = timeout
        self._append_script = client.register_script(_script("append"))
        self._read_script = client.register_script(_script("read_stream"))
        self._indexed: dict[str, int] = {}

    # -- the boundary: every Redis call goes through here ---------------------------------------

    def _run(self, operation: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.timeout
        delay = 0.02
        while True:
            try:
                return operation()
            except (rx.AuthenticationError, rx.AuthorizationError, rx.NoPermissionError) as err:
                raise BackendUnavailable(f"redis refused the credentials: {err}") from err
            except (rx.ConnectionError, rx.TimeoutError) as err:
                failure: Exception = err
            except rx.ResponseError as err:
                if not str(err).startswith(_TRANSIENT):
                    raise BackendUnavailable(f"redis: {err}") from err
                failure = err
            if time.monotonic() + delay > deadline:
                raise BackendUnavailable(
                    f"redis did not answer within {self.timeout:g}s: {failure}"
                ) from failure
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _record(
        self, session_id: str, entry_id: bytes, fields: dict[bytes, bytes]
    ) -> RecordedEvent:
        return RecordedEvent(
            stream=StreamId(session_id, fields[b"s"].decode()),
            version=int(fields[b"v"]),
            cursor=_ledger_cursor(entry_id),
            fields=msgpack.unpackb(fields[b"p"]),
        )

    # -- primitives -----------------------------------------------------------------------------

    def _append(
        self, stream: StreamId, expected: int | None, append_id: str, prepared: PreparedAppend
    ) -> AppendResult:
        session = stream.session_id
        keys = [
            self.keys.log(session),
            self.keys.meta(session),
            self.keys.stream(session, stream.name),
            self.keys.idempotency(session, stream.name),
        ]
        args: list[Any] = [
            stream.name,
            -1 if expected is None else expected,
            append_id,
            prepared.digest,
            *prepared.payloads,
        ]
        reply = self._run(lambda: self._append_script(keys=keys, args=args))
        status = _text(reply[0])
        if status == "conflict":
            raise VersionConflict(
                str(stream), expected if expected is not None else -1, int(reply[1])
            )
        if status == "idem":
            raise IdempotencyConflict(str(stream), append_id)
        cursor = _ledger_cursor(reply[3])
        result = AppendResult(stream, int(reply[1]), int(reply[2]), cursor, status == "dup")
        if status == "ok":
            self._touch_index(session, cursor_ms(cursor))
        return result

    def _touch_index(self, session_id: str, ms: int) -> None:
        if ms - self._indexed.get(session_id, -INDEX_REFRESH_MS) < INDEX_REFRESH_MS:
            return
        key = self.keys.index_of(session_id)
        self._run(lambda: self.client.zadd(key, {session_id: ms}, gt=True))
        self._indexed[session_id] = ms

    def _read_stream(self, stream: StreamId, after: int, count: int) -> list[RecordedEvent]:
        keys = [self.keys.stream(stream.session_id, stream.name), self.keys.log(stream.session_id)]
        flat = self._run(lambda: self._read_script(keys=keys, args=[after + 1, count]))
        return [
            RecordedEvent(
                stream=stream,
                version=int(flat[i]),
                cursor=_ledger_cursor(flat[i + 1]),
                fields=msgpack.unpackb(flat[i + 2]),
            )
            for i in range(0, len(flat), 3)
        ]

    def _scan(self, session_id: str, after: str | None, count: int) -> list[RecordedEvent]:
        start = "-" if after is None else "(" + _redis_cursor(after)
        log = self.keys.log(session_id)
        entries = cast(Entries, self._run(lambda: self.client.xrange(log, start, "+", count=count)))
        return [self._record(session_id, entry_id, fields) for entry_id, fields in entries]

    def _tail(self, session_id: str, n: int) -> list[RecordedEvent]:
        log = self.keys.log(session_id)
        entries = cast(Entries, self._run(lambda: self.client.xrevrange(log, "+", "-", count=n)))
        return [
            self._record(session_id, entry_id, fields) for entry_id, fields in reversed(entries)
        ]

    def _last_entry_id(self, log: str) -> str:
        newest = cast(Entries, self._run(lambda: self.client.xrevrange(log, "+", "-", count=1)))
        return _text(newest[0][0]) if newest else "0-0"

    def _wait(
        self, session_id: str, after: str | None, timeout_ms: int, count: int
    ) -> list[RecordedEvent]:
        log = self.keys.log(session_id)
        # "$" would be re-read on every slice below and miss what lands in between; pin it.
        last = self._last_entry_id(log) if after is None else _redis_cursor(after)
        deadline = time.monotonic() + timeout_ms / 1000
        # A BLOCK longer than the socket timeout would read as a dead connection.
        socket_timeout = self.client.connection_pool.connection_kwargs.get("socket_timeout") or 5.0
        slice_ms = max(100, int((float(socket_timeout) - 1.0) * 1000))
        while True:
            block = max(1, min(slice_ms, int((deadline - time.monotonic()) * 1000)))
            reply = cast(
                list[tuple[bytes, Entries]], self._run(self._xread(log, last, count, block))
            )
            if reply:
                entries = reply[0][1]
                return [self._record(session_id, entry_id, fields) for entry_id, fields in entries]
            if time.monotonic() >= deadline:
                return []

    def _xread(self, log: str, last: str, count: int, block: int) -> Callable[[], Any]:
        return lambda: self.client.xread({log: last}, count=count, block=block)

    def _stream_version(self, stream: StreamId) -> int:
        meta = self.keys.meta(stream.session_id)
        version = self._run(lambda: self.client.hget(meta, stream.name))
        return int(version or 0)

    def _session_info(self, session_id: str) -> SessionInfo:
        log = self.keys.log(session_id)

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(self.keys.meta(session_id))
            pipe.xlen(log)
            pipe.xrange(log, "-", "+", count=1)
            pipe.xrevrange(log, "+", "-", count=1)
            return list(pipe.execute())

        versions, events, first, last = self._run(read)
        streams = sorted(StreamInfo(_text(k), int(v)) for k, v in versions.items())

        def count_ids() -> int:
            pipe = self.client.pipeline(transaction=False)
            for info in streams:
                pipe.hlen(self.keys.idempotency(session_id, info.name))
            return sum(pipe.execute())

        return SessionInfo(
            session_id=session_id,
            events=int(events),
            streams=streams,
            first_cursor=_ledger_cursor(first[0][0]) if first else None,
            last_cursor=_ledger_cursor(last[0][0]) if last else None,
            append_ids=self._run(count_ids) if streams else 0,
        )

    def _sessions(self, limit: int | None) -> list[tuple[str, int]]:
        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for key in self.keys.all_indexes():
                pipe.zrange(key, 0, -1 if limit is None else limit - 1, desc=True, withscores=True)
            return list(pipe.execute())

        found = [
            (_text(member), int(score)) for bucket in self._run(read) for member, score in bucket
        ]
        found.sort(key=lambda item: (-item[1], item[0]))
        return found if limit is None else found[:limit]

    def rebuild_index(self) -> int:
        """Rebuild the cross-session index from the sessions themselves; return how many."""
        pattern = self.keys.session_pattern()
        found = self._run(lambda: list(self.client.scan_iter(match=pattern, count=1000)))
        count = 0
        for key in found:
            name = _text(key)
            session_id = name[name.index("{") + 1 : name.rindex("}")]
            last = self._last_entry_id(self.keys.log(session_id))
            if last != "0-0":
                self._indexed.pop(session_id, None)
                self._touch_index(session_id, int(last.split("-")[0]))
                count += 1
        return count

    def close(self) -> None:
        self.client.close()
