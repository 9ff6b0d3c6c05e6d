"""Reads: streams through their index, the session log, waits, artifacts, bounds, leases and
open attempts."""

from __future__ import annotations

import time
from collections.abc import Collection
from functools import partial
from typing import cast

from ledger_bus.model.errors import BackendRefused
from ledger_bus.model.ids import StreamId
from ledger_bus.model.records import (
    Bound,
    OpenAttempt,
    RecordedEvent,
    SessionInfo,
    StreamInfo,
)
from ledger_bus.store.attempts import LeaseStep
from ledger_bus.store.redis.client import ClientRequest, RedisPipeline, ScriptArg
from ledger_bus.store.redis.core import (
    Entries,
    RedisCore,
    pipelined,
)
from ledger_bus.store.redis.encoding import (
    ARTIFACT_READ_CHUNKS,
    OPEN_MEMBER_SEP,
    glob_escape,
    ledger_cursor,
    open_attempt_of,
    redis_cursor,
    text_of,
)
from ledger_bus.store.redis.replies import (
    forget_session_reply,
    lease_reply,
    read_stream_reply,
)
from ledger_bus.store.redis.scripts import (
    FORGET_SESSION,
    LEASE,
    READ_STREAM,
)
from ledger_bus.store.redis.sessions import newest_entry_id
from ledger_bus.store.steps import Op


