"""The Host and Origin check of the ledger's HTTP faces on loopback, one for both (the web view,
the MCP server). A server on 127.0.0.1 is reachable from every web page its operator visits: a
page of another site may send it requests from its own origin, or, by DNS rebinding, under its
own host name resolved to 127.0.0.1. Both name a host that is not this machine's, so a request
is answered only when its Host is a loopback name, and its Origin, when it has one, a loopback
origin. Beyond loopback the names clients use are the network's, and every request is held by
its token instead.

The answers are the MCP SDK's own (its transport security settings): 421 for a Host, 403 for
an Origin. A plain ASGI middleware, with no import beyond the standard library, so that both
faces take it whichever extra is installed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from ledger_bus.model.environment import is_loopback

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

LOCAL_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")


def _named_host(value: str) -> str:
    """A Host header's name, without its port (an IPv6 address keeps its brackets)."""
    if value.startswith("["):
        return value[: value.find("]") + 1]
    return value.partition(":")[0]


def local_host(host: str | None) -> bool:
    """Whether a Host header names this machine by a loopback name, on any port."""
    return host is not None and _named_host(host.strip().lower()) in LOCAL_NAMES


def local_origin(origin: str | None) -> bool:
    """Whether an Origin header is absent (not a browser's cross-site request) or a page of
    this machine's, on any port."""
    if origin is None:
        return True
    scheme, sep, rest = origin.strip().lower().partition("://")
    return bool(sep) and scheme in ("http", "https") and local_host(rest)


class LocalOnly:
    """ASGI middleware: on loopback, a request for another host, or from another site's page,
    is refused before it reaches anything (module docstring)."""

    def __init__(self, app: App):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)  # the lifespan
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not local_host(headers.get("host")):
            await _refuse(scope, send, 421, "Invalid Host header: not a name of this machine")
            return
        if not local_origin(headers.get("origin")):
            await _refuse(scope, send, 403, "Invalid Origin header: another site's page")
            return
        await self.app(scope, receive, send)


async def _refuse(scope: Scope, send: Send, status: int, said: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": said})
        return
    body = (said + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def local_only(app: App, host: str) -> App:
    """`app` behind the check when it listens on loopback at `host`; as it is beyond."""
    return LocalOnly(app) if is_loopback(host) else app
