"""The connections appends run on, kept by the store between appends and shared by the threads
of its process.

redis-py takes a connection from its pool for every command and gives it back afterwards, a
large part of a single-event append's time in the client (docs/performance.md): the pool checks
the connection for unread data (a system call) and tells its listeners, both ways. Here the
store keeps what it took, idle between commands, and a thread takes one for the length of a
command under a lock: a thread that lives for one task (LangGraph runs each task and each
checkpoint write on a worker of an executor made for the one run) pays nothing for being new.
What the pool does for a connection still holds: health checks and re-authentication, as the
connection does them on each command; a connection the server closed reconnected and the
command sent again (only appends come here, which their append_id makes land once); none of a
parent's used by a forked child; on a cluster, the node of the first key's slot, and the cluster
client for MOVED, ASK or a node gone. The store keeps at most half of a pool's
`max_connections`, so the commands that take a connection each always find one; they go back to
the pool when the store closes.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import hiredis
import redis.exceptions as rx

_LOST: tuple[type[Exception], ...] = (rx.ConnectionError, OSError)


class _Kept:
    """The connections a store took from its pools, by pool, in the process that took them."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.idle: dict[Any, list[Any]] = {}  # by pool: the kept ones no command is using
        self.taken: dict[Any, int] = {}  # by pool: how many were taken, idle or in use


class HeldConnections:
    """Send commands on a connection the store keeps, over a blocking `redis.Redis` (or its
    Sentinel form) or a blocking `RedisCluster`."""

    def __init__(self, client: Any):
        self.client = client
        self._cluster = hasattr(client, "nodes_manager")
        self._kept = _Kept()
        # Until a first command has gone through, commands go as the client sends any (a
        # connection from its pool, given back): a program that appends once (a command of the
        # command line) runs on the one connection it opened. Connections are kept after that.
        self._first = True

    def execute(self, key: str, *args: Any) -> Any:
        """Run the command `args`, whose first key is `key`, and return its reply."""
        if self._first:
            reply = self.client.execute_command(*args)
            self._first = False  # once a command has gone through (NOSCRIPT is sent again)
            return reply
        pool = self._pool_for(key)
        if pool is None:  # the slot map has no node for the key yet: the client finds it
            return self.client.execute_command(*args)
        kept = self._state()
        connection, reused = self._take(kept, pool)
        if connection is None:  # the pool has no room for one more kept connection
            return self.client.execute_command(*args)
        try:
            return self._run(connection, reused, args)
        except rx.ResponseError:
            raise  # an error reply, read whole: the connection is as good as before
        except BaseException:
            # A reply may be left unread (a timeout, an interrupt): the next command must not
            # read it as its own.
            connection.disconnect()
            raise
        finally:
            with kept.lock:
                kept.idle.setdefault(pool, []).append(connection)

    def close(self) -> None:
        """Give the idle connections back to their pools."""
        kept = self._state()
        with kept.lock:
            idle, kept.idle = kept.idle, {}
            for pool, connections in idle.items():
                kept.taken[pool] -= len(connections)
        for pool, connections in idle.items():
            for connection in connections:
                pool.release(connection)

    def _run(self, connection: Any, reused: bool, args: tuple[object, ...]) -> object:
        try:
            return self._send(connection, args)
        except (rx.MovedError, rx.AskError):
            if not self._cluster:
                raise
            return self.client.execute_command(*args)
        except _LOST:
            connection.disconnect()  # connects again when next used
            if self._cluster:
                # The node may be gone (a failover): the cluster client, finding it so, learns
                # the slot map again for the next try.
                return self.client.execute_command(*args)
            if not reused:
                raise
        # Kept since an earlier command, the connection may have been closed by the server in
        # between (a restart, its idle timeout): one more try on a new one.
        try:
            return self._send(connection, args)
        except _LOST:
            connection.disconnect()
            raise

    def _state(self) -> _Kept:
        if self._kept.pid != os.getpid():
            # A forked child leaves its parent's connections alone (they are the parent's) and
            # takes its own; the lock too is new, in case a thread of the parent held it.
            self._kept = _Kept()
        return self._kept

    @staticmethod
    def _take(kept: _Kept, pool: Any) -> tuple[Any, bool]:
        """A kept connection to `pool`'s server (None: the store may keep no more of them),
        and whether it was used before."""
        with kept.lock:
            idle = kept.idle.get(pool)
            if idle:
                return idle.pop(), True
            taken = kept.taken.get(pool, 0)
            if taken >= getattr(pool, "max_connections", 0) // 2:
                return None, False
            kept.taken[pool] = taken + 1
        try:
            return pool.get_connection(), False
        except BaseException:
            with kept.lock:
                kept.taken[pool] -= 1
            raise

    def _pool_for(self, key: str) -> object:
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

    @staticmethod
    def _send(connection: Any, args: tuple[Any, ...]) -> object:
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
