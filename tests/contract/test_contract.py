"""The contract suite (ledger_bus.testing.contract), as a store written elsewhere runs it, over
every store of ours: conftest's `store` is memory, fakeredis, a real redis-server, a cluster,
SQLite, PostgreSQL, and each of those under asyncio."""

from __future__ import annotations

from ledger_bus.testing.contract import *  # noqa: F403
