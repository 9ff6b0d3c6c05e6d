"""The Redis store's core: the client, the key names, and the one boundary every call crosses."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import redis.exceptions as rx
from redis import Redis
from redis.cluster import RedisCluster

from ledger_bus.model.artifacts import unpack
from ledger_bus.model.durability import LOCAL, Durability
from ledger_bus.model.errors import LedgerError
from ledger_bus.model.ids import StreamId
from ledger_bus.model.prepared import Limits
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import EventStore
from ledger_bus.store.redis.client import ClientRequest, RedisClient, RedisPipeline, ScriptArg
from ledger_bus.store.redis.connection import REDIS_ERRORS, final, refusal, sentinels_of
from ledger_bus.store.redis.held import HeldConnections
from ledger_bus.store.redis.keys import Keys
from ledger_bus.store.redis.replication import Confirmer
from ledger_bus.store.redis.replies import Entry
from ledger_bus.store.redis.scripts import LuaScript
from ledger_bus.store.steps import Op, call, retried, run

log = logging.getLogger("ledger_bus.store")

T = TypeVar("T")
# XRANGE and XREAD entries as redis-py returns them with decode_responses=False.
Entries = list[Entry]

DEFAULT_TIMEOUT: Final = 10.0


def pipelined(build: Callable[[RedisPipeline], object], transaction: bool = False) -> ClientRequest:
    """A request that queues `build(pipe)`'s commands and sends them in one round trip."""

    def request(client: RedisClient) -> object:
        pipe = client.pipeline(transaction=transaction)
        build(pipe)
        return pipe.execute()

    return request


@dataclass(slots=True)
class AppendTarget:
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


