"""Appends, one route in either driver: the script's one call, and the open-attempts and session
indexes around it; restore. The common append sends its call at once on the driver's script
connection and, should it fail, makes it again as every call is retried; an append that writes
artifacts first or waits for replicas makes the same call through `_send_writing_artifacts`
(the artifacts written before it, written again if they went) or its Confirmer."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Final, TypeVar

from ledger_bus.model.artifacts import Artifact
from ledger_bus.model.durability import Durability
from ledger_bus.model.errors import (
    BackendRefused,
    BackendUnavailable,
    HistoryRewound,
    IdempotencyConflict,
    InvalidInput,
    LedgerError,
    SessionArchived,
    UnexpectedReply,
    VersionConflict,
)
from ledger_bus.model.ids import StreamId, cursor_ms
from ledger_bus.model.prepared import Fence, PreparedAppend, lease_lost
from ledger_bus.model.records import AppendResult
from ledger_bus.store.redis.client import RedisPipeline, ScriptArg
from ledger_bus.store.redis.connection import REDIS_ERRORS
from ledger_bus.store.redis.core import (
    AppendTarget,
    RedisCore,
    pipelined,
)
from ledger_bus.store.redis.encoding import (
    ARTIFACT_CHUNK,
    ARTIFACT_UPLOAD_TTL_MS,
    OPEN_MEMBER_SEP,
    ledger_cursor,
    lua_notes,
    redis_cursor,
)
from ledger_bus.store.redis.replies import (
    Appended,
    AppendReply,
    Archived,
    Conflict,
    Duplicate,
    Fenced,
    IdempotencyClash,
    NoArtifact,
    NoPermission,
    OutOfOrder,
    Restored,
    RestoreReply,
    Rewound,
    append_reply,
    artifact_put_reply,
    restore_reply,
)
from ledger_bus.store.redis.scripts import (
    APPEND,
    ARTIFACT_PUT,
    RESTORE,
)
from ledger_bus.store.restore import RestoreBatch
from ledger_bus.store.steps import Op

# How often the cross-session index is refreshed for one session by one store, at most: it is an
# index of last activity, not a second record, and refreshing it on every append would cost a
# second round trip.
INDEX_REFRESH_MS: Final = 1000
# How often an append that opens attempts refreshes its session in the open-attempts index, at
# most. A reconciler forgets a session only once its entry is older than its prune window (600 s
# by default, never below OPEN_INDEX_REFRESH_MS * 2 in ReconcilerConfig) and nothing is open, so
# an entry refreshed this recently is still there whenever the script opens an attempt.
OPEN_INDEX_REFRESH_MS: Final = 60_000

R = TypeVar("R", AppendReply, RestoreReply)


def events_args(prepared: PreparedAppend) -> list[ScriptArg]:
    """The ARGV that append.lua and restore.lua end with: the payloads, the notes as one
    argument (encoding.lua_notes), and each artifact's sha256 and uses."""
    args: list[ScriptArg] = [*prepared.payloads, lua_notes(prepared.notes)]
    for use in prepared.uses:
        args += use
    return args


def fence_arg(fence: Fence | None) -> str:
    """append.lua's ARGV[9]: the lease an append is made under, or "" for none."""
    if fence is None:
        return ""
    return f"{fence.lease}\x1f{fence.owner}\x1f{fence.token}"


