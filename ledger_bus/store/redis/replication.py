"""Waiting for replicas and the AOF after an append: the durability levels on Redis.

The WAIT (or WAITAOF) is pipelined behind the append script on the same connection, so that it
costs no extra round trip of the client and counts exactly what that connection wrote. When the
replicas asked for are not attached, appends stop waiting out the timeout: they are reported not
confirmed at once, and the topology is looked at again once a second.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any, Final

import redis.exceptions as rx
from redis.cluster import RedisCluster

from ledger_bus.model.durability import Durability
from ledger_bus.model.errors import BackendRefused, DurabilityNotConfirmed
from ledger_bus.model.records import AppendResult
from ledger_bus.store.redis.client import RedisClient, ScriptArg
from ledger_bus.store.redis.scripts import LuaScript
from ledger_bus.store.steps import Op, Request

RECHECK_S: Final = 1.0  # how often the attached replicas are counted again while too few


class Confirmer:
    """Sends appends with their WAIT, and says what each one's reply confirmed."""

    def __init__(self, cluster: bool, durability: Durability):
        self.cluster = cluster
        self.durability = durability
        self._short_until = 0.0  # while > now: too few replicas attached, do not wait
        self._has_waitaof: bool | None = None
        self._stale = False  # a cluster's slot map to read again before the next send
        self._node_of_last: RedisClient | None = None

    def _node(self, client: RedisClient, key: str) -> RedisClient:
        """Where the WAIT must go: the connection that wrote, so the node holding `key`'s slot.
        On a cluster, the pipeline goes to that node directly; a client of one server (or of
        Sentinel's primary) is that node already."""
        if not self.cluster:
            return client
        if not isinstance(client, RedisCluster):
            # redis.asyncio's cluster client gives no connection of one node to pipeline on.
            raise BackendRefused(
                f"durability {self.durability} is not available on an asyncio cluster client"
                " (only local is); nothing written"
            )
        if self._stale:
            client.nodes_manager.initialize()
            self._stale = False
        found = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
        connection: RedisClient = found.redis_connection
        return connection

    def send(
        self, script: LuaScript, keys: list[str], args: Sequence[ScriptArg]
    ) -> Op[tuple[Any, Any]]:
        """The append script's reply and the WAIT's, from one round trip."""
        node = yield lambda c: self._node(c, keys[0])
        try:
            return (yield from self._send(node, script, keys, args))
        except (rx.ConnectionError, rx.TimeoutError):
            self._stale = self.cluster  # a failover moves the slot
            raise

    def _send(
        self, node: RedisClient, script: LuaScript, keys: list[str], args: Sequence[ScriptArg]
    ) -> Op[tuple[Any, Any]]:
        if self.durability.aof and not (yield from self._waitaof(node)):
            raise BackendRefused(
                f"durability {self.durability} needs WAITAOF (Redis 7.2 or newer, or Valkey);"
                " this server has none: nothing written"
            )
        for _ in range(2):
            wait_ms = yield from self._wait_ms(node)
            reply, acks = yield self._with_wait(node, script, keys, args, wait_ms)
            if not isinstance(reply, rx.NoScriptError):
                break
            # The server lost the script (a restart, a failover); nothing of the append ran.
            yield lambda _: node.script_load(script.text)
        if isinstance(reply, rx.MovedError | rx.AskError):
            # The slot is on another node now (a cluster failover); nothing of the append ran.
            self._stale = True
            raise rx.ConnectionError(f"the session's slot moved: {reply}")
        if isinstance(reply, Exception):
            raise reply
        self._node_of_last = node
        return reply, acks

    def _with_wait(
        self,
        node: RedisClient,
        script: LuaScript,
        keys: list[str],
        args: Sequence[ScriptArg],
        wait_ms: int,
    ) -> Request:
        """The request of the script and its WAIT (WAITAOF), pipelined on `node`."""

        def both(_: object) -> object:
            pipe = node.pipeline(transaction=False)
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            if self.durability.aof:
                pipe.execute_command("WAITAOF", 1, self.durability.replicas, wait_ms)
            else:
                pipe.execute_command("WAIT", self.durability.replicas, wait_ms)
            return pipe.execute(raise_on_error=False)

        return both

    def confirm(self, result: AppendResult, acks: Any) -> Op[AppendResult]:
        """The result with what was confirmed; DurabilityNotConfirmed when it falls short."""
        wanted = self.durability
        if isinstance(acks, Exception):
            raise DurabilityNotConfirmed(
                f"stream {result.stream}: written on the primary (cursor {result.cursor}), but"
                f" durability {wanted} could not be asked for: {acks}; retry with the same"
                " append_id",
                result,
            )
        if wanted.aof:
            local, replicas = int(acks[0]), int(acks[1])
        else:
            local, replicas = 0, int(acks)
        confirmed = dataclasses.replace(
            result,
            durability=wanted.name,
            replicas=replicas,
            aof=bool(local) if wanted.aof else None,
        )
        if replicas >= wanted.replicas and (local or not wanted.aof):
            self._short_until = 0.0
            return confirmed
        missing = []
        if wanted.aof and not local:
            missing.append("the primary's AOF was not fsynced")
        if replicas < wanted.replicas:
            last = self._node_of_last  # the node `result` was written on (`send`)
            attached = 0 if last is None else (yield from self._count_attached(last))
            missing.append(
                f"{replicas} of {wanted.replicas} replica(s) confirmed ({attached} attached)"
            )
        raise DurabilityNotConfirmed(
            f"stream {result.stream}: written on the primary (cursor {result.cursor}), not"
            f" confirmed as {wanted} within {wanted.timeout_ms} ms: {'; '.join(missing)};"
            " retry with the same append_id",
            confirmed,
        )

    def _wait_ms(self, node: RedisClient) -> Op[int]:
        """The full timeout, or 1 ms while too few replicas are attached to ever confirm."""
        if not self._short_until:
            return self.durability.timeout_ms
        if time.monotonic() >= self._short_until:
            yield from self._count_attached(node)
        return 1 if self._short_until else self.durability.timeout_ms

    def _count_attached(self, node: RedisClient) -> Op[int]:
        """Count the replicas attached now; fewer than wanted means: stop waiting for a while."""
        try:
            info = yield lambda _: node.info("replication")
            attached = int(info.get("connected_slaves", 0))
        except rx.RedisError:
            attached = 0  # cannot tell; keep waiting the full time
            self._short_until = 0.0
            return attached
        if attached < self.durability.replicas:
            self._short_until = time.monotonic() + RECHECK_S
        else:
            self._short_until = 0.0
        return attached

    def _waitaof(self, node: RedisClient) -> Op[bool]:
        if self._has_waitaof is None:
            try:  # asks for nothing, so it answers at once where the command exists
                yield lambda _: node.execute_command("WAITAOF", 0, 0, 1)
            except rx.ResponseError as err:
                if "unknown command" not in str(err).lower():
                    raise
                self._has_waitaof = False
            else:
                self._has_waitaof = True
        return self._has_waitaof
