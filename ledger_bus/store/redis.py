"""The Redis Streams store: atomic Lua appends, stream indexes, one session log per session.

Every primitive is an operation (store/ops.py): it yields its Redis calls as requests on a
client, so the same code runs over `redis.Redis` and `RedisCluster` here, and over their asyncio
counterparts under `ledger_bus.aio`.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import re
import secrets
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final, TypeVar, cast

import redis.exceptions as rx
from redis import Redis
from redis.cluster import RedisCluster

from ledger_bus.model.artifacts import Artifact, unpack
from ledger_bus.model.batch import Limits, PreparedAppend
from ledger_bus.model.durability import LOCAL, Durability
from ledger_bus.model.errors import (
    BackendRefused,
    BackendUnavailable,
    HistoryRewound,
    IdempotencyConflict,
    InvalidInput,
    NotFound,
    Refused,
    SessionArchived,
    VersionConflict,
)
from ledger_bus.model.ids import ExpectedVersion, StreamId, cursor_ms
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
from ledger_bus.store.base import (
    REPLAY_CONSUMER,
    REPLAY_IDLE_MS,
    EventStore,
    dead_letter_fields,
    parse_open,
)
from ledger_bus.store.connection import redis_retried, refusal, sentinels_of
from ledger_bus.store.held import HeldConnections
from ledger_bus.store.keys import Keys
from ledger_bus.store.ops import Op, Request, call, run
from ledger_bus.store.replication import Confirmer, LuaScript
from ledger_bus.store.restore import RestoreBatch

log = logging.getLogger("ledger_bus.store")
_HEX: Final = re.compile(rb"[0-9a-f]{64}")

T = TypeVar("T")
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
# Between a session id and the token of an append's provisional entry in the open-attempts
# index; no session id holds a control character.
OPEN_MEMBER_SEP: Final = "\x1f"
# Appends one call of delete_stream.lua deletes, at most: up to 1,000 events each (the append
# limit), it holds the server for a few milliseconds, not for the whole stream.
DELETE_CHUNK: Final = 20
# Artifacts are written a chunk per command and read a few chunks per round trip, so that no
# command holds the server for long.
ARTIFACT_CHUNK: Final = 1024 * 1024
ARTIFACT_READ_CHUNKS: Final = 4
# How long an artifact written for an append that never commits is kept (an append that commits
# makes it persist).
ARTIFACT_UPLOAD_TTL_MS: Final = 3_600_000


@dataclass(slots=True)
class _Written:
    """A stream this store appends to: the KEYS of its appends, and its highest version
    acknowledged to this store, in the session's generation (spec 3.9) it was acknowledged in."""

    keys: list[str]
    acknowledged: int = 0
    generation: int = 0

    def acknowledge(self, last_version: int, generation: int) -> None:
        if generation > self.generation:  # the stream was deleted since: its count starts over
            self.generation, self.acknowledged = generation, last_version
        elif generation == self.generation and last_version > self.acknowledged:
            self.acknowledged = last_version


@dataclass(slots=True)
class Direct:
    """An append made ready for the direct path (RedisStore.direct)."""

    stream: StreamId
    expected: int | None
    append_id: str
    written: _Written
    keys: list[str]
    args: list[Any] | None  # None: the general path must take it
    prepared: PreparedAppend


def _script(name: str) -> LuaScript:
    text = resources.files("ledger_bus.store").joinpath(f"lua/{name}.lua").read_text("utf-8")
    return LuaScript(text, hashlib.sha1(text.encode()).hexdigest())


APPEND: Final = _script("append")
RESTORE: Final = _script("restore")
LEASE: Final = _script("lease")
FORGET_SESSION: Final = _script("forget_session")
PRUNE_CONSUMERS: Final = _script("prune_consumers")
DELETE_SESSION: Final = _script("delete_session")
DELETE_STREAM: Final = _script("delete_stream")
ARCHIVE_FINISH: Final = _script("archive_finish")
ARCHIVE_ABANDON: Final = _script("archive_abandon")
ARTIFACT_PUT: Final = _script("artifact_put")


def pipelined(build: Callable[[Any], object], transaction: bool = False) -> Request:
    """A request that queues `build(pipe)`'s commands and sends them in one round trip."""

    def request(client: Any) -> Any:
        pipe = client.pipeline(transaction=transaction)
        build(pipe)
        return pipe.execute()

    return request


def idempotency_value(record: AppendRecord, generation: int) -> bytes:
    """What lb:{S}:idem:<stream> keeps of an append (append.lua): the digest's 32 bytes, then
    "<first version> <events> <cursor> <generation>"."""
    events = record.last_version - record.first_version + 1
    text = f"{record.first_version} {events} {_redis_cursor(record.cursor)} {generation}"
    return bytes.fromhex(record.digest) + text.encode()


def append_record(stream: str, append_id: str, value: bytes) -> AppendRecord:
    """The append an idempotency value records, in either form append.lua reads."""
    if len(value) > 64 and value[64:65] == b" " and _HEX.fullmatch(value[:64]):
        digest, first, last, cursor = value.decode().split(" ")[:4]  # the older form
    else:
        digest = value[:32].hex()
        first, events, cursor, _generation = value[32:].decode().split(" ")
        last = str(int(first) + int(events) - 1)
    return AppendRecord(stream, append_id, digest, int(first), int(last), _ledger_cursor(cursor))


def _glob_escape(text: str) -> str:
    """`text` matched literally in a SCAN pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _redis_cursor(cursor: str) -> str:
    ms, seq = cursor.split("-")
    return f"{int(ms)}-{int(seq)}"


def _ledger_cursor(entry_id: bytes | str) -> str:
    """format_cursor() of a Redis entry id, padding the digits without parsing them."""
    ms, _, seq = _text(entry_id).partition("-")
    return f"{ms:0>13}-{seq:0>6}"


def fullest(memory: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(used_memory, maxmemory) of the node nearest its maxmemory among the INFO memory of
    several (a cluster's primaries), or of the one using the most where none has a maxmemory."""
    found = [(int(m.get("used_memory", 0)), int(m.get("maxmemory", 0))) for m in memory]
    return max(found, key=lambda m: (m[0] / m[1] if m[1] else 0.0, m[0]))


