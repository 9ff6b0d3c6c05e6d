"""Artifacts (spec 3.11) and bounded streams (spec 3.12).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    p = f"{context.config.attributes['prefix']}_"
    op.create_table(
        f"{p}artifacts",
        sa.Column("session_id", sa.String(200), primary_key=True),
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("uses", sa.BigInteger, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        f"{p}bounds",
        sa.Column("session_id", sa.String(200), primary_key=True),
        sa.Column("stream", sa.String(200), primary_key=True),
        sa.Column("keep", sa.BigInteger, nullable=False),
        sa.Column("dedup_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    p = f"{context.config.attributes['prefix']}_"
    op.drop_table(f"{p}bounds")
    op.drop_table(f"{p}artifacts")
