"""The asyncio stores by URL, as store/urls.py opens the blocking ones: each scheme's opener of
an AsyncStore. Redis's lives with its backend (store/redis/aio.py), loaded when a Redis URL is
opened; the SQL store runs on an async engine through SQLAlchemy's greenlet bridge; the memory
store and a Redis ledger read through its archive run on worker threads."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from ledger_bus.model.durability import Durability
from ledger_bus.model.prepared import Limits
from ledger_bus.store.async_store import AsyncStore, bridge
from ledger_bus.store.urls import REDIS_SCHEMES, SQL_SCHEMES, Opening, open_sql, open_store, opening


async def _on_threads(o: Opening) -> AsyncStore:
    """A store of blocking primitives (memory, Redis read through its archive), its core run
    on worker threads."""
    core = await asyncio.to_thread(open_store, o)
    return AsyncStore(core)


async def _redis(o: Opening) -> AsyncStore:
    if o.archive:  # the archive's store has blocking primitives only
        return await _on_threads(o)
    from ledger_bus.store.redis.aio import open_redis_async  # here: it loads redis.asyncio

    return await open_redis_async(o)


async def _sql(o: Opening) -> AsyncStore:
    sql = await bridge(open_sql, o.url, o.level, o.prefix, o.limits, o.timeout, True)
    sql.resolve_artifacts = o.resolve_artifacts
    return AsyncStore(sql, bridged=True)


OPENERS: Final[dict[str, Callable[[Opening], Awaitable[AsyncStore]]]] = {
    "memory": _on_threads,
    **dict.fromkeys(REDIS_SCHEMES, _redis),
    **dict.fromkeys(SQL_SCHEMES, _sql),
}


async def open_async(  # noqa: PLR0913  (connect's settings, each a keyword)
    url: str | None = None,
    *,
    timeout: float = 10.0,
    prefix: str = "lb",
    limits: Limits | None = None,
    durability: str | Durability | None = None,
    archive: str | None = None,
    resolve_artifacts: bool = True,
) -> AsyncStore:
    """ledger_bus.connect's URLs and options, for asyncio (ledger_bus.agent.aio.connect)."""
    o = opening(url, timeout, prefix, limits, durability, archive, resolve_artifacts)
    return await OPENERS[o.scheme](o)
