"""The first schema: events, streams, append ids, sessions, open attempts, leases, groups.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

CURSOR = sa.String(20)
NAME = sa.String(200)


def upgrade() -> None:
    p = f"{context.config.attributes['prefix']}_"
    op.create_table(
        f"{p}sessions",
        sa.Column("session_id", NAME, primary_key=True),
        sa.Column("last_cursor", CURSOR, nullable=False),
        sa.Column("events", sa.BigInteger, nullable=False),
        sa.Column("opened_ms", sa.BigInteger, nullable=True),
    )
    op.create_index(f"{p}sessions_by_opened", f"{p}sessions", ["opened_ms"])
    op.create_table(
        f"{p}events",
        sa.Column("session_id", NAME, primary_key=True),
        sa.Column("cursor", CURSOR, primary_key=True),
        sa.Column("stream", NAME, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
    )
    op.create_index(
        f"{p}events_by_stream", f"{p}events", ["session_id", "stream", "version"], unique=True
    )
    op.create_table(
        f"{p}streams",
        sa.Column("session_id", NAME, primary_key=True),
        sa.Column("stream", NAME, primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
    )
    op.create_table(
        f"{p}idempotency",
        sa.Column("session_id", NAME, primary_key=True),
        sa.Column("stream", NAME, primary_key=True),
        sa.Column("append_id", sa.Text, primary_key=True),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("first_version", sa.BigInteger, nullable=False),
        sa.Column("last_version", sa.BigInteger, nullable=False),
        sa.Column("cursor", CURSOR, nullable=False),
    )
    op.create_table(
        f"{p}open_attempts",
        sa.Column("session_id", NAME, primary_key=True),
        sa.Column("attempt_id", sa.Text, primary_key=True),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("tool", sa.Text, nullable=False),
        sa.Column("stream", NAME, nullable=False),
        sa.Column("cursor", CURSOR, nullable=False),
        sa.Column("flagged_cursor", CURSOR, nullable=True),
    )
    op.create_table(
        f"{p}safe_tools",
        sa.Column("session_id", NAME, primary_key=True),
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("tool", sa.Text, primary_key=True),
    )
    op.create_table(
        f"{p}leases",
        sa.Column("session_id", NAME, primary_key=True),
        sa.Column("name", NAME, primary_key=True),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("expires_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        f"{p}groups",
        sa.Column("session_id", NAME, primary_key=True),
        sa.Column("grp", NAME, primary_key=True),
        sa.Column("last_delivered", CURSOR, nullable=False),
    )
    op.create_table(
        f"{p}consumers",
        sa.Column("session_id", NAME, primary_key=True),
        sa.Column("grp", NAME, primary_key=True),
        sa.Column("consumer", NAME, primary_key=True),
        sa.Column("seen_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        f"{p}pending",
        sa.Column("session_id", NAME, primary_key=True),
        sa.Column("grp", NAME, primary_key=True),
        sa.Column("cursor", CURSOR, primary_key=True),
        sa.Column("consumer", NAME, nullable=False),
        sa.Column("deliveries", sa.Integer, nullable=False),
        sa.Column("since_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        f"{p}dead_letters",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", NAME, nullable=False),
        sa.Column("grp", NAME, nullable=False),
        sa.Column("fields", sa.Text, nullable=False),
    )
    op.create_index(f"{p}dead_letters_by_group", f"{p}dead_letters", ["session_id", "grp"])


def downgrade() -> None:
    p = f"{context.config.attributes['prefix']}_"
    for name in (
        "dead_letters",
        "pending",
        "consumers",
        "groups",
        "leases",
        "safe_tools",
        "open_attempts",
        "idempotency",
        "streams",
        "events",
        "sessions",
    ):
        op.drop_table(f"{p}{name}")
