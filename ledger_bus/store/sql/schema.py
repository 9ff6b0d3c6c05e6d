"""The SQL store's tables, under one prefix, as SQLAlchemy Core metadata.

The migrations in store/sql/migrations create them; tests/stores/test_sql_store.py checks that
what the migrations make is what this module says.

Cursors are kept as the 20-character strings of ledger_bus.model.ids (`<ms:013d>-<seq:06d>`): their
text order is their numeric order, so one column orders a session's log on every database, and a
session moved from Redis keeps its cursors exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    text,
)

CURSOR = String(20)
NAME = String(200)


@dataclass(frozen=True)
class Tables:
    """Every table of one ledger (one prefix)."""

    metadata: MetaData
    sessions: Table
    events: Table
    streams: Table
    idempotency: Table
    open_attempts: Table
    safe_tools: Table
    leases: Table
    groups: Table
    consumers: Table
    pending: Table
    dead_letters: Table
    artifacts: Table
    bounds: Table


def tables(prefix: str = "lb") -> Tables:
    """The tables of the ledger whose names start with `prefix`_."""
    metadata = MetaData()
    p = f"{prefix}_"
    sessions = Table(
        f"{p}sessions",
        metadata,
        Column("session_id", NAME, primary_key=True),
        # The newest cursor: the next append's cursor is above it. Its row is locked by each
        # append until commit, so cursors are taken in commit order within a session.
        Column("last_cursor", CURSOR, nullable=False),
        Column("events", BigInteger, nullable=False),
        # When an attempt last opened (ms), while the session may have open attempts: the
        # reconciler's index. NULL once forgotten.
        Column("opened_ms", BigInteger, nullable=True),
        # Deletions the session has seen (spec 3.9), and when the last one was made.
        Column("generation", BigInteger, nullable=False, server_default=text("0")),
        Column("deleted_ms", BigInteger, nullable=True),
    )
    Index(f"{p}sessions_by_opened", sessions.c.opened_ms)
    events = Table(
        f"{p}events",
        metadata,
        Column("session_id", NAME, primary_key=True),
        Column("cursor", CURSOR, primary_key=True),
        Column("stream", NAME, nullable=False),
        Column("version", BigInteger, nullable=False),
        Column("payload", LargeBinary, nullable=False),
    )
    Index(
        f"{p}events_by_stream", events.c.session_id, events.c.stream, events.c.version, unique=True
    )
    streams = Table(
        f"{p}streams",
        metadata,
        Column("session_id", NAME, primary_key=True),
        Column("stream", NAME, primary_key=True),
        Column("version", BigInteger, nullable=False),
    )
    idempotency = Table(
        f"{p}idempotency",
        metadata,
        Column("session_id", NAME, primary_key=True),
        Column("stream", NAME, primary_key=True),
        Column("append_id", Text, primary_key=True),
        Column("digest", String(64), nullable=False),
        Column("first_version", BigInteger, nullable=False),
        Column("last_version", BigInteger, nullable=False),
        Column("cursor", CURSOR, nullable=False),
    )
    open_attempts = Table(
        f"{p}open_attempts",
        metadata,
        Column("session_id", NAME, primary_key=True),
        Column("attempt_id", Text, primary_key=True),
        Column("run_id", Text, nullable=False),
        Column("tool", Text, nullable=False),
        Column("stream", NAME, nullable=False),
        Column("cursor", CURSOR, nullable=False),
        Column("flagged_cursor", CURSOR, nullable=True),
    )
    safe_tools = Table(
        f"{p}safe_tools",
        metadata,
        Column("session_id", NAME, primary_key=True),
        Column("run_id", Text, primary_key=True),
        Column("tool", Text, primary_key=True),
    )
    leases = Table(
        f"{p}leases",
        metadata,
        Column("session_id", NAME, primary_key=True),
        Column("name", NAME, primary_key=True),
        Column("owner", Text, nullable=False),
        Column("expires_ms", BigInteger, nullable=False),
        # The token of the lease's current holding (0: none drawn yet); kept when the lease is
        # released or expires, so that the next holding draws a greater one.
        Column("token", BigInteger, nullable=False, server_default="0"),
    )
    groups = Table(
        f"{p}groups",
        metadata,
        Column("session_id", NAME, primary_key=True),
        Column("grp", NAME, primary_key=True),
        Column("last_delivered", CURSOR, nullable=False),
    )
    consumers = Table(
        f"{p}consumers",
        metadata,
        Column("session_id", NAME, primary_key=True),
        Column("grp", NAME, primary_key=True),
        Column("consumer", NAME, primary_key=True),
        Column("seen_ms", BigInteger, nullable=False),
    )
    pending = Table(
        f"{p}pending",
        metadata,
        Column("session_id", NAME, primary_key=True),
        Column("grp", NAME, primary_key=True),
        Column("cursor", CURSOR, primary_key=True),
        Column("consumer", NAME, nullable=False),
        Column("deliveries", Integer, nullable=False),
        Column("since_ms", BigInteger, nullable=False),
    )
    dead_letters = Table(
        f"{p}dead_letters",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("session_id", NAME, nullable=False),
        Column("grp", NAME, nullable=False),
        Column("fields", Text, nullable=False),
    )
    Index(f"{p}dead_letters_by_group", dead_letters.c.session_id, dead_letters.c.grp)
    artifacts = Table(
        f"{p}artifacts",
        metadata,
        Column("session_id", NAME, primary_key=True),
        Column("sha256", String(64), primary_key=True),
        # How many event fields in the log reference it: it goes with the last (spec 3.11).
        Column("uses", BigInteger, nullable=False),
        Column("data", LargeBinary, nullable=False),
    )
    bounds = Table(
        f"{p}bounds",
        metadata,
        Column("session_id", NAME, primary_key=True),
        Column("stream", NAME, primary_key=True),
        Column("keep", BigInteger, nullable=False),  # events kept, at least (spec 3.12)
        Column("dedup_ms", BigInteger, nullable=False),  # how long trimmed append_ids are kept
        Column("only", NAME, nullable=True),  # trims only at append_ids that begin with it
    )
    return Tables(
        metadata,
        sessions,
        events,
        streams,
        idempotency,
        open_attempts,
        safe_tools,
        leases,
        groups,
        consumers,
        pending,
        dead_letters,
        artifacts,
        bounds,
    )
