"""The first contact of a one-shot command with its server: a port where nothing listens, or
where something other than Redis answers, is said at once, not after the whole retry timeout.

Commands that run for long (reconcile, follow, tail --follow, ui, mirror) skip this and keep
retrying with backoff: a server that is down when they start may be up in a moment.
"""

from __future__ import annotations

import socket
from typing import Final
from urllib.parse import urlsplit

from ledger_bus.model.errors import BackendUnavailable, InvalidInput

CONTACT_TIMEOUT_S: Final = 1.0
# The first byte of every RESP reply: simple string, error, integer, bulk, array (RESP2).
_RESP: Final = frozenset(b"+-:$*")


def check_first_contact(url: str) -> None:
    """For a `redis://` URL: BackendUnavailable when nothing listens at its address, or when
    what answers there is not Redis; InvalidInput for a database that is not a number. Any
    other outcome (a slow answer, TLS, a name that does not resolve) is left to the store's
    own retries."""
    parts = urlsplit(url)
    if parts.scheme != "redis":
        return
    database = parts.path.strip("/")
    if database and not database.isdigit():
        raise InvalidInput(f"the database of a redis:// URL is a number, got {database!r}")
    host, port = parts.hostname or "localhost", parts.port or 6379
    try:
        with socket.create_connection((host, port), timeout=CONTACT_TIMEOUT_S) as conn:
            conn.sendall(b"PING\r\n")
            first = conn.recv(1)
    except ConnectionRefusedError:
        raise BackendUnavailable(
            f"nothing listens at {host}:{port} (connection refused): is Redis running?"
        ) from None
    except OSError:
        return  # slow, unreachable for now, or reset: the store's retries decide
    if not first:
        raise BackendUnavailable(
            f"no Redis at this address ({host}:{port}): the server there closed the connection"
            " without a Redis reply (another service on that port?)"
        )
    if first[0] not in _RESP:
        raise BackendUnavailable(
            f"no Redis at this address ({host}:{port}): its reply is not Redis's (another"
            " service on that port?)"
        )


__all__ = ["check_first_contact"]
