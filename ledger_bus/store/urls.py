"""From a URL to a store: one table from each scheme to its two openers, the blocking one
(`ledger_bus.connect`) and the asyncio one (`ledger_bus.agent.aio.connect`).

Both read the same options the same way (`opening`): LEDGER_BUS_URL when no URL is given, the
URL's durability parameters, LEDGER_BUS_ARCHIVE for a Redis ledger alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ledger_bus.model.durability import DEFAULT_TIMEOUT_MS, LOCAL, Durability, parse_durability
from ledger_bus.model.environment import ARCHIVE_ENV, DEFAULT_URL, URL_ENV
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.prepared import Limits
from ledger_bus.store.base import EventStore

if TYPE_CHECKING:
    from ledger_bus.store.sql import SqlStore


@dataclass(frozen=True, slots=True)
class Opening:
    """What a store is opened with: its URL (without durability parameters) and options."""

    url: str
    scheme: str
    level: Durability
    prefix: str
    limits: Limits | None
    timeout: float
    archive: str | None
    resolve_artifacts: bool


def opening(  # noqa: PLR0913  (connect's settings, passed on)
    url: str | None,
    timeout: float,
    prefix: str,
    limits: Limits | None,
    durability: str | Durability | None,
    archive: str | None,
    resolve_artifacts: bool,
) -> Opening:
    """The options of `connect` as both openers take them; InvalidInput for a URL no store
    takes, or an archive for a store that reads its own sessions."""
    url = url or os.environ.get(URL_ENV) or DEFAULT_URL
    url, level = split_durability(url, durability)
    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise InvalidInput(
            f"unsupported URL {url!r}: use redis://, rediss://, unix://, redis+cluster://,"
            " redis+sentinel://, sqlite:///PATH, postgresql://USER@HOST/DB or memory://"
        )
    if scheme in REDIS_SCHEMES:  # the variable names the archive of a Redis ledger only
        archive = archive or os.environ.get(ARCHIVE_ENV) or None
    elif archive:
        raise InvalidInput(
            f"an archive is read through from a Redis store; {scheme}:// reads its own sessions"
        )
    return Opening(url, scheme, level, prefix, limits, timeout, archive, resolve_artifacts)


def split_durability(url: str, given: str | Durability | None) -> tuple[str, Durability]:
    """The URL without its durability parameters, and the durability: `given`, else the URL's,
    else local."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in ("durability", "durability_timeout_ms")}
    rest = url
    if ours:
        kept = urlencode([(k, v) for k, v in query if k not in ours])
        rest = urlunsplit(parts._replace(query=kept))
    if isinstance(given, Durability):
        return rest, given
    try:
        timeout_ms = int(ours.get("durability_timeout_ms", DEFAULT_TIMEOUT_MS))
    except ValueError:
        raise InvalidInput(f"durability_timeout_ms must be milliseconds: {url!r}") from None
    return rest, parse_durability(given or ours.get("durability", "local"), timeout_ms)


# -- memory ------------------------------------------------------------------------------------


def _memory(o: Opening) -> EventStore:
    if not o.level.local:
        raise InvalidInput(f"memory:// keeps nothing beyond this process: durability {o.level}")
    from ledger_bus.store.memory import MemoryStore  # here: a command on Redis never loads it

    return MemoryStore(o.limits)


# -- Redis -------------------------------------------------------------------------------------


def redis_options(timeout: float, level: Durability) -> dict[str, Any]:
    """What every Redis client of a store is built with (its `retry` is the caller's: the
    blocking and asyncio clients each take their own kind)."""
    return {
        "protocol": 2,  # stable reply shapes; RESP3 changes XREAD's
        # A socket must outlast the longest wait the store asks of the server.
        "socket_timeout": min(5.0, max(timeout, 0.1)) + level.timeout_ms / 1000,
        "socket_connect_timeout": min(5.0, max(timeout, 0.1)),
    }


def redis_settings(options: dict[str, Any], o: Opening) -> dict[str, Any]:
    """The RedisStore arguments besides its client."""
    return {
        "prefix": o.prefix,
        "limits": o.limits,
        "timeout": o.timeout,
        "socket_timeout": options["socket_timeout"],
        "durability": o.level,
    }


def _redis(o: Opening) -> EventStore:
    import redis
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster
    from redis.retry import Retry

    from ledger_bus.store.redis import RedisStore
    from ledger_bus.store.redis.connection import (
        one_server,
        open_cluster,
        open_sentinel,
    )

    url = o.url
    options = redis_options(o.timeout, o.level)
    options["retry"] = Retry(NoBackoff(), 0)  # the store retries, to a deadline of its own
    client: redis.Redis | RedisCluster
    if o.scheme.endswith("+cluster"):
        client = open_cluster(url, options, o.timeout)
    elif o.scheme.endswith("+sentinel"):
        client = open_sentinel(url, options)
    else:
        client = one_server(redis.Redis, url, options)
    settings = redis_settings(options, o)
    if o.archive:
        from ledger_bus.store.redis.tiered import TieredStore

        cold = open_sql(o.archive, LOCAL, o.prefix, o.limits, o.timeout)
        return TieredStore(client, archive=cold, **settings)
    return RedisStore(client, **settings)


# -- SQL ---------------------------------------------------------------------------------------


def open_sql(  # noqa: PLR0913  (connect's settings, passed on)
    url: str,
    level: Durability,
    prefix: str,
    limits: Limits | None,
    timeout: float,
    asynchronous: bool = False,
) -> SqlStore:
    """The SQL store at `url`; `asynchronous`: on an async engine, to be called (and used)
    through SQLAlchemy's greenlet bridge only (ledger_bus.store.async_store)."""
    scheme = urlsplit(url).scheme
    if scheme not in SQL_SCHEMES:
        raise InvalidInput(f"an archive is a SQL store (sqlite:///PATH, postgresql://...): {url!r}")
    if not level.local:
        raise InvalidInput(
            f"a SQL store's durability is its database's own: durability {level} cannot be"
            " asked of it"
        )
    extra = "sql" if scheme == "sqlite" else "postgres"
    try:
        from ledger_bus.store.sql import SqlStore

        if asynchronous:  # what SQLAlchemy's async engines need, named before they fail
            import greenlet  # noqa: F401

            if scheme == "sqlite":
                import aiosqlite  # noqa: F401
    except ImportError as err:
        raise InvalidInput(
            f"{scheme}:// needs {err.name}: pip install 'ledger-bus[{extra}]'"
        ) from None
    return SqlStore.from_url(
        url, prefix=prefix, limits=limits, timeout=timeout, asynchronous=asynchronous
    )


def _sql(o: Opening) -> EventStore:
    return open_sql(o.url, o.level, o.prefix, o.limits, o.timeout)


# -- the table ---------------------------------------------------------------------------------

# Each scheme's opener; store/async_urls.py has the asyncio ones, by the same schemes.
REDIS_SCHEMES: Final = (
    "redis",
    "rediss",
    "unix",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
)
SQL_SCHEMES: Final = ("sqlite", "postgresql", "postgres")
SCHEMES: Final[dict[str, Callable[[Opening], EventStore]]] = {
    "memory": _memory,
    **dict.fromkeys(REDIS_SCHEMES, _redis),
    **dict.fromkeys(SQL_SCHEMES, _sql),
}


def open_store(o: Opening) -> EventStore:
    store = SCHEMES[o.scheme](o)
    store.resolve_artifacts = o.resolve_artifacts
    return store
