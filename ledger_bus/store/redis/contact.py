"""The first contact of a one-shot command with its server: a port where nothing listens, or
where something other than Redis answers, is said at once, not after the whole retry timeout.

The contact is made on the store's own client: the connection it opens is the one the command
then runs on (returned to the client's pool), so a command opens one connection, not two.
Commands that run for long (reconcile, follow, tail --follow, ui, mirror) skip this and keep
retrying with backoff: a server that is down when they start may be up in a moment.
"""

from __future__ import annotations

from typing import Any, Final

import redis
import redis.exceptions as rx

from ledger_bus.model.errors import BackendUnavailable

# What redis-py says of a connection the server closed without a reply (redis/_parsers/socket.py,
# the same in every version the locks pin: tests/stores/test_redis_py_parts.py).
_CLOSED: Final = "Connection closed by server."


def check_first_contact(client: object) -> None:
    """For a client of one server over plain TCP (`redis://`): BackendUnavailable when nothing
    listens at its address, nothing answers there within the store's timeouts, or what answers
    is not Redis. Any other outcome (a refused password, a reset, too many clients, a name that
    does not resolve) is left to the store's own retries and errors, as are TLS, a unix socket,
    Sentinel and a cluster, which reach their server otherwise."""
    if type(client) is not redis.Redis:
        return
    pool: Any = client.connection_pool
    if pool.connection_class is not redis.Connection:
        return
    found = pool.connection_kwargs
    where = f"{found.get('host', 'localhost')}:{found.get('port', 6379)}"
    connection: Any = None
    try:
        # Connecting is the contact: the store's client PINGs the server on every connection it
        # opens (connection.one_server), and that reply is the first the server gives.
        connection = pool.get_connection()
    except (rx.RedisError, OSError) as err:
        if connection is not None:
            connection.disconnect()  # not used again as it is
        unavailable = _unavailable(err, where)
        if unavailable is not None:
            raise unavailable from None
    finally:
        if connection is not None:
            pool.release(connection)  # the connection the command then runs on


def _unavailable(err: Exception, where: str) -> BackendUnavailable | None:
    """What a failed first contact means: no Redis at `where`, said at once; None for what the
    store's own retries and errors decide (a refused password, a reset, too many clients)."""
    if isinstance(err, rx.AuthenticationError | rx.AuthorizationError):
        return None  # Redis, refusing the credentials (ConnectionErrors both, to redis-py)
    if isinstance(err, rx.TimeoutError):
        # A port that takes the connection and never answers, or none that does within the
        # store's timeouts: said now, not again after the store's retries have waited as long.
        return BackendUnavailable(
            f"nothing answered at {where} within the timeout: is Redis running there?"
        )
    if isinstance(err, rx.InvalidResponse):
        return BackendUnavailable(
            f"no Redis at this address ({where}): its reply is not Redis's (another service on"
            " that port?)"
        )
    if isinstance(err, rx.ConnectionError) and _refused(err):
        return BackendUnavailable(
            f"nothing listens at {where} (connection refused): is Redis running?"
        )
    if isinstance(err, rx.ConnectionError) and str(err) == _CLOSED:
        return BackendUnavailable(
            f"no Redis at this address ({where}): the server there closed the connection"
            " without a Redis reply (another service on that port?)"
        )
    return None


def _refused(err: BaseException) -> bool:
    """Whether redis-py's connection error came of a refused connection (its cause, or the
    error it was raised while handling)."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


__all__ = ["check_first_contact"]
