"""Backends behind one EventStore interface, chosen by URL (store/urls.py has the table)."""

from __future__ import annotations

from ledger_bus.model.durability import Durability
from ledger_bus.model.environment import ARCHIVE_ENV, DEFAULT_URL, URL_ENV
from ledger_bus.model.prepared import Limits
from ledger_bus.model.records import AppendResult, RecordedEvent, SessionInfo, StreamInfo
from ledger_bus.store.base import EventStore
from ledger_bus.store.urls import (
    open_store,
    opening,
    split_durability,
)

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


def connect(  # noqa: PLR0913  (connect's settings, each a keyword, as redis-py's clients take theirs)
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
            "redis+cluster://host:port,host2:port2/0" (seed nodes of a Redis Cluster: it is
            reached while any one of them answers),
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
    return open_store(opening(url, timeout, prefix, limits, durability, archive, resolve_artifacts))
