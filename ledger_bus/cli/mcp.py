"""`ledger-bus mcp`: serve the configured store to an MCP client over stdio."""

from __future__ import annotations

import logging
import sys

import click

from ledger_bus.cli.app import (
    BadInput,
    Settings,
    cli,
    import_redis_without_its_meters,
    pass_settings,
)
from ledger_bus.model.errors import InvalidInput


@cli.command()
@click.option(
    "--agent", required=True, help="The agent the client acts as: its posts are this agent's."
)
@click.option(
    "--role",
    type=click.Choice(["reader", "writer", "operator"]),
    default="writer",
    show_default=True,
    help="reader: reads; writer: also posts and keeps the board; operator: also resolves calls.",
)
@click.option(
    "--sessions",
    "pattern",
    default="*",
    show_default=True,
    help="The sessions the client may touch (a pattern: team-a-*).",
)
@pass_settings
def mcp(settings: Settings, agent: str, role: str, pattern: str) -> None:
    """Serve the ledger to an MCP client that starts this command (stdio).

    Tools: sessions, tail, wait, post, open_calls, resolve, dispatch_open, dispatch_close,
    dispatch_list; resources: a session's tail and board; prompts: join_session,
    report_change, dispatch_work. Needs the `mcp` extra (pip install 'ledger-bus[mcp]').
    """
    try:
        from ledger_bus.mcp.access import Identity  # noqa: PLC0415  (the extra, loaded here)
        from ledger_bus.mcp.server import build_server  # noqa: PLC0415
    except ImportError as err:
        raise BadInput(f"ledger-bus mcp needs {err.name}: pip install 'ledger-bus[mcp]'") from None
    if settings.url is not None and settings.url.startswith("memory:"):
        raise BadInput("memory:// lives inside one process: give the server a Redis or SQL URL")
    try:
        who = Identity(agent, role, pattern)  # type: ignore[arg-type]  # click checked the role
    except InvalidInput as err:
        raise BadInput(str(err)) from None
    # stdout is the protocol's: whatever the server or the SDK logs goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    import_redis_without_its_meters()
    server = build_server(settings.store(), who)
    server.run()
