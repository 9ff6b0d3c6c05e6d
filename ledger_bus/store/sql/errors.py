"""What a database's errors mean to the ledger: a failure that passes (retried), or one that will
not (BackendRefused)."""

from __future__ import annotations

import sqlite3
from typing import Final, TypeVar

from sqlalchemy import exc as sa_exc

from ledger_bus.model.errors import (
    BackendRefused,
    LedgerError,
)

T = TypeVar("T")


# SQLSTATEs worth running the transaction again for: serialization failure, deadlock.
# Serialization failure, deadlock; and the server shutting down or restarting
# (admin_shutdown, crash_shutdown, cannot_connect_now): a lost connection, to be tried again.
RETRY_STATES: Final = frozenset({"40001", "40P01", "57P01", "57P02", "57P03"})
# What a server says at connect time, without a SQLSTATE, that no retry changes: bad
# credentials, a user or a database that does not exist, a client the server does not let in.
REFUSED_AT_CONNECT: Final = (
    "password authentication failed",
    "no password supplied",
    "does not exist",
    "no pg_hba.conf entry",
    "unable to open database",
    "readonly database",  # a SQLite file this user may read and not write
)
SQLITE_BUSY: Final = ("database is locked", "database is busy", "database table is locked")


def driver_error(err: BaseException) -> BaseException | None:
    """The database driver's exception behind `err` (SQLAlchemy wraps it), or None when `err`
    did not come from the database."""
    if isinstance(err, sa_exc.DBAPIError):
        return err.orig or err
    return err if isinstance(err, DRIVER_ERRORS) else None


def driver_errors() -> tuple[type[Exception], ...]:
    """What the database drivers raise, SQLAlchemy's wrapping of them included."""

    found: list[type[Exception]] = [sa_exc.DBAPIError, sqlite3.Error]
    try:
        import psycopg  # noqa: PLC0415  (psycopg: the [postgres] extra)
    except ImportError:  # SQLite only: the [postgres] extra is not installed
        pass
    else:
        found.append(psycopg.Error)
    return tuple(found)


DRIVER_ERRORS: Final = driver_errors()


def final(err: Exception) -> LedgerError | None:
    """None for a failure that passes; BackendRefused for one that will not."""
    if classify(err) == "retry":
        return None
    return BackendRefused(f"the database refused: {first_line(err)}")


def first_line(err: BaseException) -> str:
    orig = driver_error(err) or err
    text = str(orig).strip()
    return text.splitlines()[0] if text else type(orig).__name__


def classify(err: BaseException) -> str:
    """ "retry" for what passes (a lost connection, a busy database, a deadlock or serialization
    failure), "refused" for what will not (a constraint, a permission, bad SQL)."""
    if isinstance(err, sa_exc.DBAPIError) and (
        err.connection_invalidated or isinstance(err, sa_exc.InterfaceError)
    ):
        return "retry"
    orig = driver_error(err) or err
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state in RETRY_STATES or (state is not None and str(state).startswith("08")):
        return "retry"
    message = str(orig).lower()
    if any(busy in message for busy in SQLITE_BUSY):
        return "retry"
    # By the class and its bases: psycopg's ConnectionTimeout is an OperationalError too.
    names = {c.__name__ for c in type(orig).__mro__}
    if names & {"OperationalError", "InterfaceError"} and state is None:
        # Connection refused, a server going away, a timeout: psycopg and sqlite3 say these
        # without a SQLSTATE; so do refusals at connect time, which are final.
        if any(refused in message for refused in REFUSED_AT_CONNECT):
            return "refused"
        return "retry"
    return "refused"
