"""Fenced leases: each holding of a lease draws the next token, which appends made under it name.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    p = f"{context.config.attributes['prefix']}_"
    # A lease held when the tables are upgraded has token 0 until its holder renews it (the
    # renewal draws one), as lease.lua treats a holding from before leases were fenced.
    op.add_column(
        f"{p}leases", sa.Column("token", sa.BigInteger, nullable=False, server_default="0")
    )


def downgrade() -> None:
    p = f"{context.config.attributes['prefix']}_"
    with op.batch_alter_table(f"{p}leases") as batch:
        batch.drop_column("token")
