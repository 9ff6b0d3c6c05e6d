"""`ledger-bus mcp --http`: the MCP SDK's streamable HTTP app, behind what a server that teams
share needs besides: on loopback, the Host and Origin check of both HTTP faces
(ledger_bus/access/hosts.py), before any route, the authorization metadata included; and each
bearer token's MCP sessions bounded.

Sessions are the older handshake's (protocol versions up to 2025-11-25): each `initialize`
opens one, held until the client deletes it or it has been idle for IDLE_S. The SDK bounds all
of them together (10,000), which one token filled in under a minute, for half an hour. Here a
token holds at most its limit: a new one past it closes the token's least recently used idle
session first (a client that reconnects often, or leaks its sessions, churns its own and no
one else's); when every session of the token is busy (a request in flight, a stream open),
the new one is refused, 429, saying why. The 2026-07-28 protocol opens no session: its
requests pass untouched.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ledger_bus.access.hosts import App, Message, Receive, Scope, Send, local_only
from ledger_bus.access.limits import Limits, key_of

PATH: Final = "/mcp"
IDLE_S: Final = 30 * 60.0  # a session with no request in flight this long is closed (the SDK's)
SESSION: Final = "mcp-session-id"


def http_app(server: MCPServer, host: str, limits: Limits) -> App:
    """The server as an ASGI app for uvicorn, listening on `host`."""
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        session_idle_timeout=IDLE_S,
        # The check is ours, around every route: the SDK's covers the MCP endpoint alone.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return local_only(SessionsPerToken(app, limits.sessions), host)


@dataclass
class _Held:
    """One session of a token's: its requests in flight, and when the last of them ended."""

    busy: int = 0
    since: float = field(default_factory=time.monotonic)


class SessionsPerToken:
    """ASGI middleware: each bearer token holds at most `limit` MCP sessions (module
    docstring). What it knows of a session it learns from the requests that pass: the session
    id an `initialize` is answered with, the requests made in it, its deletion, a 404."""

    def __init__(self, app: App, limit: int, clock: Callable[[], float] = time.monotonic):
        self.app = app
        self.limit = limit
        self.clock = clock
        self.sessions: dict[str, OrderedDict[str, _Held]] = {}  # by token: least recent first
        self.opening: dict[str, int] = {}  # by token: initializes not answered yet

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        token = _bearer(headers.get("authorization", ""))
        session = headers.get(SESSION)
        if token is None:
            await self.app(scope, receive, send)  # the SDK answers 401
        elif session is not None:
            await self._in_session(key_of(token), session, scope, receive, send)
        elif (
            scope["method"] == "POST"
            and headers.get("mcp-protocol-version", HANDSHAKE_PROTOCOL_VERSIONS[0])
            in HANDSHAKE_PROTOCOL_VERSIONS
        ):
            await self._opening(key_of(token), scope, receive, send)
        else:
            await self.app(scope, receive, send)  # a request that opens no session

    def _held(self, key: str) -> OrderedDict[str, _Held]:
        """The token's sessions, those the server has let go for idleness forgotten. Kept
        only while it has some: a token that opens none (a wrong one, say) leaves nothing."""
        mine = self.sessions.pop(key, OrderedDict())
        now = self.clock()
        for session, held in list(mine.items()):
            if not held.busy and now - held.since > IDLE_S:
                del mine[session]
        if mine:
            self.sessions[key] = mine
        return mine

    async def _opening(self, key: str, scope: Scope, receive: Receive, send: Send) -> None:
        mine = self._held(key)
        closing = None
        if len(mine) + self.opening.get(key, 0) >= self.limit:
            closing = next((s for s, held in mine.items() if not held.busy), None)
            if closing is None:
                await _refuse(send, self.limit)
                return
            del mine[closing]
        # Counted before the first await: an initialize arriving meanwhile sees this one.
        self.opening[key] = self.opening.get(key, 0) + 1
        try:
            if closing is not None:
                await self._close(scope, closing)
            status, opened = await _passed(self.app, scope, receive, send)
        finally:
            self.opening[key] -= 1
            if not self.opening[key]:
                del self.opening[key]
        if status < 400 and opened is not None:
            self.sessions[key] = self._held(key)
            self.sessions[key][opened] = _Held(since=self.clock())

    async def _in_session(
        self, key: str, session: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        held = self.sessions.get(key, OrderedDict()).get(session)
        if held is None:  # another token's, or one let go: the SDK answers for it
            await self.app(scope, receive, send)
            return
        self.sessions[key].move_to_end(session)
        held.busy += 1
        status = 500
        try:
            status, _ = await _passed(self.app, scope, receive, send)
        finally:
            held.busy -= 1
            held.since = self.clock()
            if status == 404 or (scope["method"] == "DELETE" and status < 400):
                self._forget(key, session)

    def _forget(self, key: str, session: str) -> None:
        mine = self.sessions.get(key)
        if mine is not None:
            mine.pop(session, None)
            if not mine:
                del self.sessions[key]

    async def _close(self, scope: Scope, session: str) -> None:
        """Close a session as its client would: DELETE, with the token that opened it."""
        kept = [(k, v) for k, v in scope["headers"] if k.lower() in (b"authorization", b"host")]
        closing = {
            **scope,
            "method": "DELETE",
            "query_string": b"",
            "headers": [*kept, (SESSION.encode(), session.encode())],
        }
        asked = False

        async def receive() -> Message:
            nonlocal asked
            if asked:
                return {"type": "http.disconnect"}
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}

        async def dropped(_: Message) -> None:
            return None

        await self.app(closing, receive, dropped)


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _bearer(authorization: str) -> str | None:
    scheme, _, value = authorization.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


async def _passed(app: App, scope: Scope, receive: Receive, send: Send) -> tuple[int, str | None]:
    """Run `app` on the request; the status it answered with, and the session id it named."""
    answered: dict[str, Any] = {"status": 500, "session": None}

    async def watched(message: Message) -> None:
        if message["type"] == "http.response.start":
            answered["status"] = message["status"]
            for k, v in message.get("headers", []):
                if k.decode("latin-1").lower() == SESSION:
                    answered["session"] = v.decode("latin-1")
        await send(message)

    await app(scope, receive, watched)
    return answered["status"], answered["session"]


async def _refuse(send: Send, limit: int) -> None:
    said = (
        f"OverLimit: this token holds {limit} MCP sessions at once already, each busy, the most"
        " one token may: end one (DELETE), or give each agent a token of its own"
    )
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": said}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
