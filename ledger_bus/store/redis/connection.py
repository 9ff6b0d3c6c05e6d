"""Reaching Redis: the clients for a cluster and for Sentinel's primary, the retry loop every
call goes through, and what each final answer means as a ledger error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

import redis.exceptions as rx
from redis.cluster import RedisCluster

from ledger_bus.model.errors import BackendRefused, BackendUnavailable, InvalidInput, LedgerError
from ledger_bus.store.ops import call, retried, run

T = TypeVar("T")

# Replies that mean "not now" rather than "never": a failover, a loading replica, a busy script.
_TRANSIENT: Final = ("LOADING", "BUSY", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN")


def refusal(err: Exception) -> LedgerError:
    """The ledger error for a reply that will not change by retrying it as it is."""
    text = str(err)
    if isinstance(err, rx.InvalidResponse):
        return BackendUnavailable(f"no Redis at this address (its reply is not Redis's): {text}")
    if isinstance(err, rx.AuthenticationError) or text.startswith("WRONGPASS"):
        return BackendRefused(f"redis refused the credentials: {text}")
    if (
        isinstance(err, rx.NoPermissionError)
        or text.startswith("NOPERM")
        or "can't run this command" in text  # a script's own command, refused by the ACL
        or "can't access at least one of the keys" in text  # or the keys it names
    ):
        return BackendRefused(f"redis refused the permission (ACL): {text}")
    if isinstance(err, rx.OutOfMemoryError) or "used memory > 'maxmemory'" in text:
        return BackendRefused(f"Redis memory is full (maxmemory reached): {text}")
    return BackendRefused(f"redis refused the command: {text}")


# What the Redis store's calls retry on (store/ops.py's `retried`): every error of redis-py,
# each judged by `final`.
REDIS_ERRORS: Final = (rx.RedisError,)


def final(err: Exception) -> LedgerError | None:
    """None for a failure that passes; the ledger error for one that will not."""
    if isinstance(err, (rx.AuthenticationError, rx.AuthorizationError)):
        return refusal(err)  # ConnectionErrors to redis-py, but final
    if isinstance(err, (rx.ConnectionError, rx.TimeoutError)):
        return None
    if isinstance(err, rx.ResponseError) and str(err).startswith(_TRANSIENT):
        return None
    return refusal(err)


def parsed(make: Callable[[], T]) -> T:
    """`make()`, which builds a client from a URL: a bad value in the URL's query (redis-py
    raises ValueError, "Invalid value for 'max_connections' in connection URL.") is bad input."""
    try:
        return make()
    except ValueError as err:
        raise InvalidInput(str(err)) from None


def open_cluster(url: str, options: dict[str, Any], timeout: float) -> RedisCluster:
    """A cluster client, which reads the slot map as it is built: retried like any call until
    `timeout`, and refused at once when the node answers that it is not in cluster mode."""

    def build() -> RedisCluster:
        try:
            return parsed(lambda: RedisCluster.from_url(url, **options))
        except rx.RedisClusterException as err:
            raise cluster_failure(err, url) from err

    made: RedisCluster = run(
        retried(
            lambda: call(lambda _: build()), timeout, REDIS_ERRORS, final, f"the cluster at {url}"
        ),
        None,
    )
    return made


def cluster_failure(err: rx.RedisClusterException, url: str) -> Exception:
    """What reading a cluster's slot map failing means (the exception is no RedisError, so it
    says which it is): refused at once when the node is not in cluster mode, else a lost
    connection, retried."""
    if "Cluster mode is not enabled" in str(err):
        return BackendRefused(
            f"{url} is not a Redis Cluster node; use redis:// for a single server"
        )
    return rx.ConnectionError(str(err))


def open_sentinel(url: str, options: dict[str, Any], sentinel_class: Any = None) -> Any:
    """A client of the primary that Sentinel names: `redis+sentinel://H:P,H2:P2/MASTER/DB`
    (`rediss+sentinel://` for TLS to the data nodes; user and password in the URL are the data
    nodes', `?sentinel_password=` the sentinels', and `?max_connections=` caps the primary's
    pool as on redis:// URLs). After a failover, the next connection it makes asks the sentinels
    again, so the store's retries find the new primary."""
    from redis.sentinel import Sentinel

    kind = sentinel_class or Sentinel  # redis.asyncio.sentinel.Sentinel for an asyncio client
    parts = urlsplit(url)
    hosts = []
    for item in parts.netloc.rpartition("@")[2].split(","):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidInput(f"a sentinel is host:port, got {item!r} in {url!r}")
        hosts.append((host.strip("[]"), int(port)))
    names = [p for p in parts.path.split("/") if p]
    if not names or len(names) > 2 or (len(names) == 2 and not names[1].isdigit()):
        raise InvalidInput(f"a Sentinel URL names the primary and a database: /MASTER/DB; {url!r}")
    query = dict(parse_qsl(parts.query))
    data = dict(options)
    if parts.username:
        data["username"] = unquote(parts.username)
    if parts.password:
        data["password"] = unquote(parts.password)
    if parts.scheme.startswith("rediss"):
        data["ssl"] = True
    if "max_connections" in query:
        # As redis-py reads it from a redis:// URL: an integer, 0 for no cap.
        cap = query["max_connections"]
        if not cap.isdigit():
            raise InvalidInput("Invalid value for 'max_connections' in connection URL.")
        data["max_connections"] = int(cap)
    timeouts = {k: options[k] for k in ("socket_timeout", "socket_connect_timeout")}
    if "sentinel_password" in query:
        timeouts["password"] = query["sentinel_password"]
    sentinel = kind(hosts, sentinel_kwargs=timeouts, **timeouts)
    db = int(names[1]) if len(names) == 2 else 0
    return sentinel.master_for(names[0], db=db, **data)


def sentinels_of(client: Any) -> list[Any]:
    """The clients of the sentinels that `client`, from open_sentinel, asks for its primary:
    closing `client` closes its pool of the primary's connections, not theirs."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    return list(manager.sentinels) if manager is not None else []
