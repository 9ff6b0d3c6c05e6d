"""The SQL store: SQLite embedded, or PostgreSQL, on SQLAlchemy Core, under the same contract.

An append is one transaction that first locks its session's row (`SELECT ... FOR UPDATE` on
PostgreSQL, `BEGIN IMMEDIATE` on SQLite) and holds it to commit. Cursors are taken under that lock
from the session's last cursor, so within a session cursor order is commit order: a reader paging
with "cursor > last seen" can never skip an event that commits late, as it could with a sequence
shared by concurrent transactions.

Consumer groups, leases and open attempts are tables of their own, kept in the same transactions,
with the semantics of the Redis store (tests/contract/ and tests/stores/test_consumer_groups.py run
on both).

The store is composed of its concerns: the core (engine, schema, transactions), appends, reads,
deletes, restores and consumer groups, each a module of this package; `statements` holds the
hand-written SQL of the hot paths, `schema` the tables, `waits` how a call waits.
"""

from __future__ import annotations

from ledger_bus.store.sql.append import SqlAppend
from ledger_bus.store.sql.deletes import SqlDeletes
from ledger_bus.store.sql.engine import MIGRATIONS, POLL_S, SCHEMA_HEAD, open_engine, sql_url
from ledger_bus.store.sql.groups import SqlGroups
from ledger_bus.store.sql.reads import SqlReads
from ledger_bus.store.sql.restore import SqlRestore

__all__ = [
    "MIGRATIONS",
    "POLL_S",
    "SCHEMA_HEAD",
    "SqlStore",
    "open_engine",
    "sql_url",
]


class SqlStore(SqlAppend, SqlReads, SqlDeletes, SqlRestore, SqlGroups):
    """A ledger in SQL tables whose names start with `prefix`_."""
