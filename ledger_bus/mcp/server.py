"""The ledger as an MCP server (the official `mcp` SDK, version 2): tools to list sessions,
tail one, wait for what is new, post a message or a mutation, keep the dispatch board, list and
resolve open calls; resources for the same reads; prompts that carry the discipline.

Every tool acts as one identity (ledger_bus/access/identity.py). A ledger error is the tool's
error, one line that names the error after the SDK's preamble (`Error executing tool post:
Refused: ...`), and writes nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Final, ParamSpec, TypeVar

import anyio
from mcp import MCPError
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ResourceUpdated,
    ServerEvent,
    SubscriptionBus,
)
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    CallToolResult,
    GetPromptResult,
    InputRequiredResult,
)
from pydantic import ValidationError

import ledger_bus
from ledger_bus.access.identity import Identity
from ledger_bus.access.limits import NO_TOKEN, Limits, Quota, key_of
from ledger_bus.access.tokens import Identifies
from ledger_bus.mcp import tools
from ledger_bus.model.errors import InvalidInput, LedgerError, Refused
from ledger_bus.store.base import EventStore

logger = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")

INSTRUCTIONS = """\
A shared, append-only record of a task that several agents work on. Before you act in a
session, read its tail (the last events, as context) and keep the cursor it gives you; wait
after that cursor for what others do next. Say what you did with post: a message, or, when the
session's state changes (a task taken, a file written, a decision), a mutation whose kind names
the change. Give each post an append_id of your own making, and give the same one when you
retry it: the ledger keeps it once. Dispatch work on the board and close it when it is done.
"""


class _Verifier(TokenVerifier):
    """A bearer token as the identity the tokens file gives it: the agent as client and
    subject, the role as the one scope, and the identity itself as a claim, for the tools."""

    def __init__(self, tokens: Identifies):
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        who = self.tokens.identify(token)
        if who is None:
            return None
        return AccessToken(
            token=token,
            client_id=who.agent,
            subject=who.agent,
            scopes=[who.role],
            claims={IDENTITY: who},
        )


class _LedgerServer(MCPServer):
    """The SDK's server, with its refusal of arguments said as the ledger says one: a line
    that names the error (InvalidInput) and the argument, not pydantic's report."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if name not in {tool.name for tool in await self.list_tools()}:
            raise ToolError(f"InvalidInput: no tool named {' '.join(repr(name).split())}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as err:
            if not isinstance(err.__cause__, ValidationError):
                raise
            first = err.__cause__.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "arguments"
            said = f"InvalidInput: {name}'s argument {where}: {first['msg']}"
            raise ToolError(f"Error executing tool {name}: {' '.join(said.split())}") from err

    async def get_prompt(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        context: Context[Any, Any] | None = None,
    ) -> GetPromptResult | InputRequiredResult:
        # A prompt unknown, or asked without an argument it needs, is the client's mistake: an
        # invalid-params error of one line, where the SDK would answer "Internal server error".
        prompts = {prompt.name: prompt for prompt in await self.list_prompts()}
        if name not in prompts:
            said = f"InvalidInput: no prompt named {' '.join(repr(name).split())}"
            raise MCPError(INVALID_PARAMS, said)
        needed = [a.name for a in prompts[name].arguments or [] if a.required]
        missing = [a for a in needed if a not in (arguments or {})]
        if missing:
            said = f"InvalidInput: prompt {name} needs {', '.join(missing)}"
            raise MCPError(INVALID_PARAMS, said)
        return await super().get_prompt(name, arguments, context)


def _one_line(err: LedgerError) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}"


