"""Bounds for one writer's appends: a rewrite's bound trims at its own appends alone.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    p = f"{context.config.attributes['prefix']}_"
    op.add_column(f"{p}bounds", sa.Column("only", sa.String(200), nullable=True))


def downgrade() -> None:
    p = f"{context.config.attributes['prefix']}_"
    with op.batch_alter_table(f"{p}bounds") as batch:
        batch.drop_column("only")
