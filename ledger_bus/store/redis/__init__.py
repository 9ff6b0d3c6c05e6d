"""The Redis Streams store: atomic Lua appends, stream indexes, one session log per session.

Every primitive is an operation (store/steps.py): it yields its Redis calls as requests on a
client, so the same code runs over `redis.Redis` and `RedisCluster` here, and over their asyncio
counterparts under `ledger_bus.aio`. The store is composed of its concerns, as redis-py composes
its command families: appends, reads, deletes, archiving, administration and consumer groups,
each a module of this package standing on the core alone (the client, keys, the boundary), never
on another concern; what two of them share is the core's, or a plain function's (`sessions`).
"""

from __future__ import annotations

from ledger_bus.store.redis.admin import RedisAdmin
from ledger_bus.store.redis.append import RedisAppend
from ledger_bus.store.redis.archive import RedisArchive
from ledger_bus.store.redis.core import DEFAULT_TIMEOUT, Entries
from ledger_bus.store.redis.deletes import RedisDeletes
from ledger_bus.store.redis.encoding import ARTIFACT_CHUNK, fullest
from ledger_bus.store.redis.groups import RedisGroups
from ledger_bus.store.redis.reads import RedisReads
from ledger_bus.store.redis.scripts import APPEND, DELETE_STREAM, load_script

__all__ = [
    "APPEND",
    "ARTIFACT_CHUNK",
    "DEFAULT_TIMEOUT",
    "DELETE_STREAM",
    "Entries",
    "RedisStore",
    "fullest",
    "load_script",
]


class RedisStore(RedisAppend, RedisReads, RedisDeletes, RedisArchive, RedisAdmin, RedisGroups):
    """An EventStore on one Redis (or Valkey) server, 7.0 or newer, or on a Redis Cluster.

    Every call is retried with backoff on a lost connection until `timeout` seconds have passed,
    then raises BackendUnavailable. Retrying an append is safe: the append_id makes it land once.
    `client` is a blocking client for this class's own methods, or an asyncio one when the store
    is the core of `ledger_bus.agent.aio.AsyncStore`, which runs the same operations.
    """