class RedisReads(RedisCore):
    """Everything the store reads, and its leases."""

    def _artifact(self, session_id: str, sha256: str) -> Op[bytes | None]:
        key, uses = self.keys.artifact(session_id, sha256), self.keys.artifact_uses(session_id)
        fields = [str(n) for n in range(ARTIFACT_READ_CHUNKS)]

        def first(pipe: RedisPipeline) -> None:
            pipe.hexists(uses, sha256)  # one written for an append yet to commit is not yet one
            pipe.hlen(key)
            pipe.hmget(key, fields)

        def chunks(start: int, end: int) -> ClientRequest:
            names = [str(n) for n in range(start, end)]
            return lambda c: c.hmget(key, names)

        def read() -> Op[bytes | None]:
            # A few chunks a round trip: a pipeline of all of them would have the server copy
            # the whole artifact into its replies at one go.
            referenced, count, found = yield pipelined(first)
            if not referenced or not count:
                return None
            parts = found[:count]
            for start in range(ARTIFACT_READ_CHUNKS, count, ARTIFACT_READ_CHUNKS):
                parts.extend((yield chunks(start, min(count, start + ARTIFACT_READ_CHUNKS))))
            if any(part is None for part in parts):
                return None  # deleted while read
            return b"".join(parts)

        return (yield from self._retried(read))

    def _set_bound(self, stream: StreamId, bound: Bound | None) -> Op[None]:
        key = self.keys.bounds(stream.session_id)
        if bound is None:
            yield from self._run(lambda c: c.hdel(key, stream.name))
        else:
            value = f"{bound.keep} {bound.dedup_window_ms}"
            if bound.only is not None:
                value += f" {bound.only}"
            yield from self._run(lambda c: c.hset(key, stream.name, value))

    def _bound(self, stream: StreamId) -> Op[Bound | None]:
        key = self.keys.bounds(stream.session_id)
        found = yield from self._run(lambda c: c.hget(key, stream.name))
        if found is None:
            return None
        keep, window, *only = text_of(found).split()
        return Bound(int(keep), int(window), only[0] if only else None)

    def _artifact_uses(self, session_id: str) -> Op[dict[str, int]]:
        key = self.keys.artifact_uses(session_id)
        found = yield from self._run(lambda c: c.hgetall(key))
        return {text_of(sha): int(count) for sha, count in found.items()}

    def _read_stream(self, stream: StreamId, after: int, count: int) -> Op[list[RecordedEvent]]:
        # One round trip (read_stream.lua): the stream index says which appends hold the
        # versions wanted and where each one's events lie, consecutive, in the session log,
        # and the log gives them. A view brought up to date (an adapter's every read) is one
        # call for what is new. A server without EVALSHA_RO (an emulation) makes the two
        # reads, pipelined, one after the other.
        keys = self.keys.read_stream_keys(stream.session_id, stream.name)
        if self._read_script:
            try:
                found = yield from self._retried(
                    lambda: self._evalsha(READ_STREAM, keys, [after + 1, count], read_only=True)
                )
            except BackendRefused as err:
                if "unknown command" not in str(err).lower():
                    raise
                self._read_script = False
            else:
                return self._records(stream.session_id, read_stream_reply(found))
        return (yield from self._read_stream_twice(stream, keys[0], keys[1], after + 1, count))

    def _read_stream_twice(
        self, stream: StreamId, index: str, log: str, first: int, count: int
    ) -> Op[list[RecordedEvent]]:
        def read_index(pipe: RedisPipeline) -> None:
            pipe.xrevrange(index, f"{first}-0", "-", count=1)  # the append holding `first`
            pipe.xrange(index, f"({first}-0", "+", count=count)  # and those after it

        head, rest = yield from self._run(pipelined(read_index))
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

        def read_log(pipe: RedisPipeline) -> None:
            for cursor, skip, take in plan:
                pipe.xrange(log, cursor, "+", count=skip + take)

        found_all = yield from self._run(pipelined(read_log))
        entries = [
            entry
            for (_, skip, take), found in zip(plan, found_all, strict=True)
            for entry in found[skip : skip + take]
        ]
        return self._records(stream.session_id, entries)

    def _scan(self, session_id: str, after: str | None, count: int) -> Op[list[RecordedEvent]]:
        start = "-" if after is None else "(" + redis_cursor(after)
        log = self.keys.log(session_id)
        entries = yield from self._run(lambda c: c.xrange(log, start, "+", count=count))
        return self._records(session_id, cast(Entries, entries))

    def _tail(self, session_id: str, n: int, before: str | None) -> Op[list[RecordedEvent]]:
        log = self.keys.log(session_id)
        end = "+" if before is None else "(" + redis_cursor(before)
        entries = yield from self._run(lambda c: c.xrevrange(log, end, "-", count=n))
        return self._records(session_id, reversed(cast(Entries, entries)))

    def _wait(
        self, session_id: str, after: str | None, timeout_ms: int, count: int
    ) -> Op[list[RecordedEvent]]:
        log = self.keys.log(session_id)
        # "$" would be re-read on every slice below and miss what lands in between; pin it.
        if after is None:
            last = yield from self._retried(partial(newest_entry_id, log))
        else:
            last = redis_cursor(after)
        deadline = time.monotonic() + timeout_ms / 1000
        slice_ms = self.max_block_ms

        def read(block: int) -> ClientRequest:
            return lambda c: c.xread({log: last}, count=count, block=block)

        while True:
            block = max(1, min(slice_ms, int((deadline - time.monotonic()) * 1000)))
            reply = yield from self._run(read(block))
            if reply:
                return self._records(session_id, cast(list[tuple[bytes, Entries]], reply)[0][1])
            if time.monotonic() >= deadline:
                return []

    def _stream_version(self, stream: StreamId) -> Op[int]:
        meta = self.keys.meta(stream.session_id)
        version = yield from self._run(lambda c: c.hget(meta, stream.name))
        return int(version or 0)

    def _session_exists(self, session_id: str) -> Op[bool]:
        meta = self.keys.meta(session_id)  # written by every append, never by anything else
        return bool((yield from self._run(lambda c: c.exists(meta))))

    def _session_info(self, session_id: str, append_ids: bool) -> Op[SessionInfo]:
        log = self.keys.log(session_id)

        def read(pipe: RedisPipeline) -> None:
            pipe.hgetall(self.keys.meta(session_id))
            pipe.xlen(log)
            pipe.xrange(log, "-", "+", count=1)
            pipe.xrevrange(log, "+", "-", count=1)

        versions, events, first, last = yield from self._run(pipelined(read))
        streams = sorted(StreamInfo(text_of(k), int(v)) for k, v in versions.items())

        def count_ids(pipe: RedisPipeline) -> None:
            for info in streams:
                pipe.hlen(self.keys.idempotency(session_id, info.name))

        ids: int | None = None
        if append_ids:
            ids = sum((yield from self._run(pipelined(count_ids)))) if streams else 0
        return SessionInfo(
            session_id=session_id,
            events=int(events),
            streams=streams,
            first_cursor=ledger_cursor(first[0][0]) if first else None,
            last_cursor=ledger_cursor(last[0][0]) if last else None,
            append_ids=ids,
        )

    def _sessions(self, limit: int | None) -> Op[list[tuple[str, int]]]:
        def read(pipe: RedisPipeline) -> None:
            for key in self.keys.all_indexes():
                pipe.zrange(key, 0, -1 if limit is None else limit - 1, desc=True, withscores=True)

        buckets = yield from self._run(pipelined(read))
        found = [(text_of(member), int(score)) for bucket in buckets for member, score in bucket]
        found.sort(key=lambda item: (-item[1], item[0]))
        return found if limit is None else found[:limit]

    def _lease(self, op: LeaseStep, session_id: str, name: str, owner: str, ttl_ms: int) -> Op[int]:
        keys = self.keys.lease_keys(session_id, name)
        args: list[ScriptArg] = [op, owner, ttl_ms, name]
        return lease_reply((yield from self._retried(lambda: self._evalsha(LEASE, keys, args))))

    def _lease_holder(self, session_id: str, name: str) -> Op[str | None]:
        key = self.keys.lease(session_id, name)
        holder = yield from self._run(lambda c: c.get(key))
        return None if holder is None else text_of(holder)

    def _open_attempts(self, session_ids: list[str]) -> Op[dict[str, list[OpenAttempt]]]:
        def read(pipe: RedisPipeline) -> None:
            for session_id in session_ids:
                pipe.hgetall(self.keys.open_attempts(session_id))

        found_all = yield from self._run(pipelined(read))
        return {
            session_id: [
                open_attempt_of(session_id, text_of(a), text_of(v)) for a, v in found.items()
            ]
            for session_id, found in zip(session_ids, found_all, strict=True)
        }

    def _safe_to_replay(self, session_id: str, run_id: str, tool: str) -> Op[bool]:
        key = self.keys.safe_tools(session_id)
        return bool((yield from self._run(lambda c: c.hexists(key, f"{run_id}\x1f{tool}"))))

    def _open_sessions(self, buckets: Collection[int]) -> Op[list[tuple[str, int]]]:
        def read(pipe: RedisPipeline) -> None:
            for number in buckets:
                pipe.zrange(self.keys.open_index(number), 0, -1, withscores=True)

        found_all = yield from self._run(pipelined(read))
        # A provisional member (`_list_open_session`) names its session before the separator.
        newest: dict[str, int] = {}
        for found in found_all:
            for member, ms in found:
                session = text_of(member).split(OPEN_MEMBER_SEP, 1)[0]
                newest[session] = max(int(ms), newest.get(session, 0))
        return sorted(newest.items())

    def _forget_open_session(self, session_id: str, opened_before_ms: int) -> Op[bool]:
        keys = self.keys.forget_session_keys(session_id)
        pattern = f"{glob_escape(session_id)}{OPEN_MEMBER_SEP}*"
        args: list[ScriptArg] = [session_id, opened_before_ms, pattern]
        raw = yield from self._retried(lambda: self._evalsha(FORGET_SESSION, keys, args))
        return forget_session_reply(raw)
