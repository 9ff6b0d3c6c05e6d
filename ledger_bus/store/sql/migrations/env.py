"""Alembic's entry point: migrations run on the connection and table prefix the store gives."""

from __future__ import annotations

from alembic import context

config = context.config
connection = config.attributes["connection"]
prefix = config.attributes["prefix"]

# One version table per ledger, under the ledger's prefix, so ledgers sharing a database (as
# Redis ledgers share one by key prefix) migrate apart.
context.configure(
    connection=connection,
    version_table=f"{prefix}_alembic_version",
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
