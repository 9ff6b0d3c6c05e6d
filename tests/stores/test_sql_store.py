"""The SQL store beyond the contract suite: cursors a reader never skips, sessions moved in with
their cursors, a tail that uses the index, the schema's version, and faults of the database."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ledger_bus as lb
from ledger_bus.exports.conversation import export_session
from ledger_bus.model.ids import CURSOR_ZERO
from ledger_bus.store.base import EventStore
from ledger_bus.store.sql import SCHEMA_HEAD, SqlStore
from tests.support.events import call, msg, result
from tests.support.helpers import Writers, ledger_cli, ledger_here
from tests.support.pgserver import LocalPostgres
from tests.support.proxy import DropProxy


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_store(request: pytest.FixtureRequest) -> SqlStore:
    store = request.getfixturevalue(f"{request.param}_store")
    assert isinstance(store, SqlStore)
    return store


def test_readers_paging_by_cursor_never_skip_an_event_that_commits_late(
    sql_store: SqlStore,
) -> None:
    """8 writers on one session and 4 on others while 3 readers page: what each reader saw is
    the final scan, in order, with no gap and no repeat."""
    stop = threading.Event()
    written = threading.Event()  # every writer has returned
    errors: list[BaseException] = []

    hot_appends: dict[str, int] = {}  # writer -> appends so far, on the shared session

    def write(session: str, name: str) -> None:
        try:
            n = 0
            while not stop.is_set():
                sql_store.append(lb.StreamId(session, name), lb.ANY, str(n), [msg(f"{name}-{n}")])
                n += 1
                if session == "hot":
                    hot_appends[name] = n
        except BaseException as err:  # the assertion below names it
            errors.append(err)

    seen: dict[str, list[str]] = {}

    def page(reader: str, wait: bool) -> None:
        got: list[str] = []
        cursor = CURSOR_ZERO
        try:
            while True:
                done = written.is_set()  # read once more after the last write
                if wait:
                    batch = sql_store.wait_session("hot", cursor, timeout_ms=50)
                else:
                    batch = sql_store.scan_session("hot", cursor, limit=7)
                got += [e.cursor for e in batch]
                if batch:
                    cursor = batch[-1].cursor
                elif done:
                    break
        except BaseException as err:
            errors.append(err)
        seen[reader] = got

    writers = [threading.Thread(target=write, args=("hot", f"w{i}")) for i in range(8)]
    writers += [threading.Thread(target=write, args=(f"cold-{i}", "w")) for i in range(4)]
    readers = [
        threading.Thread(target=page, args=(name, wait))
        for name, wait in (("scan-1", False), ("scan-2", False), ("wait", True))
    ]
    for thread in writers + readers:
        thread.start()
    # Three seconds of racing, longer on a loaded machine: until the writers have raced enough.
    started = time.monotonic()
    while time.monotonic() - started < 3 or (
        sum(hot_appends.values()) < 100 and time.monotonic() - started < 60
    ):
        time.sleep(0.1)
    stop.set()
    for thread in writers:
        thread.join(timeout=60)
    written.set()
    for thread in readers:
        thread.join(timeout=60)
    assert errors == []
    final = [e.cursor for e in sql_store.scan_session("hot")]
    assert len(final) > 50, "the writers wrote too little to race"
    for reader, got in seen.items():
        assert got == final, f"{reader} saw {len(got)} of {len(final)}, or out of order"


def _copy(source: EventStore, target: SqlStore, session: str) -> int:
    return target.restore(source.iter_session(session))


def test_a_session_moved_from_redis_keeps_its_cursors_and_exports_byte_identical(
    redis_store: EventStore, sql_store: SqlStore
) -> None:
    for i in range(5):
        redis_store.append(lb.StreamId("moved", "main"), lb.ANY, f"m{i}", [msg(f"line {i}\n")])
    redis_store.append(lb.StreamId("moved", "tools"), 0, "c", [call("a1"), call("a2")])
    redis_store.append(lb.StreamId("moved", "tools"), 2, "r", [result("a1")])
    before = io.StringIO()
    export_session(redis_store, "moved", before)

    assert _copy(redis_store, sql_store, "moved") == 8
    assert _copy(redis_store, sql_store, "moved") == 0, "a move run again writes nothing"
    after = io.StringIO()
    export_session(sql_store, "moved", after)
    assert after.getvalue() == before.getvalue()
    assert [a.attempt_id for a in sql_store.open_attempts("moved")] == ["a2"]

    newest = redis_store.tail("moved", 1)[-1]
    native = sql_store.append(lb.StreamId("moved", "main"), 5, "m5", [msg("native")])
    assert native.first_version == 6
    assert native.cursor > newest.cursor, "a native cursor sorts after the moved ones"
    assert sql_store.tail("moved", 2)[0].cursor == newest.cursor


def test_a_restore_refuses_events_out_of_order_or_with_a_gap(
    memory_store: EventStore, sql_store: SqlStore
) -> None:
    memory_store.append(lb.StreamId("src", "main"), 0, "a", [msg("1"), msg("2"), msg("3")])
    events = memory_store.scan_session("src")
    with pytest.raises(lb.VersionConflict):
        sql_store.restore([events[0], events[2]])
    assert not sql_store.session_exists("src"), "nothing of a refused batch is written"


def test_a_tail_reads_the_index_not_the_table(sql_store: SqlStore) -> None:
    for s in range(4):
        ref = lb.StreamId(f"big-{s}", "main")
        for i in range(0, 2000, 500):
            sql_store.append(ref, lb.ANY, str(i), [msg(str(j)) for j in range(500)])
    if sql_store.postgres:
        with sql_store.engine.begin() as conn:
            conn.exec_driver_sql(f"ANALYZE {sql_store.tables.events.name}")
    plan = sql_store.tail_plan("big-2", 20)
    if sql_store.postgres:
        assert "Seq Scan" not in plan, plan
        assert "Index" in plan, plan
    else:
        assert "USING" in plan, plan  # SEARCH ... USING INDEX, never a bare SCAN of the table
        assert "INDEX" in plan.upper(), plan


def test_a_schema_behind_the_code_is_refused_naming_the_command(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    store = lb.connect(url)
    assert isinstance(store, SqlStore)
    assert store.schema_revision() == (None, SCHEMA_HEAD), "a read makes no tables"
    store.append(lb.StreamId("s", "main"), 0, "a", [msg("x")])  # the first write does
    assert store.schema_revision() == (SCHEMA_HEAD, SCHEMA_HEAD)
    with store.engine.begin() as conn:  # as if made by a release before the newest revision
        conn.exec_driver_sql("DELETE FROM lb_alembic_version")
    store.close()
    with pytest.raises(lb.BackendRefused, match="run `ledger-bus db upgrade`"):
        lb.connect(url)


def test_a_store_opened_while_another_process_makes_the_tables_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a file without the ledger's tables, a store opening it (its schema checked below,
    # as opening checks it) and another that will write first
    path = tmp_path / "shared.db"
    url = f"sqlite:///{path}"
    path.touch()
    opening = SqlStore.from_url(url, check_schema=False)
    maker = lb.connect(url)
    # When another process's first write makes the tables (and stamps their revision, in one
    # transaction) between the opening store's read of the revision and its read of the tables
    reads = 0
    run = opening._run

    def another_process_commits_between(work: Any, *, write: bool = True) -> Any:
        nonlocal reads
        reads += 1
        if reads == 2:
            maker.append(lb.StreamId("s", "main"), 0, "a", [msg("first")])
        return run(work, write=write)

    monkeypatch.setattr(opening, "_run", another_process_commits_between)
    # Then it reads the ledger the other made, not a schema behind the code
    opening._check_schema()
    assert reads >= 2
    monkeypatch.undo()
    assert opening.schema_revision() == (SCHEMA_HEAD, SCHEMA_HEAD)
    maker.close()
    opening.close()


def test_a_ledger_made_before_deletions_upgrades_and_keeps_its_sessions(tmp_path: Path) -> None:
    from alembic import command

    url = f"sqlite:///{tmp_path / 'old.db'}"
    store = SqlStore.from_url(url, check_schema=False)
    with store.engine.begin() as conn:  # the tables as release 0002 made them
        command.upgrade(store._migrations(conn), "0002")
    store.close()
    with pytest.raises(lb.BackendRefused, match="db upgrade"):
        lb.connect(url)
    store = SqlStore.from_url(url, check_schema=False)
    with store.engine.begin() as conn:  # a session written then, without the newer columns
        conn.exec_driver_sql(
            "INSERT INTO lb_sessions (session_id, last_cursor, events) VALUES ('old', :c, 0)",
            {"c": CURSOR_ZERO},
        )
    store.close()

    upgraded = ledger_here(url, "lb", "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr

    with lb.connect(url) as upgraded_store:
        upgraded_store.append(lb.StreamId("old", "main"), 0, "a", [msg("x")])
        assert upgraded_store.delete_session("old").generation == 1
        again = upgraded_store.append(lb.StreamId("old", "main"), 0, "b", [msg("y")])
        assert again.first_version == 1


def test_the_store_knows_the_newest_migration(sql_store: SqlStore) -> None:
    from ledger_bus.store.sql import SCHEMA_HEAD

    sql_store.append(lb.StreamId("s", "main"), 0, "a", [msg("x")])
    assert sql_store.schema_revision() == (SCHEMA_HEAD, SCHEMA_HEAD)


def test_the_migrations_make_the_tables_the_store_uses(sql_store: SqlStore) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    # On SQLite the first write makes them
    sql_store.append(lb.StreamId("s", "main"), 0, "a", [msg("x")])
    with sql_store.engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"version_table": f"{sql_store.prefix}_alembic_version"}
        )
        differences = compare_metadata(context, sql_store.tables.metadata)
    ours = [d for d in differences if sql_store.prefix in repr(d)]
    assert ours == []


def test_processes_starting_at_once_create_the_tables_once(
    postgres_server: LocalPostgres, prefix: str
) -> None:
    url = postgres_server.url
    opened: list[EventStore] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            opened.append(lb.connect(url, prefix=prefix))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    opened[0].append(lb.StreamId("s", "main"), 0, "a", [msg("x")])
    assert all(store.stream_version(lb.StreamId("s", "main")) == 1 for store in opened)
    for store in opened:
        store.close()


@pytest.fixture
def own_postgres() -> Iterator[LocalPostgres]:
    """A PostgreSQL for one test, fsyncing as in production, that the test may kill."""
    with LocalPostgres(fsync=True) as server:
        yield server


def test_an_append_whose_reply_is_lost_after_commit_is_retried_and_lands_once(
    own_postgres: LocalPostgres,
) -> None:
    proxy = DropProxy(own_postgres.port)
    url = own_postgres.url.replace(f":{own_postgres.port}/", f":{proxy.port}/")
    store = lb.connect(url, timeout=20)
    try:
        ref = lb.StreamId("lost", "main")
        store.append(ref, 0, "first", [msg("first")])
        # The append is one call of the server-side function, in a transaction of its own: the
        # server commits it, and its reply is lost with the connection.
        # (The statement is prepared: what the wire shows of this call is its parameters.)
        proxy.drop_next_reply_to(b"append-whose-reply-is-lost")
        done = store.append(ref, 1, "append-whose-reply-is-lost", [msg("second")])
        assert proxy.dropped == 1, "the reply to the committing call was not lost"
        assert (done.first_version, done.deduplicated) == (2, True)
        assert [e["body"] for e in store.scan_session("lost")] == ["first", "second"]
    finally:
        store.close()
        proxy.close()


class PagingReader:
    """A thread paging through a session by cursor, a few events a page, while it grows: what a
    mirror or a follower does. A page lost to the server's absence is asked again."""

    def __init__(self, url: str, session: str):
        self.url, self.session = url, session
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read)

    def _read(self) -> None:
        store = lb.connect(self.url, timeout=30)
        after = None
        while True:
            stopping = self._stop.is_set()
            try:
                page = store.scan_session(self.session, after_cursor=after, limit=7)
            except lb.BackendUnavailable:
                time.sleep(0.05)
                continue
            self.seen += [e.cursor for e in page]
            after = page[-1].cursor if page else after
            if stopping and not page:
                break
            if not page:
                time.sleep(0.01)
        store.close()

    def __enter__(self) -> PagingReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()  # after the writers stopped: it reads on to the end, then stops
        self._thread.join(timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["killed", "restarted", "postmaster killed"])
