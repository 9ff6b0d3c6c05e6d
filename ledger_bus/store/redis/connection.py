"""Reaching Redis: the clients for a cluster and for Sentinel's primary, the retry loop every
call goes through, and what each final answer means as a ledger error."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import redis
import redis.exceptions as rx
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

from ledger_bus.model.environment import without_password
from ledger_bus.model.errors import BackendRefused, BackendUnavailable, InvalidInput, LedgerError
from ledger_bus.store.steps import call, retried, run

if TYPE_CHECKING:
    from redis.asyncio import Redis as AsyncRedis

T = TypeVar("T")
R = TypeVar("R", "redis.Redis", "AsyncRedis")

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


# What the Redis store's calls retry on (store/steps.py's `retried`): every error of redis-py,
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


def one_server(kind: type[R], url: str, options: dict[str, Any]) -> R:
    """A client of `kind` (redis-py's blocking or asyncio Redis) for the one server at `url`
    (redis://, rediss://, unix://). Each connection it opens PINGs the server first
    (health_check_interval), which is what a command's first contact sees (contact.py).
    InvalidInput for a TCP URL whose database is not a number (`redis://h/abc`), which redis-py
    would take for database 0 without a word; a socket's database is its `?db=`."""
    parts = urlsplit(url)
    database = parts.path.strip("/")
    if parts.scheme in ("redis", "rediss") and database and not database.isdigit():
        raise InvalidInput(f"the database of a Redis URL is a number, got {database!r}")
    return parsed(lambda: kind.from_url(url, health_check_interval=30, **options))


def parsed(make: Callable[[], T]) -> T:
    """`make()`, which builds a client from a URL: a bad value in the URL's query (redis-py
    raises ValueError, "Invalid value for 'max_connections' in connection URL.") is bad input."""
    try:
        return make()
    except ValueError as err:
        raise InvalidInput(str(err)) from None


# One node: an IPv6 address in brackets, or a name or an IPv4 address; then ":PORT" if it has
# one. The TypeScript SDK reads a node by the same rule (typescript/src/store/urls.ts).
_NODE: Final = re.compile(r"(?:\[([0-9A-Fa-f:.]+)\]|([^\s:\[\]]+))(?::([0-9]+))?", re.ASCII)


def hosts_of(url: str, what: str, default_port: int | None = None) -> list[tuple[str, int]]:
    """The nodes a URL names, `H:P,H2:P2` between its credentials and its path, in its order
    (an IPv6 host in brackets, `[::1]:P`). Without a port, a node is at `default_port`; where
    there is none, the port is required. InvalidInput naming the URL (its password hidden) for
    an empty node or host, or a port that is no number from 1 to 65535, before anything is
    tried."""
    hosts = []
    for item in urlsplit(url).netloc.rpartition("@")[2].split(","):
        node = _NODE.fullmatch(item)
        port = node[3] if node and node[3] else default_port
        if node is None or port is None or not 0 < int(port) < 65536:
            raise InvalidInput(f"{what} is host:port, got {item!r} in {without_password(url)!r}")
        hosts.append((node[1] or node[2], int(port)))
    return hosts


def cluster_seeds(url: str) -> tuple[str, list[tuple[str, int]]]:
    """A `redis+cluster://` (or `rediss+cluster://`) URL as redis-py reads it, naming the first
    of its seed nodes, and every seed: `redis+cluster://USER:PASS@H:P,H2:P2/0?OPTIONS`. The
    user, password, TLS and options are the URL's, for every node the client reaches; a seed
    without a port is at 6379, as on redis:// URLs."""
    seeds = hosts_of(url, "a cluster seed", default_port=6379)
    parts = urlsplit(url.replace("+cluster", "", 1))
    if parts.path.strip("/") not in ("", "0"):
        raise InvalidInput(f"a Redis Cluster has one database, 0: {without_password(url)!r}")
    credentials, at, _ = parts.netloc.rpartition("@")
    host, port = seeds[0]
    first = f"[{host}]" if ":" in host else host
    return urlunsplit(parts._replace(netloc=f"{credentials}{at}{first}:{port}")), seeds


def cluster_client(kind: Any, node: Any, url: str, options: dict[str, Any]) -> Any:
    """A client of `kind` (redis-py's RedisCluster, blocking or asyncio) for the cluster that
    `url` names by its seeds (`cluster_seeds`), with the nodes of `node`, ClusterNode of the
    same flavour: it learns the slot map from the first seed that answers, so the cluster is
    reached as long as one of them is up. The blocking client reads the map as it is built."""
    first, seeds = cluster_seeds(url)
    # Every seed, the first included (redis-py adds the URL's own node again; the same name is
    # one node to it): a URL of one seed is the client it has always been.
    nodes = [node(host, port) for host, port in seeds]
    return parsed(lambda: kind.from_url(first, startup_nodes=nodes, **options))


def open_cluster(url: str, options: dict[str, Any], timeout: float) -> RedisCluster:
    """A cluster client from a `redis+cluster://` URL (`cluster_seeds`), which reads the slot
    map as it is built: retried like any call until `timeout`, and refused at once when a node
    answers that it is not in cluster mode."""
    where = without_password(url.replace("+cluster", "", 1))

    def build() -> RedisCluster:
        try:
            made: RedisCluster = cluster_client(RedisCluster, ClusterNode, url, options)
        except rx.RedisClusterException as err:
            raise cluster_failure(err, where) from err
        return made

    made: RedisCluster = run(
        retried(
            lambda: call(lambda _: build()), timeout, REDIS_ERRORS, final, f"the cluster at {where}"
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
    if isinstance(err.__cause__, (rx.AuthenticationError, rx.AuthorizationError)):
        # A node refused the URL's credentials, which are every node's: no retry changes that.
        return refusal(err.__cause__)
    return rx.ConnectionError(str(err))


def open_sentinel(url: str, options: dict[str, Any], sentinel_class: Any = None) -> Any:
    """A client of the primary that Sentinel names: `redis+sentinel://H:P,H2:P2/MASTER/DB`
    (`rediss+sentinel://` for TLS to the data nodes; user and password in the URL are the data
    nodes', `?sentinel_password=` the sentinels', and `?max_connections=` caps the primary's
    pool as on redis:// URLs). After a failover, the next connection it makes asks the sentinels
    again, so the store's retries find the new primary."""
    kind = sentinel_class or Sentinel  # redis.asyncio.sentinel.Sentinel for an asyncio client
    parts = urlsplit(url)
    hosts = hosts_of(url, "a sentinel")
    names = [p for p in parts.path.split("/") if p]
    if not names or len(names) > 2 or (len(names) == 2 and not names[1].isdigit()):
        named = without_password(url)
        raise InvalidInput(
            f"a Sentinel URL names the primary and a database: /MASTER/DB; {named!r}"
        )
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


def sentinels_of(client: object) -> list[Any]:
    """The clients of the sentinels that `client`, from open_sentinel, asks for its primary:
    closing `client` closes its pool of the primary's connections, not theirs."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    return list(manager.sentinels) if manager is not None else []
