"""`ledger-bus mcp`: serve the configured store to MCP clients, over stdio (as one identity) or
streamable HTTP (as each request's bearer token says); `ledger-bus token`: make such a token."""

from __future__ import annotations

import logging
import sys
from importlib import resources
from typing import Any, cast

import click

from ledger_bus.access.identity import Identity, Role
from ledger_bus.access.limits import Limits
from ledger_bus.access.tokens import TokenFile, add_token
from ledger_bus.cli.app import (
    BadInput,
    Settings,
    cli,
    import_redis_without_its_meters,
    pass_settings,
    say,
)
from ledger_bus.model.errors import InvalidInput

ROLES = click.Choice(["reader", "writer", "operator"])
ROLE_HELP = "reader: reads; writer: also posts and keeps the board; operator: also resolves calls."
SESSIONS_HELP = "The sessions it may touch (a pattern: team-a-*)."


def _extra() -> tuple[Any, Any]:
    """The `mcp` extra's modules, loaded here so that their absence is one line and exit 2."""
    try:
        from ledger_bus.mcp import http, server  # noqa: PLC0415
    except ImportError as err:
        raise BadInput(f"ledger-bus mcp needs {err.name}: pip install 'ledger-bus[mcp]'") from None
    return server, http


def _identity(agent: str, role: str, pattern: str) -> Identity:
    try:
        return Identity(agent, cast(Role, role), pattern)  # click's Choice, and Identity, check it
    except InvalidInput as err:
        raise BadInput(str(err)) from None


@cli.command()
@click.option(
    "--agent", help="Over stdio: the agent the client acts as; its posts are this agent's."
)
@click.option("--role", type=ROLES, default="writer", show_default=True, help=ROLE_HELP)
@click.option("--sessions", "pattern", default="*", show_default=True, help=SESSIONS_HELP)
@click.option(
    "--http", is_flag=True, help="Serve streamable HTTP, each request as its token's identity."
)
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="With --http: the address to listen on."
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8787,
    show_default=True,
    help="With --http: the port.",
)
@click.option(
    "--tokens", "tokens_file", help="With --http: the tokens file (ledger-bus token makes one)."
)
@click.option(
    "--max-mcp-sessions",
    type=click.IntRange(1),
    default=Limits.sessions,
    show_default=True,
    help="With --http: MCP sessions one token holds at once (a new one closes its oldest idle).",
)
@click.option(
    "--max-waits",
    type=click.IntRange(1),
    default=Limits.waits,
    show_default=True,
    help="Waits one token (over stdio: the client) has in flight at once; more are refused.",
)
@click.option(
    "--max-streams",
    type=click.IntRange(1),
    default=Limits.streams,
    show_default=True,
    help="Subscription streams one token (over stdio: the client) holds open at once.",
)
@pass_settings
def mcp(
    settings: Settings,
    agent: str | None,
    role: str,
    pattern: str,
    http: bool,
    host: str,
    port: int,
    tokens_file: str | None,
    max_mcp_sessions: int,
    max_waits: int,
    max_streams: int,
) -> None:
    """Serve the ledger to MCP clients: over stdio to a client that starts this command, acting
    as --agent; with --http, over streamable HTTP at http://HOST:PORT/mcp, each request acting
    as the identity of its bearer token.

    Tools: sessions, tail, wait, post, open_calls, resolve, dispatch_open, dispatch_close,
    dispatch_list; resources: a session's tail and board; prompts: join_session,
    report_change, dispatch_work. Over HTTP on loopback only requests for a local host name,
    from no other site's page, are answered; a token taken out of the file stops at once, its
    open subscriptions at their next event. Needs the `mcp` extra (pip install
    'ledger-bus[mcp]').
    """
    server, served = _extra()
    if settings.url is not None and settings.url.startswith("memory:"):
        raise BadInput("memory:// lives inside one process: give the server a Redis or SQL URL")
    if http == (agent is not None):
        raise BadInput("give --agent (stdio) or --http with --tokens, not both or neither")
    if http and tokens_file is None:
        raise BadInput("--http needs --tokens FILE: over HTTP every request names its identity")
    if http and (role, pattern) != ("writer", "*"):
        raise BadInput(
            "over --http each token names its role and sessions; --role and --sessions are stdio's"
        )
    if not http and tokens_file is not None:
        raise BadInput("--tokens is for --http: over stdio the server acts as --agent")
    who = None if http else _identity(agent or "", role, pattern)
    known: TokenFile | None = None
    if tokens_file is not None:
        try:
            known = TokenFile(tokens_file)
        except InvalidInput as err:
            raise BadInput(str(err)) from None
    # stdout is the protocol's over stdio: whatever the server or the SDK logs goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    import_redis_without_its_meters()
    url = f"http://{host}:{port}/mcp"
    limits = Limits(sessions=max_mcp_sessions, waits=max_waits, streams=max_streams)
    built = server.build_server(settings.store(), who, tokens=known, url=url, limits=limits)
    if not http:
        built.run()
        return
    import uvicorn  # noqa: PLC0415  (the mcp extra's, as the SDK's own HTTP server is)

    say(f"serving MCP at {url}")
    uvicorn.run(served.http_app(built, host, limits), host=host, port=port, log_level="warning")


@cli.command()
@click.argument("file")
@click.option("--agent", required=True, help="The agent the token's holder acts as.")
@click.option("--role", type=ROLES, default="writer", show_default=True, help=ROLE_HELP)
@click.option("--sessions", "pattern", default="*", show_default=True, help=SESSIONS_HELP)
def token(file: str, agent: str, role: str, pattern: str) -> None:
    """Make a bearer token for the ledger's HTTP faces and print it (once: FILE keeps only its
    SHA-256). FILE is made when it does not exist."""
    try:
        made = add_token(file, _identity(agent, role, pattern))
    except InvalidInput as err:
        raise BadInput(str(err)) from None
    click.echo(made)


@cli.command()
def skill() -> None:
    """Print the skill (SKILL.md, the Agent Skills format) that teaches an agent to work on the
    ledger through `ledger-bus mcp`: save it as .claude/skills/ledger-bus/SKILL.md (or where
    your agent loads skills from)."""
    click.echo(
        (resources.files("ledger_bus.mcp") / "skill" / "SKILL.md").read_text("utf-8"), nl=False
    )