def test_postgres_killed_or_restarted_under_writers_loses_no_acknowledged_append(
    own_postgres: LocalPostgres, how: str
) -> None:
    # Given writers appending and a reader paging, when PostgreSQL is SIGKILLed (every process,
    # or the postmaster alone), or shut down fast (SQLSTATE 57P01 to every session: a lost
    # connection, not a refusal), and started again
    session = how.replace(" ", "-")
    with lb.connect(own_postgres.url) as first:
        first.append(lb.StreamId(session, "start"), 0, "0", [msg("start")])
    reader = PagingReader(own_postgres.url, session)
    with reader, Writers(own_postgres.url, session, names=("w0", "w1", "w2")) as writers:
        writers.wait_for(30)
        if how == "killed":
            own_postgres.kill()
            time.sleep(0.5)
        elif how == "postmaster killed":
            own_postgres.kill_postmaster()
        else:
            own_postgres.stop()
        counts = writers.counts()
        own_postgres.start()
        # Then they go on (no writer stopped on a refusal: its thread would have raised), and
        # no acknowledged append is lost
        writers.wait_for(30, than=counts)
    with lb.connect(own_postgres.url) as store:
        writers.assert_kept_in(store)
        assert writers.lost_in(store) == 0
        # And the reader saw every event once, in commit order: none skipped, none twice
        assert reader.seen == [e.cursor for e in store.iter_session(session)]


