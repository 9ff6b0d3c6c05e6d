"""Where a program finds its ledger when it is not told: the environment variables and the
default URL, in a module of their own so that reading them imports no store."""

from __future__ import annotations

from typing import Final

DEFAULT_URL: Final = "redis://127.0.0.1:6379/0"
URL_ENV: Final = "LEDGER_BUS_URL"
ARCHIVE_ENV: Final = "LEDGER_BUS_ARCHIVE"
