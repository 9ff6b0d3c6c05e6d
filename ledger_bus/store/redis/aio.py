"""The Redis store under asyncio: its opener, on a `redis.asyncio` client (one server, Sentinel,
cluster), and redis-py's asyncio connections packing commands in C. Imported by the asyncio
opener of a Redis URL (store/async_urls.py) only, so that nothing else loads redis.asyncio."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import redis.exceptions as rx
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.utils import HIREDIS_AVAILABLE

from ledger_bus.model.environment import without_password
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.store.redis import RedisStore
from ledger_bus.store.redis.autopipe import Coalescing
from ledger_bus.store.redis.connection import (
    REDIS_ERRORS,
    cluster_client,
    cluster_failure,
    final,
    one_server,
    open_sentinel,
    sentinels_of,
)
from ledger_bus.store.steps import call, retried, run_async
from ledger_bus.store.urls import Opening, redis_options, redis_settings


async def open_redis_async(o: Opening) -> AsyncStore:
    """A Redis store on a `redis.asyncio` client (one server, Sentinel, cluster)."""
    url, scheme, timeout = o.url, o.scheme, o.timeout
    options = redis_options(timeout, o.level)
    options["retry"] = Retry(NoBackoff(), 0)  # the store retries, to a deadline of its own
    client: Any
    if scheme.endswith("+cluster"):
        client = cluster_client(RedisCluster, ClusterNode, url, options)
        settings = client.nodes_manager.connection_kwargs
        settings["connection_class"] = packing_in_c(settings["connection_class"])
        for node in client.nodes_manager.startup_nodes.values():
            node.connection_class = packing_in_c(node.connection_class)
        seed = without_password(url.replace("+cluster", "", 1))

        async def initialize(cluster: Any) -> None:
            try:
                await cluster.initialize()
            except rx.RedisClusterException as err:
                raise cluster_failure(err, seed) from err

        who = f"the cluster at {seed}"
        await run_async(
            retried(lambda: call(initialize), timeout, REDIS_ERRORS, final, who), client
        )
    else:
        if scheme.endswith("+sentinel"):
            client = open_sentinel(url, options, Sentinel)
        else:
            client = one_server(Redis, url, options)
        pool = client.connection_pool
        pool.connection_class = packing_in_c(pool.connection_class)
    core = RedisStore(client, **redis_settings(options, o))
    core.resolve_artifacts = o.resolve_artifacts

    async def closing() -> None:
        await client.aclose()
        for sentinel in sentinels_of(client):
            await sentinel.aclose()

    # A cluster's client sends each command to its slot's node: coalescing is for one server.
    requests = client if scheme.endswith("+cluster") else Coalescing(client)
    return AsyncStore(core, client, requests=requests, closing=closing)


_PACKING: dict[type, type] = {}


class _Packer(Protocol):
    """What `packing_in_c` uses of redis-py's hiredis serializer."""

    def pack(self, *args: Any) -> Any: ...


def packing_in_c(kind: type) -> type:
    """The asyncio connection class `kind`, packing commands with hiredis's C packer as
    redis-py's blocking connections do: before redis-py 8.2 its own packs them in Python, a large
    part of a single-event append under asyncio (docs/performance.md has the figures)."""
    # redis-py 8.2 packs asyncio commands with hiredis itself (its Python packer then moved to
    # `_pack_command_python`, the fallback it hands its serializer): nothing to add there.
    if not HIREDIS_AVAILABLE or hasattr(kind, "_pack_command_python"):
        return kind
    found = _PACKING.get(kind)
    if found is None:
        # Imported here: only the redis-py versions before 8.2 need it, and get this far.
        from redis.connection import HiredisRespSerializer  # noqa: PLC0415

        # Typed as what is used of it: redis-py 8.2 gave the class an unannotated __init__.
        make_packer: Callable[[], _Packer] = HiredisRespSerializer
        packer = make_packer()

        def pack_command(self: object, *args: Any) -> list[bytes]:
            packed: list[bytes] = packer.pack(*args)
            return packed

        found = _PACKING[kind] = type(kind.__name__, (kind,), {"pack_command": pack_command})
    return found
