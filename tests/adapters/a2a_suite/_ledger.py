"""LEDGER-BUS ADDITION (README.md): the ledger's stores the SDK's tests are run on, beside the
SDK's own stores: the memory store, a SQLite file, and Redis and PostgreSQL when
LEDGER_BUS_TEST_REDIS_URL and LEDGER_BUS_TEST_POSTGRES_URL name servers. Each store made here
is a ledger of its own (a fresh file, or a fresh prefix on the server)."""

from __future__ import annotations

import os
import tempfile
import uuid
from typing import Any

import ledger_bus
from ledger_bus import aio
from ledger_bus.adapters.a2a import LedgerTaskStore
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.store.base import EventStore

REDIS = os.environ.get("LEDGER_BUS_TEST_REDIS_URL")
POSTGRES = os.environ.get("LEDGER_BUS_TEST_POSTGRES_URL")
BACKENDS = [
    "ledger_memory",
    "ledger_sqlite",
    *(["ledger_redis"] if REDIS else []),
    *(["ledger_postgresql"] if POSTGRES else []),
]


def _url(backend: str) -> str:
    if backend == "ledger_sqlite":
        return f"sqlite:///{tempfile.mkdtemp(prefix='a2a-suite-')}/ledger.db"
    if backend == "ledger_redis":
        return str(REDIS)
    if backend == "ledger_postgresql":
        return str(POSTGRES)
    return "memory://"


def _prefix() -> str:
    return f"a2a{uuid.uuid4().hex[:10]}"


def blocking_store(backend: str) -> EventStore:
    """A blocking store (the adapter runs its calls on worker threads)."""
    return ledger_bus.connect(_url(backend), prefix=_prefix())


async def asyncio_store(backend: str) -> AsyncStore:
    return await aio.connect(_url(backend), prefix=_prefix())


class Chosen:
    """The store the tests of tasks/ build as `InMemoryTaskStore()`, set for each test by
    tasks/conftest.py: the SDK's own (`sdk`), or a LedgerTaskStore on a ledger backend."""

    backend = "sdk"


def task_store(**options: Any) -> Any:
    from a2a.server.tasks import InMemoryTaskStore as SdkInMemoryTaskStore

    if Chosen.backend == "sdk":
        return SdkInMemoryTaskStore(**options)
    # A ledger's task store always hands out copies (what `use_copying=True` asks for).
    return LedgerTaskStore(blocking_store(Chosen.backend))