def test_the_command_line_works_on_sqlite_and_migrates_its_schema(tmp_path: Path) -> None:
    import json

    url = f"sqlite:///{tmp_path / 'cli.db'}"

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return ledger_here(url, "lb", *args, stdin=stdin)

    appended = run("append", "s1", "main", "--append-id", "a", stdin=json.dumps(msg("hello")))
    assert appended.returncode == 0, appended.stderr
    assert json.loads(appended.stdout)["last_version"] == 1
    call_line = json.dumps(call("c1", tool="deploy"))
    assert run("append", "s1", "ops", "--append-id", "c", stdin=call_line).returncode == 0
    tailed = [json.loads(line) for line in run("tail", "s1").stdout.splitlines()]
    assert [line["type"] for line in tailed] == ["message", "tool_call"]
    assert [
        json.loads(line)["attempt_id"] for line in run("unresolved", "s1").stdout.splitlines()
    ] == ["c1"]
    exported = tmp_path / "s1.jsonl"
    assert run("export", "s1", str(exported)).returncode == 0
    assert run("import", "s2", str(exported)).returncode == 0
    assert run("export", "s2").stdout.count("\n") == 2
    followed = run("follow", "s1", "--group", "g", "--consumer", "c", "--once", "--block-ms", "50")
    assert followed.returncode == 0, followed.stderr
    assert run("dispatch", "open", "s1", "--role", "w", "--objective", "o").returncode == 0

    current = json.loads(run("db", "current").stdout)
    assert current == {
        "prefix": "lb",
        "revision": SCHEMA_HEAD,
        "head": SCHEMA_HEAD,
        "up_to_date": True,
    }
    with lb.connect(url) as store:
        assert isinstance(store, SqlStore)
        with store.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM lb_alembic_version")
    behind = run("tail", "s1")
    assert behind.returncode == 8
    assert "run `ledger-bus db upgrade`" in behind.stderr
    assert json.loads(run("db", "current").stdout)["up_to_date"] is False
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    made = ledger_here(fresh, "lb", "db", "upgrade")
    assert json.loads(made.stdout) == {"prefix": "lb", "from": None, "to": SCHEMA_HEAD}
    again = ledger_here(fresh, "lb", "db", "upgrade")
    assert json.loads(again.stdout) == {"prefix": "lb", "from": SCHEMA_HEAD, "to": SCHEMA_HEAD}
    assert run("--url", "redis://127.0.0.1:1", "db", "current").returncode == 2
    doctor = run("doctor")
    assert doctor.returncode == 2
    assert "db current" in doctor.stderr


