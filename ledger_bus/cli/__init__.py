"""The `ledger-bus` command: thin click commands over the library."""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

import click

from ledger_bus.cli.app import EXIT_INTERNAL, EXIT_USAGE, cli, say
from ledger_bus.model.extras import missing_extra

__all__ = ["cli", "main"]

# Each command and the module that registers it, loaded when the command is used.
cli.lazy = {
    **dict.fromkeys(
        ["append", "artifact", "inspect", "read", "scan", "sessions", "tail"], "ledger_bus.cli.log"
    ),
    **dict.fromkeys(["export", "import", "mirror", "otel"], "ledger_bus.cli.exports"),
    **dict.fromkeys(
        ["acl", "archive", "bound", "delete", "doctor", "du", "reconcile", "resolve", "unresolved"],
        "ledger_bus.cli.operations",
    ),
    **dict.fromkeys(["follow", "groups"], "ledger_bus.cli.groups"),
    "db": "ledger_bus.cli.db",
    "demo": "ledger_bus.cli.demo",
    "dispatch": "ledger_bus.cli.board",
    **dict.fromkeys(["mcp", "skill", "token"], "ledger_bus.cli.mcp"),
    "ui": "ledger_bus.cli.ui",
}  # fmt: skip

DEBUG_ENV = "LEDGER_BUS_DEBUG"


def main() -> NoReturn:
    """Entry point: the error boundary. Whatever happens, the user sees one line on stderr and a
    documented exit code, never a traceback (set LEDGER_BUS_DEBUG=1 to see one)."""
    if not os.environ.get(DEBUG_ENV):
        # SQLAlchemy's pool logs, with a traceback, each connection it could not reset after
        # the server dropped it (a restart); the store retries those, and the user is told
        # what came of it in one line.
        logging.getLogger("sqlalchemy.pool").addHandler(logging.NullHandler())
        logging.getLogger("sqlalchemy.pool").propagate = False
    try:
        code = cli.main(prog_name="ledger-bus", standalone_mode=False)
    except click.UsageError as err:
        where = err.ctx.command_path if err.ctx else "ledger-bus"
        say(f"{err.format_message()} (see '{where} --help')")
        code = EXIT_USAGE
    except click.ClickException as err:
        err.show()
        code = err.exit_code
    except BrokenPipeError:  # outside a command (LedgerGroup handles it inside one)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    except (click.Abort, KeyboardInterrupt):
        code = 130
    except ImportError as err:
        said = missing_extra(err)
        if said is None or os.environ.get(DEBUG_ENV):
            raise
        say(said)
        code = EXIT_USAGE
    except Exception as err:
        if os.environ.get(DEBUG_ENV):
            raise
        say(f"internal error: {type(err).__name__}: {err} (set {DEBUG_ENV}=1 for the traceback)")
        code = EXIT_INTERNAL
    sys.exit(code if isinstance(code, int) else 0)
