"""Deletes of sessions and streams (spec 3.9), and the append_id records that outlive them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import redis.exceptions as rx

from ledger_bus.model.errors import BackendUnavailable
from ledger_bus.model.records import (
    AppendRecord,
    Deletion,
)
from ledger_bus.store.redis.core import (
    RedisCore,
    pipelined,
)
from ledger_bus.store.redis.encoding import (
    append_record,
    text_of,
)
from ledger_bus.store.redis.scripts import (
    DELETE_SESSION,
    DELETE_STREAM,
)
from ledger_bus.store.steps import Op

# Appends one call of delete_stream.lua deletes, at most: up to 1,000 events each (the append
# limit), it holds the server for a few milliseconds, not for the whole stream.
DELETE_CHUNK: Final = 20


class RedisDeletes(RedisCore):
    """Deleting, a script at a time; what a deletion keeps."""

    def _delete(self, session_id: str, stream: str | None) -> Op[Deletion]:
        if stream is None:
            events, generation = yield from self._delete_whole(session_id)
        else:
            events, generation = yield from self._delete_one(session_id, stream)
        if stream is None and events:
            yield from self._forget_session(session_id)
        return Deletion(session_id, stream, events, generation)

    def _forget_session(self, session_id: str) -> Op[None]:
        """After a session's keys are gone: its entries in the indexes (in other slots, so they
        follow, as they follow appends), and what this store remembers of it."""

        def unlist(pipe: Any) -> None:
            pipe.zrem(self.keys.index_of(session_id), session_id)
            pipe.zrem(self.keys.open_index_of(session_id), session_id)

        yield from self._run(pipelined(unlist))
        self._streams = {r: w for r, w in self._streams.items() if r.session_id != session_id}
        self._indexed.pop(session_id, None)
        self._open_indexed.pop(session_id, None)

    def _delete_whole(self, session_id: str) -> Op[tuple[int, int]]:
        def attempt() -> Op[list[Any]]:
            streams, _, keys = yield from self._session_keys(session_id)
            now = yield from self.now_ms_op()
            args = [now, len(streams), *streams]
            return list((yield from self._evalsha(DELETE_SESSION, keys, args)))

        reply = yield from self._until_settled(session_id, attempt)
        if text_of(reply[0]) == "none":
            return 0, int(reply[1])
        return int(reply[1]), int(reply[2])

    def _session_keys(self, session_id: str) -> Op[tuple[list[str], list[str], list[str]]]:
        """(streams, consumer groups, KEYS) of a session as delete_session.lua and
        archive_finish.lua take them: the scripts build no keys, and check that what was found
        here is still so."""
        keys = self.keys
        log = keys.log(session_id)
        meta = keys.meta(session_id)
        streams = sorted(text_of(name) for name in (yield lambda c: c.hkeys(meta)))
        try:
            groups = [text_of(g["name"]) for g in (yield lambda c: c.xinfo_groups(log))]
        except rx.ResponseError:  # no log: no group either
            groups = []
        return (
            streams,
            groups,
            [
                log,
                meta,
                keys.open_attempts(session_id),
                keys.safe_tools(session_id),
                keys.tombstone(session_id),
                *(keys.stream(session_id, name) for name in streams),
                *(keys.group_dead_letters(session_id, group) for group in groups),
            ],
        )

    def _until_settled(
        self, session_id: str, attempt: Callable[[], Op[list[Any]]]
    ) -> Op[list[Any]]:
        """Run a script over a whole session again while it replies "changed": a stream or
        group was created between looking and calling."""
        for _ in range(100):
            reply = yield from self._retried(attempt)
            if text_of(reply[0]) != "changed":
                return reply
        raise BackendUnavailable(f"session {session_id!r} kept changing; nothing done to it")

    def _delete_one(self, session_id: str, stream: str) -> Op[tuple[int, int]]:
        keys = self.keys
        script_keys = [
            keys.log(session_id),
            keys.meta(session_id),
            keys.stream(session_id, stream),
            keys.open_attempts(session_id),
            keys.tombstone(session_id),
        ]
        deleted = 0
        while True:
            now = yield from self.now_ms_op()
            args = [stream, DELETE_CHUNK, now]
            reply = yield from self._retried(
                lambda: self._evalsha(DELETE_STREAM, script_keys, args)  # noqa: B023
            )
            status = text_of(reply[0])
            if status == "none":
                return deleted, int(reply[1])
            deleted += int(reply[1])
            if status == "done":
                return deleted, int(reply[2])

    def _idempotency_streams(self, session_id: str) -> Op[set[str]]:
        """The streams with append_id records: those in meta, and those deleted (spec 3.9)."""

        def look(pipe: Any) -> None:
            pipe.hkeys(self.keys.meta(session_id))
            pipe.hkeys(self.keys.tombstone(session_id))

        live, tomb = yield pipelined(look)
        deleted = (text_of(f) for f in tomb if text_of(f).startswith("stream:"))
        return {text_of(name) for name in live} | {f.split(":", 1)[1] for f in deleted}

    def _append_ids(self, session_id: str) -> Op[list[AppendRecord]]:
        streams = yield from self._retried(lambda: self._idempotency_streams(session_id))
        records: list[AppendRecord] = []
        for stream in sorted(streams):
            key = self.keys.idempotency(session_id, stream)
            scan_from, seen = 0, set()  # HSCAN may return a field twice
            while True:
                scan_from, found = yield from self._run(
                    lambda c: c.hscan(key, scan_from, count=1000)  # noqa: B023
                )
                for append_id, value in found.items():
                    if append_id in seen:
                        continue
                    seen.add(append_id)
                    records.append(append_record(stream, text_of(append_id), value))
                if scan_from == 0:
                    break
        return records
