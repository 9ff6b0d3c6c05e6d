"""The `ledger-bus` command: thin click commands over the library."""

from __future__ import annotations

import os
import sys

from ledger_bus.cli import agents as _agents  # noqa: F401  (registers the commands)
from ledger_bus.cli import board as _board  # noqa: F401
from ledger_bus.cli import demo as _demo  # noqa: F401
from ledger_bus.cli import ledger as _ledger  # noqa: F401
from ledger_bus.cli import ops as _ops  # noqa: F401
from ledger_bus.cli.app import cli

__all__ = ["cli", "main"]


def main() -> None:
    """Entry point: run the command; a closed pipe (`| head`) ends it quietly."""
    try:
        cli(prog_name="ledger-bus")
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except KeyboardInterrupt:
        sys.exit(130)
