"""The engine for a SQL URL: SQLite in WAL mode with a busy timeout, PostgreSQL with keepalives and
a connect timeout; and the schema revision the code needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    event,
)
from sqlalchemy.engine import make_url

from ledger_bus.model.errors import InvalidInput

T = TypeVar("T")


MIGRATIONS: Final = Path(__file__).with_name("migrations")
# The newest migration; tests/stores/test_sql_store.py holds the two together.
SCHEMA_HEAD: Final = "0006"
BOUND_TTL: Final = 5.0  # seconds a stream's bound, as read, is taken for its bound
POLL_S: Final = 0.02  # how often a waiting read looks again


def sql_url(url: str) -> str:
    """The SQLAlchemy URL of a ledger URL: psycopg 3 for postgresql://, pysqlite for sqlite://."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def pg_options(timeout: float) -> dict[str, Any]:
    return {
        "connect_args": {
            "connect_timeout": max(1, int(timeout)),
            # A server that vanished without closing its sockets (a host gone, a network cut)
            # is found out instead of waited on for ever.
            "keepalives": 1,
            "keepalives_idle": 5,
            "keepalives_interval": 2,
            "keepalives_count": 3,
            "tcp_user_timeout": int(timeout * 1000),
        }
    }


def open_engine(url: str, timeout: float, asynchronous: bool = False) -> Engine:
    """An engine for the URL, set up for the ledger: SQLite in WAL mode with a busy timeout and
    its transactions begun by the store itself; PostgreSQL with a connect timeout.

    `asynchronous`: the sync face of an async engine (aiosqlite, psycopg's AsyncConnection),
    for a store run through SQLAlchemy's greenlet bridge (ledger_bus.store.async_store): the same
    statements, every one awaited on the event loop.
    """
    target = make_url(sql_url(url))
    backend = target.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise InvalidInput(f"not a SQL URL: {url!r} (sqlite:///PATH or postgresql://USER@HOST/DB)")
    if asynchronous:
        from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415  (SQLAlchemy's asyncio engine: under asyncio only)

        driver = "sqlite+aiosqlite" if backend == "sqlite" else "postgresql+psycopg_async"
        options = {"connect_args": {"timeout": timeout}} if backend == "sqlite" else {}
        if backend == "postgresql":
            options = pg_options(timeout)
        engine = create_async_engine(target.set(drivername=driver), **options).sync_engine
    elif backend == "sqlite":
        engine = create_engine(target, connect_args={"timeout": timeout})
    else:
        # No pre-ping: it cost a round trip per call. A connection that died in the pool fails
        # its first statement, before anything is written; SQLAlchemy then drops the pool's
        # connections and the store's retry takes a new one.
        engine = create_engine(target, **pg_options(timeout))
    if backend == "sqlite":

        @event.listens_for(engine, "connect")
        def _configure(dbapi: Any, record: object) -> None:
            dbapi.isolation_level = None  # the store says BEGIN itself (below)
            cursor = dbapi.cursor()
            # Settings of this connection alone; WAL mode is the file's, set when the ledger's
            # tables are made (SqlStore.upgrade), so that merely opening a file changes nothing.
            cursor.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
            cursor.execute("PRAGMA synchronous=FULL")  # an acknowledged append survives a crash
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            # A writer takes the write lock at BEGIN: two writers never both read, then both
            # find the lock taken when they write (SQLite's deadlock, answered with SQLITE_BUSY).
            writing = conn.get_execution_options().get("ledger_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if writing else "BEGIN")

    return engine
