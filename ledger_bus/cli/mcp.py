"""`ledger-bus mcp`: serve the configured store to MCP clients, over stdio (as one identity) or
streamable HTTP (as each request's bearer token says); `ledger-bus mcp config`: what a client
needs to start or reach it; `ledger-bus token`: make such a token; `ledger-bus skill`: the
skill that teaches an agent the tools, printed or installed where a client loads it."""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
from importlib import resources
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import click
from click.core import ParameterSource

from ledger_bus.access.identity import Identity, Role
from ledger_bus.access.limits import Limits
from ledger_bus.access.tokens import TokenFile, add_token
from ledger_bus.cli.app import (
    BadInput,
    Settings,
    cli,
    pass_settings,
    say,
)
from ledger_bus.mcp.clients import (
    CLIENTS,
    SKILLS,
    TOKEN_ENV,
    WHERE,
    Client,
    Http,
    Stdio,
    client_config,
    skills_dir,
)
from ledger_bus.model.environment import ARCHIVE_ENV, DEFAULT_URL, URL_ENV
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.files import replace_whole

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


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)


@cli.group(invoke_without_command=True)  # `mcp` serves; `mcp config` says how to reach it
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
@click.pass_context
def mcp(
    ctx: click.Context,
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

    `ledger-bus mcp config --client claude|cursor|codex` prints what a client needs to start
    (or reach) this server.
    """
    if ctx.invoked_subcommand is not None:
        given = [p.opts[-1] for p in ctx.command.params if p.name and _given(ctx, p.name)]
        if given:
            raise BadInput(
                f"{given[0]} is the server's: give `mcp {ctx.invoked_subcommand}` its own options"
            )
        return
    settings: Settings = ctx.obj
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
    url = f"http://{host}:{port}/mcp"
    limits = Limits(sessions=max_mcp_sessions, waits=max_waits, streams=max_streams)
    built = server.build_server(settings.store(), who, tokens=known, url=url, limits=limits)
    if not http:
        built.run()
        return
    import uvicorn  # noqa: PLC0415  (the mcp extra's, as the SDK's own HTTP server is)

    say(f"serving MCP at {url}")
    uvicorn.run(served.http_app(built, host, limits), host=host, port=port, log_level="warning")


@mcp.command(name="config")
@click.option(
    "--client",
    type=click.Choice(CLIENTS),
    required=True,
    help="Claude Code (.mcp.json), Cursor (.cursor/mcp.json) or Codex (~/.codex/config.toml).",
)
@click.option(
    "--name", "server_name", default="ledger", show_default=True, help="The server's name there."
)
@click.option(
    "--agent", default=None, help="Over stdio: the agent it acts as (default: the client's name)."
)
@click.option("--role", type=ROLES, default="writer", show_default=True, help=ROLE_HELP)
@click.option("--sessions", "pattern", default="*", show_default=True, help=SESSIONS_HELP)
@click.option(
    "--http",
    "http_url",
    default=None,
    help="Reach a server already serving there (http://HOST:8787/mcp) with a token, instead of"
    " starting one over stdio.",
)
@click.option(
    "--token-env",
    default=TOKEN_ENV,
    show_default=True,
    help="With --http: the variable the client reads the bearer token from.",
)
@pass_settings
def config(
    settings: Settings,
    client: Client,
    server_name: str,
    agent: str | None,
    role: str,
    pattern: str,
    http_url: str | None,
    token_env: str,
) -> None:
    """Print the configuration that tells an MCP client of this server: over stdio, this very
    command by its absolute path and the store's URL (--url or LEDGER_BUS_URL), so that a
    client started anywhere finds both; with --http, the server's URL and the variable its
    token is read from (no token is printed). Where to save it is said on stderr."""
    if http_url is not None:
        server: Stdio | Http = _reached(http_url, token_env, agent, role, pattern)
    else:
        who = _identity(agent or client, role, pattern)
        args = ["mcp", "--agent", who.agent]
        args += ["--role", role] if role != "writer" else []
        args += ["--sessions", pattern] if pattern != "*" else []
        command, before = _this_command()
        server = Stdio(command, [*before, *args], _server_env(settings))
    click.echo(client_config(client, server_name, server), nl=False)
    say(WHERE[client])
    if isinstance(server, Http):
        say(
            f"the client reads the token from {token_env}: make one with `ledger-bus token FILE"
            f" --agent A --role R`, and export {token_env}=<token> where the client starts"
        )


def _reached(url: str, token_env: str, agent: str | None, role: str, pattern: str) -> Http:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadInput(f"--http takes the server's URL, http://HOST:PORT/mcp; got {url!r}")
    if agent is not None or (role, pattern) != ("writer", "*"):
        raise BadInput("over --http the token names the agent, its role and sessions")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token_env):
        raise BadInput(f"--token-env names an environment variable; got {token_env!r}")
    return Http(url, token_env)


def _this_command() -> tuple[str, list[str]]:
    """This command as a client starts it from anywhere: its absolute path, or when it runs as
    `python -m ledger_bus` (or its path is not known), this Python and `-m ledger_bus`."""
    started = sys.argv[0]
    if os.path.basename(started) not in ("__main__.py", "-c", "") and not started.endswith(".py"):
        found = started if os.sep in started else shutil.which(started)
        if found is not None and os.access(found, os.X_OK) and os.path.isfile(found):
            return os.path.abspath(found), []
    return os.path.abspath(sys.executable), ["-m", "ledger_bus"]


def _server_env(settings: Settings) -> dict[str, str]:
    """What the server needs to find the store it serves, as this command was given it: the
    URL (a relative SQLite path made absolute: the client starts the server in a directory of
    its own), and the prefix, durability and archive when they are not the defaults."""
    url = settings.url or DEFAULT_URL
    if url.startswith("memory:"):
        raise BadInput("memory:// lives inside one process: give the server a Redis or SQL URL")
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        path, _, query = url.removeprefix("sqlite:///").partition("?")
        url = f"sqlite:///{Path(path).resolve()}" + (f"?{query}" if query else "")
    if _password(url):
        say("the URL holds a password, and so does what is printed: keep it as you keep the URL")
    env = {URL_ENV: url}
    archive = settings.archive or os.environ.get(ARCHIVE_ENV)
    for name, value, default in [
        ("LEDGER_BUS_PREFIX", settings.prefix, "lb"),
        ("LEDGER_BUS_DURABILITY", settings.durability, None),
        (ARCHIVE_ENV, archive, None),
    ]:
        if value is not None and value != default:
            env[name] = value
    return env


def _password(url: str) -> bool:
    try:
        return urlsplit(url).password is not None
    except ValueError:  # not a URL urllib can read: the store says what is wrong with it
        return False


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
@click.option(
    "--install",
    "into",
    type=click.Path(file_okay=False),
    default=None,
    help="Write it as DIR/ledger-bus/SKILL.md (folders made as needed) instead of printing it.",
)
@click.option(
    "--client",
    type=click.Choice(sorted(SKILLS)),
    default=None,
    help="Write it where this client loads a project's skills (.claude/skills, .cursor/skills,"
    " .agents/skills for Codex, .pi/skills).",
)
@click.option(
    "--user", is_flag=True, help="With --client: the user's own skills, for every project."
)
def skill(into: str | None, client: str | None, user: bool) -> None:
    """Print the skill (SKILL.md, the Agent Skills format) that teaches an agent to work on the
    ledger through `ledger-bus mcp`, or install it: --install DIR, or --client NAME for where
    that client looks (a project's skills, or with --user the user's own)."""
    text = (resources.files("ledger_bus.mcp") / "skill" / "SKILL.md").read_text("utf-8")
    if into is not None and client is not None:
        raise BadInput("give --install DIR or --client NAME, not both")
    if user and client is None:
        raise BadInput("--user goes with --client: the user's skills folder of that client")
    if into is None and client is None:
        click.echo(text, nl=False)
        return
    folder = Path(into) if into is not None else skills_dir(cast(str, client), user)
    path = folder / "ledger-bus" / "SKILL.md"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BadInput(f"cannot make {str(path.parent)!r}: {err.strerror}") from None
    with replace_whole(str(path)) as out:
        out.write(text)
    click.echo(f"installed the skill as {path.absolute()}", err=True)
