"""Deletions: each session counts the deletions it has seen, and remembers the last one's time.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = f"{context.config.attributes['prefix']}_sessions"
    op.add_column(
        table,
        sa.Column("generation", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    )
    op.add_column(table, sa.Column("deleted_ms", sa.BigInteger, nullable=True))


def downgrade() -> None:
    table = f"{context.config.attributes['prefix']}_sessions"
    with op.batch_alter_table(table) as batch:
        batch.drop_column("deleted_ms")
        batch.drop_column("generation")
