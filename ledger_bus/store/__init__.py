"""Backends behind one EventStore interface, chosen by URL."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ledger_bus.model.batch import Limits
from ledger_bus.model.durability import DEFAULT_TIMEOUT_MS, LOCAL, Durability, parse_durability
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.records import AppendResult, RecordedEvent, SessionInfo, StreamInfo
from ledger_bus.store.base import EventStore
from ledger_bus.store.memory import MemoryStore

if TYPE_CHECKING:
    from ledger_bus.store.sql import SqlStore

DEFAULT_URL: Final = "redis://127.0.0.1:6379/0"
URL_ENV: Final = "LEDGER_BUS_URL"
ARCHIVE_ENV: Final = "LEDGER_BUS_ARCHIVE"

__all__ = [
    "ARCHIVE_ENV",
    "DEFAULT_URL",
    "URL_ENV",
    "AppendResult",
    "EventStore",
    "RecordedEvent",
    "SessionInfo",
    "StreamInfo",
    "connect",
    "split_durability",
]


def connect(
    url: str | None = None,
    *,
    timeout: float = 10.0,
    prefix: str = "lb",
    limits: Limits | None = None,
    durability: str | Durability | None = None,
    archive: str | None = None,
    resolve_artifacts: bool = True,
) -> EventStore:
    """Open a store.

    Args:
        url: "redis://host:port/db", "rediss://..." (TLS), "unix:///path.sock",
            "redis+cluster://host:port" (any node of a Redis Cluster),
            "redis+sentinel://host:port,host2:port2/MASTER/DB" (the primary Sentinel names),
            "sqlite:///PATH" or "postgresql://USER@HOST:PORT/DB" (the SQL store), or
            "memory://"; None reads LEDGER_BUS_URL, then falls back to redis://127.0.0.1:6379/0.
            `?durability=LEVEL&durability_timeout_ms=MS` in the URL sets the durability.
        timeout: seconds, retries included, before a call gives up with BackendUnavailable.
        prefix: the first part of every Redis key (or SQL table name), to share one database
            between ledgers.
        limits: bounds on event size and events per append, and the size from which an
            event keeps its large fields as artifacts (spec 3.11).
        durability: what an append waits for: "local" (the default), "replicas:N", "aof" or
            "aof+replicas:N" (ledger_bus.model.durability); overrides the URL's.
        archive: the SQL store ("sqlite:///PATH", "postgresql://...") that sessions archived
            from this Redis live in, read through (spec 3.10); None reads LEDGER_BUS_ARCHIVE.
        resolve_artifacts: whether reads put artifacts back into their events (spec 3.11), or
            leave ArtifactRef values, unless a read says.
    """
    store = _open(url, timeout, prefix, limits, durability, archive)
    store.resolve_artifacts = resolve_artifacts
    return store


def _open(
    url: str | None,
    timeout: float,
    prefix: str,
    limits: Limits | None,
    durability: str | Durability | None,
    archive: str | None,
) -> EventStore:
    url = url or os.environ.get(URL_ENV) or DEFAULT_URL
    url, level = split_durability(url, durability)
    scheme = urlsplit(url).scheme
    if scheme in _REDIS_SCHEMES:  # the variable names the archive of a Redis ledger only
        archive = archive or os.environ.get(ARCHIVE_ENV) or None
    if scheme == "memory":
        if not level.local:
            raise InvalidInput(f"memory:// keeps nothing beyond this process: durability {level}")
        return MemoryStore(limits)
    if scheme in _REDIS_SCHEMES:
        import redis
        from redis.backoff import NoBackoff
        from redis.cluster import RedisCluster
        from redis.retry import Retry

        from ledger_bus.store.redis import RedisStore
        from ledger_bus.store.redis.connection import open_cluster, open_sentinel, parsed

        options = redis_options(timeout, level)
        options["retry"] = Retry(NoBackoff(), 0)  # the store retries, to a deadline of its own
        client: redis.Redis | RedisCluster
        if scheme.endswith("+cluster"):
            client = open_cluster(url.replace("+cluster", "", 1), options, timeout)
        elif scheme.endswith("+sentinel"):
            client = open_sentinel(url, options)
        else:
            client = parsed(lambda: redis.Redis.from_url(url, health_check_interval=30, **options))
        settings = redis_settings(options, prefix, limits, timeout, level)
        if archive:
            from ledger_bus.store.redis.tiered import TieredStore

            cold = open_sql(archive, LOCAL, prefix, limits, timeout)
            return TieredStore(client, archive=cold, **settings)
        return RedisStore(client, **settings)
    if archive:
        raise InvalidInput(
            f"an archive is read through from a Redis store; {scheme}:// reads its own sessions"
        )
    if scheme in _SQL_SCHEMES:
        return open_sql(url, level, prefix, limits, timeout)
    raise InvalidInput(
        f"unsupported URL {url!r}: use redis://, rediss://, unix://, redis+cluster://,"
        " redis+sentinel://, sqlite:///PATH, postgresql://USER@HOST/DB or memory://"
    )


def redis_options(timeout: float, level: Durability) -> dict[str, Any]:
    """What every Redis client of a store is built with (its `retry` is the caller's: the
    blocking and asyncio clients each take their own kind)."""
    return {
        "protocol": 2,  # stable reply shapes; RESP3 changes XREAD's
        # A socket must outlast the longest wait the store asks of the server.
        "socket_timeout": min(5.0, max(timeout, 0.1)) + level.timeout_ms / 1000,
        "socket_connect_timeout": min(5.0, max(timeout, 0.1)),
    }


def redis_settings(
    options: dict[str, Any],
    prefix: str,
    limits: Limits | None,
    timeout: float,
    level: Durability,
) -> dict[str, Any]:
    """The RedisStore arguments besides its client."""
    return {
        "prefix": prefix,
        "limits": limits,
        "timeout": timeout,
        "socket_timeout": options["socket_timeout"],
        "durability": level,
    }


_REDIS_SCHEMES: Final = (
    "redis",
    "rediss",
    "unix",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
)


_SQL_SCHEMES: Final = ("sqlite", "postgresql", "postgres")


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


def open_sql(
    url: str,
    level: Durability,
    prefix: str,
    limits: Limits | None,
    timeout: float,
    asynchronous: bool = False,
) -> SqlStore:
    """The SQL store at `url`; `asynchronous`: on an async engine, to be called (and used)
    through SQLAlchemy's greenlet bridge only (ledger_bus.store.aio)."""
    scheme = urlsplit(url).scheme
    if scheme not in _SQL_SCHEMES:
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
