"""Deletes of sessions and streams (spec 3.9), and the append_id records that outlive them."""

from __future__ import annotations

from typing import Final

from ledger_bus.model.records import (
    AppendRecord,
    Deletion,
)
from ledger_bus.store.redis.client import ClientRequest, ScriptArg
from ledger_bus.store.redis.core import RedisCore
from ledger_bus.store.redis.encoding import (
    append_record,
    text_of,
)
from ledger_bus.store.redis.replies import (
    DeleteSessionReply,
    DeleteStreamReply,
    MoreToDelete,
    NothingToDelete,
    SessionDeleted,
    delete_session_reply,
    delete_stream_reply,
)
from ledger_bus.store.redis.scripts import (
    DELETE_SESSION,
    DELETE_STREAM,
)
from ledger_bus.store.redis.sessions import (
    SETTLE_TRIES,
    idempotency_streams,
    kept_changing,
    session_layout,
)
from ledger_bus.store.steps import Op

# Appends one call of delete_stream.lua deletes, at most: up to 1,000 events each (the append
# limit), it holds the server for a few milliseconds, not for the whole stream.
DELETE_CHUNK: Final = 20


class RedisDeletes(RedisCore):
    """Deleting, a script at a time; what a deletion keeps."""

    def _delete(self, session_id: str, stream: str | None) -> Op[Deletion]:
        if stream is None:
            events, generation = yield from self._delete_session(session_id)
        else:
            events, generation = yield from self._delete_stream(session_id, stream)
        if stream is None and events:
            yield from self._forget_session(session_id)
        return Deletion(session_id, stream, events, generation)

    def _delete_session(self, session_id: str) -> Op[tuple[int, int]]:
        """(events deleted, generation) of a deletion of the whole session."""

        def attempt() -> Op[DeleteSessionReply]:
            layout = yield from session_layout(self.keys, session_id)
            now = yield from self.now_ms_op()
            args: list[ScriptArg] = [now, len(layout.streams), *layout.streams]
            return delete_session_reply(
                (yield from self._evalsha(DELETE_SESSION, layout.keys(self.keys), args))
            )

        for _ in range(SETTLE_TRIES):
            reply = yield from self._retried(attempt)
            if isinstance(reply, SessionDeleted):
                return reply.events, reply.generation
            if isinstance(reply, NothingToDelete):
                return 0, reply.generation
        raise kept_changing(session_id)

    def _delete_stream(self, session_id: str, stream: str) -> Op[tuple[int, int]]:
        """(events deleted, generation) of a deletion of one stream, a few appends a call."""
        script_keys = self.keys.delete_stream_keys(session_id, stream)

        def step() -> Op[DeleteStreamReply]:
            now = yield from self.now_ms_op()
            args: list[ScriptArg] = [stream, DELETE_CHUNK, now]
            return delete_stream_reply((yield from self._evalsha(DELETE_STREAM, script_keys, args)))

        deleted = 0
        while True:
            reply = yield from self._retried(step)
            if isinstance(reply, NothingToDelete):
                return deleted, reply.generation
            deleted += reply.deleted
            if not isinstance(reply, MoreToDelete):
                return deleted, reply.generation

    def _append_ids(self, session_id: str) -> Op[list[AppendRecord]]:
        streams = yield from self._retried(lambda: idempotency_streams(self.keys, session_id))
        records: list[AppendRecord] = []
        for stream in sorted(streams):
            records += yield from self._stream_append_ids(session_id, stream)
        return records

    def _stream_append_ids(self, session_id: str, stream: str) -> Op[list[AppendRecord]]:
        key = self.keys.idempotency(session_id, stream)
        scan_from = 0
        seen: set[bytes] = set()  # HSCAN may return a field twice
        records: list[AppendRecord] = []

        def page(cursor: int) -> ClientRequest:
            return lambda c: c.hscan(key, cursor, count=1000)

        while True:
            scan_from, found = yield from self._run(page(scan_from))
            for append_id, value in found.items():
                if append_id in seen:
                    continue
                seen.add(append_id)
                records.append(append_record(stream, text_of(append_id), value))
            if scan_from == 0:
                return records