def _said_as(error: type[Exception]) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """A decorator: a ledger error raised by the function it wraps, raised again as `error`
    (the SDK's error of a tool, or of a resource read): one line, the error's name first."""

    def wrap(fn: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return fn(*args, **kwargs)
            except LedgerError as err:
                raise error(_one_line(err)) from err

        return call

    return wrap


ledger_errors = _said_as(ToolError)
resource_errors = _said_as(ResourceError)


def _caller(identity: Identity | None) -> Callable[[], Identity]:
    """Who the current request acts as: `identity` (stdio), or its verified token's."""

    def me() -> Identity:
        if identity is not None:
            return identity
        token = get_access_token()
        who = None if token is None or token.claims is None else token.claims.get(IDENTITY)
        if not isinstance(who, Identity):
            raise Refused("no token: every request names its identity with a bearer token")
        return who

    return me


@dataclass(frozen=True)
class Door:
    """How the current request came in: what its token's limits are counted under (its digest,
    or one key for all over stdio), who it is, and whether its token still names that
    identity (a token taken out of the tokens file stops what it holds open)."""

    key: str
    who: Identity
    still: Callable[[], bool]


def _doors(me: Callable[[], Identity], tokens: Identifies | None) -> Callable[[], Door]:
    def door() -> Door:
        who = me()
        token = get_access_token()
        if tokens is None or token is None:
            return Door(NO_TOKEN, who, lambda: True)
        held = token.token
        return Door(key_of(held), who, lambda: tokens.identify(held) == who)

    return door


def build_server(  # noqa: PLR0915  (the tools, resources and prompts, each a few lines)
    store: EventStore,
    identity: Identity | None = None,
    *,
    tokens: Identifies | None = None,
    url: str = "",
    limits: Limits | None = None,
) -> MCPServer:
    """An MCP server on `store`, acting as `identity` (stdio), or, with `tokens`, as the
    identity of each request's bearer token (streamable HTTP at `url`). `limits` bound what
    one token holds at once: its waits and its subscription streams (and, over HTTP, its
    sessions: ledger_bus/mcp/http.py)."""
    if (identity is None) == (tokens is None):
        raise InvalidInput("an MCP server acts as one identity, or as its tokens', not both")
    auth: dict[str, Any] = {}
    if tokens is not None:
        # Bearer tokens checked by the SDK's own middleware: a request without one, or with a
        # token the file does not hold, is refused (401) before any tool runs.
        auth = {
            "token_verifier": _Verifier(tokens),
            "auth": AuthSettings(
                issuer_url=url, resource_server_url=url, validate_token_resource=False
            ),
        }
    limits = limits or Limits()
    waiting = anyio.CapacityLimiter(WAITS)
    waits = Quota(limits.waits, "waits")
    me = _caller(identity)
    door = _doors(me, tokens)

    # A subscription to a session's resources is told when the session grows: one watcher
    # for the server follows the sessions' last activity and publishes to the SDK's bus, which
    # delivers each event to the listen streams that asked for its URI (and its identity may
    # read). A failed call is the client's to read; the server logs only warnings (to stderr).
    bus = _ReadersBus(InMemorySubscriptionBus(), door)

    @contextlib.asynccontextmanager
    async def watching(_: MCPServer) -> AsyncIterator[None]:
        # What is there when the server starts is the baseline: growth is what comes after.
        seen = dict(await _activity(store))
        async with anyio.create_task_group() as group:
            group.start_soon(publish_growth, store, bus, seen)
            yield None
            group.cancel_scope.cancel()

    server = _LedgerServer(
        "ledger-bus",
        instructions=INSTRUCTIONS,
        version=ledger_bus.__version__,
        subscriptions=bus,
        lifespan=watching,
        log_level="WARNING",
        middleware=[_Subscriptions(Quota(limits.streams, "subscription streams"), door)],
        **auth,
    )

    @server.tool()
    @ledger_errors
    def sessions(limit: int = 20) -> list[dict[str, Any]]:
        """The sessions you may read, most recently active first."""
        return tools.sessions(store, me(), limit)

    @server.tool()
    @ledger_errors
    def tail(
        session: str,
        n: int = tools.TAIL,
        types: list[str] | None = None,
        agents: list[str] | None = None,
        before: str | None = None,
    ) -> dict[str, Any]:
        """The session's last n events (before the cursor `before`, when given), oldest
        first, as context lines and as events, with the cursor to wait after. types and agents
        keep only those (message, mutation, tool_call, tool_result; agents by name). About a
        megabyte of events at most: `truncated` says when fewer than n were given, and
        `before` the cursor to ask the tail before, for the older ones."""
        return tools.tail(store, me(), session, n, types or [], agents or [], before)

    @server.tool()
    async def wait(
        session: str, after: str | None = None, timeout_s: float = 10.0
    ) -> dict[str, Any]:
        """The events committed after the cursor `after` (none: the session's newest now),
        waiting up to timeout_s seconds (at most 30) for the first; with the cursor to wait
        after next. About a megabyte of events at most (`truncated` says when more are
        there: wait again after the cursor)."""
        came = ledger_errors(door)()
        call = ledger_errors(
            functools.partial(tools.wait, store, came.who, session, after, timeout_s)
        )
        if timeout_s == 0:  # answered at once, as a tail is: no turn behind the long waits
            return await anyio.to_thread.run_sync(call)
        # Waits hold a thread each for as long as they wait: they take turns among threads of
        # their own, so that the other tools and the watcher never wait behind them, and each
        # token holds a few of those at most, so that no token waits behind another's.
        release = ledger_errors(waits.take)(came.key, came.who.agent)
        try:
            found = await anyio.to_thread.run_sync(call, limiter=waiting)
        finally:
            release()
        if not came.still():
            raise ToolError(_one_line(Refused(REVOKED)))
        return found

    @server.tool()
    @ledger_errors
    def post(
        session: str,
        body: str | None = None,
        kind: str | None = None,
        fields: dict[str, Any] | None = None,
        append_id: str | None = None,
    ) -> dict[str, Any]:
        """Post a message (body) or a mutation (kind, and its fields) to the session as you.
        A retry with the same append_id is kept once; other content under it is refused."""
        return tools.post(store, me(), session, body, kind, fields, append_id)

    @server.tool()
    @ledger_errors
    def open_calls(session: str) -> list[dict[str, Any]]:
        """The calls requested in the session and never finished (a crashed agent's, say)."""
        return tools.open_calls(store, me(), session)

    @server.tool()
    @ledger_errors
    def resolve(session: str, attempt_id: str, outcome: str, result: Any = None) -> dict[str, Any]:
        """Close an open call (operators only): outcome ok or error with its result, or
        unknown when nobody knows whether it took effect."""
        return tools.resolve(store, me(), session, attempt_id, outcome, result)

    @server.tool()
    @ledger_errors
    def dispatch_open(
        session: str,
        role: str,
        objective: str,
        fields: dict[str, Any] | None = None,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """Dispatch work to a role: a record on the session's board, its id minted. A retry
        with the same request_id gives the dispatch the first call opened."""
        return tools.board_open(store, me(), session, role, objective, fields, request_id)

    @server.tool()
    @ledger_errors
    def dispatch_close(session: str, dispatch_id: str, outcome: str) -> dict[str, Any]:
        """Close a dispatch; the outcome begins with a closed word (done, failed, ...)."""
        return tools.board_close(store, me(), session, dispatch_id, outcome)

    @server.tool()
    @ledger_errors
    def dispatch_list(session: str) -> list[dict[str, Any]]:
        """The dispatches in flight, each marked live (< 24 h) or stale (24-48 h)."""
        return tools.board_list(store, me(), session)

    @server.resource("ledger://sessions/{session}/tail", mime_type="application/json")
    @resource_errors
    def tail_resource(session: str) -> str:
        """The session's last 20 events and the cursor after them."""
        return json.dumps(tools.tail(store, me(), session, tools.TAIL, [], []))

    @server.resource("ledger://sessions/{session}/board", mime_type="application/json")
    @resource_errors
    def board_resource(session: str) -> str:
        """The session's dispatches in flight."""
        return json.dumps(tools.board_list(store, me(), session))

    @server.prompt()
    def join_session(session: str) -> str:
        """Join a session: read its tail before acting."""
        return (
            f"You are joining the ledger session {session!r}. First call the tail tool for it and"
            " read the context it returns; keep its cursor. Act only on what the tail shows, and"
            " before each later step call wait with your cursor to see what others did."
        )

    @server.prompt()
    def report_change(session: str, change: str) -> str:
        """Report a change of the session's state as a mutation."""
        return (
            f"Record this change of state in the ledger session {session!r} with the post tool,"
            f" as a mutation: a kind that names the change (task.taken, file.written, ...) and"
            f" its fields. Give it an append_id you keep, and retry with the same one if the"
            f" call fails. The change: {change}"
        )

    @server.prompt()
    def dispatch_work(session: str, role: str, objective: str) -> str:
        """Dispatch work on the board, and close it when it ends."""
        return (
            f"Dispatch this work in the ledger session {session!r} with dispatch_open (role"
            f" {role!r}, objective {objective!r}) when you hand it over, not later; when it ends,"
            " close it with dispatch_close and an outcome that begins done, failed or cancelled."
        )

    return server


IDENTITY: Final = "ledger_bus.identity"  # the claim of a verified token that holds its identity
WAITS: Final = 32  # waits in flight at once; more take their turn
PING_S: Final = 15.0  # how often an open subscription looks at its token, between events
REVOKED: Final = "the token this was asked with is no longer in the tokens file"
WATCH_EVERY_S: Final = 0.1
WATCHED: Final = 100  # the most recently active sessions: one that just grew is among them


RESOURCES: Final = ("tail", "board")  # a session's resources: ledger://sessions/{session}/...


def resource_uris(session: str) -> list[str]:
    """The resources of a session, which change as it grows."""
    return [f"ledger://sessions/{session}/{name}" for name in RESOURCES]


def session_of(uri: str) -> str | None:
    """The session a resource URI of the server names; None for any other URI."""
    head, _, name = uri.removeprefix("ledger://sessions/").rpartition("/")
    if not uri.startswith("ledger://sessions/") or name not in RESOURCES or not head:
        return None
    return head


class _ReadersBus:
    """The SDK's bus, each subscriber told of the sessions its identity may read alone: the
    identity is taken when the subscription is made (in the request that makes it), and a
    subscription to another team's session is kept, as one to a resource that does not exist
    is, and never told anything (else it would learn when that session grows). Before each
    event, the subscriber's token is looked at again: one taken out of the tokens file is told
    nothing more, and its stream is ended (_Subscriptions)."""

    def __init__(self, bus: SubscriptionBus, door: Callable[[], Door]):
        self.bus = bus
        self.door = door

    async def publish(self, event: ServerEvent) -> None:
        await self.bus.publish(event)

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        try:
            came: Door | None = self.door()
        except LedgerError:
            came = None
        revoked = _REVOKED.get(None)

        def deliver(event: ServerEvent) -> None:
            if isinstance(event, ResourceUpdated):
                session = session_of(event.uri)
                if came is None or session is None or not came.who.reads(session):
                    return
                if not came.still():
                    if revoked is not None:
                        revoked.set()
                    return
            listener(event)

        return self.bus.subscribe(deliver)


# Set by _Subscriptions for the listen request it runs: the bus sets it when the token is out.
_REVOKED: contextvars.ContextVar[anyio.Event] = contextvars.ContextVar("ledger_bus_revoked")


class _Subscriptions:
    """Server middleware for `subscriptions/listen`: each token holds at most its limit of
    subscription streams at once (one more is refused, OverLimit), and a stream whose token
    was taken out of the tokens file ends, at its next event (the bus says so) or at its next
    ping (every PING_S), refused (Refused) rather than left open for ever."""

    def __init__(self, quota: Quota, door: Callable[[], Door]):
        self.quota = quota
        self.door = door

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != "subscriptions/listen":
            return await call_next(ctx)
        try:
            came = self.door()
            release = self.quota.take(came.key, came.who.agent)
        except LedgerError as err:
            raise MCPError(INVALID_REQUEST, _one_line(err)) from err
        revoked = anyio.Event()
        reset = _REVOKED.set(revoked)
        answered: list[HandlerResult] = []
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._watch, came, revoked, group.cancel_scope)
                answered.append(await call_next(ctx))
                group.cancel_scope.cancel()
        finally:
            _REVOKED.reset(reset)
            release()
        if not answered:  # the watch ended it
            raise MCPError(INVALID_REQUEST, _one_line(Refused(f"{REVOKED}: the stream ends")))
        return answered[0]

    @staticmethod
    async def _watch(came: Door, revoked: anyio.Event, scope: anyio.CancelScope) -> None:
        while not revoked.is_set():
            with anyio.move_on_after(PING_S):
                await revoked.wait()
            if not came.still():
                revoked.set()
        scope.cancel()


async def publish_growth(store: EventStore, bus: SubscriptionBus, seen: dict[str, int]) -> None:
    """Publish that a session's resources changed whenever its last activity moves on from
    what `seen` holds, as long as the server runs; a store that fails is tried again."""
    while True:
        await anyio.sleep(WATCH_EVERY_S)
        for session, last in await _activity(store):
            if seen.get(session) != last:
                seen[session] = last
                for uri in resource_uris(session):
                    await bus.publish(ResourceUpdated(uri=uri))


async def _activity(store: EventStore) -> list[tuple[str, int]]:
    try:
        return await anyio.to_thread.run_sync(store.sessions, WATCHED)
    except LedgerError as err:
        logger.warning("watching the sessions for subscriptions: %s", _one_line(err))
        return []