def test_a_waiting_reader_on_postgres_wakes_at_the_commit_not_at_a_poll(
    postgresql_store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger_bus.store.sql import core

    monkeypatch.setattr(core, "POLL_S", 60.0)  # a poll would wait out the whole timeout
    ref = lb.StreamId("woken", "main")
    postgresql_store.append(ref, 0, "first", [msg("first")])
    writer = threading.Timer(0.3, postgresql_store.append, args=(ref, 1, "second", [msg("x")]))
    started = time.monotonic()
    writer.start()
    found = postgresql_store.wait_session("woken", None, timeout_ms=40_000)
    writer.join()
    assert [e.version for e in found] == [2]
    assert time.monotonic() - started < 20, "woken by the timeout, not by the NOTIFY"


def test_processes_on_one_host_append_to_one_sqlite_file(tmp_path: Path) -> None:
    """WAL and a busy timeout: several processes write one file, none refused, none lost."""

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    lb.connect(url).close()  # the tables, before the race
    script = (
        "import sys, ledger_bus as lb\n"
        "store = lb.connect(sys.argv[1])\n"
        "for i in range(60):\n"
        "    event = {'type': 'message', 'agent': sys.argv[2], 'body': str(i)}\n"
        "    store.append(lb.StreamId('shared', 'main'), lb.ANY, f'{sys.argv[2]}-{i}', [event])\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, url, f"p{n}"], stderr=subprocess.PIPE)
        for n in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    with lb.connect(url) as store:
        events = store.read_stream(lb.StreamId("shared", "main"))
        assert [e.version for e in events] == list(range(1, 241))
        for n in range(4):
            assert [e["body"] for e in events if e.agent == f"p{n}"] == [str(i) for i in range(60)]


def test_a_serialization_failure_is_retried_inside_the_store(
    postgres_server: LocalPostgres, prefix: str
) -> None:
    """Under SERIALIZABLE, appends racing on one session fail to serialize; the store runs
    them again, and every one lands once."""
    import psycopg

    dsn = f"host=127.0.0.1 port={postgres_server.port} user=postgres dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {prefix}")
        admin.execute(f"ALTER DATABASE {prefix} SET default_transaction_isolation = 'serializable'")
    url = postgres_server.url.rsplit("/", 1)[0] + f"/{prefix}"
    store = lb.connect(url, timeout=60)
    errors: list[BaseException] = []

    def write(name: str) -> None:
        try:
            for i in range(25):
                store.append(lb.StreamId("tight", name), lb.ANY, str(i), [msg(f"{name}-{i}")])
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=write, args=(f"w{n}",)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    try:
        assert errors == []
        assert store.session_info("tight").events == 150
        cursors = [e.cursor for e in store.scan_session("tight")]
        assert cursors == sorted(set(cursors))
    finally:
        store.close()


def test_the_redis_store_needs_no_sql_package() -> None:

    script = (
        "import sys\n"
        "sys.modules['sqlalchemy'] = None  # as if not installed\n"
        "import ledger_bus as lb\n"
        "store = lb.connect('memory://')\n"
        "try:\n"
        "    lb.connect('sqlite:///x.db')\n"
        "except lb.InvalidInput as err:\n"
        "    print(err)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert "pip install 'ledger-bus[sql]'" in done.stdout


def test_racing_first_acquires_and_group_creations_have_one_winner(sql_store: SqlStore) -> None:
    barrier = threading.Barrier(6)
    leases: list[bool] = []
    groups: list[bool] = []

    def race(n: int) -> None:
        barrier.wait()
        leases.append(bool(sql_store.acquire_lease("race", "run-1", f"owner-{n}", 30_000)))
        groups.append(sql_store.group_create("race", "g", None))

    threads = [threading.Thread(target=race, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(leases) == [False] * 5 + [True], leases
    assert sorted(groups) == [False] * 5 + [True], groups


@pytest.mark.parametrize(
    ("user", "database"), [("nobody", "ledger"), ("postgres", "no_such_database")]
)
def test_a_user_or_database_postgres_does_not_know_is_refused_at_once(
    postgres_server: LocalPostgres, user: str, database: str
) -> None:
    url = f"postgresql://{user}@127.0.0.1:{postgres_server.port}/{database}"
    done = ledger_cli(url, "lb", "--timeout", "60", "tail", "s1", timeout=30)
    assert done.returncode == 8, done.stderr
    assert done.stderr.count("\n") == 1
    assert "does not exist" in done.stderr


def test_a_listener_that_never_answers_is_unavailable_not_refused() -> None:
    # Given a port that takes connections and never says a word
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"postgresql://postgres@127.0.0.1:{silent.getsockname()[1]}/ledger"
        done = ledger_here(url, "lb", "--timeout", "2", "tail", "s1")
    assert done.returncode == 5, done.stderr
    assert done.stderr.count("\n") == 1