class RedisAppend(RedisCore):
    """Appends and restores, on either driver."""

    def _append(
        self,
        stream: StreamId,
        expected: int | None,
        append_id: str,
        prepared: PreparedAppend,
        durability: Durability,
    ) -> Op[AppendResult]:
        session = stream.session_id
        target = self._append_target(stream)
        keys, known, generation = target.keys, target.acknowledged, target.generation
        if durability is self.durability:
            confirmer = self._default_confirmer
        else:
            confirmer = self._confirmer(durability)
        args = self.append_args(
            stream, expected, append_id, prepared, known, confirmer is not None, generation
        )
        listed = None
        if prepared.opens_attempts and self._open_index_due(session):
            listed = yield from self._list_open_session(session)
        acks: object = None
        if confirmer is None and not prepared.artifacts:
            # The common append: its one call, sent at once on the driver's script connection
            # (held.py for the blocking store, autopipe.py under asyncio); should it fail, the
            # same call is retried as every call is.
            try:
                raw = yield self._script_request(APPEND, keys, args, held=True)
            except REDIS_ERRORS as err:
                raw = yield from self._tried_again(
                    err, APPEND, lambda: self._evalsha(APPEND, keys, args, True)
                )
            reply = append_reply(raw)
        else:

            def send(keys: list[str]) -> Op[tuple[AppendReply, Any]]:
                if confirmer is None:
                    return append_reply((yield from self._evalsha(APPEND, keys, args, True))), None
                raw, acks = yield from confirmer.send(APPEND, keys, args)
                return append_reply(raw), acks

            reply, acks = yield from self._send_writing_artifacts(session, prepared, keys, send)
        if listed is not None:
            committed = isinstance(reply, Appended | Duplicate)
            yield from self._settle_open_listing(session, listed, committed)
        landed = self._landed(stream, expected, append_id, prepared, known, reply)
        result = self._result(stream, landed)
        if not result.deduplicated:
            ms = cursor_ms(result.cursor)
            if self._index_due(session, ms):  # checked here too: most appends refresh nothing
                yield from self._touch_index(session, ms)
        if confirmer is not None:
            result = yield from confirmer.confirm(result, acks)  # raises when not confirmed
        # Acknowledged: a later append that finds the stream shorter in the same generation was
        # rewound by a failover.
        target.acknowledge(result.last_version, landed.generation)
        return result

    def _restore_batch(self, batch: RestoreBatch) -> Op[int]:
        stream, prepared = batch.stream, batch.prepared
        session = stream.session_id
        keys = self.keys.restore_keys(session, stream.name)
        args: list[ScriptArg] = [
            stream.name,
            batch.first_version,
            len(batch.events),
            *(redis_cursor(c) for c in batch.cursors),
            *events_args(prepared),
        ]
        listed = None
        if prepared.opens_attempts:
            listed = yield from self._list_open_session(session)

        def send(keys: list[str]) -> Op[tuple[RestoreReply, None]]:
            return restore_reply((yield from self._evalsha(RESTORE, keys, args))), None

        reply, _ = yield from self._send_writing_artifacts(session, prepared, keys, send)
        if listed is not None:
            yield from self._settle_open_listing(session, listed, isinstance(reply, Restored))
        if isinstance(reply, Conflict):
            raise VersionConflict(str(stream), batch.first_version - 1, reply.version)
        if isinstance(reply, OutOfOrder):
            raise InvalidInput(
                f"{batch.events[0]!r}: events to restore must come in commit order, above the"
                " session's newest cursor"
            )
        if not isinstance(reply, Restored):
            raise self._refusal(stream, reply)
        if reply.written:
            yield from self._touch_index(session, cursor_ms(batch.cursors[-1]))
        return reply.written

    def _append_target(self, stream: StreamId) -> AppendTarget:
        """What this store knows of `stream` (its KEYS, the version acknowledged to it),
        remembered from its first append."""
        target = self._streams.get(stream)
        if target is None:
            target = self._remember(self._streams, stream, AppendTarget(self._keys_of(stream)))
        return target

    def _landed(  # noqa: PLR0913  (the append as sent, and the reply to read against it)
        self,
        stream: StreamId,
        expected: int | None,
        append_id: str,
        prepared: PreparedAppend,
        known: int,
        reply: AppendReply,
    ) -> Appended | Duplicate:
        """append.lua's reply when the events are in the log (written now, or before by the
        same append); the error any other reply means, raised."""
        if isinstance(reply, Appended | Duplicate):
            return reply
        if isinstance(reply, Rewound):
            raise HistoryRewound(
                str(stream), known, reply.version, lambda: self.accept_history(stream)
            )
        if isinstance(reply, Conflict):
            raise VersionConflict(str(stream), -1 if expected is None else expected, reply.version)
        if isinstance(reply, IdempotencyClash):
            raise IdempotencyConflict(str(stream), append_id)
        if isinstance(reply, Fenced) and prepared.fence is not None:
            raise lease_lost(prepared.fence, reply.token)
        raise self._refusal(stream, reply)

    @staticmethod
    def _result(stream: StreamId, landed: Appended | Duplicate) -> AppendResult:
        cursor = ledger_cursor(landed.cursor)
        return AppendResult(
            stream, landed.first, landed.last, cursor, isinstance(landed, Duplicate)
        )

    @staticmethod
    def _refusal(
        stream: StreamId, reply: Archived | Fenced | NoArtifact | NoPermission
    ) -> LedgerError:
        """The error of a reply append.lua and restore.lua both give when they write nothing."""
        if isinstance(reply, Archived):
            return SessionArchived(stream.session_id, reply.where)
        if isinstance(reply, Fenced):  # only an append that named a fence is fenced
            return UnexpectedReply(f"append.lua refused an append without a fence: {reply}")
        if isinstance(reply, NoArtifact):
            return BackendUnavailable(
                f"an artifact of the append kept going before the append: {reply.key}"
            )
        return BackendRefused(
            f"redis refused the permission (ACL): this user may not {reply.command}"
            f" {reply.key}; nothing written"
        )

    def accept_history(self, stream: StreamId) -> None:
        """Forget the versions of `stream` acknowledged to this store, once a HistoryRewound has
        been dealt with (`HistoryRewound.accept`): later appends build on the stream as it now
        is."""
        target = self._streams.get(stream)
        if target is not None:
            target.acknowledged = 0

    def append_args(  # noqa: PLR0913  (what append.lua's ARGV names, which the benchmarks build)
        self,
        stream: StreamId,
        expected: int | None,
        append_id: str,
        prepared: PreparedAppend,
        known: int = 0,
        waits: bool = False,
        generation: int = 0,
    ) -> list[ScriptArg]:
        """The ARGV of an append, in the order append.lua names them; `waits`: a WAIT follows."""
        return [
            stream.name,
            -1 if expected is None else expected,
            append_id,
            prepared.sha256,
            len(prepared.payloads),
            known,
            "1" if waits else "",
            generation,
            fence_arg(prepared.fence),
            *events_args(prepared),
        ]

    def _send_writing_artifacts(
        self,
        session: str,
        prepared: PreparedAppend,
        keys: list[str],
        send: Callable[[list[str]], Op[tuple[R, Any]]],
    ) -> Op[tuple[R, Any]]:
        """`send(keys)` retried, for a script call whose events may keep fields as artifacts
        (append.lua, restore.lua): those are written first and their keys added, and written
        again when one went before the call ran (a deletion of the session, its TTL)."""
        if prepared.artifacts:
            shas: list[str] = [a.ref.sha256 for a in prepared.artifacts]
            keys = [*keys, *self.keys.artifact_keys(session, shas)]
            yield from self._put_artifacts(session, prepared.artifacts, again=False)
        for _ in range(3):
            sent = yield from self._retried(lambda: send(keys))
            if not isinstance(sent[0], NoArtifact):
                break
            yield from self._put_artifacts(session, prepared.artifacts, again=True)
        return sent

    def _put_artifacts(
        self, session: str, artifacts: tuple[Artifact, ...], again: bool
    ) -> Op[None]:
        """Write the artifacts the session does not hold (all of them `again`)."""
        keys = self.keys
        todo = list(artifacts)
        if not again:

            def present(pipe: RedisPipeline) -> None:
                for a in artifacts:
                    pipe.exists(keys.artifact(session, a.ref.sha256))

            there = yield from self._run(pipelined(present))
            todo = [a for a, found in zip(artifacts, there, strict=True) if not found]
        for artifact in todo:
            token = secrets.token_hex(6)
            for _ in range(3):
                if (
                    yield from self._retried(partial(self._put_artifact, session, artifact, token))
                ):
                    break
            else:
                raise BackendUnavailable(
                    f"artifact sha256:{artifact.ref.sha256} could not be written whole"
                )

    def _put_artifact(self, session: str, artifact: Artifact, token: str) -> Op[bool]:
        """Write one artifact under a name of its own (its upload, by `token`) until
        artifact_put.lua names it: a hash of 1 MiB chunks, a chunk per command, so that no
        command holds the server for long (one string grown to the size, or grown a chunk at a
        time, held it for tens of milliseconds: docs/performance.md). False when the upload came
        out short."""
        sha, data = artifact.ref.sha256, memoryview(artifact.data)
        names = self.keys.artifact_put_keys(session, sha, token)
        upload = names[0]
        chunks = [data[at : at + ARTIFACT_CHUNK] for at in range(0, len(data), ARTIFACT_CHUNK)]

        def first(pipe: RedisPipeline) -> None:
            pipe.hset(upload, "0", chunks[0])
            pipe.pexpire(upload, ARTIFACT_UPLOAD_TTL_MS)

        def rest(pipe: RedisPipeline) -> None:
            for n in range(1, len(chunks)):
                pipe.hset(upload, str(n), chunks[n])

        # The first chunk and the TTL together: an upload cut short goes by itself.
        yield pipelined(first, transaction=True)
        if len(chunks) > 1:
            yield pipelined(rest)
        args: list[ScriptArg] = [sum(len(c) for c in chunks), len(chunks)]
        return artifact_put_reply((yield from self._evalsha(ARTIFACT_PUT, names, args)))

    def _keys_of(self, stream: StreamId) -> list[str]:
        """The KEYS of an append to `stream`, in the order append.lua names them."""
        return self.keys.append_keys(stream.session_id, stream.name)

    def _list_open_session(self, session: str) -> Op[str]:
        """List the session in the open-attempts index before an append that opens attempts: a
        writer killed right after its request committed must not leave an open attempt that no
        reconciler can find. The index lives outside the session's slot, so the script cannot
        write it on a cluster. The entry is provisional, a member of this append's own
        (`<session>\x1f<token>`), so that an append refused takes back exactly what it wrote
        whatever other writers of the session listed meanwhile; `_settle_open_listing` makes
        it the session's own once the script has run. Listing once a minute keeps the entry
        inside any prune window (see OPEN_INDEX_REFRESH_MS) at the cost of two extra round
        trips a minute (the caller asks `_open_index_due`). Returns the provisional member."""
        member = f"{session}{OPEN_MEMBER_SEP}{secrets.token_hex(8)}"
        key = self.keys.open_index_of(session)
        yield from self._run(lambda c: c.zadd(key, {member: self.now_local_ms()}))
        return member

    def _settle_open_listing(self, session: str, member: str, committed: bool) -> Op[None]:
        """After the script: a committed append lists the session under its own name, and the
        provisional member goes either way (an append refused writes nothing, the index
        included). Left behind only by a writer that died in between, the member still names
        the session to the reconciler, which forgets it with the session."""
        key = self.keys.open_index_of(session)
        now = self.now_local_ms()

        def settle(pipe: RedisPipeline) -> None:
            if committed:
                pipe.zadd(key, {session: now}, gt=True)
            pipe.zrem(key, member)

        settled = yield from self._best_effort("open-attempts index listing", pipelined(settle))
        if settled and committed:
            self._remember(self._open_indexed, session, now)

    def _open_index_due(self, session: str) -> bool:
        last = self._open_indexed.get(session, -OPEN_INDEX_REFRESH_MS)
        return self.now_local_ms() - last >= OPEN_INDEX_REFRESH_MS

    def _index_due(self, session: str, ms: int) -> bool:
        return ms - self._indexed.get(session, -INDEX_REFRESH_MS) >= INDEX_REFRESH_MS

    @staticmethod
    def now_local_ms() -> int:
        return time.time_ns() // 1_000_000

    def _touch_index(self, session_id: str, ms: int) -> Op[None]:
        """Refresh the session's last activity after a committed append. A failure (memory full,
        a lost connection) leaves the index a little stale and is retried by the next append;
        `sessions --rebuild` repairs whatever is left."""
        if not self._index_due(session_id, ms):
            return
        key = self.keys.index_of(session_id)
        if (
            yield from self._best_effort(
                "session index refresh", lambda c: c.zadd(key, {session_id: ms}, gt=True)
            )
        ):
            self._remember(self._indexed, session_id, ms)
