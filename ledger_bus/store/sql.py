"""The SQL store: SQLite embedded, or PostgreSQL, on SQLAlchemy Core, under the same contract.

An append is one transaction that first locks its session's row (`SELECT ... FOR UPDATE` on
PostgreSQL, `BEGIN IMMEDIATE` on SQLite) and holds it to commit. Cursors are taken under that lock
from the session's last cursor, so within a session cursor order is commit order: a reader paging
with "cursor > last seen" can never skip an event that commits late, as it could with a sequence
shared by concurrent transactions.

Consumer groups, leases and open attempts are tables of their own, kept in the same transactions,
with the semantics of the Redis store (tests/test_contract.py and tests/test_groups.py run on
both).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sqlite3
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    and_,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from ledger_bus.model.artifacts import pack, unpack, uses_of
from ledger_bus.model.batch import Limits, PreparedAppend
from ledger_bus.model.durability import LOCAL, Durability
from ledger_bus.model.errors import (
    BackendRefused,
    InvalidInput,
    LedgerError,
    NotFound,
    VersionConflict,
)
from ledger_bus.model.events import attempt_note
from ledger_bus.model.ids import CURSOR_ZERO, StreamId, cursor_ms, format_cursor
from ledger_bus.model.records import (
    AppendRecord,
    AppendResult,
    Bound,
    Deletion,
    Delivery,
    GroupStats,
    OpenAttempt,
    PendingEntry,
    RecordedEvent,
    SessionInfo,
    StreamInfo,
)
from ledger_bus.store import sql_append
from ledger_bus.store.base import (
    PAGE,
    REPLAY_CONSUMER,
    REPLAY_IDLE_MS,
    EventStore,
    dead_letter_fields,
)
from ledger_bus.store.keys import bucket_of
from ledger_bus.store.ops import Op, run
from ledger_bus.store.restore import RestoreBatch
from ledger_bus.store.retry import retry_until
from ledger_bus.store.sql_schema import Tables, tables
from ledger_bus.store.sql_waits import Bridged, Waits

T = TypeVar("T")

MIGRATIONS: Final = Path(__file__).with_name("migrations")
SCHEMA_HEAD: Final = "0005"  # the newest migration; tests/test_sql.py holds the two together
BOUND_TTL: Final = 5.0  # seconds a stream's bound, as read, is taken for its bound
POLL_S: Final = 0.02  # how often a waiting read looks again
RESTORE_BATCH: Final = 5000  # events restored per transaction
# SQLSTATEs worth running the transaction again for: serialization failure, deadlock.
# Serialization failure, deadlock; and the server shutting down or restarting
# (admin_shutdown, crash_shutdown, cannot_connect_now): a lost connection, to be tried again.
_RETRY_STATES: Final = frozenset({"40001", "40P01", "57P01", "57P02", "57P03"})
# What a server says at connect time, without a SQLSTATE, that no retry changes: bad
# credentials, a user or a database that does not exist, a client the server does not let in.
_REFUSED_AT_CONNECT: Final = (
    "password authentication failed",
    "no password supplied",
    "does not exist",
    "no pg_hba.conf entry",
    "unable to open database",
    "readonly database",  # a SQLite file this user may read and not write
)
_SQLITE_BUSY: Final = ("database is locked", "database is busy", "database table is locked")


def sql_url(url: str) -> str:
    """The SQLAlchemy URL of a ledger URL: psycopg 3 for postgresql://, pysqlite for sqlite://."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _pg_options(timeout: float) -> dict[str, Any]:
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
    for a store run through SQLAlchemy's greenlet bridge (ledger_bus.store.aio): the same
    statements, every one awaited on the event loop.
    """
    target = make_url(sql_url(url))
    backend = target.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise InvalidInput(f"not a SQL URL: {url!r} (sqlite:///PATH or postgresql://USER@HOST/DB)")
    if asynchronous:
        from sqlalchemy.ext.asyncio import create_async_engine

        driver = "sqlite+aiosqlite" if backend == "sqlite" else "postgresql+psycopg_async"
        options = {"connect_args": {"timeout": timeout}} if backend == "sqlite" else {}
        if backend == "postgresql":
            options = _pg_options(timeout)
        engine = create_async_engine(target.set(drivername=driver), **options).sync_engine
    elif backend == "sqlite":
        engine = create_engine(target, connect_args={"timeout": timeout})
    else:
        # No pre-ping: it cost a round trip per call. A connection that died in the pool fails
        # its first statement, before anything is written; SQLAlchemy then drops the pool's
        # connections and the store's retry takes a new one.
        engine = create_engine(target, **_pg_options(timeout))
    if backend == "sqlite":

        @event.listens_for(engine, "connect")
        def _configure(dbapi: Any, record: Any) -> None:
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


DIGEST_PAGE: Final = 5000  # events a page digest covers


class PageDigests:
    """Digests of a session's events in commit order, a page of DIGEST_PAGE at a time: the
    sha256 of each event's `<cursor>␟<stream>␟<version>␟` and payload bytes, run together.
    What an archive is verified by (ledger_bus.archive), the same whoever computes it."""

    def __init__(self) -> None:
        self.pages: list[tuple[int, str]] = []
        self._hash = hashlib.sha256()
        self._count = 0

    def add(self, cursor: str, stream: str, version: int, payload: bytes) -> None:
        self._hash.update(f"{cursor}\x1f{stream}\x1f{version}\x1f".encode())
        self._hash.update(payload)
        self._count += 1
        if self._count == DIGEST_PAGE:
            self._close()

    def _close(self) -> None:
        self.pages.append((self._count, self._hash.hexdigest()))
        self._hash = hashlib.sha256()
        self._count = 0

    def finish(self) -> list[tuple[int, str]]:
        if self._count:
            self._close()
        return self.pages


class SqlStore(EventStore):
    """A ledger in SQL tables whose names start with `prefix`_."""

    def __init__(
        self,
        engine: Engine,
        prefix: str = "lb",
        limits: Limits | None = None,
        timeout: float = 10.0,
        durability: Durability = LOCAL,
        check_schema: bool = True,
        waits: Waits | None = None,
    ):
        super().__init__(limits, durability)
        # How a call waits: with its thread, or (under asyncio) on the event loop.
        self.waits = waits or Waits()
        self.engine = engine
        self.postgres = engine.dialect.name == "postgresql"
        # Reads on PostgreSQL go without BEGIN and COMMIT, on connections of their own made so
        # once (switching a pooled one costs a round trip each way): each statement sees what
        # was committed when it began. A tail was three round trips; it is one.
        self._reads = (
            engine.execution_options(isolation_level="AUTOCOMMIT") if self.postgres else engine
        )
        self.prefix = prefix
        self.timeout = timeout
        self.t: Tables = tables(prefix)
        e = self.t.events
        self._tail_query = self._events(
            [e.c.session_id == bindparam("session")], e.c.cursor.desc(), bindparam("n")
        )
        self._tail_before_query = self._events(
            [e.c.session_id == bindparam("session"), e.c.cursor < bindparam("before")],
            e.c.cursor.desc(),
            bindparam("n"),
        )
        # The bounds of the streams this store appends to (spec 3.12), as last read, and until
        # when (monotonic) they are taken for so: a bound declared elsewhere applies within
        # BOUND_TTL seconds.
        self._bounds: dict[StreamId, tuple[float, Bound | None]] = {}
        self._channel = f"{prefix}_appended"  # NOTIFY, with the session id as payload
        self._sql = sql_append.AppendSql.build(prefix, self.postgres)
        # SQLite with no ledger in the file yet (or no file): reads see an empty ledger, and
        # the first write makes the tables. A read never creates a file or adds a table.
        self._absent = False
        self._making = threading.Lock()
        if check_schema:
            self._check_schema()

    @classmethod
    def from_url(
        cls,
        url: str,
        prefix: str = "lb",
        limits: Limits | None = None,
        timeout: float = 10.0,
        durability: Durability = LOCAL,
        check_schema: bool = True,
        asynchronous: bool = False,
    ) -> SqlStore:
        """A store on `url`; check_schema=False opens tables of any revision (to migrate them).

        `asynchronous`: on an async engine, every call run through SQLAlchemy's greenlet bridge
        (`sqlalchemy.util.greenlet_spawn`), as ledger_bus.store.aio does.
        """
        engine = open_engine(url, timeout, asynchronous)
        waits = Bridged() if asynchronous else Waits()
        return cls(engine, prefix, limits, timeout, durability, check_schema, waits)

    @property
    def location(self) -> str:
        """The database's URL without its password: what a tombstone names (spec 3.10)."""
        url = self.engine.url
        plain = url.set(drivername=url.get_backend_name())  # as connect() takes it
        return str(plain.render_as_string(hide_password=True))

    # -- the schema ------------------------------------------------------------------------------

    def _migrations(self, conn: Connection) -> Any:
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = conn
        config.attributes["prefix"] = self.prefix
        return config

    def _revisions(self, conn: Connection) -> tuple[str | None, str | None]:
        """The schema revision the tables are at (None: no ledger here), and the newest."""
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        context = MigrationContext.configure(
            conn, opts={"version_table": f"{self.prefix}_alembic_version"}
        )
        head = ScriptDirectory.from_config(self._migrations(conn)).get_current_head()
        return context.get_current_revision(), head

    def _current(self, conn: Connection) -> str | None:
        """The revision the tables are at, read straight from the version table (without
        loading Alembic, which every command would pay for); None when there is none."""
        table = f"{self.prefix}_alembic_version"
        if not inspect(conn).has_table(table):
            return None
        found = conn.exec_driver_sql(f"SELECT version_num FROM {table}").scalar()
        return str(found) if found is not None else None

    def _check_schema(self) -> None:
        """A new PostgreSQL database gets the tables; a SQLite file without them (or no file)
        is read as an empty ledger until the first write makes them; a schema behind is
        refused, naming the command that brings it up to date."""
        if not self._file_exists():
            self._read_empty()
            return
        current = self._run(self._current, write=False)
        if current == SCHEMA_HEAD:
            return
        names = self._run(lambda c: set(inspect(c).get_table_names()), write=False)
        if current is None and not names & {t.name for t in self.t.metadata.sorted_tables}:
            if self.postgres:
                self.upgrade()
            else:
                self._read_empty()
            return
        raise BackendRefused(
            f"the ledger's tables are at schema revision {current or 'none'}, this ledger-bus"
            f" needs {SCHEMA_HEAD}: run `ledger-bus db upgrade`"
        )

    def _file_exists(self) -> bool:
        """False for a SQLite URL naming a file that is not there (connecting would make it)."""
        database = self.engine.url.database
        if self.postgres or not database or database == ":memory:":
            return True
        return os.path.exists(database)

    def _read_empty(self) -> None:
        """Serve reads from an empty ledger of this store's own (a file in the temp folder,
        which threads read each on a connection of its own), until the tables are made here
        (by this store's first write, or by another process: `_look_again`)."""
        handle, path = tempfile.mkstemp(prefix="ledger-bus-empty-", suffix=".db")
        os.close(handle)
        # Removed when reads move to the file, or with the store, or at exit, whichever is first.
        self._forget_empty = weakref.finalize(self, _remove, path)
        empty = create_engine(f"sqlite:///{path}")
        self.t.metadata.create_all(empty)
        self._reads = empty
        self._absent = True

    def _look_again(self) -> None:
        """While reads see an empty ledger: read the file's from now on if another process has
        made the ledger's tables in it since."""
        if not self._file_exists():
            return
        with self.engine.connect() as conn:
            current = self._current(conn)
        if current is None:
            return
        self._read_the_file()
        if current != SCHEMA_HEAD:
            self._check_schema()

    def _make_tables(self) -> None:
        """Before the first write to a SQLite file without the ledger: make its tables (once,
        however many threads write first)."""
        with self._making:
            if not self._absent:
                return
            self._absent = False  # the upgrade's own transactions are writes
            try:
                self.upgrade()
            except BaseException:
                self._absent = True
                raise
            self._read_the_file()

    def _read_the_file(self) -> None:
        """Reads go to the file from now on: its ledger is there."""
        self._absent = False
        empty, self._reads = self._reads, self.engine
        empty.dispose()  # a connection a reader holds still reads it: the file goes when it does
        self._forget_empty()

    def upgrade(self) -> str:
        """Bring the tables to the newest schema revision; return it. A SQLite file is put in
        WAL mode (the file's own setting, kept), so readers never wait for the writer."""
        from alembic import command

        if not self.postgres:
            self._retry(self._wal)

        def migrate(conn: Connection) -> str:
            if self.postgres:  # processes starting at once migrate one at a time
                conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:p))"), {"p": self.prefix})
            command.upgrade(self._migrations(conn), "head")
            current, _ = self._revisions(conn)
            return str(current)

        return self._run(migrate, write=True)

    def _wal(self) -> None:
        raw = self.engine.raw_connection()  # outside a transaction, where the mode can change
        try:
            raw.cursor().execute("PRAGMA journal_mode=WAL")
        finally:
            raw.close()

    def schema_revision(self) -> tuple[str | None, str | None]:
        """(the revision the tables are at, the newest this ledger-bus knows)."""
        return self._run(self._revisions, write=False)

    # -- transactions, retried -------------------------------------------------------------------

    @contextmanager
    def _connection(self, write: bool) -> Iterator[Connection]:
        if self._absent:
            self._make_tables() if write else self._look_again()
        with (
            self._writing() if write else contextlib.nullcontext(),
            (self.engine if write else self._reads).connect() as opened,
        ):
            conn = opened
            if write and not self.postgres:
                conn = opened.execution_options(ledger_write=True)
            with conn.begin():
                yield conn

    def _writing(self) -> contextlib.AbstractContextManager[object]:
        """What a write transaction holds in this process. SQLite has one writer at a time, and
        threads that meet its lock sleep in its busy handler for up to 100 ms a try: twelve
        threads writing at once made about 15 appends a second. Queued on a lock of this
        process instead, they take turns at once; other processes still meet the busy timeout.
        """
        return self.waits.writing() if not self.postgres else contextlib.nullcontext()

    def _retry(self, operation: Callable[[], T]) -> T:
        """Call `operation` again after a failure that passes, until the timeout."""
        return retry_until(
            operation,
            self.timeout,
            _DRIVER_ERRORS,
            self._final,
            self._who,
            _first_line,
            self.waits.sleep,
        )

    @property
    def _who(self) -> str:
        """The database, as errors name it: a SQLite file by its absolute path, so that a
        relative `sqlite:///data/x.db` says which directory it was taken from."""
        database = self.engine.url.database
        if self.postgres or not database or database == ":memory:":
            return "the database"
        return f"the SQLite database {os.path.abspath(database)}"

    def _final(self, err: Exception) -> LedgerError | None:
        verdict = _final(err)
        if verdict is not None and not self.postgres:
            return BackendRefused(f"{self._who} refused: {_first_line(err)}")
        return verdict

    def run_op(self, op: Op[T]) -> T:
        return run(op, None, self.waits.sleep)

    def _run(self, work: Callable[[Connection], T], *, write: bool = True) -> T:
        """Run `work(conn)` in a transaction, again after a failure that passes."""

        def attempt() -> T:
            with self._connection(write) as conn:
                return work(conn)

        return self._retry(attempt)

    def _now(self, conn: Connection) -> int:
        """The clock cursors and leases use: the server's on PostgreSQL (one clock for every
        host), this process's on SQLite (one host)."""
        if self.postgres:
            return int(
                conn.execute(
                    text("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
                ).scalar_one()
            )
        return time.time_ns() // 1_000_000

    def _now_ms(self) -> int:
        return self._run(self._now, write=False)

    # -- appends ---------------------------------------------------------------------------------

    def _lock_session(self, conn: Connection, session_id: str) -> tuple[str, int]:
        """Lock the session's row until commit, making it first; return its last cursor and
        event count."""
        s = self.t.sessions
        found = conn.execute(
            select(s.c.last_cursor, s.c.events)
            .where(s.c.session_id == session_id)
            .with_for_update()
        ).first()
        if found is None:
            if self.postgres:
                conn.execute(
                    text(
                        f"INSERT INTO {s.name} (session_id, last_cursor, events)"
                        " VALUES (:s, :c, 0) ON CONFLICT (session_id) DO NOTHING"
                    ),
                    {"s": session_id, "c": CURSOR_ZERO},
                )
                found = conn.execute(
                    select(s.c.last_cursor, s.c.events)
                    .where(s.c.session_id == session_id)
                    .with_for_update()
                ).first()
            else:  # BEGIN IMMEDIATE holds the database's write lock: nobody else inserts it
                conn.execute(
                    insert(s).values(session_id=session_id, last_cursor=CURSOR_ZERO, events=0)
                )
                return CURSOR_ZERO, 0
        assert found is not None
        return str(found[0]), int(found[1])

    def _append(
        self,
        stream: StreamId,
        expected: int | None,
        append_id: str,
        prepared: PreparedAppend,
        durability: Durability,
    ) -> AppendResult:
        if not durability.local:
            raise InvalidInput(
                f"a SQL store's durability is its database's own (synchronous_commit, its"
                f" replicas): durability {durability} cannot be asked per append"
            )

        def attempt() -> AppendResult:
            with self._writing():
                return write()

        def write() -> AppendResult:
            if self._absent:
                self._make_tables()
            raw = self.engine.raw_connection()
            try:
                return sql_append.append(
                    self._sql,
                    raw.dbapi_connection,
                    self._channel,
                    stream,
                    expected,
                    append_id,
                    prepared,
                )
            except Exception as err:
                if _driver_error(err) is not None and _classify(err) == "retry":
                    raw.invalidate()  # the connection may be gone: never hand it out again
                raise
            finally:
                raw.close()

        result = self._retry(attempt)
        if not result.deduplicated:
            bound = self._bound_of(stream)
            if bound is not None and bound.applies_to(append_id):
                self._run(lambda conn: self._trim(conn, stream, bound))
        return result

    def _bound_of(self, stream: StreamId) -> Bound | None:
        now = time.monotonic()
        known = self._bounds.get(stream)
        if known is not None and known[0] > now:
            return known[1]
        bound = self._bound(stream)
        self._remember(self._bounds, stream, (now + BOUND_TTL, bound))
        return bound

    def _trim(self, conn: Connection, stream: StreamId, bound: Bound) -> None:
        """What a bounded stream does after an append, as store/lua/append.lua's trim does:
        the appends older than the newest `keep` events go, whole; their append_ids stay for
        the dedup window. Under the session's row lock, in a transaction of its own."""
        t = self.t
        session_id, name = stream.session_id, stream.name
        head = conn.execute(
            select(t.sessions.c.deleted_ms, t.streams.c.version)
            .join(
                t.streams,
                (t.streams.c.session_id == t.sessions.c.session_id) & (t.streams.c.stream == name),
            )
            .where(t.sessions.c.session_id == session_id)
            .with_for_update()
        ).first()
        if head is None:
            return
        # Records of appends before the last deletion are of an earlier generation: they stay.
        since = "" if head.deleted_ms is None else format_cursor(int(head.deleted_ms), 999_999)
        i, e = t.idempotency, t.events
        records = (i.c.session_id == session_id, i.c.stream == name, i.c.cursor > since)
        upto = conn.execute(
            select(func.max(i.c.last_version)).where(
                *records, i.c.last_version <= int(head.version) - bound.keep
            )
        ).scalar()
        in_stream = (e.c.session_id == session_id, e.c.stream == name)
        if upto is not None:
            going = (*in_stream, e.c.version <= upto)
            gone = conn.execute(select(e.c.cursor, e.c.payload).where(*going)).all()
            if gone:
                self._drop_uses(conn, session_id, (row.payload for row in gone))
                p = t.pending
                held = select(e.c.cursor).where(*going)
                conn.execute(delete(p).where(p.c.session_id == session_id, p.c.cursor.in_(held)))
                conn.execute(delete(e).where(*going))
                conn.execute(
                    update(t.sessions)
                    .where(t.sessions.c.session_id == session_id)
                    .values(events=t.sessions.c.events - len(gone))
                )
        oldest = conn.execute(select(func.min(e.c.version)).where(*in_stream)).scalar()
        if oldest is None:
            return
        cutoff = format_cursor(max(0, self._now(conn) - bound.dedup_window_ms), 0)
        conn.execute(delete(i).where(*records, i.c.last_version < oldest, i.c.cursor < cutoff))

    def _set_bound(self, stream: StreamId, bound: Bound | None) -> None:
        b = self.t.bounds
        key = (b.c.session_id == stream.session_id, b.c.stream == stream.name)

        def write(conn: Connection) -> None:
            conn.execute(delete(b).where(*key))
            if bound is not None:
                conn.execute(
                    insert(b).values(
                        session_id=stream.session_id,
                        stream=stream.name,
                        keep=bound.keep,
                        dedup_ms=bound.dedup_window_ms,
                        only=bound.only,
                    )
                )

        self._run(write)
        self._remember(self._bounds, stream, (time.monotonic() + BOUND_TTL, bound))

    def _bound(self, stream: StreamId) -> Bound | None:
        b = self.t.bounds
        query = select(b.c.keep, b.c.dedup_ms, b.c.only).where(
            b.c.session_id == stream.session_id, b.c.stream == stream.name
        )
        row = self._run(lambda c: c.execute(query).first(), write=False)
        return None if row is None else Bound(int(row.keep), int(row.dedup_ms), row.only)

    def restore_moved(
        self,
        events: Iterable[RecordedEvent],
        seen: Callable[[RecordedEvent, bytes], object] | None = None,
    ) -> int:
        """Write recorded events as they are, with their streams, versions, cursors and event ids:
        a session moved here from another store by `ledger-bus archive`, its artifacts copied
        on their own (`restore_artifact`). Return how many were written. Unlike `restore`, the
        fields are kept as given, artifact references included, without validation: they come
        from a store that validated them; and the batches are larger (COPY on PostgreSQL).

        Events come in commit order; each must be above its session's newest cursor and the next
        version of its stream, so what an append writes afterwards sorts after them. An event
        already here (its cursor taken) is skipped: a move cut short can be run again. Open
        attempts follow from the events, as they do for appends. `seen` is told of every event
        with the payload bytes it has here, written now or before.
        """
        written = 0
        batch: list[RecordedEvent] = []

        def flush() -> None:
            nonlocal written
            if batch:
                payloads = [pack(e.fields) for e in batch]
                if seen is not None:
                    for recorded, payload in zip(batch, payloads, strict=True):
                        seen(recorded, payload)
                written += self._run(lambda conn: self._restore(conn, list(batch), payloads))
                batch.clear()

        for recorded in events:
            if batch and (
                recorded.session_id != batch[0].session_id or len(batch) >= RESTORE_BATCH
            ):
                flush()
            batch.append(recorded)
        flush()
        return written

    def _restore_batch(self, batch: RestoreBatch) -> int:
        """EventStore.restore's batch: validated, its big fields kept as artifacts."""
        rows = sql_append.artifact_rows(batch.stream.session_id, batch.prepared)

        def write(conn: Connection) -> int:
            written = self._restore(conn, batch.events, batch.prepared.payloads)
            if written and rows:
                driver_cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
                driver_cursor.executemany(self._sql.artifact_add, rows)
                driver_cursor.close()
            return written

        return self._run(write)

    def _restore(self, conn: Connection, events: list[RecordedEvent], payloads: list[bytes]) -> int:
        t = self.t
        session_id = events[0].session_id
        last, count = self._lock_session(conn, session_id)
        fresh = [e for e in events if e.cursor > last]
        if not fresh:
            return 0
        payloads = payloads[len(events) - len(fresh) :]  # those skipped come first
        versions = {
            row.stream: int(row.version)
            for row in conn.execute(
                select(t.streams.c.stream, t.streams.c.version).where(
                    t.streams.c.session_id == session_id
                )
            )
        }
        known = dict(versions)
        previous = last
        opened = False
        for recorded in fresh:
            name = recorded.stream.name
            if recorded.cursor <= previous:
                raise InvalidInput(f"{recorded!r}: events to restore must come in commit order")
            # A stream's first event here may come after others a bound trimmed (spec 3.12);
            # from then on its versions follow one another.
            if name in versions and recorded.version != versions[name] + 1:
                raise VersionConflict(str(recorded.stream), versions[name], recorded.version - 1)
            versions[name] = recorded.version
            previous = recorded.cursor
        self._insert_events(conn, session_id, fresh, payloads)
        for name, version in versions.items():
            if name not in known:
                conn.execute(
                    insert(t.streams).values(session_id=session_id, stream=name, version=version)
                )
            elif version != known[name]:
                conn.execute(
                    update(t.streams)
                    .where(t.streams.c.session_id == session_id, t.streams.c.stream == name)
                    .values(version=version)
                )
        notes = []
        for recorded in fresh:
            note = attempt_note(recorded.fields)
            opened = opened or note.startswith("o")
            notes.append((recorded.stream.name, note, recorded.cursor))
        self._apply_notes(conn, session_id, notes)
        values: dict[str, Any] = {"last_cursor": fresh[-1].cursor, "events": count + len(fresh)}
        if opened:
            values["opened_ms"] = self._now(conn)
        conn.execute(
            update(t.sessions).where(t.sessions.c.session_id == session_id).values(**values)
        )
        return len(fresh)

    def _insert_events(
        self, conn: Connection, session_id: str, events: list[RecordedEvent], payloads: list[bytes]
    ) -> None:
        driver_cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        # sqlite3's executemany runs in C; psycopg's async adapter has no COPY to offer.
        if not self.postgres or not hasattr(driver_cursor, "copy"):
            driver_cursor.close()
            conn.execute(
                insert(self.t.events),
                [
                    {
                        "session_id": session_id,
                        "cursor": e.cursor,
                        "stream": e.stream.name,
                        "version": e.version,
                        "payload": payload,
                    }
                    for e, payload in zip(events, payloads, strict=True)
                ],
            )
            return
        # psycopg's executemany sends a statement per row; COPY streams them, several times
        # faster than that or than one statement from arrays.
        columns = "session_id, cursor, stream, version, payload"
        with driver_cursor.copy(f"COPY {self.t.events.name} ({columns}) FROM STDIN") as copy:
            for e, payload in zip(events, payloads, strict=True):
                copy.write_row((session_id, e.cursor, e.stream.name, e.version, payload))
        driver_cursor.close()

    def _apply_notes(
        self, conn: Connection, session_id: str, notes: list[tuple[str, str, str]]
    ) -> None:
        """Keep open attempts for restored events as their appends did."""
        net = sql_append.net_notes(notes) if self.postgres else None
        if net is None:
            driver_cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            sql_append.apply_notes(self._sql, driver_cursor, session_id, notes)
            driver_cursor.close()
            return
        opened, closed = net
        table = self.t.open_attempts.name
        gone = sorted(closed - opened.keys())
        if gone:
            conn.execute(
                text(
                    f"DELETE FROM {table} WHERE session_id = :session"
                    " AND attempt_id = ANY(CAST(:ids AS text[]))"
                ),
                {"session": session_id, "ids": gone},
            )
        if opened:
            conn.execute(
                text(
                    f"INSERT INTO {table} (session_id, attempt_id, run_id, tool, stream, cursor,"
                    " flagged_cursor) SELECT :session, a, r, t, s, c, NULL FROM"
                    " unnest(CAST(:attempts AS text[]), CAST(:runs AS text[]),"
                    " CAST(:tools AS text[]), CAST(:streams AS text[]),"
                    " CAST(:cursors AS text[])) AS n(a, r, t, s, c)"
                    " ON CONFLICT (session_id, attempt_id) DO UPDATE SET"
                    " run_id = excluded.run_id, tool = excluded.tool, stream = excluded.stream,"
                    " cursor = excluded.cursor, flagged_cursor = NULL"
                ),
                {
                    "session": session_id,
                    "attempts": list(opened),
                    "runs": [o[0] for o in opened.values()],
                    "tools": [o[1] for o in opened.values()],
                    "streams": [o[2] for o in opened.values()],
                    "cursors": [o[3] for o in opened.values()],
                },
            )

    def tail_plan(self, session_id: str, n: int = 20) -> str:
        """How the database runs a tail of the session: its query plan, as text."""
        e = self.t.events
        query = self._events([e.c.session_id == session_id], e.c.cursor.desc(), n)
        compiled = query.compile(self.engine, compile_kwargs={"literal_binds": True})
        prefix = "EXPLAIN" if self.postgres else "EXPLAIN QUERY PLAN"

        def explain(conn: Connection) -> str:
            rows = conn.exec_driver_sql(f"{prefix} {compiled}").all()
            return "\n".join(" ".join(str(v) for v in row) for row in rows)

        return self._run(explain, write=False)

    # -- reads -----------------------------------------------------------------------------------

    @staticmethod
    def _record(session_id: str, row: Any) -> RecordedEvent:
        return RecordedEvent(
            stream=StreamId(session_id, row.stream),
            version=int(row.version),
            cursor=row.cursor,
            fields=unpack(row.payload),
        )

    @staticmethod
    def _records(session_id: str, rows: Iterable[Any]) -> list[RecordedEvent]:
        """Rows as events; a StreamId is made (and its name checked) once per stream."""
        refs: dict[str, StreamId] = {}
        out = []
        for stream, version, cursor, payload in rows:
            ref = refs.get(stream)
            if ref is None:
                ref = refs[stream] = StreamId(session_id, stream)
            out.append(RecordedEvent(ref, int(version), cursor, unpack(payload)))
        return out

    def _events(self, where: Sequence[Any], order: Any, count: Any) -> Any:
        e = self.t.events
        return (
            select(e.c.stream, e.c.version, e.c.cursor, e.c.payload)
            .where(*where)
            .order_by(order)
            .limit(count)
        )

    def _read_stream(self, stream: StreamId, after: int, count: int) -> list[RecordedEvent]:
        e = self.t.events
        query = self._events(
            [
                e.c.session_id == stream.session_id,
                e.c.stream == stream.name,
                e.c.version > after,
            ],
            e.c.version,
            count,
        )
        rows = self._run(lambda c: c.execute(query).all(), write=False)
        return self._records(stream.session_id, rows)

    def _scan_rows(self, conn: Connection, session_id: str, after: str | None, count: int) -> Any:
        e = self.t.events
        where = [e.c.session_id == session_id]
        if after is not None:
            where.append(e.c.cursor > after)
        return conn.execute(self._events(where, e.c.cursor, count)).all()

    def _scan(self, session_id: str, after: str | None, count: int) -> list[RecordedEvent]:
        rows = self._run(lambda c: self._scan_rows(c, session_id, after, count), write=False)
        return self._records(session_id, rows)

    def _tail(self, session_id: str, n: int, before: str | None) -> list[RecordedEvent]:
        values = {"session": session_id, "n": n, "before": before}
        if self.postgres:
            # On the driver's own connection: SQLAlchemy's part of a tail was most of its cost.
            text_ = self._sql.tail if before is None else self._sql.tail_before
            found = self._retry(lambda: sql_append.read(self.engine, text_, values))
            return self._records(session_id, reversed(found))
        # Statements built once: building and keying one per call cost more than the query.
        query = self._tail_query if before is None else self._tail_before_query
        rows = self._run(lambda c: c.execute(query, values).all(), write=False)
        return self._records(session_id, reversed(rows))

    def _last_cursor(self, conn: Connection, session_id: str) -> str:
        s = self.t.sessions
        found = conn.execute(select(s.c.last_cursor).where(s.c.session_id == session_id)).scalar()
        return str(found) if found else CURSOR_ZERO

    def _wait(
        self, session_id: str, after: str | None, timeout_ms: int, count: int
    ) -> list[RecordedEvent]:
        deadline = time.monotonic() + timeout_ms / 1000
        if after is None:
            after = self._run(lambda c: self._last_cursor(c, session_id), write=False)
        with self._changes(session_id) as changed:
            while True:
                found = self._scan(session_id, after, count)
                if found or time.monotonic() >= deadline:
                    return found
                changed(deadline - time.monotonic())

    @contextmanager
    def _changes(self, session_id: str) -> Iterator[Callable[[float], None]]:
        """A function that waits up to its seconds for the session to change.

        On PostgreSQL it listens for the NOTIFY each append sends at commit; it is listening
        before the caller first looks, so no commit falls between a look and the wait. On SQLite,
        and should listening fail, it polls.
        """

        def poll(seconds: float) -> None:
            self.waits.sleep(min(POLL_S, max(0.0, seconds)))

        if not self.postgres:
            yield poll
            return
        try:
            raw = self.engine.raw_connection()
        except sa_exc.DBAPIError:
            yield poll
            return
        driver: Any = raw.dbapi_connection  # psycopg's, or SQLAlchemy's adapter of its async one
        try:
            driver.rollback()
            driver.autocommit = True
            driver.execute(f"LISTEN {self._channel}")
        except Exception:  # a connection gone bad: the reads around it say what is wrong
            raw.invalidate()
            yield poll
            return

        def wait(seconds: float) -> None:
            end = time.monotonic() + max(0.0, seconds)
            try:
                while (left := end - time.monotonic()) > 0:
                    if session_id in self.waits.notes(raw.driver_connection, left):
                        return
            except Exception:
                poll(seconds)

        try:
            yield wait
        finally:
            try:
                driver.execute(f"UNLISTEN {self._channel}")
                driver.autocommit = False
                raw.close()
            except Exception:
                raw.invalidate()

    def _stream_version(self, stream: StreamId) -> int:
        v = self.t.streams
        query = select(v.c.version).where(
            v.c.session_id == stream.session_id, v.c.stream == stream.name
        )
        return int(self._run(lambda c: c.execute(query).scalar() or 0, write=False))

    def _session_exists(self, session_id: str) -> bool:
        s = self.t.sessions
        query = select(s.c.events).where(s.c.session_id == session_id)
        return bool(self._run(lambda c: c.execute(query).scalar() or 0, write=False))

    def _delete(self, session_id: str, stream: str | None) -> Deletion:
        return self._run(lambda conn: self._delete_in(conn, session_id, stream))

    def _delete_in(self, conn: Connection, session_id: str, stream: str | None) -> Deletion:
        """One transaction, under the session's row lock: appends wait for it, and what they
        write after it is the next generation."""
        t = self.t
        s = t.sessions
        head = conn.execute(
            select(s.c.events, s.c.generation).where(s.c.session_id == session_id).with_for_update()
        ).first()
        if head is None:  # never written: nothing to lock, nothing to delete
            return Deletion(session_id, stream, 0, 0)
        events, generation = head
        where = [t.events.c.session_id == session_id]
        if stream is not None:
            where.append(t.events.c.stream == stream)
            events = conn.execute(
                select(func.count()).select_from(t.events).where(*where)
            ).scalar_one()
        if not events:
            return Deletion(session_id, stream, 0, int(generation))
        if stream is None:  # groups go with the log they follow, as on Redis
            for table in (
                t.pending,
                t.consumers,
                t.groups,
                t.dead_letters,
                t.safe_tools,
                t.artifacts,
                t.bounds,
            ):
                conn.execute(delete(table).where(table.c.session_id == session_id))
        else:  # the stream's events are no longer pending with anyone
            held = select(t.events.c.cursor).where(*where)
            p = t.pending
            conn.execute(delete(p).where(p.c.session_id == session_id, p.c.cursor.in_(held)))
            b = t.bounds
            conn.execute(delete(b).where(b.c.session_id == session_id, b.c.stream == stream))
            self._drop_uses(
                conn, session_id, conn.execute(select(t.events.c.payload).where(*where)).scalars()
            )
        for table in (t.events, t.streams, t.open_attempts):
            condition = [table.c.session_id == session_id]
            if stream is not None:
                condition.append(table.c.stream == stream)
            conn.execute(delete(table).where(*condition))
        # The session's row stays, with its last cursor: what is written next sorts after it.
        conn.execute(
            update(s)
            .where(s.c.session_id == session_id)
            .values(
                events=s.c.events - events,
                generation=s.c.generation + 1,
                deleted_ms=self._now(conn),
                **({"opened_ms": None} if stream is None else {}),
            )
        )
        return Deletion(session_id, stream, int(events), int(generation) + 1)

    def _append_ids(self, session_id: str) -> list[AppendRecord]:
        i = self.t.idempotency
        query = (
            select(
                i.c.stream,
                i.c.append_id,
                i.c.digest,
                i.c.first_version,
                i.c.last_version,
                i.c.cursor,
            )
            .where(i.c.session_id == session_id)
            .order_by(i.c.stream, i.c.append_id)
        )
        after: tuple[str, str] | None = None
        found: list[AppendRecord] = []
        while True:
            page = (
                query if after is None else query.where(tuple_(i.c.stream, i.c.append_id) > after)
            )
            rows = self._run(lambda c: c.execute(page.limit(PAGE)).all(), write=False)  # noqa: B023
            found += (AppendRecord(*row) for row in rows)
            if len(rows) < PAGE:
                return found
            after = (rows[-1].stream, rows[-1].append_id)

    def page_digests(self, session_id: str) -> list[tuple[int, str]]:
        """The session's events as `PageDigests` gives them: on PostgreSQL computed by the
        server, so that verifying an archive does not carry every payload back."""
        if not self.postgres:
            digests = PageDigests()
            e = self.t.events
            query = (
                select(e.c.cursor, e.c.stream, e.c.version, e.c.payload)
                .where(e.c.session_id == session_id, e.c.cursor > bindparam("after"))
                .order_by(e.c.cursor)
                .limit(DIGEST_PAGE)
            )
            after = CURSOR_ZERO
            while rows := self._run(
                lambda c: c.execute(query, {"after": after}).all(),  # noqa: B023
                write=False,
            ):
                for cursor, stream, version, payload in rows:
                    digests.add(cursor, stream, int(version), bytes(payload))
                after = rows[-1][0]
            return digests.finish()
        page = text(
            "SELECT count(*), max(cursor), encode(sha256(string_agg(convert_to(cursor"
            " || chr(31) || stream || chr(31) || version::text || chr(31), 'UTF8') || payload,"
            " ''::bytea ORDER BY cursor)), 'hex') FROM (SELECT cursor, stream, version, payload"
            f" FROM {self.t.events.name} WHERE session_id = :session AND cursor > :after"
            " ORDER BY cursor LIMIT :n) AS page"
        )
        pages: list[tuple[int, str]] = []
        after = CURSOR_ZERO
        while True:
            values = {"session": session_id, "after": after, "n": DIGEST_PAGE}
            count, last, digest = self._run(
                lambda c: c.execute(page, values).one(),  # noqa: B023
                write=False,
            )
            if not count:
                return pages
            pages.append((int(count), str(digest)))
            after = last

    def restore_append_ids(self, session_id: str, records: Iterable[AppendRecord]) -> int:
        """Record appends of a session moved here, as its events were (restore); one already
        recorded is left as it is, so a move cut short can be run again. Return how many
        records were given."""
        statement = self._insert_new(self.t.idempotency)
        given = 0
        batch: list[dict[str, Any]] = []

        def flush() -> None:
            rows = list(batch)
            self._run(lambda c: c.execute(statement, rows))
            batch.clear()

        for record in records:
            given += 1
            batch.append({"session_id": session_id, **dataclasses.asdict(record)})
            if len(batch) >= RESTORE_BATCH:
                flush()
        if batch:
            flush()
        return given

    def restore_artifact(self, session_id: str, sha256: str, data: bytes, uses: int) -> None:
        """Keep an artifact of a session moved here, with the references its events hold; one
        kept before takes the count given (a move cut short can be run again)."""
        a = self.t.artifacts
        statement = self._upsert(a).values(
            session_id=session_id, sha256=sha256, uses=uses, data=data
        )
        statement = statement.on_conflict_do_update(
            index_elements=[a.c.session_id, a.c.sha256], set_={"uses": statement.excluded.uses}
        )
        self._run(lambda c: c.execute(statement))

    def _artifact(self, session_id: str, sha256: str) -> bytes | None:
        a = self.t.artifacts
        query = select(a.c.data).where(a.c.session_id == session_id, a.c.sha256 == sha256)
        found = self._run(lambda c: c.execute(query).scalar(), write=False)
        return None if found is None else bytes(found)

    def _artifact_uses(self, session_id: str) -> dict[str, int]:
        a = self.t.artifacts
        query = select(a.c.sha256, a.c.uses).where(a.c.session_id == session_id)
        rows = self._run(lambda c: c.execute(query).all(), write=False)
        return {row.sha256: int(row.uses) for row in rows}

    def _drop_uses(self, conn: Connection, session_id: str, payloads: Iterable[bytes]) -> None:
        """Forget the references events being removed held; an artifact none holds goes."""
        a = self.t.artifacts
        for sha, count in uses_of(unpack(p) for p in payloads).items():
            key = (a.c.session_id == session_id, a.c.sha256 == sha)
            conn.execute(update(a).where(*key).values(uses=a.c.uses - count))
            conn.execute(delete(a).where(*key, a.c.uses <= 0))

    def find_append_ids(
        self, session_id: str, keys: list[tuple[str, str]]
    ) -> dict[tuple[str, str], AppendRecord]:
        """The records of these (stream, append_id) pairs that the session has."""
        i = self.t.idempotency
        query = select(
            i.c.stream, i.c.append_id, i.c.digest, i.c.first_version, i.c.last_version, i.c.cursor
        ).where(i.c.session_id == session_id, tuple_(i.c.stream, i.c.append_id).in_(keys))
        rows = self._run(lambda c: c.execute(query).all(), write=False) if keys else []
        return {(row.stream, row.append_id): AppendRecord(*row) for row in rows}

    def _insert_new(self, table: Table) -> Any:
        """INSERT that leaves a row whose key is taken as it is."""
        return self._upsert(table).on_conflict_do_nothing()

    def _upsert(self, table: Table) -> Any:
        """The dialect's INSERT, which says what to do with a row whose key is taken."""
        if self.postgres:
            from sqlalchemy.dialects.postgresql import insert as dialect_insert
        else:
            from sqlalchemy.dialects.sqlite import insert as dialect_insert  # type: ignore[assignment]
        return dialect_insert(table)

    def _session_info(self, session_id: str) -> SessionInfo:
        t = self.t

        def read(conn: Connection) -> SessionInfo:
            head = conn.execute(
                select(t.sessions.c.last_cursor, t.sessions.c.events).where(
                    t.sessions.c.session_id == session_id
                )
            ).first()
            streams = conn.execute(
                select(t.streams.c.stream, t.streams.c.version)
                .where(t.streams.c.session_id == session_id)
                .order_by(t.streams.c.stream)
            ).all()
            first = conn.execute(
                select(t.events.c.cursor)
                .where(t.events.c.session_id == session_id)
                .order_by(t.events.c.cursor)
                .limit(1)
            ).scalar()
            append_ids = conn.execute(
                select(func.count())
                .select_from(t.idempotency)
                .where(t.idempotency.c.session_id == session_id)
            ).scalar_one()
            events = int(head.events) if head else 0
            return SessionInfo(
                session_id=session_id,
                events=events,
                streams=[StreamInfo(row.stream, int(row.version)) for row in streams],
                first_cursor=first,
                last_cursor=head.last_cursor if head and events else None,
                append_ids=int(append_ids),
            )

        return self._run(read, write=False)

    def _session_count(self) -> int:
        s = self.t.sessions
        query = select(func.count()).select_from(s).where(s.c.events > 0)
        return int(self._run(lambda c: c.execute(query).scalar_one(), write=False))

    def _sessions(self, limit: int | None) -> list[tuple[str, int]]:
        s = self.t.sessions
        query = (
            select(s.c.session_id, s.c.last_cursor)
            .where(s.c.events > 0)
            .order_by(func.substr(s.c.last_cursor, 1, 13).desc(), s.c.session_id)
        )
        if limit is not None:
            query = query.limit(limit)
        rows = self._run(lambda c: c.execute(query).all(), write=False)
        return [(row.session_id, cursor_ms(row.last_cursor)) for row in rows]

    # -- leases ----------------------------------------------------------------------------------

    def _holder(self, conn: Connection, session_id: str, name: str, now: int) -> str | None:
        lease = self.t.leases
        found = conn.execute(
            select(lease.c.owner, lease.c.expires_ms).where(
                lease.c.session_id == session_id, lease.c.name == name
            )
        ).first()
        if found is None or found.expires_ms <= now:
            return None
        return str(found.owner)

    def _lease_holder(self, session_id: str, name: str) -> str | None:
        return self._run(lambda c: self._holder(c, session_id, name, self._now(c)), write=False)

    def _lease(self, op: str, session_id: str, name: str, owner: str, ttl_ms: int) -> bool:
        # One statement each, so that two racing acquires cannot both read "free" and both
        # write: the database decides, on the row's key.
        p = self.prefix
        key = {"session": session_id, "name": name, "owner": owner, "ttl": ttl_ms}
        if op == "acquire":
            statement = text(
                f"INSERT INTO {p}_leases (session_id, name, owner, expires_ms)"
                " VALUES (:session, :name, :owner, :now + :ttl)"
                " ON CONFLICT (session_id, name) DO UPDATE SET owner = excluded.owner,"
                f" expires_ms = excluded.expires_ms WHERE {p}_leases.expires_ms <= :now"
                f" OR {p}_leases.owner = excluded.owner RETURNING owner"
            )
        elif op == "renew":
            statement = text(
                f"UPDATE {p}_leases SET expires_ms = :now + :ttl WHERE session_id = :session"
                " AND name = :name AND owner = :owner AND expires_ms > :now RETURNING owner"
            )
        else:
            statement = text(
                f"DELETE FROM {p}_leases WHERE session_id = :session AND name = :name"
                " AND owner = :owner AND expires_ms > :now RETURNING owner"
            )

        def change(conn: Connection) -> bool:
            found = conn.execute(statement, {**key, "now": self._now(conn)}).first()
            return found is not None

        return self._run(change)

    # -- open attempts ---------------------------------------------------------------------------

    def _open_attempts(self, session_ids: list[str]) -> dict[str, list[OpenAttempt]]:
        o = self.t.open_attempts
        if not session_ids:
            return {}
        query = select(o).where(o.c.session_id.in_(session_ids))
        rows = self._run(lambda c: c.execute(query).all(), write=False)
        found: dict[str, list[OpenAttempt]] = {s: [] for s in session_ids}
        for row in rows:
            found[row.session_id].append(
                OpenAttempt(
                    row.session_id,
                    row.attempt_id,
                    row.run_id or None,
                    row.tool,
                    row.stream,
                    row.cursor,
                    row.flagged_cursor,
                )
            )
        return found

    def _safe_to_replay(self, session_id: str, run_id: str, tool: str) -> bool:
        safe = self.t.safe_tools
        query = select(safe.c.tool).where(
            safe.c.session_id == session_id, safe.c.run_id == run_id, safe.c.tool == tool
        )
        return self._run(lambda c: c.execute(query).first() is not None, write=False)

    def _open_sessions(self, buckets: Collection[int]) -> list[tuple[str, int]]:
        s = self.t.sessions
        query = select(s.c.session_id, s.c.opened_ms).where(s.c.opened_ms.is_not(None))
        rows = self._run(lambda c: c.execute(query).all(), write=False)
        wanted = set(buckets)
        return sorted(
            (row.session_id, int(row.opened_ms))
            for row in rows
            if bucket_of(row.session_id) in wanted
        )

    def _forget_open_session(self, session_id: str, opened_before_ms: int) -> bool:
        s = self.t.sessions
        statement = (
            update(s)
            .where(s.c.session_id == session_id, s.c.opened_ms < opened_before_ms)
            .values(opened_ms=None)
        )
        return self._run(lambda c: bool(c.execute(statement).rowcount > 0))

    # -- consumer groups: the semantics of Redis consumer groups on the session log -------------

    def _group_row(self, conn: Connection, session_id: str, group: str) -> str:
        g = self.t.groups
        query = select(g.c.last_delivered).where(g.c.session_id == session_id, g.c.grp == group)
        if self.postgres:
            query = query.with_for_update()
        found = conn.execute(query).scalar()
        if found is None:
            raise NotFound(f"no consumer group {group!r} on session {session_id!r}")
        return str(found)

    def _seen(self, conn: Connection, session_id: str, group: str, consumer: str, now: int) -> None:
        c = self.t.consumers
        where = and_(c.c.session_id == session_id, c.c.grp == group, c.c.consumer == consumer)
        if conn.execute(update(c).where(where).values(seen_ms=now)).rowcount == 0:
            conn.execute(
                insert(c).values(session_id=session_id, grp=group, consumer=consumer, seen_ms=now)
            )

    def _deliver(
        self,
        conn: Connection,
        session_id: str,
        group: str,
        consumer: str,
        cursors: list[str],
        now: int,
    ) -> list[Delivery]:
        """Hand `cursors` to `consumer`: each becomes (or stays) pending with it, counted."""
        p = self.t.pending
        c = self.t.consumers
        known = conn.execute(
            select(c.c.consumer).where(
                c.c.session_id == session_id, c.c.grp == group, c.c.consumer == consumer
            )
        ).first()
        if cursors or known is not None:  # like Redis: a read that finds nothing creates nobody
            self._seen(conn, session_id, group, consumer, now)
        if not cursors:
            return []
        held = {
            row.cursor: int(row.deliveries)
            for row in conn.execute(
                select(p.c.cursor, p.c.deliveries).where(
                    p.c.session_id == session_id, p.c.grp == group, p.c.cursor.in_(cursors)
                )
            )
        }
        for cursor in cursors:
            where = and_(p.c.session_id == session_id, p.c.grp == group, p.c.cursor == cursor)
            if cursor in held:
                conn.execute(
                    update(p)
                    .where(where)
                    .values(consumer=consumer, since_ms=now, deliveries=held[cursor] + 1)
                )
            else:
                conn.execute(
                    insert(p).values(
                        session_id=session_id,
                        grp=group,
                        cursor=cursor,
                        consumer=consumer,
                        deliveries=1,
                        since_ms=now,
                    )
                )
        e = self.t.events
        rows = {
            row.cursor: row
            for row in conn.execute(
                select(e.c.stream, e.c.version, e.c.cursor, e.c.payload).where(
                    e.c.session_id == session_id, e.c.cursor.in_(cursors)
                )
            )
        }
        return [
            Delivery(self._record(session_id, rows[cursor]), cursor, held.get(cursor, 0) + 1)
            for cursor in cursors
            if cursor in rows
        ]

    def _group_create(self, session_id: str, group: str, after: str | None) -> bool:
        g = self.t.groups

        def create(conn: Connection) -> bool:
            start = after if after is not None else self._last_cursor(conn, session_id)
            created = conn.execute(
                text(
                    f"INSERT INTO {g.name} (session_id, grp, last_delivered)"
                    " VALUES (:session, :group, :start)"
                    " ON CONFLICT (session_id, grp) DO NOTHING"
                ),
                {"session": session_id, "group": group, "start": start},
            )
            return bool(created.rowcount)

        return self._run(create)

    def _group_exists(self, session_id: str, group: str) -> bool:
        g = self.t.groups
        query = select(g.c.grp).where(g.c.session_id == session_id, g.c.grp == group)
        return self._run(lambda c: c.execute(query).first() is not None, write=False)

    def _group_read(
        self, session_id: str, group: str, consumer: str, count: int, block_ms: int | None
    ) -> list[Delivery]:
        deadline = time.monotonic() + (block_ms or 0) / 1000
        g = self.t.groups

        def read(conn: Connection) -> list[Delivery]:
            last = self._group_row(conn, session_id, group)
            fresh = [row.cursor for row in self._scan_rows(conn, session_id, last, count)]
            if fresh:
                conn.execute(
                    update(g)
                    .where(g.c.session_id == session_id, g.c.grp == group)
                    .values(last_delivered=fresh[-1])
                )
            return self._deliver(conn, session_id, group, consumer, fresh, self._now(conn))

        found = self._run(read)
        if found or block_ms is None:
            return found
        # Nothing yet: listen, then read again, since a commit between the read above and the
        # LISTEN would wake nobody. (The read above spares a listening connection when there is
        # something to deliver, the common case.)
        with self._changes(session_id) as changed:
            while True:
                found = self._run(read)
                if found or time.monotonic() >= deadline:
                    return found
                changed(deadline - time.monotonic())

    def _pending_cursors(self, conn: Connection, session_id: str, group: str, *where: Any) -> Any:
        p = self.t.pending
        return conn.execute(
            select(p.c.cursor)
            .where(p.c.session_id == session_id, p.c.grp == group, *where)
            .order_by(p.c.cursor)
        ).scalars()

    def _group_pending(
        self, session_id: str, group: str, consumer: str, count: int
    ) -> list[Delivery]:
        p = self.t.pending

        def pending(conn: Connection) -> list[Delivery]:
            self._group_row(conn, session_id, group)
            mine = list(self._pending_cursors(conn, session_id, group, p.c.consumer == consumer))
            return self._deliver(conn, session_id, group, consumer, mine[:count], self._now(conn))

        return self._run(pending)

    def _group_claim(
        self, session_id: str, group: str, consumer: str, min_idle_ms: int, count: int
    ) -> list[Delivery]:
        p = self.t.pending

        def claim(conn: Connection) -> list[Delivery]:
            self._group_row(conn, session_id, group)
            now = self._now(conn)
            idle = list(
                self._pending_cursors(conn, session_id, group, p.c.since_ms <= now - min_idle_ms)
            )
            return self._deliver(conn, session_id, group, consumer, idle[:count], now)

        return self._run(claim)

    def _group_keep(self, session_id: str, group: str, consumer: str, entry_ids: list[str]) -> None:
        p = self.t.pending

        def keep(conn: Connection) -> None:
            self._group_row(conn, session_id, group)
            now = self._now(conn)
            self._seen(conn, session_id, group, consumer, now)
            if entry_ids:
                conn.execute(
                    update(p)
                    .where(
                        p.c.session_id == session_id, p.c.grp == group, p.c.cursor.in_(entry_ids)
                    )
                    .values(consumer=consumer, since_ms=now)
                )

        self._run(keep)

    def _group_ack(self, session_id: str, group: str, entry_ids: list[str]) -> int:
        p = self.t.pending

        def ack(conn: Connection) -> int:
            self._group_row(conn, session_id, group)
            if not entry_ids:
                return 0
            return int(
                conn.execute(
                    delete(p).where(
                        p.c.session_id == session_id, p.c.grp == group, p.c.cursor.in_(entry_ids)
                    )
                ).rowcount
            )

        return self._run(ack)

    def _group_dead_letter(
        self, session_id: str, group: str, delivery: Delivery, reason: str
    ) -> None:
        p, dead = self.t.pending, self.t.dead_letters

        def bury(conn: Connection) -> None:
            self._group_row(conn, session_id, group)
            fields = json.dumps(dead_letter_fields(delivery, reason))
            conn.execute(insert(dead).values(session_id=session_id, grp=group, fields=fields))
            conn.execute(
                delete(p).where(
                    p.c.session_id == session_id, p.c.grp == group, p.c.cursor == delivery.entry_id
                )
            )

        self._run(bury)

    def _group_dead_letters(self, session_id: str, group: str) -> list[dict[str, str]]:
        dead = self.t.dead_letters
        query = (
            select(dead.c.fields)
            .where(dead.c.session_id == session_id, dead.c.grp == group)
            .order_by(dead.c.id)
        )
        rows = self._run(lambda c: c.execute(query).scalars().all(), write=False)
        return [json.loads(row) for row in rows]

    def _idle_consumers(
        self, conn: Connection, session_id: str, group: str, idle_ms: int, now: int
    ) -> list[str]:
        c, p = self.t.consumers, self.t.pending
        holding = select(p.c.consumer).where(p.c.session_id == session_id, p.c.grp == group)
        return list(
            conn.execute(
                select(c.c.consumer)
                .where(
                    c.c.session_id == session_id,
                    c.c.grp == group,
                    c.c.seen_ms <= now - idle_ms,
                    c.c.consumer.not_in(holding),
                )
                .order_by(c.c.consumer)
            ).scalars()
        )

    def _stats(self, conn: Connection, session_id: str, group: str, idle_ms: int) -> GroupStats:
        last = self._group_row(conn, session_id, group)
        now = self._now(conn)
        c, p, e = self.t.consumers, self.t.pending, self.t.events

        def count(query: Any) -> int:
            return int(conn.execute(query).scalar_one())

        idle = len(self._idle_consumers(conn, session_id, group, idle_ms, now))
        consumers = count(
            select(func.count())
            .select_from(c)
            .where(c.c.session_id == session_id, c.c.grp == group)
        )
        pending = count(
            select(func.count())
            .select_from(p)
            .where(p.c.session_id == session_id, p.c.grp == group)
        )
        lag = count(
            select(func.count())
            .select_from(e)
            .where(e.c.session_id == session_id, e.c.cursor > last)
        )
        return GroupStats(
            group=group,
            consumers=consumers - idle,
            idle_consumers=idle,
            pending=pending,
            lag=lag,
            last_delivered=last,
        )

    def _group_stats(self, session_id: str, group: str, idle_ms: int) -> GroupStats:
        return self._run(lambda conn: self._stats(conn, session_id, group, idle_ms), write=False)

    def _group_prune(self, session_id: str, group: str, idle_ms: int) -> list[str]:
        c = self.t.consumers

        def prune(conn: Connection) -> list[str]:
            self._group_row(conn, session_id, group)
            removed = self._idle_consumers(conn, session_id, group, idle_ms, self._now(conn))
            if removed:
                conn.execute(
                    delete(c).where(
                        c.c.session_id == session_id, c.c.grp == group, c.c.consumer.in_(removed)
                    )
                )
            return removed

        return self._run(prune)

    def _groups(self, session_id: str, idle_ms: int) -> list[GroupStats]:
        g = self.t.groups

        def read(conn: Connection) -> list[GroupStats]:
            names = conn.execute(
                select(g.c.grp).where(g.c.session_id == session_id).order_by(g.c.grp)
            ).scalars()
            return [self._stats(conn, session_id, name, idle_ms) for name in list(names)]

        return self._run(read, write=False)

    def _group_pending_entries(self, session_id: str, group: str, count: int) -> list[PendingEntry]:
        p = self.t.pending

        def read(conn: Connection) -> list[PendingEntry]:
            self._group_row(conn, session_id, group)
            now = self._now(conn)
            rows = conn.execute(
                select(p)
                .where(p.c.session_id == session_id, p.c.grp == group)
                .order_by(p.c.cursor)
                .limit(count)
            ).all()
            return [
                PendingEntry(
                    row.cursor, row.cursor, row.consumer, now - int(row.since_ms), row.deliveries
                )
                for row in rows
            ]

        return self._run(read, write=False)

    def _group_delete(self, session_id: str, group: str) -> bool:
        t = self.t

        def drop(conn: Connection) -> bool:
            for table in (t.consumers, t.pending, t.dead_letters):
                conn.execute(
                    delete(table).where(table.c.session_id == session_id, table.c.grp == group)
                )
            return bool(
                conn.execute(
                    delete(t.groups).where(
                        t.groups.c.session_id == session_id, t.groups.c.grp == group
                    )
                ).rowcount
            )

        return self._run(drop)

    def _group_reset(self, session_id: str, group: str, cursor: str) -> None:
        g = self.t.groups

        def reset(conn: Connection) -> None:
            self._group_row(conn, session_id, group)
            conn.execute(
                update(g)
                .where(g.c.session_id == session_id, g.c.grp == group)
                .values(last_delivered=cursor)
            )

        self._run(reset)

    def _group_replay(self, session_id: str, group: str) -> int:
        t = self.t

        def replay(conn: Connection) -> int:
            self._group_row(conn, session_id, group)
            dead = t.dead_letters
            letters = conn.execute(
                select(dead.c.fields)
                .where(dead.c.session_id == session_id, dead.c.grp == group)
                .order_by(dead.c.id)
            ).scalars()
            since = self._now(conn) - REPLAY_IDLE_MS
            replayed = 0
            p = t.pending
            for letter in list(letters):
                cursor = json.loads(letter)["cursor"]
                present = conn.execute(
                    select(t.events.c.cursor).where(
                        t.events.c.session_id == session_id, t.events.c.cursor == cursor
                    )
                ).first()
                if present is None:
                    continue
                where = and_(p.c.session_id == session_id, p.c.grp == group, p.c.cursor == cursor)
                conn.execute(delete(p).where(where))
                conn.execute(
                    insert(p).values(
                        session_id=session_id,
                        grp=group,
                        cursor=cursor,
                        consumer=REPLAY_CONSUMER,
                        deliveries=0,
                        since_ms=since,
                    )
                )
                replayed += 1
            conn.execute(delete(dead).where(dead.c.session_id == session_id, dead.c.grp == group))
            return replayed

        return self._run(replay)

    def close(self) -> None:
        if self._absent:
            self._read_the_file()
        self.engine.dispose()
        self._reads.dispose()


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def _driver_error(err: BaseException) -> BaseException | None:
    """The database driver's exception behind `err` (SQLAlchemy wraps it), or None when `err`
    did not come from the database."""
    if isinstance(err, sa_exc.DBAPIError):
        return err.orig or err
    return err if isinstance(err, _DRIVER_ERRORS) else None


def _driver_errors() -> tuple[type[Exception], ...]:
    """What the database drivers raise, SQLAlchemy's wrapping of them included."""

    found: list[type[Exception]] = [sa_exc.DBAPIError, sqlite3.Error]
    try:
        import psycopg
    except ImportError:  # SQLite only: the [postgres] extra is not installed
        pass
    else:
        found.append(psycopg.Error)
    return tuple(found)


_DRIVER_ERRORS: Final = _driver_errors()


def _final(err: Exception) -> LedgerError | None:
    """None for a failure that passes; BackendRefused for one that will not."""
    if _classify(err) == "retry":
        return None
    return BackendRefused(f"the database refused: {_first_line(err)}")


def _first_line(err: BaseException) -> str:
    orig = _driver_error(err) or err
    text = str(orig).strip()
    return text.splitlines()[0] if text else type(orig).__name__


def _classify(err: BaseException) -> str:
    """ "retry" for what passes (a lost connection, a busy database, a deadlock or serialization
    failure), "refused" for what will not (a constraint, a permission, bad SQL)."""
    if isinstance(err, sa_exc.DBAPIError) and (
        err.connection_invalidated or isinstance(err, sa_exc.InterfaceError)
    ):
        return "retry"
    orig = _driver_error(err) or err
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state in _RETRY_STATES or (state is not None and str(state).startswith("08")):
        return "retry"
    message = str(orig).lower()
    if any(busy in message for busy in _SQLITE_BUSY):
        return "retry"
    # By the class and its bases: psycopg's ConnectionTimeout is an OperationalError too.
    names = {c.__name__ for c in type(orig).__mro__}
    if names & {"OperationalError", "InterfaceError"} and state is None:
        # Connection refused, a server going away, a timeout: psycopg and sqlite3 say these
        # without a SQLSTATE; so do refusals at connect time, which are final.
        if any(refused in message for refused in _REFUSED_AT_CONNECT):
            return "refused"
        return "retry"
    return "refused"
