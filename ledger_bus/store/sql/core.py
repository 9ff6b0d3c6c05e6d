"""The SQL store's core: the engine and its schema, transactions retried, the session row's
lock, rows as records."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Self, TypeVar

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Table,
    cast,
    create_engine,
    delete,
    func,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy import exc as sa_exc

from ledger_bus.model.artifacts import unpack, uses_of
from ledger_bus.model.durability import LOCAL, Durability
from ledger_bus.model.errors import (
    BackendRefused,
    LedgerError,
    NotFound,
)
from ledger_bus.model.ids import CURSOR_ZERO, StreamId
from ledger_bus.model.prepared import Limits
from ledger_bus.model.records import (
    Bound,
    RecordedEvent,
)
from ledger_bus.store.base import EventStore
from ledger_bus.store.sql import statements
from ledger_bus.store.sql.engine import (
    MIGRATIONS,
    POLL_S,
    SCHEMA_HEAD,
    open_engine,
)
from ledger_bus.store.sql.errors import (
    DRIVER_ERRORS,
    final,
    first_line,
)
from ledger_bus.store.sql.schema import Tables, tables
from ledger_bus.store.sql.waits import Bridged, Waits
from ledger_bus.store.steps import Op, call, immediate, retried, run

T = TypeVar("T")


def remove_file(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


class SqlCore(EventStore):
    """What every part of the SQL store stands on: the engine, the schema, transactions retried,
    the clock, the session's lock, and rows read as records."""

    tier = "sql"

    def __init__(  # noqa: PLR0913  (the store's settings, each a keyword)
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
        self.tables: Tables = tables(prefix)
        # The bounds of the streams this store appends to (spec 3.12), as last read, and until
        # when (monotonic) they are taken for so: a bound declared elsewhere applies within
        # BOUND_TTL seconds.
        self._bounds: dict[StreamId, tuple[float, Bound | None]] = {}
        self._channel = f"{prefix}_appended"  # NOTIFY, with the session id as payload
        self._sql = statements.AppendSql.build(prefix, self.postgres)
        # SQLite with no ledger in the file yet (or no file): reads see an empty ledger, and
        # the first write makes the tables. A read never creates a file or adds a table.
        self._absent = False
        self._making = threading.Lock()
        if check_schema:
            self._check_schema()

    @classmethod
    def from_url(  # noqa: PLR0913  (the store's settings, each a keyword)
        cls,
        url: str,
        prefix: str = "lb",
        limits: Limits | None = None,
        timeout: float = 10.0,
        durability: Durability = LOCAL,
        check_schema: bool = True,
        asynchronous: bool = False,
    ) -> Self:
        """A store on `url`; check_schema=False opens tables of any revision (to migrate them).

        `asynchronous`: on an async engine, every call run through SQLAlchemy's greenlet bridge
        (`sqlalchemy.util.greenlet_spawn`), as ledger_bus.store.async_store does.
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

    def _migrations(self, conn: Connection | None) -> Any:
        from alembic.config import Config  # noqa: PLC0415  (alembic: for the schema's migrations only)

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = conn
        config.attributes["prefix"] = self.prefix
        return config

    def _revisions(self, conn: Connection) -> tuple[str | None, str | None]:
        """The schema revision the tables are at (None: no ledger here), and the newest."""
        from alembic.runtime.migration import MigrationContext  # noqa: PLC0415  (alembic: for the schema's migrations only)
        from alembic.script import ScriptDirectory  # noqa: PLC0415  (alembic: for the schema's migrations only)

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
        ours = names & {t.name for t in self.tables.metadata.sorted_tables}
        if ours:
            # The revision again, read after the tables: another process's first write makes
            # the tables and stamps their revision in one transaction, which may have committed
            # between the two reads above (two processes starting on a new file).
            current = self._run(self._current, write=False)
            if current == SCHEMA_HEAD:
                return
        if current is None and not ours:
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
        return self._file is None or os.path.exists(self._file)

    @property
    def _file(self) -> str | None:
        """The SQLite file the URL names, by its absolute path; None for PostgreSQL, and for a
        database in memory."""
        database = self.engine.url.database
        if self.postgres or not database or database == ":memory:":
            return None
        return os.path.abspath(database)

    def missing_ledger(self) -> NotFound | None:
        """NotFound naming the SQLite file the URL names, while there is no file there; else
        None (a file, with or without a ledger in it, and PostgreSQL).

        Reads of a file that is not there see an empty ledger and create nothing, as they must
        for a writer that reads before its first write (`dispatch open` mints its id from the
        board, an import looks at the session first) and for a reader started before the writer.
        So a mistyped path reads as an empty ledger: this is how a caller that only reads (the
        command line's `tail`, `sessions`, ...) tells the two apart and names the path."""
        path = self._file
        if path is None or os.path.exists(path):
            return None
        folder = os.path.dirname(path)
        why = "no such file" if os.path.isdir(folder) else f"no such file, nor directory {folder}"
        return NotFound(f"no ledger at {path} ({why})")

    def _read_empty(self) -> None:
        """Serve reads from an empty ledger of this store's own (a file in the temp folder,
        which threads read each on a connection of its own), until the tables are made here
        (by this store's first write, or by another process: `_look_again`)."""
        handle, path = tempfile.mkstemp(prefix="ledger-bus-empty-", suffix=".db")
        os.close(handle)
        # Removed when reads move to the file, or with the store, or at exit, whichever is first.
        self._forget_empty = weakref.finalize(self, remove_file, path)
        empty = create_engine(f"sqlite:///{path}")
        self.tables.metadata.create_all(empty)
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
        from alembic import command  # noqa: PLC0415  (alembic: for the schema's migrations only)

        if not self.postgres:
            self._retried(self._wal)

        def migrate(conn: Connection) -> str:
            if self.postgres:  # processes starting at once migrate one at a time
                conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(self.prefix))))
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
        if not self._file_exists():  # none, and looking must not make the file (connecting would)
            from alembic.script import ScriptDirectory  # noqa: PLC0415  (alembic: for the schema's migrations only)

            return None, ScriptDirectory.from_config(self._migrations(None)).get_current_head()
        return self._run(self._revisions, write=False)

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

    def _retried(self, operation: Callable[[], T]) -> T:
        """Call `operation` again after a failure that passes, until the timeout: the one retry
        loop (store/steps.py's `retried`), run here by the blocking driver."""
        op = retried(
            lambda: call(lambda _: operation()),
            self.timeout,
            DRIVER_ERRORS,
            self._final,
            self._who,
            first_line,
        )
        done: T = run(op, None, self.waits.sleep)
        return done

    @property
    def _who(self) -> str:
        """The database, as errors name it: a SQLite file by its absolute path, so that a
        relative `sqlite:///data/x.db` says which directory it was taken from."""
        path = self._file
        return "the database" if path is None else f"the SQLite database {path}"

    def _final(self, err: Exception) -> LedgerError | None:
        verdict = final(err)
        if verdict is not None and not self.postgres:
            # SQLite says "unable to open database file" alike for a directory that is not
            # there and one it may not enter: which it is, the user should not have to find out.
            folder = os.path.dirname(self._file or "")
            where = f" (no directory {folder})" if folder and not os.path.isdir(folder) else ""
            return BackendRefused(f"{self._who} refused: {first_line(err)}{where}")
        return verdict

    def run_op(self, op: Op[T]) -> T:
        return run(op, None, self.waits.sleep)

    def _run(self, work: Callable[[Connection], T], *, write: bool = True) -> T:
        """Run `work(conn)` in a transaction, again after a failure that passes."""

        def attempt() -> T:
            with self._connection(write) as conn:
                return work(conn)

        return self._retried(attempt)

    def _now(self, conn: Connection) -> int:
        """The clock cursors and leases use: the server's on PostgreSQL (one clock for every
        host), this process's on SQLite (one host)."""
        if self.postgres:
            now = cast(func.extract("epoch", func.clock_timestamp()) * 1000, BigInteger)
            return int(conn.execute(select(now)).scalar_one())
        return time.time_ns() // 1_000_000

    @immediate
    def _now_ms(self) -> int:
        return self._run(self._now, write=False)

    def close(self) -> None:
        if self._absent:
            self._read_the_file()
        self.engine.dispose()
        self._reads.dispose()

    def _lock_session(self, conn: Connection, session_id: str) -> tuple[str, int]:
        """Lock the session's row until commit, making it first; return its last cursor and
        event count."""
        s = self.tables.sessions
        found = conn.execute(
            select(s.c.last_cursor, s.c.events)
            .where(s.c.session_id == session_id)
            .with_for_update()
        ).first()
        if found is None:
            if self.postgres:
                conn.execute(
                    self._insert_new(s).values(
                        session_id=session_id, last_cursor=CURSOR_ZERO, events=0
                    )
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
        """A select of events as the read statements make it (statements.py), for tail_plan's
        EXPLAIN with its values written in."""
        e = self.tables.events
        return (
            select(e.c.stream, e.c.version, e.c.cursor, e.c.payload)
            .where(*where)
            .order_by(order)
            .limit(count)
        )

    def _scan_rows(self, conn: Connection, session_id: str, after: str | None, count: int) -> Any:
        """A page of the session's log in the caller's transaction (a group's read): the
        statements `_scan` runs on its own connection (statements.py)."""
        if after is None:
            return conn.exec_driver_sql(self._sql.scan, {"session": session_id, "n": count}).all()
        values = {"session": session_id, "after": after, "n": count}
        return conn.exec_driver_sql(self._sql.scan_after, values).all()

    def _last_cursor(self, conn: Connection, session_id: str) -> str:
        s = self.tables.sessions
        found = conn.execute(select(s.c.last_cursor).where(s.c.session_id == session_id)).scalar()
        return str(found) if found else CURSOR_ZERO

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

    def _drop_uses(self, conn: Connection, session_id: str, payloads: Iterable[bytes]) -> None:
        """Forget the references events being removed held; an artifact none holds goes."""
        a = self.tables.artifacts
        for sha, count in uses_of(unpack(p) for p in payloads).items():
            key = (a.c.session_id == session_id, a.c.sha256 == sha)
            conn.execute(update(a).where(*key).values(uses=a.c.uses - count))
            conn.execute(delete(a).where(*key, a.c.uses <= 0))

    def _upsert(self, table: Table) -> Any:
        """The dialect's INSERT, which says what to do with a row whose key is taken."""
        if self.postgres:
            from sqlalchemy.dialects import postgresql  # noqa: PLC0415  (the dialect in use, only)

            return postgresql.insert(table)
        from sqlalchemy.dialects import sqlite  # noqa: PLC0415  (the dialect in use, only)

        return sqlite.insert(table)

    def _insert_new(self, table: Table) -> Any:
        """INSERT that leaves a row whose key is taken as it is."""
        return self._upsert(table).on_conflict_do_nothing()