class RedisStore(EventStore):
    """An EventStore on one Redis (or Valkey) server, 7.0 or newer, or on a Redis Cluster.

    Every call is retried with backoff on a lost connection until `timeout` seconds have passed,
    then raises BackendUnavailable. Retrying an append is safe: the append_id makes it land once.
    `client` is a blocking client for this class's own methods, or an asyncio one when the store
    is the core of `ledger_bus.aio.AsyncStore`, which runs the same operations.
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "lb",
        limits: Limits | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        socket_timeout: float = 5.0,
        durability: Durability = LOCAL,
    ):
        super().__init__(limits, durability)
        self.client: Any = client  # the commands used are common to all four kinds of client
        # A cluster client, blocking or asyncio (whose module costs the command line 0.1 s to
        # import, so it is not asked by name): both keep a map of the nodes.
        self.cluster = hasattr(client, "nodes_manager")
        self._confirmers: dict[Durability, Confirmer] = {}
        self._default_confirmer = self._confirmer(durability)
        # What this store knows of each stream it appended to: its keys, and the highest version
        # acknowledged to it (forgotten, like the other per-store tables, past REMEMBERED).
        self._streams: dict[StreamId, _Written] = {}
        self.keys = Keys(prefix)
        self.timeout = timeout
        # A blocking read longer than the client's socket timeout would look like a dead server.
        self.max_block_ms = max(100, int((socket_timeout - 1.0) * 1000))
        self._indexed: dict[str, int] = {}
        self._open_indexed: dict[str, int] = {}
        # A blocking client's appends run on a connection each thread holds (the asyncio
        # driver coalesces its appends into pipelines instead: store/autopipe.py).
        self._held = HeldConnections(client) if isinstance(client, Redis | RedisCluster) else None

    # -- the boundary: every Redis call goes through here ---------------------------------------

    def run_op(self, op: Op[T]) -> T:
        return run(op, self.client)

    def _retried(self, make: Callable[[], Op[T]]) -> Op[T]:
        return redis_retried(make, self.timeout)

    def _run(self, request: Request) -> Op[Any]:
        """One request, retried."""
        return self._retried(lambda: call(request))

    def _quietly(self, what: str, request: Request) -> Op[bool]:
        """Run bookkeeping that follows a committed write; a failure is logged, never raised,
        because the write it follows is in the ledger whatever happens here."""
        try:
            yield request  # once: a dead server must not hold up an append that has committed
        except (rx.RedisError, OSError) as err:
            log.warning("%s skipped, to be redone later: %s", what, refusal(err))
            return False
        return True

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
                out.append(RecordedEvent(ref, int(fields[b"v"]), cursor, unpack(fields[b"p"])))
        finally:
            if paused:
                gc.enable()
        return out

    # -- primitives -----------------------------------------------------------------------------

    def append(
        self,
        stream: StreamId,
        expected_version: ExpectedVersion,
        append_id: str,
        events: Sequence[object],
        *,
        durability: str | Durability | None = None,
    ) -> AppendResult:
        """EventStore.append. The common append goes out on this thread's held connection in
        one call, outside the machinery of operations (`direct`)."""
        held = self._held
        if held is None or not self.direct_suits(durability):
            return super().append(
                stream, expected_version, append_id, events, durability=durability
            )
        ready = self.direct(stream, expected_version, append_id, events)
        if ready.args is not None:
            keys = ready.keys
            try:
                reply = held.execute(keys[0], "EVALSHA", APPEND.sha, len(keys), *keys, *ready.args)
            except (rx.RedisError, OSError):
                reply = None  # NOSCRIPT, a lost connection, a failover: the general path knows
            result = self.settle(ready, reply)
            if result is not None:
                if self.index_due(result):
                    self.run_op(self.touch_index(result))
                return result
        return self.run_op(self.general(ready))

    def direct_suits(self, durability: str | Durability | None) -> bool:
        """Whether an append asking for `durability` may take the direct path: only a local
        append waits for nothing after its script."""
        return durability is None and self._default_confirmer is None

    def direct(
        self,
        stream: StreamId,
        expected_version: ExpectedVersion,
        append_id: str,
        events: Sequence[object],
    ) -> Direct:
        """An append checked and prepared for the direct path: one script call, its keys and
        arguments (None when the append needs more: artifacts to write first, or the
        open-attempts index to refresh); `general` is the path to fall back on. The direct path
        costs a single-event append a tenth less than the operations' machinery; any failure of
        its call, or a reply that needs more (an archived session), takes the general path,
        which starts the append over: its append_id makes it land once."""
        expected, prepared, _ = self._prepare(stream, expected_version, append_id, events, None)
        written = self._written(stream)

        ready = Direct(stream, expected, append_id, written, written.keys, None, prepared)
        if prepared.artifacts or (
            prepared.opens_attempts and self._open_index_due(stream.session_id)
        ):
            return ready
        ready.args = self.append_args(
            stream, expected, append_id, prepared, written.acknowledged, False, written.generation
        )
        return ready

    def general(self, ready: Direct) -> Op[AppendResult]:
        """The general path for an append the direct path made ready."""
        return self._append(
            ready.stream, ready.expected, ready.append_id, ready.prepared, self.durability
        )

    def settle(self, ready: Direct, reply: Any) -> AppendResult | None:
        """The result of a direct append's reply (or the error it means); None when the general
        path must take the append: no reply, or an archived session."""
        if reply is None or reply[0] == b"archived":
            return None
        written = ready.written
        result = self._outcome(
            ready.stream, ready.expected, ready.append_id, written.acknowledged, reply
        )
        written.acknowledge(result.last_version, int(reply[4 if result.deduplicated else 5]))
        return result

    def index_due(self, result: AppendResult) -> bool:
        """Whether the session index is to be refreshed after a direct append's `result`."""
        return not result.deduplicated and self._index_due(
            result.stream.session_id, cursor_ms(result.cursor)
        )

    def touch_index(self, result: AppendResult) -> Op[None]:
        """Refresh the session index after a direct append's `result`."""
        return self._touch_index(result.stream.session_id, cursor_ms(result.cursor))

    def _append(
        self,
        stream: StreamId,
        expected: int | None,
        append_id: str,
        prepared: PreparedAppend,
        durability: Durability,
    ) -> Op[AppendResult]:
        session = stream.session_id
        written = self._written(stream)
        keys, known, generation = written.keys, written.acknowledged, written.generation
        if durability is self.durability:
            confirmer = self._default_confirmer
        else:
            confirmer = self._confirmer(durability)
        args = self.append_args(
            stream, expected, append_id, prepared, known, confirmer is not None, generation
        )
        listed = None
        if prepared.opens_attempts:
            listed = yield from self._list_open_session(session)
        if prepared.artifacts:
            keys = [*keys, *self._artifact_keys(session, prepared.artifacts)]
            yield from self._put_artifacts(session, prepared.artifacts, again=False)
        acks = None
        for _ in range(3):
            if confirmer is None:
                reply = yield from self._retried(lambda: self._evalsha(APPEND, keys, args, True))
            else:
                reply, acks = yield from self._retried(lambda: confirmer.send(APPEND, keys, args))
            if reply[0] != b"noartifact":
                break
            # Gone since it was written (a deletion of the session, its TTL): write it again.
            yield from self._put_artifacts(session, prepared.artifacts, again=True)
        if listed is not None:
            yield from self._settle_open_listing(session, listed, reply[0] in (b"ok", b"dup"))
        result = self._outcome(stream, expected, append_id, known, reply)
        if not result.deduplicated:
            yield from self._touch_index(session, cursor_ms(result.cursor))
        if confirmer is not None:
            result = yield from confirmer.confirm(result, acks)  # raises when not confirmed
        # Acknowledged: a later append that finds the stream shorter in the same generation was
        # rewound by a failover.
        written.acknowledge(result.last_version, int(reply[4 if result.deduplicated else 5]))
        return result

    def _restore_batch(self, batch: RestoreBatch) -> Op[int]:
        stream, prepared = batch.stream, batch.prepared
        session = stream.session_id
        keys = self._keys_of(stream)
        args: list[Any] = [
            stream.name,
            batch.first_version,
            len(batch.events),
            *(_redis_cursor(c) for c in batch.cursors),
            *prepared.payloads,
            "\x1e" + "\x1e".join(prepared.notes),
        ]
        for use in prepared.uses:
            args += use
        listed = None
        if prepared.opens_attempts:
            listed = yield from self._list_open_session(session, due=True)
        if prepared.artifacts:
            keys += self._artifact_keys(session, prepared.artifacts)
            yield from self._put_artifacts(session, prepared.artifacts, again=False)
        for _ in range(3):
            reply = yield from self._retried(lambda: self._evalsha(RESTORE, keys, args))
            if reply[0] != b"noartifact":
                break
            yield from self._put_artifacts(session, prepared.artifacts, again=True)
        if listed is not None:
            yield from self._settle_open_listing(session, listed, reply[0] == b"ok")
        status = _text(reply[0])
        if status == "conflict":
            raise VersionConflict(str(stream), batch.first_version - 1, int(reply[1]))
        if status == "order":
            raise InvalidInput(
                f"{batch.events[0]!r}: events to restore must come in commit order, above the"
                " session's newest cursor"
            )
        if status != "ok":
            self._outcome(stream, None, "restore", 0, reply)  # raises what the reply means
        if int(reply[1]):
            yield from self._touch_index(session, cursor_ms(batch.cursors[-1]))
        return int(reply[1])

    def _written(self, stream: StreamId) -> _Written:
        written = self._streams.get(stream)
        if written is None:
            written = self._remember(self._streams, stream, _Written(self._keys_of(stream)))
        return written

    def _outcome(
        self, stream: StreamId, expected: int | None, append_id: str, known: int, reply: Any
    ) -> AppendResult:
        """The result append.lua's reply gives, or the error it means."""
        status = _text(reply[0])
        if status == "rewound":
            raise HistoryRewound(
                str(stream), known, int(reply[1]), lambda: self.accept_history(stream)
            )
        if status == "conflict":
            raise VersionConflict(str(stream), -1 if expected is None else expected, int(reply[1]))
        if status == "idem":
            raise IdempotencyConflict(str(stream), append_id)
        if status == "archived":
            raise SessionArchived(stream.session_id, _text(reply[1]))
        if status == "noartifact":
            raise BackendUnavailable(
                f"an artifact of the append kept going before the append: {_text(reply[1])}"
            )
        if status == "noperm":
            raise BackendRefused(
                f"redis refused the permission (ACL): this user may not {_text(reply[1])}"
                f" {_text(reply[2])}; nothing written"
            )
        cursor = _ledger_cursor(reply[3])
        return AppendResult(stream, int(reply[1]), int(reply[2]), cursor, status == "dup")

    def _confirmer(self, durability: Durability) -> Confirmer | None:
        """What waits for `durability` (None for local); one per level, each with its own view
        of how many replicas are attached."""
        if durability.local:
            return None
        found = self._confirmers.get(durability)
        if found is None:
            found = self._confirmers[durability] = Confirmer(self.cluster, durability)
        return found

    def accept_history(self, stream: StreamId) -> None:
        """Forget the versions of `stream` acknowledged to this store, once a HistoryRewound has
        been dealt with (`HistoryRewound.accept`): later appends build on the stream as it now
        is."""
        written = self._streams.get(stream)
        if written is not None:
            written.acknowledged = 0

    def append_args(
        self,
        stream: StreamId,
        expected: int | None,
        append_id: str,
        prepared: PreparedAppend,
        known: int = 0,
        waits: bool = False,
        generation: int = 0,
    ) -> list[Any]:
        """The ARGV of an append, in the order append.lua names them; `waits`: a WAIT follows."""
        args: list[Any] = [
            stream.name,
            -1 if expected is None else expected,
            append_id,
            prepared.sha256,
            len(prepared.payloads),
            known,
            "1" if waits else "",
            generation,
            *prepared.payloads,
            # One argument for all the notes (append.lua): each begun by \x1e, which no id holds.
            "\x1e" + "\x1e".join(prepared.notes),
        ]
        for use in prepared.uses:
            args += use
        return args

    def _artifact_keys(self, session: str, artifacts: tuple[Artifact, ...]) -> list[str]:
        """The KEYS an append with artifacts adds, in the order append.lua names them."""
        keys = self.keys
        return [
            keys.artifact_uses(session),
            *(keys.artifact(session, a.ref.sha256) for a in artifacts),
        ]

    def _put_artifacts(
        self, session: str, artifacts: tuple[Artifact, ...], again: bool
    ) -> Op[None]:
        """Write the artifacts the session does not hold (all of them `again`), each under a
        name of its own until artifact_put.lua names it: a hash of 1 MiB chunks, a chunk per
        command, so that no command holds the server for long (one string grown to the size,
        or grown a chunk at a time, held it for tens of milliseconds: docs/performance.md)."""
        keys = self.keys
        todo = list(artifacts)
        if not again:

            def present(pipe: Any) -> None:
                for a in artifacts:
                    pipe.exists(keys.artifact(session, a.ref.sha256))

            there = yield from self._run(pipelined(present))
            todo = [a for a, found in zip(artifacts, there, strict=True) if not found]
        for artifact in todo:
            sha, data = artifact.ref.sha256, memoryview(artifact.data)
            upload = keys.artifact_upload(session, sha, secrets.token_hex(6))
            names = [upload, keys.artifact(session, sha)]
            chunks = [data[at : at + ARTIFACT_CHUNK] for at in range(0, len(data), ARTIFACT_CHUNK)]

            def send(upload: str, names: list[str], chunks: list[memoryview]) -> Op[Any]:
                def first(pipe: Any) -> None:
                    pipe.hset(upload, "0", chunks[0])
                    pipe.pexpire(upload, ARTIFACT_UPLOAD_TTL_MS)

                def rest(pipe: Any) -> None:
                    for n in range(1, len(chunks)):
                        pipe.hset(upload, str(n), chunks[n])

                # The first chunk and the TTL together: an upload cut short goes by itself.
                yield pipelined(first, transaction=True)
                if len(chunks) > 1:
                    yield pipelined(rest)
                args = [sum(len(c) for c in chunks), len(chunks)]
                return (yield from self._evalsha(ARTIFACT_PUT, names, args))

            for _ in range(3):
                if (yield from self._retried(lambda: send(upload, names, chunks))):  # noqa: B023
                    break
            else:
                raise BackendUnavailable(f"artifact sha256:{sha} could not be written whole")

    def _artifact(self, session_id: str, sha256: str) -> Op[bytes | None]:
        key, uses = self.keys.artifact(session_id, sha256), self.keys.artifact_uses(session_id)
        fields = [str(n) for n in range(ARTIFACT_READ_CHUNKS)]

        def first(pipe: Any) -> None:
            pipe.hexists(uses, sha256)  # one written for an append yet to commit is not yet one
            pipe.hlen(key)
            pipe.hmget(key, fields)

        def read() -> Op[bytes | None]:
            # A few chunks a round trip: a pipeline of all of them would have the server copy
            # the whole artifact into its replies at one go.
            referenced, count, found = yield pipelined(first)
            if not referenced or not count:
                return None
            parts = found[:count]
            for start in range(ARTIFACT_READ_CHUNKS, count, ARTIFACT_READ_CHUNKS):
                names = [str(n) for n in range(start, min(count, start + ARTIFACT_READ_CHUNKS))]
                parts.extend((yield lambda c: c.hmget(key, names)))  # noqa: B023
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
        keep, window, *only = _text(found).split()
        return Bound(int(keep), int(window), only[0] if only else None)

    def _artifact_uses(self, session_id: str) -> Op[dict[str, int]]:
        key = self.keys.artifact_uses(session_id)
        found = yield from self._run(lambda c: c.hgetall(key))
        return {_text(sha): int(count) for sha, count in found.items()}

    def _evalsha(
        self, script: LuaScript, keys: list[str], args: list[Any], held: bool = False
    ) -> Op[Any]:
        """Run a script by its sha, loading it first when the server lacks it (after a restart
        or failover). EVALSHA directly, not redis-py's Script wrapper: its per-call work is
        measurable on a single-event append (docs/performance.md). `held`: on this thread's
        held connection (store/held.py), for a script that is safe to send twice."""
        on = self._held if held else None

        def request(client: Any) -> Any:
            if on is None:
                return client.evalsha(script.sha, len(keys), *keys, *args)
            return on.execute(keys[0], "EVALSHA", script.sha, len(keys), *keys, *args)

        try:
            return (yield request)
        except rx.NoScriptError:
            yield lambda c: c.script_load(script.text)
            return (yield request)

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
            self.keys.tombstone(session),
        ]

    def _list_open_session(self, session: str, due: bool = False) -> Op[str | None]:
        """List the session in the open-attempts index before an append that opens attempts: a
        writer killed right after its request committed must not leave an open attempt that no
        reconciler can find. The index lives outside the session's slot, so the script cannot
        write it on a cluster. The entry is provisional, a member of this append's own
        (`<session>\x1f<token>`), so that an append refused takes back exactly what it wrote
        whatever other writers of the session listed meanwhile; `_settle_open_listing` makes
        it the session's own once the script has run. Listing once a minute keeps the entry
        inside any prune window (see OPEN_INDEX_REFRESH_MS) at the cost of two extra round
        trips a minute. Returns the provisional member, None when no listing was due."""
        if not (due or self._open_index_due(session)):
            return None
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

        def settle(pipe: Any) -> None:
            if committed:
                pipe.zadd(key, {session: now}, gt=True)
            pipe.zrem(key, member)

        settled = yield from self._quietly("open-attempts index listing", pipelined(settle))
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
            yield from self._quietly(
                "session index refresh", lambda c: c.zadd(key, {session_id: ms}, gt=True)
            )
        ):
            self._remember(self._indexed, session_id, ms)

    def _read_stream(self, stream: StreamId, after: int, count: int) -> Op[list[RecordedEvent]]:
        # Two pipelined round trips, no script: the stream index says which appends hold the
        # versions wanted and where each one's events lie, consecutive, in the session log; then
        # one XRANGE per append reads them. Entries never change once written, so nothing can
        # move between the two reads.
        index = self.keys.stream(stream.session_id, stream.name)
        log = self.keys.log(stream.session_id)
        first = after + 1

        def read_index(pipe: Any) -> None:
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

        def read_log(pipe: Any) -> None:
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
        start = "-" if after is None else "(" + _redis_cursor(after)
        log = self.keys.log(session_id)
        entries = yield from self._run(lambda c: c.xrange(log, start, "+", count=count))
        return self._records(session_id, cast(Entries, entries))

    def _tail(self, session_id: str, n: int, before: str | None) -> Op[list[RecordedEvent]]:
        log = self.keys.log(session_id)
        end = "+" if before is None else "(" + _redis_cursor(before)
        entries = yield from self._run(lambda c: c.xrevrange(log, end, "-", count=n))
        return self._records(session_id, reversed(cast(Entries, entries)))

    def _last_entry_id(self, log: str) -> Op[str]:
        newest = yield from self._run(lambda c: c.xrevrange(log, "+", "-", count=1))
        return _text(newest[0][0]) if newest else "0-0"

    def _wait(
        self, session_id: str, after: str | None, timeout_ms: int, count: int
    ) -> Op[list[RecordedEvent]]:
        log = self.keys.log(session_id)
        # "$" would be re-read on every slice below and miss what lands in between; pin it.
        last = (yield from self._last_entry_id(log)) if after is None else _redis_cursor(after)
        deadline = time.monotonic() + timeout_ms / 1000
        slice_ms = self.max_block_ms
        while True:
            block = max(1, min(slice_ms, int((deadline - time.monotonic()) * 1000)))
            reply = yield from self._run(
                lambda c: c.xread({log: last}, count=count, block=block)  # noqa: B023
            )
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
        if _text(reply[0]) == "none":
            return 0, int(reply[1])
        return int(reply[1]), int(reply[2])

    def _session_keys(self, session_id: str) -> Op[tuple[list[str], list[str], list[str]]]:
        """(streams, consumer groups, KEYS) of a session as delete_session.lua and
        archive_finish.lua take them: the scripts build no keys, and check that what was found
        here is still so."""
        keys = self.keys
        log = keys.log(session_id)
        meta = keys.meta(session_id)
        streams = sorted(_text(name) for name in (yield lambda c: c.hkeys(meta)))
        try:
            groups = [_text(g["name"]) for g in (yield lambda c: c.xinfo_groups(log))]
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
            if _text(reply[0]) != "changed":
                return reply
        raise BackendUnavailable(f"session {session_id!r} kept changing; nothing done to it")

    # -- memory ------------------------------------------------------------------------------------

    def memory_of(self, session_ids: list[str]) -> dict[str, dict[str, int]]:
        return self.run_op(self.memory_of_op(session_ids))

    def memory_of_op(self, session_ids: list[str]) -> Op[dict[str, dict[str, int]]]:
        """Bytes each session takes in Redis, by kind of key: `log` (the events), `streams`
        (their indexes), `append_ids`, `attempts` (open attempts and safe tools), `artifacts`
        and `other` (versions, tombstone, bounds, dead letters). MEMORY USAGE with its default
        sampling, two round trips for any number of sessions."""
        keys = self.keys

        def kinds_of(
            session_id: str, streams: set[str], groups: list[str], shas: list[str]
        ) -> dict[str, list[str]]:
            return {
                "log": [keys.log(session_id)],
                "streams": [keys.stream(session_id, name) for name in sorted(streams)],
                "append_ids": [
                    *(keys.idempotency(session_id, name) for name in sorted(streams)),
                    *(keys.trimmed(session_id, name) for name in sorted(streams)),
                ],
                "attempts": [keys.open_attempts(session_id), keys.safe_tools(session_id)],
                "artifacts": [
                    keys.artifact_uses(session_id),
                    *(keys.artifact(session_id, sha) for sha in sorted(shas)),
                ],
                "other": [
                    keys.meta(session_id),
                    keys.tombstone(session_id),
                    keys.bounds(session_id),
                    *(keys.group_dead_letters(session_id, g) for g in groups),
                ],
            }

        def look(client: Any) -> Any:
            pipe = client.pipeline(transaction=False)
            for session_id in session_ids:
                pipe.hkeys(keys.meta(session_id))
                pipe.hkeys(keys.tombstone(session_id))
                pipe.xinfo_groups(keys.log(session_id))
                pipe.hkeys(keys.artifact_uses(session_id))
            return pipe.execute(raise_on_error=False)

        def measure() -> Op[dict[str, dict[str, int]]]:
            found = yield look
            layout = {}
            for n, session_id in enumerate(session_ids):
                live, tomb, groups, shas = found[4 * n : 4 * n + 4]
                deleted = {_text(f)[7:] for f in tomb if _text(f).startswith("stream:")}
                names = [] if isinstance(groups, Exception) else [_text(g["name"]) for g in groups]
                layout[session_id] = kinds_of(
                    session_id,
                    {_text(name) for name in live} | deleted,
                    names,
                    [_text(sha) for sha in shas],
                )

            def usage(pipe: Any) -> None:
                for kinds in layout.values():
                    for names in kinds.values():
                        for name in names:
                            pipe.memory_usage(name)

            sizes = iter((yield pipelined(usage)))
            return {
                session_id: {
                    kind: sum(int(next(sizes) or 0) for _ in names) for kind, names in kinds.items()
                }
                for session_id, kinds in layout.items()
            }

        return (yield from self._retried(measure))

    def session_count_op(self) -> Op[int]:
        """Sessions in the index: ZCARD of its buckets, in one round trip."""

        def count(pipe: Any) -> None:
            for key in self.keys.all_indexes():
                pipe.zcard(key)

        return sum(int(n) for n in (yield from self._run(pipelined(count))))

    def memory_info(self) -> tuple[int, int]:
        return self.run_op(self.memory_info_op())

    def memory_info_op(self) -> Op[tuple[int, int]]:
        """(used_memory, maxmemory) of the server; on a cluster, of the primary nearest its
        maxmemory (each fills on its own, and the first full one refuses its sessions'
        appends), or the one using the most where none has a maxmemory."""
        if not self.cluster:
            info = yield from self._run(lambda c: c.info("memory"))
            return int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
        nodes = yield from self._run(
            lambda c: c.info("memory", target_nodes=RedisCluster.PRIMARIES)
        )
        return fullest(nodes.values())

    # -- archiving: the Redis half of ledger_bus/archive.py ---------------------------------------

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
        return (None if where is None else _text(where)), done is not None

    def begin_archive(self, session_id: str, where: str) -> str:
        """Refuse appends to the session from now on, naming `where`; return the archive that
        is under way (another one, if an archive to elsewhere began first)."""
        tomb = self.keys.tombstone(session_id)

        def mark(pipe: Any) -> None:
            pipe.hsetnx(tomb, "archive", where)
            pipe.hget(tomb, "archive")

        return _text(self.run_op(self._run(pipelined(mark, transaction=True)))[1])

    def abandon_archive(self, session_id: str, where: str) -> bool:
        """Take appends again, unless the archive has finished."""
        keys, args = [self.keys.tombstone(session_id)], [where]
        return bool(self.run_op(self._retried(lambda: self._evalsha(ARCHIVE_ABANDON, keys, args))))

    def end_archive(self, session_id: str, records: Iterable[AppendRecord]) -> None:
        """After the archived session was deleted there: its append_id records come back here
        (a late retry must still find them, spec 3.9), then the session takes appends here
        again, as its next generation."""
        tomb = self.keys.tombstone(session_id)
        generation = self.generation_of(session_id)
        batch: list[AppendRecord] = []

        def write(pipe: Any) -> None:
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

        def reopen(pipe: Any) -> None:
            pipe.hdel(tomb, "archive", "archived_ms")
            pipe.hincrby(tomb, "generation", 1)
            pipe.hset(tomb, "deleted_ms", now)

        self.run_op(self._run(pipelined(reopen, transaction=True)))

    def finish_archive(self, session_id: str, where: str, events: int) -> bool:
        """Remove the session but its tombstone, once its `events` are verified in `where`;
        False when it was finished before."""

        def attempt() -> Op[list[Any]]:
            streams, groups, keys = yield from self._session_keys(session_id)
            idem = [
                self.keys.idempotency(session_id, name)
                for name in sorted((yield from self._idempotency_streams(session_id)))
            ]
            now = yield from self.now_ms_op()
            args = [now, len(streams), events, where, len(groups), *streams]
            return list((yield from self._evalsha(ARCHIVE_FINISH, [*keys, *idem], args)))

        reply = self.run_op(self._until_settled(session_id, attempt))
        status = _text(reply[0])
        if status == "moved":
            raise Refused(
                f"session {session_id!r} is being archived to {_text(reply[1]) or 'nowhere'},"
                f" not {where}"
            )
        self.run_op(self._forget_session(session_id))  # "done": a crash may have come first
        return status == "ok"

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
            status = _text(reply[0])
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
        deleted = (_text(f) for f in tomb if _text(f).startswith("stream:"))
        return {_text(name) for name in live} | {f.split(":", 1)[1] for f in deleted}

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
                    records.append(append_record(stream, _text(append_id), value))
                if scan_from == 0:
                    break
        return records

    def _session_info(self, session_id: str) -> Op[SessionInfo]:
        log = self.keys.log(session_id)

        def read(pipe: Any) -> None:
            pipe.hgetall(self.keys.meta(session_id))
            pipe.xlen(log)
            pipe.xrange(log, "-", "+", count=1)
            pipe.xrevrange(log, "+", "-", count=1)

        versions, events, first, last = yield from self._run(pipelined(read))
        streams = sorted(StreamInfo(_text(k), int(v)) for k, v in versions.items())

        def count_ids(pipe: Any) -> None:
            for info in streams:
                pipe.hlen(self.keys.idempotency(session_id, info.name))

        ids = sum((yield from self._run(pipelined(count_ids)))) if streams else 0
        return SessionInfo(
            session_id=session_id,
            events=int(events),
            streams=streams,
            first_cursor=_ledger_cursor(first[0][0]) if first else None,
            last_cursor=_ledger_cursor(last[0][0]) if last else None,
            append_ids=ids,
        )

    def _sessions(self, limit: int | None) -> Op[list[tuple[str, int]]]:
        def read(pipe: Any) -> None:
            for key in self.keys.all_indexes():
                pipe.zrange(key, 0, -1 if limit is None else limit - 1, desc=True, withscores=True)

        buckets = yield from self._run(pipelined(read))
        found = [(_text(member), int(score)) for bucket in buckets for member, score in bucket]
        found.sort(key=lambda item: (-item[1], item[0]))
        return found if limit is None else found[:limit]

    def _lease(self, op: str, session_id: str, name: str, owner: str, ttl_ms: int) -> Op[bool]:
        keys = [self.keys.lease(session_id, name)]
        args: list[Any] = [op, owner, ttl_ms]
        return bool((yield from self._retried(lambda: self._evalsha(LEASE, keys, args))))

    def _lease_holder(self, session_id: str, name: str) -> Op[str | None]:
        key = self.keys.lease(session_id, name)
        holder = yield from self._run(lambda c: c.get(key))
        return None if holder is None else _text(holder)

    def _open_attempts(self, session_ids: list[str]) -> Op[dict[str, list[OpenAttempt]]]:
        def read(pipe: Any) -> None:
            for session_id in session_ids:
                pipe.hgetall(self.keys.open_attempts(session_id))

        found_all = yield from self._run(pipelined(read))
        return {
            session_id: [parse_open(session_id, _text(a), _text(v)) for a, v in found.items()]
            for session_id, found in zip(session_ids, found_all, strict=True)
        }

    def _safe_to_replay(self, session_id: str, run_id: str, tool: str) -> Op[bool]:
        key = self.keys.safe_tools(session_id)
        return bool((yield from self._run(lambda c: c.hexists(key, f"{run_id}\x1f{tool}"))))

    def _open_sessions(self, buckets: Collection[int]) -> Op[list[tuple[str, int]]]:
        def read(pipe: Any) -> None:
            for number in buckets:
                pipe.zrange(self.keys.open_index(number), 0, -1, withscores=True)

        found_all = yield from self._run(pipelined(read))
        # A provisional member (`_list_open_session`) names its session before the separator.
        newest: dict[str, int] = {}
        for found in found_all:
            for member, ms in found:
                session = _text(member).split(OPEN_MEMBER_SEP, 1)[0]
                newest[session] = max(int(ms), newest.get(session, 0))
        return sorted(newest.items())

    def _forget_open_session(self, session_id: str, opened_before_ms: int) -> Op[bool]:
        keys = [self.keys.open_index_of(session_id)]
        pattern = f"{_glob_escape(session_id)}{OPEN_MEMBER_SEP}*"
        args: list[Any] = [session_id, opened_before_ms, pattern]
        return bool((yield from self._retried(lambda: self._evalsha(FORGET_SESSION, keys, args))))

    # -- consumer groups ------------------------------------------------------------------------

    def _group_call(self, make: Callable[[], Op[T]], session_id: str, group: str) -> Op[T]:
        """A retried operation, with a refusal because the group does not exist as NotFound. The
        group is looked up rather than the error parsed: servers word NOGROUP differently, and
        a pipeline wraps it in text of its own."""
        try:
            return (yield from self._retried(make))
        except BackendRefused:
            if not (yield from self._group_exists(session_id, group)):
                raise NotFound(f"no consumer group {group!r} on session {session_id!r}") from None
            raise

    def _group_request(self, request: Request, session_id: str, group: str) -> Op[Any]:
        return self._group_call(lambda: call(request), session_id, group)

    def _deliveries(
        self, session_id: str, entries: Entries, counts: dict[bytes, int] | None
    ) -> list[Delivery]:
        events = self._records(session_id, entries)
        times = counts or {}
        return [
            Delivery(event, entry_id.decode(), times.get(entry_id, 1))
            for (entry_id, _), event in zip(entries, events, strict=True)
        ]

    def _group_create(self, session_id: str, group: str, after: str | None) -> Op[bool]:
        log = self.keys.log(session_id)
        start = "$" if after is None else _redis_cursor(after)

        def create() -> Op[bool]:
            try:
                yield lambda c: c.xgroup_create(log, group, id=start, mkstream=True)
            except rx.ResponseError as err:
                if str(err).startswith("BUSYGROUP"):
                    return False
                raise
            return True

        return (yield from self._retried(create))

    def _group_exists(self, session_id: str, group: str) -> Op[bool]:
        log = self.keys.log(session_id)

        def groups() -> Op[list[dict[str, Any]]]:
            try:
                return cast(list[dict[str, Any]], (yield lambda c: c.xinfo_groups(log)))
            except rx.ResponseError:  # no such key yet
                return []

        return any(_text(g["name"]) == group for g in (yield from self._retried(groups)))

    def _group_read(
        self, session_id: str, group: str, consumer: str, count: int, block_ms: int | None
    ) -> Op[list[Delivery]]:
        log = self.keys.log(session_id)
        block = None if block_ms is None else min(block_ms, self.max_block_ms)
        tries = 0

        def read() -> Op[tuple[Any, bool]]:
            nonlocal tries
            tries += 1
            if tries > 1:
                # The try before may have delivered entries to this consumer and lost the reply
                # on the way back: they are pending with it now, and a read of new entries
                # would never see them again. Read them first.
                own = yield lambda c: c.xreadgroup(group, consumer, {log: "0"}, count=count)
                if own and own[0][1]:
                    return own, True
            new = yield lambda c: c.xreadgroup(
                group, consumer, {log: ">"}, count=count, block=block
            )
            return new, False

        reply, own_pending = yield from self._group_call(read, session_id, group)
        if own_pending:
            return (yield from self._own_pending(session_id, group, cast(Entries, reply[0][1])))
        entries = cast(Entries, reply[0][1]) if reply else []
        return self._deliveries(session_id, entries, None)

    def _group_pending(
        self, session_id: str, group: str, consumer: str, count: int
    ) -> Op[list[Delivery]]:
        log = self.keys.log(session_id)
        reply = yield from self._group_request(
            lambda c: c.xreadgroup(group, consumer, {log: "0"}, count=count), session_id, group
        )
        entries = cast(Entries, reply[0][1]) if reply else []
        return (yield from self._own_pending(session_id, group, entries))

    def _own_pending(self, session_id: str, group: str, entries: Entries) -> Op[list[Delivery]]:
        # An own pending entry deleted from the log comes back with no fields; nothing to redo.
        gone = [_text(entry_id) for entry_id, fields in entries if not fields]
        if gone:
            yield from self._group_ack(session_id, group, gone)
            entries = [e for e in entries if e[1]]
        counts = yield from self._delivery_counts(session_id, group, [e[0] for e in entries])
        return self._deliveries(session_id, entries, counts)

    def _group_claim(
        self, session_id: str, group: str, consumer: str, min_idle_ms: int, count: int
    ) -> Op[list[Delivery]]:
        log = self.keys.log(session_id)
        reply = yield from self._group_request(
            lambda c: c.xautoclaim(log, group, consumer, min_idle_ms, "0-0", count=count),
            session_id,
            group,
        )
        # Redis 7 drops entries deleted from the log out of the pending list by itself, and
        # reports them third; there is nothing left to deliver for those.
        entries = cast(Entries, reply[1])
        counts = yield from self._delivery_counts(session_id, group, [e[0] for e in entries])
        return self._deliveries(session_id, entries, counts)

    def _group_keep(
        self, session_id: str, group: str, consumer: str, entry_ids: list[str]
    ) -> Op[None]:
        log, ids = self.keys.log(session_id), list(entry_ids)
        yield from self._group_request(
            lambda c: c.xclaim(log, group, consumer, 0, ids, justid=True), session_id, group
        )

    def _delivery_counts(
        self, session_id: str, group: str, entry_ids: list[bytes]
    ) -> Op[dict[bytes, int]]:
        if not entry_ids:
            return {}
        log = self.keys.log(session_id)

        def read(pipe: Any) -> None:
            for entry_id in entry_ids:
                pipe.xpending_range(log, group, entry_id, entry_id, 1)

        found_all = yield from self._group_request(pipelined(read), session_id, group)
        return {
            item["message_id"]: int(item["times_delivered"])
            for found in found_all
            for item in found
        }

    def _group_ack(self, session_id: str, group: str, entry_ids: list[str]) -> Op[int]:
        log = self.keys.log(session_id)
        acked = yield from self._group_request(
            lambda c: c.xack(log, group, *entry_ids), session_id, group
        )
        return int(acked)

    def _group_dead_letter(
        self, session_id: str, group: str, delivery: Delivery, reason: str
    ) -> Op[None]:
        log, dead = self.keys.log(session_id), self.keys.group_dead_letters(session_id, group)
        fields: dict[Any, Any] = dead_letter_fields(delivery, reason)

        def move(pipe: Any) -> None:
            pipe.xadd(dead, fields)
            pipe.xack(log, group, delivery.entry_id)

        # One slot: MULTI works on a cluster.
        yield from self._group_request(pipelined(move, transaction=True), session_id, group)

    def _group_dead_letters(self, session_id: str, group: str) -> Op[list[dict[str, str]]]:
        dead = self.keys.group_dead_letters(session_id, group)
        entries = yield from self._run(lambda c: c.xrange(dead))
        return [
            {_text(k): _text(v) for k, v in fields.items()} for _, fields in cast(Entries, entries)
        ]

    def _group_stats(self, session_id: str, group: str, idle_ms: int) -> Op[GroupStats]:
        # Lag is computed here: XINFO's own is not kept after some operations.
        log = self.keys.log(session_id)

        def read(pipe: Any) -> None:
            pipe.xinfo_groups(log)
            pipe.xlen(log)
            pipe.xinfo_consumers(log, group)

        groups, length, consumers = yield from self._group_request(
            pipelined(read), session_id, group
        )
        info = next((g for g in groups if _text(g["name"]) == group), None)
        if info is None:
            raise NotFound(f"no consumer group {group!r} on session {session_id!r}")
        last = _text(info["last-delivered-id"])
        read_count = info.get("entries-read")
        if read_count is not None:
            lag = max(0, int(length) - int(read_count))
        else:
            after = yield from self._run(lambda c: c.xrange(log, "(" + last, "+", count=100_000))
            lag = len(after)
        idle = sum(1 for c in consumers if not int(c["pending"]) and int(c["idle"]) >= idle_ms)
        return GroupStats(
            group=group,
            consumers=len(consumers) - idle,
            idle_consumers=idle,
            pending=int(info["pending"]),
            lag=lag,
            last_delivered=_ledger_cursor(last),
        )

    def _group_prune(self, session_id: str, group: str, idle_ms: int) -> Op[list[str]]:
        keys, args = [self.keys.log(session_id)], [group, idle_ms]
        removed = yield from self._group_call(
            lambda: self._evalsha(PRUNE_CONSUMERS, keys, args), session_id, group
        )
        return [_text(name) for name in removed]

    def _groups(self, session_id: str, idle_ms: int) -> Op[list[GroupStats]]:
        log = self.keys.log(session_id)

        def names() -> Op[list[Any]]:
            try:
                return cast(list[Any], (yield lambda c: c.xinfo_groups(log)))
            except rx.ResponseError:  # no log yet
                return []

        found = []
        for g in (yield from self._retried(names)):
            found.append((yield from self._group_stats(session_id, _text(g["name"]), idle_ms)))
        return found

    def _group_pending_entries(
        self, session_id: str, group: str, count: int
    ) -> Op[list[PendingEntry]]:
        log = self.keys.log(session_id)
        found = yield from self._group_request(
            lambda c: c.xpending_range(log, group, "-", "+", count), session_id, group
        )
        return [
            PendingEntry(
                entry_id=_text(item["message_id"]),
                cursor=_ledger_cursor(item["message_id"]),
                consumer=_text(item["consumer"]),
                idle_ms=int(item["time_since_delivered"]),
                deliveries=int(item["times_delivered"]),
            )
            for item in found
        ]

    def _group_delete(self, session_id: str, group: str) -> Op[bool]:
        log, dead = self.keys.log(session_id), self.keys.group_dead_letters(session_id, group)

        def delete(pipe: Any) -> None:
            pipe.xgroup_destroy(log, group)
            pipe.delete(dead)

        if not (yield from self._group_exists(session_id, group)):
            return False
        # One slot: MULTI works on a cluster.
        return bool((yield from self._run(pipelined(delete, transaction=True)))[0])

    def _group_reset(self, session_id: str, group: str, cursor: str) -> Op[None]:
        log = self.keys.log(session_id)
        yield from self._group_request(
            lambda c: c.xgroup_setid(log, group, _redis_cursor(cursor)), session_id, group
        )

    def _group_replay(self, session_id: str, group: str) -> Op[int]:
        log, dead = self.keys.log(session_id), self.keys.group_dead_letters(session_id, group)
        letters = cast(Entries, (yield from self._run(lambda c: c.xrange(dead))))
        if not letters:
            return 0
        entries = [fields[b"entry"] for _, fields in letters]
        letter_ids = [letter_id for letter_id, _ in letters]

        def replay(pipe: Any) -> None:
            pipe.xclaim(
                log,
                group,
                REPLAY_CONSUMER,
                0,
                entries,
                idle=REPLAY_IDLE_MS,
                retrycount=0,
                force=True,
                justid=True,
            )
            pipe.xdel(dead, *letter_ids)

        # One slot: all of it, or none.
        claimed = yield from self._group_request(
            pipelined(replay, transaction=True), session_id, group
        )
        return len(claimed[0])

    def now_ms_op(self) -> Op[int]:
        seconds, micros = yield from self._run(lambda c: c.time())
        return int(seconds) * 1000 + int(micros) // 1000

    def rebuild_index(self) -> int:
        """Rebuild the cross-session index from the sessions themselves; return how many."""
        pattern = self.keys.session_pattern()
        found = self.run_op(self._run(lambda c: list(c.scan_iter(match=pattern, count=1000))))
        count = 0
        for key in found:
            name = _text(key)
            session_id = name[name.index("{") + 1 : name.rindex("}")]
            last = self.run_op(self._last_entry_id(self.keys.log(session_id)))
            if last != "0-0":
                index, ms = self.keys.index_of(session_id), int(last.split("-")[0])
                self.run_op(
                    self._run(lambda c: c.zadd(index, {session_id: ms}, gt=True))  # noqa: B023
                )
                self._indexed.pop(session_id, None)
                count += 1
        return count

    def purge_sessions(self, starting_with: str) -> list[str]:
        """Remove every key of the sessions whose ids start with `starting_with`, and their
        index entries; return the ids removed.

        Meant for sessions nobody writes any more, such as the demo's. A writer that appended
        to one before is refused with HistoryRewound; a new writer creates it again, from
        version 1.
        """
        if not starting_with:
            raise InvalidInput("purge_sessions needs a non-empty start of session ids")
        pattern = f"{_glob_escape(self.keys.prefix)}:{{{_glob_escape(starting_with)}*}}:*"
        found = self.run_op(self._run(lambda c: list(c.scan_iter(match=pattern, count=1000))))
        by_session: dict[str, list[str]] = {}
        for key in found:
            name = _text(key)
            by_session.setdefault(name[name.index("{") + 1 : name.index("}")], []).append(name)
        for session_id, names in by_session.items():
            self.run_op(self._run(lambda c: c.unlink(*names)))  # noqa: B023  (called at once)
            self.run_op(self._forget_session(session_id))
        return sorted(by_session)

    def close(self) -> None:
        self.client.close()
        for sentinel in sentinels_of(self.client):
            sentinel.close()
