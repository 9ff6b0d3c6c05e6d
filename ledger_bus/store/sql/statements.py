"""The SQL store's hand-written statements, where SQLAlchemy Core costs too much or cannot say
it; everything else is Core.

- The append, on the driver's own connection: on PostgreSQL one call of the server-side function
  migration 0002 creates (one round trip; a migration's text stays as it was written), on SQLite
  the statements sent by hand (one query takes the write lock and reads what the append checks).
  Built once per prefix: building and compiling Core constructs per append costs more than the
  database does. The note statements also serve restores.
- The tail read on PostgreSQL (`read`), without a transaction around it.
- Restores on PostgreSQL: open attempts from arrays in one statement, and page digests computed
  by the server.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import TextClause, text

from ledger_bus.model.attempts import AttemptNote, Closes, DeclaresSafe, Flags, Opens
from ledger_bus.model.batch import PreparedAppend
from ledger_bus.model.errors import IdempotencyConflict, LedgerError, VersionConflict
from ledger_bus.model.ids import CURSOR_ZERO, StreamId, cursors_after, format_cursor, parse_cursor
from ledger_bus.model.prepared import Fence, lease_lost
from ledger_bus.model.records import AppendResult
from ledger_bus.store.notes import note_text


def _sql(text: str, postgres: bool) -> str:
    """`:name` parameters as the driver wants them: sqlite3 takes them, psycopg `%(name)s`."""
    return re.sub(r":(\w+)", r"%(\1)s", text) if postgres else text


_NOW_MS = {
    True: "CAST(extract(epoch FROM clock_timestamp()) * 1000 AS bigint)",
    False: ":now",  # SQLite's store keeps time by this process's clock (SqlCore._now)
}


@dataclass(frozen=True)
class AppendSql:
    """The statements of an append, for one prefix and one dialect."""

    postgres: bool
    head: str
    new_session: str
    events: str
    stream_new: str
    stream_set: str
    idempotency: str
    open_drop: str
    open_add: str
    flag_any: str
    flag_named: str
    safe: str
    session_set: str
    session_set_opened: str
    call: str
    artifact_add: str
    tail: str
    tail_before: str
    stream_read: str
    scan: str
    scan_after: str
    fence: str

    @classmethod
    def build(cls, prefix: str, postgres: bool) -> AppendSql:
        p = f"{prefix}_"
        flag = (
            f"UPDATE {p}open_attempts SET flagged_cursor = :cursor"
            " WHERE session_id = :session AND attempt_id = :attempt AND flagged_cursor IS NULL"
        )
        statements = {
            "head": (
                f"SELECT s.last_cursor, s.events, v.version, i.digest, i.first_version,"
                f" i.last_version, i.cursor FROM {p}sessions s"
                f" LEFT JOIN {p}streams v ON v.session_id = s.session_id AND v.stream = :stream"
                f" LEFT JOIN {p}idempotency i ON i.session_id = s.session_id"
                " AND i.stream = :stream AND i.append_id = :append_id"
                " WHERE s.session_id = :session"
            ),
            "new_session": (
                f"INSERT INTO {p}sessions (session_id, last_cursor, events)"
                f" VALUES (:session, '{CURSOR_ZERO}', 0) ON CONFLICT (session_id) DO NOTHING"
            ),
            "events": (
                f"INSERT INTO {p}events (session_id, cursor, stream, version, payload)"
                " VALUES (:session, :cursor, :stream, :version, :payload)"
            ),
            "stream_new": (
                f"INSERT INTO {p}streams (session_id, stream, version)"
                " VALUES (:session, :stream, :version)"
            ),
            "stream_set": (
                f"UPDATE {p}streams SET version = :version"
                " WHERE session_id = :session AND stream = :stream"
            ),
            "idempotency": (
                f"INSERT INTO {p}idempotency (session_id, stream, append_id, digest,"
                " first_version, last_version, cursor) VALUES (:session, :stream, :append_id,"
                " :digest, :first, :last, :cursor)"
            ),
            "open_drop": (
                f"DELETE FROM {p}open_attempts WHERE session_id = :session"
                " AND attempt_id = :attempt"
            ),
            "open_add": (
                f"INSERT INTO {p}open_attempts (session_id, attempt_id, run_id, tool, stream,"
                " cursor, flagged_cursor) VALUES (:session, :attempt, :run, :tool, :stream,"
                " :cursor, NULL) ON CONFLICT (session_id, attempt_id) DO UPDATE SET"
                " run_id = excluded.run_id, tool = excluded.tool, stream = excluded.stream,"
                " cursor = excluded.cursor, flagged_cursor = NULL"
            ),
            "flag_any": flag,
            "flag_named": flag + " AND cursor = :named",
            "safe": (
                f"INSERT INTO {p}safe_tools (session_id, run_id, tool)"
                " VALUES (:session, :run, :tool) ON CONFLICT DO NOTHING"
            ),
            "session_set": (
                f"UPDATE {p}sessions SET last_cursor = :cursor, events = :events"
                " WHERE session_id = :session"
            ),
            "session_set_opened": (
                f"UPDATE {p}sessions SET last_cursor = :cursor, events = :events,"
                " opened_ms = :now WHERE session_id = :session"
            ),
            "artifact_add": (
                f"INSERT INTO {p}artifacts (session_id, sha256, uses, data)"
                " VALUES (:session, :sha, :uses, :data) ON CONFLICT (session_id, sha256)"
                f" DO UPDATE SET uses = {p}artifacts.uses + excluded.uses"
            ),
            "tail": (
                f"SELECT stream, version, cursor, payload FROM {p}events"
                " WHERE session_id = :session ORDER BY cursor DESC LIMIT :n"
            ),
            "tail_before": (
                f"SELECT stream, version, cursor, payload FROM {p}events"
                " WHERE session_id = :session AND cursor < :before ORDER BY cursor DESC LIMIT :n"
            ),
            "stream_read": (
                f"SELECT stream, version, cursor, payload FROM {p}events"
                " WHERE session_id = :session AND stream = :stream AND version > :after"
                " ORDER BY version LIMIT :n"
            ),
            "scan": (
                f"SELECT stream, version, cursor, payload FROM {p}events"
                " WHERE session_id = :session ORDER BY cursor LIMIT :n"
            ),
            "scan_after": (
                f"SELECT stream, version, cursor, payload FROM {p}events"
                " WHERE session_id = :session AND cursor > :after ORDER BY cursor LIMIT :n"
            ),
            "call": (
                f"SELECT o_outcome, o_first, o_last, o_cursor FROM {p}append(:session, :stream,"
                " :append_id, :expected, :digest, :payloads, :notes, :only_opens, :channel)"
            ),
            # The lease an append is made under, and the clock its expiry is read by: on
            # PostgreSQL the server's, and the row held (FOR SHARE) to COMMIT, so that no new
            # holding commits between this check and the append's own commit.
            "fence": (
                f"SELECT owner, token, expires_ms, {_NOW_MS[postgres]} FROM {p}leases"
                " WHERE session_id = :session AND name = :lease"
                + (" FOR SHARE" if postgres else "")
            ),
        }
        return cls(postgres, **{k: _sql(v, postgres) for k, v in statements.items()})


Note = tuple[str, AttemptNote, str]  # (stream, note, cursor of its event)
# A statement's bound values: text, numbers and bytes (digests, payloads), never read as JSON.
Params = dict[str, object]


def note_statement(
    sql: AppendSql, session_id: str, stream: str, note: AttemptNote, at: str
) -> tuple[str, Params] | None:
    """The statement that keeps open attempts for one event's note; None when it changes
    nothing."""
    match note:
        case Opens(attempt_id, run_id, tool):  # an attempt requested again starts afresh
            key = {"session": session_id, "attempt": attempt_id}
            return sql.open_add, {
                **key,
                "run": run_id,
                "tool": tool,
                "stream": stream,
                "cursor": at,
            }
        case Closes(attempt_id):
            return sql.open_drop, {"session": session_id, "attempt": attempt_id}
        case Flags(attempt_id, None):
            return sql.flag_any, {"session": session_id, "attempt": attempt_id, "cursor": at}
        case Flags(attempt_id, call):
            key = {"session": session_id, "attempt": attempt_id}
            named = format_cursor(*parse_cursor(call))
            return sql.flag_named, {**key, "cursor": at, "named": named}
        case DeclaresSafe(run_id, tool):
            return sql.safe, {"session": session_id, "run": run_id, "tool": tool}
    return None


def apply_notes(sql: AppendSql, cursor: Any, session_id: str, notes: list[Note]) -> None:
    """Apply (stream, note, cursor) notes in order, a run of one kind of statement at a time."""
    run: list[Params] = []
    statement = ""
    for stream, note, at in notes:
        found = note_statement(sql, session_id, stream, note, at)
        if found is None:
            continue
        if found[0] != statement and run:
            cursor.executemany(statement, run)
            run = []
        statement = found[0]
        run.append(found[1])
    if run:
        cursor.executemany(statement, run)


def net_notes(notes: list[Note]) -> tuple[dict[str, tuple[str, str, str, str]], set[str]] | None:
    """What (stream, note, cursor) notes that only open and close attempts leave once applied
    in order: the attempts open at the end (attempt -> run, tool, stream, cursor of the call)
    and the attempts closed. None when a note flags or declares: those are applied in order."""
    opened: dict[str, tuple[str, str, str, str]] = {}
    closed: set[str] = set()
    for stream, note, at in notes:
        if type(note) is Opens:
            opened[note.attempt_id] = (note.run_id, note.tool, stream, at)
        elif type(note) is Closes:
            opened.pop(note.attempt_id, None)
            closed.add(note.attempt_id)
        else:
            return None
    return opened, closed


def function_notes(notes: list[AttemptNote | None]) -> tuple[list[str], bool]:
    """The notes as the append function of migration 0002 takes them (store/notes.py), and
    whether they only open attempts, each once: then the function applies them in one
    statement."""
    opened = [note.attempt_id for note in notes if isinstance(note, Opens)]
    only = bool(opened) and len(set(opened)) == len(opened) == sum(n is not None for n in notes)
    return [note_text(note) for note in notes], only


def restored_attempts(table: str) -> tuple[TextClause, TextClause]:
    """PostgreSQL: the statements that drop the attempts a restored batch closed and write
    those it left open, each set in one statement from arrays (a statement per attempt cost
    a round trip each)."""
    drop = text(
        f"DELETE FROM {table} WHERE session_id = :session"
        " AND attempt_id = ANY(CAST(:ids AS text[]))"
    )
    add = text(
        f"INSERT INTO {table} (session_id, attempt_id, run_id, tool, stream, cursor,"
        " flagged_cursor) SELECT :session, a, r, t, s, c, NULL FROM"
        " unnest(CAST(:attempts AS text[]), CAST(:runs AS text[]),"
        " CAST(:tools AS text[]), CAST(:streams AS text[]),"
        " CAST(:cursors AS text[])) AS n(a, r, t, s, c)"
        " ON CONFLICT (session_id, attempt_id) DO UPDATE SET"
        " run_id = excluded.run_id, tool = excluded.tool, stream = excluded.stream,"
        " cursor = excluded.cursor, flagged_cursor = NULL"
    )
    return drop, add


def page_digest(table: str) -> TextClause:
    """PostgreSQL: one page of a session's events digested as restore.PageDigests digests it,
    by the server, so that verifying an archive does not carry every payload back."""
    return text(
        "SELECT count(*), max(cursor), encode(sha256(string_agg(convert_to(cursor"
        " || chr(31) || stream || chr(31) || version::text || chr(31), 'UTF8') || payload,"
        " ''::bytea ORDER BY cursor)), 'hex') FROM (SELECT cursor, stream, version, payload"
        f" FROM {table} WHERE session_id = :session AND cursor > :after"
        " ORDER BY cursor LIMIT :n) AS page"
    )


def read(engine: Any, statement: str, params: Params, postgres: bool) -> list[Any]:
    """The rows of one read on a pooled connection of the driver's own, without BEGIN or
    COMMIT: the statement sees what was committed when it began. SQLAlchemy's part of a read
    (its connection, transaction and result objects) cost more than the query did."""
    if postgres:
        return _read_postgres(engine, statement, params)
    raw = engine.raw_connection()
    try:
        cursor = raw.dbapi_connection.cursor()  # sqlite3's (no transaction: set on connect)
        try:
            cursor.execute(statement, params)
            return list(cursor.fetchall())
        finally:
            cursor.close()
    finally:
        raw.close()


def _read_postgres(engine: Any, statement: str, params: Params) -> list[Any]:
    import psycopg  # noqa: PLC0415  (psycopg: the [postgres] extra)

    raw = engine.raw_connection()
    try:
        driver = raw.dbapi_connection  # psycopg's, or SQLAlchemy's adapter of its async one
        if driver.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            driver.rollback()
        driver.autocommit = True
        try:
            # closing(): SQLAlchemy 2.0's adapter of the async driver's cursor has no `with`
            with contextlib.closing(driver.cursor()) as cursor:
                _prepared(cursor, statement, params)
                return list(cursor.fetchall())
        finally:
            if not driver.closed:
                driver.autocommit = False  # the pool's next user expects transactions
    except psycopg.OperationalError:
        raw.invalidate()  # the connection may be gone: never hand it out again
        raise
    finally:
        raw.close()


def _prepared(cursor: Any, statement: str, params: Mapping[str, object]) -> None:
    """Execute `statement` prepared at once on psycopg's own cursor; SQLAlchemy's adapter of
    its async cursor passes no options, and psycopg prepares a statement there from its fifth
    use on a connection (its prepare_threshold)."""
    import psycopg  # noqa: PLC0415  (psycopg: the [postgres] extra)

    if isinstance(cursor, psycopg.Cursor):
        cursor.execute(statement, params, prepare=True)
    else:
        cursor.execute(statement, params)


def append(  # noqa: PLR0913  (one append's parts, as the store hands them to its one statement)
    sql: AppendSql,
    driver: object,
    channel: str,
    stream: StreamId,
    expected: int | None,
    append_id: str,
    prepared: PreparedAppend,
) -> AppendResult:
    """One append as one transaction on `driver` (a psycopg or sqlite3 connection, or
    SQLAlchemy's adapter of an async one: the same calls, awaited in its greenlet bridge)."""
    if sql.postgres:
        return _call(sql, driver, channel, stream, expected, append_id, prepared)
    return _statements(sql, driver, stream, expected, append_id, prepared)


def _call(  # noqa: PLR0913  (one append's parts, as the store hands them to its one statement)
    sql: AppendSql,
    driver: Any,
    channel: str,
    stream: StreamId,
    expected: int | None,
    append_id: str,
    prepared: PreparedAppend,
) -> AppendResult:
    """One append as one call of the server-side function (PostgreSQL): one round trip, in a
    transaction of its own."""
    import psycopg  # noqa: PLC0415  (psycopg: the [postgres] extra)

    notes, only_opens = function_notes(prepared.notes)
    params = {
        "session": stream.session_id,
        "stream": stream.name,
        "append_id": append_id,
        "expected": expected,
        "digest": prepared.digest,
        "payloads": prepared.payloads,
        "notes": notes,
        "only_opens": only_opens,
        "channel": channel,
    }
    if driver.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        driver.rollback()  # a connection handed back mid-transaction cannot change mode
    # Alone, the call is its own transaction: no BEGIN, no COMMIT to wait for. With artifacts,
    # they are written first in the same transaction, kept only if the append commits; under a
    # lease, its row is held from the check to the commit.
    transaction = bool(prepared.artifacts) or prepared.fence is not None
    driver.autocommit = not transaction
    try:
        with contextlib.closing(driver.cursor()) as cursor:  # see _read_postgres
            result = _call_on(sql, cursor, stream, append_id, prepared, params)
        if transaction:
            if result.deduplicated:
                driver.rollback()
            else:
                driver.commit()
    except LedgerError:
        driver.rollback()
        raise
    except psycopg.Error as err:
        if not driver.closed and not driver.autocommit:
            driver.rollback()
        state = getattr(err, "sqlstate", None)
        if state == "LBI01":
            raise IdempotencyConflict(str(stream), append_id) from None
        if state == "LBV01" and expected is not None:  # only an expected version conflicts
            actual = int(err.diag.message_detail or 0)
            raise VersionConflict(str(stream), expected, actual) from None
        raise
    finally:
        if not driver.closed:
            driver.autocommit = False
    return result


def _call_on(  # noqa: PLR0913  (one append's parts, as the store hands them to its one statement)
    sql: AppendSql,
    cursor: Any,
    stream: StreamId,
    append_id: str,
    prepared: PreparedAppend,
    params: Mapping[str, object],
) -> AppendResult:
    """_call's statements on its cursor: the fence's check, the artifacts, the function."""
    if prepared.fence is not None:  # first of all (append.lua); its row held to COMMIT
        _check_fence(sql, cursor, stream.session_id, prepared.fence)
    if prepared.artifacts:
        cursor.executemany(sql.artifact_add, artifact_rows(stream.session_id, prepared))
    _prepared(cursor, sql.call, params)
    outcome, first, last, newest = cursor.fetchone()
    return AppendResult(stream, first, last, newest, deduplicated=outcome == "dedup")


def _statements(  # noqa: PLR0913  (one append's parts, as the store hands them to its one statement)
    sql: AppendSql,
    driver: Any,
    stream: StreamId,
    expected: int | None,
    append_id: str,
    prepared: PreparedAppend,
) -> AppendResult:
    """One append as statements on a sqlite3 connection, under the database's write lock."""
    session_id = stream.session_id
    key = {"session": session_id, "stream": stream.name, "append_id": append_id}
    cursor = driver.cursor()
    cursor.execute("BEGIN IMMEDIATE")  # the database's write lock, held to COMMIT
    try:
        cursor.execute(sql.head, key)
        head = cursor.fetchone()
        if head is None:
            cursor.execute(sql.new_session, key)
            cursor.execute(sql.head, key)
            head = cursor.fetchone()
        now = time.time_ns() // 1_000_000
        if prepared.fence is not None:  # first of all (append.lua)
            _check_fence(sql, cursor, session_id, prepared.fence, now)
        last, count, version, digest, first, last_version, prior = head
        if digest is not None:
            if digest != prepared.digest:
                raise IdempotencyConflict(str(stream), append_id)
            _rollback(cursor)
            return AppendResult(stream, first, last_version, prior, deduplicated=True)
        version = version or 0
        if expected is not None and expected != version:
            raise VersionConflict(str(stream), expected, version)
        cursors = cursors_after(last, now, len(prepared.payloads))
        rows = [
            {**key, "cursor": at, "version": version + n, "payload": payload}
            for n, (at, payload) in enumerate(zip(cursors, prepared.payloads, strict=True), 1)
        ]
        _write(sql, cursor, key, rows, version + 1, prepared, count, now)
        cursor.execute("COMMIT")
        return AppendResult(stream, version + 1, version + len(rows), cursors[-1])
    except BaseException:
        _rollback(cursor)
        raise
    finally:
        cursor.close()


def _write(  # noqa: PLR0913  (one append's parts, as the store hands them to its one statement)
    sql: AppendSql,
    cursor: Any,
    key: dict[str, str],
    rows: list[dict[str, Any]],
    first: int,
    prepared: PreparedAppend,
    count: int,
    now: int,
) -> None:
    session_id, stream = key["session"], key["stream"]
    last = rows[-1]
    cursor.executemany(sql.events, rows)
    if prepared.artifacts:
        cursor.executemany(sql.artifact_add, artifact_rows(session_id, prepared))
    cursor.execute(
        sql.stream_new if first == 1 else sql.stream_set, {**key, "version": last["version"]}
    )
    cursor.execute(
        sql.idempotency,
        {
            **key,
            "digest": prepared.digest,
            "first": first,
            "last": last["version"],
            "cursor": last["cursor"],
        },
    )
    if any(prepared.notes):
        notes = [
            (stream, note, row["cursor"])
            for note, row in zip(prepared.notes, rows, strict=True)
            if note is not None
        ]
        apply_notes(sql, cursor, session_id, notes)
    values = {"session": session_id, "cursor": last["cursor"], "events": count + len(rows)}
    if prepared.opens_attempts:
        cursor.execute(sql.session_set_opened, {**values, "now": now})
    else:
        cursor.execute(sql.session_set, values)


def _check_fence(
    sql: AppendSql, cursor: Any, session_id: str, fence: Fence, now: int | None = None
) -> None:
    """Raise LeaseLost unless `fence` is the current holding of its lease (`now`: this
    process's clock, on SQLite; PostgreSQL reads the server's)."""
    cursor.execute(sql.fence, {"session": session_id, "lease": fence.lease, "now": now})
    row = cursor.fetchone()
    if row is None:
        raise lease_lost(fence, 0)
    owner, token, expires_ms, at = row
    if owner != fence.owner or token != fence.token or expires_ms <= at:
        raise lease_lost(fence, int(token))


def artifact_rows(session_id: str, prepared: PreparedAppend) -> list[Params]:
    """The artifacts of an append as rows of artifact_add, with the references it adds."""
    uses = dict(prepared.uses)
    return [
        {
            "session": session_id,
            "sha": a.ref.sha256,
            "uses": uses[a.ref.sha256],
            "data": a.data,
        }
        for a in prepared.artifacts
    ]


def _rollback(cursor: Any) -> None:
    """End the transaction, writing nothing; a connection already gone has ended it."""
    with contextlib.suppress(Exception):  # the connection is gone, and its transaction with it
        cursor.execute("ROLLBACK")