class RedisCore(EventStore):
    """What every part of the Redis store stands on: its client and keys, and the boundary every
    Redis call goes through (retried, its errors translated)."""

    tier = "redis"

    def __init__(  # noqa: PLR0913  (the store's options, keyword-only, as connect() passes them)
        self,
        client: RedisClient,
        *,
        prefix: str = "lb",
        limits: Limits | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        socket_timeout: float = 5.0,
        durability: Durability = LOCAL,
    ):
        super().__init__(limits, durability)
        self.client = client
        # A cluster client, blocking or asyncio (whose module costs the command line 0.1 s to
        # import, so it is not asked by name): both keep a map of the nodes.
        self.cluster = hasattr(client, "nodes_manager")
        self._confirmers: dict[Durability, Confirmer] = {}
        self._default_confirmer = self._confirmer(durability)
        # What this store knows of each stream it appended to: its keys, and the highest version
        # acknowledged to it (forgotten, like the other per-store tables, past REMEMBERED).
        self._streams: dict[StreamId, AppendTarget] = {}
        self.keys = Keys(prefix)
        self.timeout = timeout
        # A blocking read longer than the client's socket timeout would look like a dead server.
        self.max_block_ms = max(100, int((socket_timeout - 1.0) * 1000))
        self._indexed: dict[str, int] = {}
        self._open_indexed: dict[str, int] = {}
        self._read_script = True  # until a server says it has no EVALSHA_RO (reads.py)
        # A blocking client's appends run on a connection each thread holds (the asyncio
        # driver coalesces its appends into pipelines instead: store/redis/autopipe.py).
        self._held = HeldConnections(client) if isinstance(client, Redis | RedisCluster) else None
        # How many calls failed in a way worth another try (a lost connection, a failover, a
        # server busy or loading), each named in the log and tried again (`_retried`).
        self.call_failures = 0

    def _judged(self, err: Exception) -> LedgerError | None:
        """`final`'s verdict on a failed call; a failure worth another try is named and counted
        here first, so that none passes unseen (the call is then made again: an append's
        append_id makes it land once)."""
        verdict = final(err)
        if verdict is None:
            # INFO, not WARNING: the call goes on, and a failure that lasts is raised
            # (BackendUnavailable); a program without logging set up prints WARNINGs to stderr,
            # which a command's one-line error must not be buried under.
            self.call_failures += 1
            log.info("a call to redis failed (%s: %s); trying again", type(err).__name__, err)
        return verdict

    def run_op(self, op: Op[T]) -> T:
        return run(op, self.client)

    def _retried(self, make: Callable[[], Op[T]], failed: Exception | None = None) -> Op[T]:
        return retried(make, self.timeout, REDIS_ERRORS, self._judged, "redis", failed=failed)

    def _run(self, request: ClientRequest) -> Op[Any]:
        """One request, retried."""
        return self._retried(lambda: call(request))

    def _forget_session(self, session_id: str) -> Op[None]:
        """After a session's keys are gone: its entries in the indexes (in other slots, so they
        follow, as they follow appends), and what this store remembers of it."""

        def unlist(pipe: RedisPipeline) -> None:
            pipe.zrem(self.keys.index_of(session_id), session_id)
            pipe.zrem(self.keys.open_index_of(session_id), session_id)

        yield from self._run(pipelined(unlist))
        self._streams = {r: w for r, w in self._streams.items() if r.session_id != session_id}
        self._indexed.pop(session_id, None)
        self._open_indexed.pop(session_id, None)

    def _best_effort(self, what: str, request: ClientRequest) -> Op[bool]:
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

    def _evalsha(
        self,
        script: LuaScript,
        keys: list[str],
        args: Sequence[ScriptArg],
        held: bool = False,
        read_only: bool = False,
    ) -> Op[object]:
        """Run a script by its sha, loading it first when the server lacks it (after a restart
        or failover). EVALSHA directly, not redis-py's Script wrapper: its per-call work is
        measurable on a single-event append (docs/performance.md). `held`: on the driver's
        script connection (store/redis/held.py), for a script that is safe to send twice."""
        request = self._script_request(script, keys, args, held, read_only)
        try:
            return (yield request)
        except rx.NoScriptError:
            yield lambda client: client.script_load(script.text)
            return (yield request)

    def _script_request(
        self,
        script: LuaScript,
        keys: list[str],
        args: Sequence[ScriptArg],
        held: bool = False,
        read_only: bool = False,
    ) -> ClientRequest:
        """The EVALSHA of `script` as a request. `held`: on the connection the blocking store's
        thread holds (store/redis/held.py); under asyncio the driver's client is the one that
        coalesces a loop turn's calls (store/redis/autopipe.py), so the request is the same."""
        on = self._held if held else None
        if on is not None:  # no script that only reads is sent on it
            return lambda _: on.execute(keys[0], "EVALSHA", script.sha, len(keys), *keys, *args)
        # EVALSHA_RO for a script that only reads: a role that may only read its keys may run it
        if read_only:
            return lambda client: client.evalsha_ro(script.sha, len(keys), *keys, *args)
        return lambda client: client.evalsha(script.sha, len(keys), *keys, *args)

    def _tried_again(self, err: Exception, script: LuaScript, make: Callable[[], Op[T]]) -> Op[T]:
        """After a call of `script` sent at once failed with `err`: the call `make()` makes
        again, retried as every call is. A server that lacked the script (NOSCRIPT) is given it
        first; any other failure is judged as the first of the retries (named and counted, or
        raised as the ledger's error)."""
        if isinstance(err, rx.NoScriptError):
            yield from self._run(lambda client: client.script_load(script.text))
            return (yield from self._retried(make))
        return (yield from self._retried(make, failed=err))

    def _now_ms(self) -> Op[int]:
        seconds, micros = yield from self._run(lambda c: c.time())
        return int(seconds) * 1000 + int(micros) // 1000

    def _confirmer(self, durability: Durability) -> Confirmer | None:
        """What waits for `durability` (None for local); one per level, each with its own view
        of how many replicas are attached."""
        if durability.local:
            return None
        found = self._confirmers.get(durability)
        if found is None:
            found = self._confirmers[durability] = Confirmer(self.cluster, durability)
        return found

    def close(self) -> None:
        if self._held is not None:
            self._held.close()
        self.client.close()
        for sentinel in sentinels_of(self.client):
            sentinel.close()
