"""Backends behind one EventStore interface, chosen by URL."""

from __future__ import annotations

import os
from typing import Any, Final
from urllib.parse import urlsplit

from ledger_bus.batch import Limits
from ledger_bus.errors import InvalidInput
from ledger_bus.store.base import AppendResult, EventStore, RecordedEvent, SessionInfo, StreamInfo
from ledger_bus.store.memory import MemoryStore

DEFAULT_URL: Final = "redis://127.0.0.1:6379/0"
URL_ENV: Final = "LEDGER_BUS_URL"

__all__ = [
    "DEFAULT_URL",
    "URL_ENV",
    "AppendResult",
    "EventStore",
    "RecordedEvent",
    "SessionInfo",
    "StreamInfo",
    "connect",
]


def connect(
    url: str | None = None,
    *,
    timeout: float = 10.0,
    prefix: str = "lb",
    limits: Limits | None = None,
) -> EventStore:
    """Open a store.

    Args:
        url: "redis://host:port/db", "rediss://..." (TLS), "unix:///path.sock",
            "redis+cluster://host:port" (any node of a Redis Cluster), or "memory://";
            None reads LEDGER_BUS_URL, then falls back to redis://127.0.0.1:6379/0.
        timeout: seconds, retries included, before a call gives up with BackendUnavailable.
        prefix: the first part of every Redis key, to share one database between ledgers.
        limits: bounds on event size and events per append.
    """
    url = url or os.environ.get(URL_ENV) or DEFAULT_URL
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        return MemoryStore(limits)
    if scheme in ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"):
        import redis
        from redis.backoff import NoBackoff
        from redis.cluster import RedisCluster
        from redis.retry import Retry

        from ledger_bus.store.redis import RedisStore, open_cluster

        socket_timeout = min(5.0, max(timeout, 0.1))
        options: dict[str, Any] = {
            "protocol": 2,  # stable reply shapes; RESP3 changes XREAD's
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": socket_timeout,
            # The store retries itself, with a deadline that covers every attempt.
            "retry": Retry(NoBackoff(), 0),
        }
        client: redis.Redis | RedisCluster
        if scheme.endswith("+cluster"):
            client = open_cluster(url.replace("+cluster", "", 1), options, timeout)
        else:
            client = redis.Redis.from_url(url, health_check_interval=30, **options)
        return RedisStore(
            client, prefix=prefix, limits=limits, timeout=timeout, socket_timeout=socket_timeout
        )
    raise InvalidInput(
        f"unsupported URL {url!r}: use redis://, rediss://, unix://, redis+cluster:// or memory://"
    )
