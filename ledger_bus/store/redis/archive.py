"""The Redis half of archiving (operations/archiving.py): the mark, the moved records, the end."""

from __future__ import annotations

from collections.abc import Iterable

from ledger_bus.model.errors import Refused
from ledger_bus.model.records import AppendRecord
from ledger_bus.store.families import ArchiveSource
from ledger_bus.store.redis.client import RedisPipeline, ScriptArg
from ledger_bus.store.redis.core import RedisCore, pipelined
from ledger_bus.store.redis.encoding import (
    idempotency_value,
    text_of,
)
from ledger_bus.store.redis.replies import (
    ArchiveFinished,
    ArchiveFinishReply,
    Changed,
    MovedElsewhere,
    archive_abandon_reply,
    archive_finish_reply,
)
from ledger_bus.store.redis.scripts import (
    ARCHIVE_ABANDON,
    ARCHIVE_FINISH,
)
from ledger_bus.store.redis.sessions import (
    SETTLE_TRIES,
    idempotency_streams,
    kept_changing,
    session_layout,
)
from ledger_bus.store.steps import Op


class RedisArchive(RedisCore, ArchiveSource):
    """A session's way out to its archive."""

    def generation_of(self, session_id: str) -> int:
        """How many deletions the session has seen (spec 3.9)."""
        return self.run_op(self._generation_of(session_id))

    def _generation_of(self, session_id: str) -> Op[int]:
        tomb = self.keys.tombstone(session_id)
        return int((yield from self._run(lambda c: c.hget(tomb, "generation"))) or 0)

    def archive_state(self, session_id: str) -> tuple[str | None, bool]:
        """(the archive the session is moving or has moved to, or None; whether it has moved)."""
        return self.run_op(self._archive_state(session_id))

    def _archive_state(self, session_id: str) -> Op[tuple[str | None, bool]]:
        tomb = self.keys.tombstone(session_id)
        where, done = yield from self._run(lambda c: c.hmget(tomb, "archive", "archived_ms"))
        return (None if where is None else text_of(where)), done is not None

    def begin_archive(self, session_id: str, where: str) -> str:
        """Refuse appends to the session from now on, naming `where`; return the archive that
        is under way (another one, if an archive to elsewhere began first)."""
        tomb = self.keys.tombstone(session_id)

        def mark(pipe: RedisPipeline) -> None:
            pipe.hsetnx(tomb, "archive", where)
            pipe.hget(tomb, "archive")

        return text_of(self.run_op(self._run(pipelined(mark, transaction=True)))[1])

    def abandon_archive(self, session_id: str, where: str) -> bool:
        """Take appends again, unless the archive has finished."""
        keys, args = self.keys.archive_abandon_keys(session_id), [where]
        raw = self.run_op(self._retried(lambda: self._evalsha(ARCHIVE_ABANDON, keys, args)))
        return archive_abandon_reply(raw)

    def end_archive(self, session_id: str, records: Iterable[AppendRecord]) -> None:
        """After the archived session was deleted there: its append_id records come back here
        (a late retry must still find them, spec 3.9), then the session takes appends here
        again, as its next generation."""
        tomb = self.keys.tombstone(session_id)
        generation = self.generation_of(session_id)
        batch: list[AppendRecord] = []

        def write(pipe: RedisPipeline) -> None:
            for r in batch:
                value = idempotency_value(r, generation)
                pipe.hset(self.keys.idempotency(session_id, r.stream), r.append_id, value)
                pipe.hset(tomb, f"stream:{r.stream}", 1)

        for record in records:
            batch.append(record)
            if len(batch) >= 1000:
                self.run_op(self._run(pipelined(write)))
                batch.clear()
        if batch:
            self.run_op(self._run(pipelined(write)))
        now = self.now_ms()

        def reopen(pipe: RedisPipeline) -> None:
            pipe.hdel(tomb, "archive", "archived_ms")
            pipe.hincrby(tomb, "generation", 1)
            pipe.hset(tomb, "deleted_ms", now)

        self.run_op(self._run(pipelined(reopen, transaction=True)))

    def finish_archive(self, session_id: str, where: str, events: int) -> bool:
        """Remove the session but its tombstone, once its `events` are verified in `where`;
        False when it was finished before."""

        def attempt() -> Op[ArchiveFinishReply]:
            layout = yield from session_layout(self.keys, session_id)
            kept = sorted((yield from idempotency_streams(self.keys, session_id)))
            keys = self.keys.archive_finish_keys(session_id, layout.streams, layout.groups, kept)
            now = yield from self.now_ms_op()
            streams = layout.streams
            args: list[ScriptArg] = [now, len(streams), events, where, len(layout.groups), *streams]
            raw = yield from self._evalsha(ARCHIVE_FINISH, keys, args)
            return archive_finish_reply(raw)

        for _ in range(SETTLE_TRIES):
            reply = self.run_op(self._retried(attempt))
            if isinstance(reply, MovedElsewhere):
                raise Refused(
                    f"session {session_id!r} is being archived to {reply.where or 'nowhere'},"
                    f" not {where}"
                )
            if not isinstance(reply, Changed):
                break
        else:
            raise kept_changing(session_id)
        self.run_op(self._forget_session(session_id))  # "done": a crash may have come first
        return isinstance(reply, ArchiveFinished)
