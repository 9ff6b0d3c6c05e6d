"""The web view's door when it listens beyond loopback: every request carries a token of the
tokens file `ledger-bus token` writes (the MCP server's), and any role's token is enough to
look, at the sessions its pattern names.

A token comes as `Authorization: Bearer <token>` (scripts, curl) or as the password of HTTP
Basic authentication, whatever the user name (browsers: the view answers 401 with a Basic
challenge, the browser asks for it once and sends it with every request after, the live
event streams included). No login page and no cookie: nothing to forge across sites, and
nothing kept on the server.

A request that stays open (a live event stream) is asked again, at each event and each ping,
whether its token still names the identity it came in with (`may_go_on`): a token taken out of
the file ends the streams it opened there.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Final

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ledger_bus.access.identity import Identity
from ledger_bus.access.limits import NO_TOKEN, key_of
from ledger_bus.access.tokens import Identifies

IDENTITY: Final = "ledger_bus.identity"  # where a request's identity waits in its scope
DOOR: Final = "ledger_bus.door"  # and what its token's limits are counted under, and its check
CHALLENGE: Final = 'Basic realm="ledger-bus", charset="UTF-8"'


def token_of(authorization: str) -> str | None:
    """The token an Authorization header carries, as a bearer token or a Basic password."""
    scheme, _, value = authorization.partition(" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme == "bearer":
        return value or None
    if scheme == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        _, colon, password = decoded.partition(":")
        return password if colon and password else None
    return None


class TokenGate:
    """ASGI middleware: a request whose token names no identity is answered 401 and reaches
    no page; one that does goes on with its identity in the scope."""

    def __init__(self, app: ASGIApp, tokens: Identifies):
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)  # the lifespan
            return
        token = token_of(Headers(scope=scope).get("authorization", ""))
        who = self.tokens.identify(token) if token else None
        if token is None or who is None:
            said = "a token is needed" if token is None else "that token opens nothing here"
            refused = PlainTextResponse(
                f"Unauthorized: {said} (ledger-bus token makes one)\n",
                status_code=401,
                headers={"WWW-Authenticate": CHALLENGE},
            )
            await refused(scope, receive, send)
            return
        scope[IDENTITY] = who
        scope[DOOR] = (key_of(token), lambda: self.tokens.identify(token) == who)
        await self.app(scope, receive, send)


def identity_of(scope: Scope) -> Identity | None:
    """The identity a request came in as; None when the view has no door (loopback)."""
    who: Identity | None = scope.get(IDENTITY)
    return who


def _always() -> bool:
    return True


def door_of(scope: Scope) -> tuple[str, Callable[[], bool]]:
    """What a request's limits are counted under (its token's digest; one key for all when the
    view has no door), and whether its token still names the identity it came in with."""
    door: tuple[str, Callable[[], bool]] = scope.get(DOOR, (NO_TOKEN, _always))
    return door
