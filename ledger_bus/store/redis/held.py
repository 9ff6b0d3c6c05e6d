"""The connection an append runs on, held by its thread from one append to the next.

redis-py takes a connection from its pool for every command and gives it back afterwards, a
large part of a single-event append's time in the client (docs/performance.md). Here each
thread keeps one connection per server, taken from the client's own pool, and keeps what the
pool gives: a connection per thread, given back when the thread ends; none shared with a forked
child; health checks and re-authentication as the pool does them; a connection the server closed
reconnected and the command sent again (only appends come here, which their append_id makes
land once); on a cluster, the node of the first key's slot, and the cluster client for MOVED,
ASK or a node gone. Threads hold at most half of a pool's `max_connections`, so the commands that
take a connection each always find one.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import hiredis
import redis.exceptions as rx

_LOST: tuple[type[Exception], ...] = (rx.ConnectionError, OSError)


class _Counts:
    """How many connections the threads of this process hold, by pool."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.held: dict[Any, int] = {}
        # Reentrant: a holder's finalizer may run (garbage collection) in a thread that is
        # counting already.
        self.lock = threading.RLock()

    def take(self, pool: Any) -> bool:
        """Count one more connection held from `pool`, if it has room for it."""
        with self.lock:
            if self.pid != os.getpid():  # a forked child holds none of its parent's
                self.pid, self.held = os.getpid(), {}
            held = self.held.get(pool, 0)
            if held >= getattr(pool, "max_connections", 0) // 2:
                return False
            self.held[pool] = held + 1
            return True

    def give(self, pool: Any) -> None:
        """Count one connection held from `pool` given back, in the process that took it."""
        with self.lock:
            if self.held.get(pool, 0) > 0:
                self.held[pool] -= 1


class _Holder:
    """One thread's connections, by pool; given back to their pools when the thread ends."""

    def __init__(self, counts: _Counts) -> None:
        self.pid = os.getpid()
        self.counts = counts
        self.connections: dict[Any, Any] = {}  # by pool

    def hold(self, pool: Any) -> Any:
        """A connection of `pool` for this thread to keep, or None when the pool's half that
        threads may hold is held."""
        if not self.counts.take(pool):
            return None  # asked again at the next command: a thread may have given one back
        try:
            connection = pool.get_connection()
        except BaseException:
            self.counts.give(pool)
            raise
        self.connections[pool] = connection
        # The holder goes with its thread (threading.local); its connections go back then.
        weakref.finalize(self, _give_back, pool, connection, self.pid, self.counts)
        return connection


def _give_back(pool: Any, connection: Any, pid: int, counts: _Counts) -> None:
    if os.getpid() == pid:  # a forked child's counts are its own, begun afresh
        pool.release(connection)
        counts.give(pool)


class HeldConnections:
    """Send commands on a connection each thread holds, over a blocking `redis.Redis` (or its
    Sentinel form) or a blocking `RedisCluster`."""

    def __init__(self, client: Any):
        self.client = client
        self._cluster = hasattr(client, "nodes_manager")
        self._local = threading.local()
        self._counts = _Counts()

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        """EVALSHA as redis-py's clients take it, so that a request made for a client runs
        here too (its first key says the node)."""
        return self.execute(keys_and_args[0], "EVALSHA", sha, numkeys, *keys_and_args)

    def execute(self, key: str, *args: Any) -> Any:
        """Run the command `args`, whose first key is `key`, and return its reply."""
        pool = self._pool_for(key)
        if pool is None:  # the slot map has no node for the key yet: the client finds it
            return self.client.execute_command(*args)
        connection, reused = self._connection(pool)
        if connection is None:  # the pool has no room for one more held connection
            return self.client.execute_command(*args)
        try:
            return self._send(connection, args)
        except (rx.MovedError, rx.AskError):
            if not self._cluster:
                raise
            return self.client.execute_command(*args)
        except _LOST:
            connection.disconnect()
            if self._cluster:
                # The node may be gone (a failover): the cluster client, finding it so, learns
                # the slot map again for the next try.
                return self.client.execute_command(*args)
            if not reused:
                raise
        # Held since an earlier command, the connection may have been closed by the server in
        # between (a restart, its idle timeout): one more try on a new one.
        try:
            return self._send(connection, args)
        except _LOST:
            connection.disconnect()
            raise

    def _pool_for(self, key: str) -> Any:
        if not self._cluster:
            return self.client.connection_pool
        client = self.client
        try:
            node = client.nodes_manager.get_node_from_slot(client.keyslot(key))
        except rx.RedisClusterException:
            return None
        if node.redis_connection is None:
            return None
        return node.redis_connection.connection_pool

    def _connection(self, pool: Any) -> tuple[Any, bool]:
        """This thread's connection to `pool`'s server (None: it holds none), and whether it
        was held before."""
        holder: _Holder | None = getattr(self._local, "holder", None)
        if holder is None or holder.pid != os.getpid():
            # A child process leaves its parent's connections alone: they are the parent's.
            holder = self._local.holder = _Holder(self._counts)
        connection = holder.connections.get(pool)
        if connection is None:
            return holder.hold(pool), False
        return connection, True

    @staticmethod
    def _send(connection: Any, args: tuple[Any, ...]) -> Any:
        # hiredis (a dependency, through redis[hiredis]) packs the command in C, where redis-py
        # would first walk the arguments in Python to look for bytearrays among them.
        connection.send_packed_command([hiredis.pack_command(args)])
        try:
            reply = connection.read_response()
        except rx.ResponseError:
            connection.re_auth()
            raise
        connection.re_auth()
        return reply
