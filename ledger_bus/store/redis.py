"""The Redis Streams store: atomic Lua appends, stream indexes, one session log per session."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Collection, Iterable
from importlib import resources
from typing import Any, Final, TypeVar, cast

import redis
import redis.exceptions as rx
from msgpack import unpackb
from redis.cluster import RedisCluster
from redis.commands.core import Script

from ledger_bus.batch import Limits, PreparedAppend
from ledger_bus.errors import BackendUnavailable, IdempotencyConflict, VersionConflict
from ledger_bus.ids import StreamId, cursor_ms
from ledger_bus.store.base import (
    AppendResult,
    EventStore,
    OpenAttempt,
    RecordedEvent,
    SessionInfo,
    StreamInfo,
    parse_open,
)
from ledger_bus.store.keys import Keys

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
# XRANGE and XREAD entries as redis-py returns them with decode_responses=False.
Entry = tuple[bytes, dict[bytes, bytes]]
Entries = list[Entry]

DEFAULT_TIMEOUT: Final = 10.0
# How often the cross-session index is refreshed for one session by one store, at most: it is an
# index of last activity, not a second record, and refreshing it on every append would cost a
# second round trip.
INDEX_REFRESH_MS: Final = 1000
# How often an append that opens attempts refreshes its session in the open-attempts index, at
# most. A reconciler forgets a session only once its entry is older than its prune window (600 s
# by default, never below OPEN_INDEX_REFRESH_MS * 2 in ReconcilerConfig) and nothing is open, so
# an entry refreshed this recently is still there whenever the script opens an attempt.
OPEN_INDEX_REFRESH_MS: Final = 60_000
_REMEMBERED: Final = 10_000  # sessions (or streams) one store keeps refresh times (or keys) of
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
    """format_cursor() of a Redis entry id, padding the digits without parsing them."""
    ms, _, seq = _text(entry_id).partition("-")
    return f"{ms:0>13}-{seq:0>6}"


class RedisStore(EventStore):
    """An EventStore on one Redis (or Valkey) server, 7.0 or newer.

    Every call is retried with backoff on a lost connection until `timeout` seconds have passed,
    then raises BackendUnavailable. Retrying an append is safe: the append_id makes it land once.
    """

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        *,
        prefix: str = "lb",
        limits: Limits | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        socket_timeout: float = 5.0,
    ):
        super().__init__(limits)
        self.client: Any = client  # redis.Redis or RedisCluster: the commands used are common
        self.keys = Keys(prefix)
        self.timeout = timeout
        # A blocking read longer than the client's socket timeout would look like a dead server.
        self.max_block_ms = max(100, int((socket_timeout - 1.0) * 1000))
        self._append_script = client.register_script(_script("append"))
        self._lease_script = client.register_script(_script("lease"))
        self._forget_script = client.register_script(_script("forget_session"))
        self._indexed: dict[str, int] = {}
        self._open_indexed: dict[str, int] = {}
        self._append_keys: dict[StreamId, list[str]] = {}

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

    def _records(self, session_id: str, entries: Iterable[Entry]) -> list[RecordedEvent]:
        """Decode session log entries; a StreamId is built once per stream, not per event."""
        refs: dict[bytes, StreamId] = {}
        out = []
        # Thousands of new dicts kept alive set off full garbage collections that find nothing
        # to free (msgpack's documentation gives the same advice); pause it for the page.
        paused = gc.isenabled()
        gc.disable()
        try:
            for entry_id, fields in entries:
                name = fields[b"s"]
                ref = refs.get(name)
                if ref is None:
                    ref = refs[name] = StreamId(session_id, name.decode())
                ms, _, seq = entry_id.partition(b"-")  # _ledger_cursor, inlined on the hot path
                cursor = (ms.zfill(13) + b"-" + seq.zfill(6)).decode()
                out.append(RecordedEvent(ref, int(fields[b"v"]), cursor, unpackb(fields[b"p"])))
        finally:
            if paused:
                gc.enable()
        return out

    # -- primitives -----------------------------------------------------------------------------

    def _append(
        self, stream: StreamId, expected: int | None, append_id: str, prepared: PreparedAppend
    ) -> AppendResult:
        session = stream.session_id
        keys = self._append_keys.get(stream)
        if keys is None:
            keys = self._remember(self._append_keys, stream, self._keys_of(stream))
        args: list[Any] = [
            stream.name,
            -1 if expected is None else expected,
            append_id,
            prepared.digest,
            len(prepared.payloads),
            *prepared.payloads,
            *prepared.notes,
        ]
        if prepared.opens_attempts:
            self._refresh_open_index(session)
        reply = self._run(lambda: self._evalsha(self._append_script, keys, args))
        status = _text(reply[0])
        if status == "conflict":
            raise VersionConflict(str(stream), -1 if expected is None else expected, int(reply[1]))
        if status == "idem":
            raise IdempotencyConflict(str(stream), append_id)
        cursor = _ledger_cursor(reply[3])
        result = AppendResult(stream, int(reply[1]), int(reply[2]), cursor, status == "dup")
        if status == "ok":
            self._touch_index(session, cursor_ms(cursor))
        return result

    def _evalsha(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        """Run a registered script by its sha; redis-py's Script loads it when the server lacks
        it (after a restart or failover). Calling EVALSHA directly skips the Script wrapper's
        per-call work, which is measurable on a single-event append (docs/performance.md)."""
        try:
            return self.client.evalsha(script.sha, len(keys), *keys, *args)
        except rx.NoScriptError:
            return script(keys=keys, args=args)

    def _keys_of(self, stream: StreamId) -> list[str]:
        """The KEYS of an append to `stream`, in the order append.lua names them."""
        session = stream.session_id
        return [
            self.keys.log(session),
            self.keys.meta(session),
            self.keys.stream(session, stream.name),
            self.keys.idempotency(session, stream.name),
            self.keys.open_attempts(session),
            self.keys.safe_tools(session),
        ]

    @staticmethod
    def _remember(table: dict[K, V], key: K, value: V) -> V:
        """Keep `value` in a per-store table that is emptied once it holds _REMEMBERED entries."""
        if len(table) >= _REMEMBERED:
            table.clear()
        table[key] = value
        return value

    def _refresh_open_index(self, session: str) -> None:
        """List the session in the open-attempts index before an append that opens attempts: a
        writer killed right after its request committed must not leave an open attempt that no
        reconciler can find. The index lives outside the session's slot, so the script cannot
        write it on a cluster; refreshing once a minute keeps the entry inside any prune window
        (see OPEN_INDEX_REFRESH_MS) at the cost of one extra round trip a minute."""
        now = self.now_local_ms()
        if now - self._open_indexed.get(session, -OPEN_INDEX_REFRESH_MS) < OPEN_INDEX_REFRESH_MS:
            return
        key = self.keys.open_index_of(session)
        self._run(lambda: self.client.zadd(key, {session: now}))
        self._remember(self._open_indexed, session, now)

    @staticmethod
    def now_local_ms() -> int:
        return time.time_ns() // 1_000_000

    def _touch_index(self, session_id: str, ms: int) -> None:
        if ms - self._indexed.get(session_id, -INDEX_REFRESH_MS) < INDEX_REFRESH_MS:
            return
        key = self.keys.index_of(session_id)
        self._run(lambda: self.client.zadd(key, {session_id: ms}, gt=True))
        self._remember(self._indexed, session_id, ms)

    def _read_stream(self, stream: StreamId, after: int, count: int) -> list[RecordedEvent]:
        # Two pipelined round trips, no script: the stream index says which appends hold the
        # versions wanted and where each one's events lie, consecutive, in the session log; then
        # one XRANGE per append reads them. Entries never change once written, so nothing can
        # move between the two reads.
        index = self.keys.stream(stream.session_id, stream.name)
        log = self.keys.log(stream.session_id)
        first = after + 1

        def read_index() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            pipe.xrevrange(index, f"{first}-0", "-", count=1)  # the append holding `first`
            pipe.xrange(index, f"({first}-0", "+", count=count)  # and those after it
            return list(pipe.execute())

        head, rest = self._run(read_index)
        plan: list[tuple[bytes, int, int]] = []  # (first cursor, events to skip, to take)
        wanted = count
        for entry_id, fields in [*head, *rest]:
            start = int(entry_id.partition(b"-")[0])
            skip = max(0, first - start)
            take = min(int(fields[b"n"]) - skip, wanted)
            if take > 0:
                plan.append((fields[b"c"], skip, take))
                wanted -= take
            if not wanted:
                break
        if not plan:
            return []

        def read_log() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for cursor, skip, take in plan:
                pipe.xrange(log, cursor, "+", count=skip + take)
            return list(pipe.execute())

        entries = [
            entry
            for (_, skip, take), found in zip(plan, self._run(read_log), strict=True)
            for entry in found[skip : skip + take]
        ]
        return self._records(stream.session_id, entries)

    def _scan(self, session_id: str, after: str | None, count: int) -> list[RecordedEvent]:
        start = "-" if after is None else "(" + _redis_cursor(after)
        log = self.keys.log(session_id)
        entries = cast(Entries, self._run(lambda: self.client.xrange(log, start, "+", count=count)))
        return self._records(session_id, entries)

    def _tail(self, session_id: str, n: int) -> list[RecordedEvent]:
        log = self.keys.log(session_id)
        entries = cast(Entries, self._run(lambda: self.client.xrevrange(log, "+", "-", count=n)))
        return self._records(session_id, reversed(entries))

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
        slice_ms = self.max_block_ms
        while True:
            block = max(1, min(slice_ms, int((deadline - time.monotonic()) * 1000)))
            reply = cast(
                list[tuple[bytes, Entries]], self._run(self._xread(log, last, count, block))
            )
            if reply:
                return self._records(session_id, reply[0][1])
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

    def _lease(self, op: str, session_id: str, name: str, owner: str, ttl_ms: int) -> bool:
        keys = [self.keys.lease(session_id, name)]
        args: list[Any] = [op, owner, ttl_ms]
        return bool(self._run(lambda: self._evalsha(self._lease_script, keys, args)))

    def _lease_holder(self, session_id: str, name: str) -> str | None:
        key = self.keys.lease(session_id, name)
        holder = self._run(lambda: self.client.get(key))
        return None if holder is None else _text(holder)

    def _open_attempts(self, session_ids: list[str]) -> dict[str, list[OpenAttempt]]:
        def read() -> list[dict[bytes, bytes]]:
            pipe = self.client.pipeline(transaction=False)
            for session_id in session_ids:
                pipe.hgetall(self.keys.open_attempts(session_id))
            return list(pipe.execute())

        return {
            session_id: [parse_open(session_id, _text(a), _text(v)) for a, v in found.items()]
            for session_id, found in zip(session_ids, self._run(read), strict=True)
        }

    def _safe_to_replay(self, session_id: str, run_id: str, tool: str) -> bool:
        key = self.keys.safe_tools(session_id)
        return bool(self._run(lambda: self.client.hexists(key, f"{run_id}\x1f{tool}")))

    def _open_sessions(self, buckets: Collection[int]) -> list[tuple[str, int]]:
        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for number in buckets:
                pipe.zrange(self.keys.open_index(number), 0, -1, withscores=True)
            return list(pipe.execute())

        return sorted((_text(s), int(ms)) for found in self._run(read) for s, ms in found)

    def _forget_open_session(self, session_id: str, opened_before_ms: int) -> bool:
        keys = [self.keys.open_index_of(session_id)]
        args: list[Any] = [session_id, opened_before_ms]
        return bool(self._run(lambda: self._evalsha(self._forget_script, keys, args)))

    def now_ms(self) -> int:
        seconds, micros = self._run(self.client.time)
        return int(seconds) * 1000 + int(micros) // 1000

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
