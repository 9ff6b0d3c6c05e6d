"""The first contact of a one-shot command with its server: a port where nothing listens, or
where something other than Redis answers, is said at once, not after the whole retry timeout.

The contact is made on the store's own client: the connection it opens is the one the command
then runs on (returned to the client's pool), so a command opens one connection, not two.
Commands that run for long (reconcile, follow, tail --follow, ui, mirror) skip this and keep
retrying with backoff: a server that is down when they start may be up in a moment.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import redis
import redis.exceptions as rx

from ledger_bus.model.errors import BackendUnavailable


def check_first_contact(store: object, url: str) -> None:
    """For a store on one server at a `redis://` URL: BackendUnavailable when nothing listens
    at its address, or when what answers there is not Redis. Any other outcome (a slow
    answer, a refused password, a name that does not resolve) is left to the store's own
    retries and errors."""
    parts = urlsplit(url)
    if parts.scheme != "redis":
        return
    client = getattr(store, "client", None)
    if type(client) is not redis.Redis:  # Sentinel's client finds its server otherwise
        return
    where = f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
    pool: Any = client.connection_pool
    connection: Any = None
    try:
        connection = pool.get_connection()
        connection.send_command("PING")
        connection.read_response()
    except rx.InvalidResponse:
        raise BackendUnavailable(
            f"no Redis at this address ({where}): its reply is not Redis's (another service on"
            " that port?)"
        ) from None
    except rx.ConnectionError as err:
        if _refused(err):
            raise BackendUnavailable(
                f"nothing listens at {where} (connection refused): is Redis running?"
            ) from None
        if err.__cause__ is None and err.__context__ is None:  # redis-py: closed by server
            raise BackendUnavailable(
                f"no Redis at this address ({where}): the server there closed the connection"
                " without a Redis reply (another service on that port?)"
            ) from None
        # anything else (slow, reset, unreachable for now): the store's retries decide
    except (rx.RedisError, OSError):
        pass  # a Redis error (NOAUTH, a refused password) or a timeout: the store's own
    else:
        pool.release(connection)  # the connection the command then runs on
        return
    if connection is not None:
        connection.disconnect()
        pool.release(connection)


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
