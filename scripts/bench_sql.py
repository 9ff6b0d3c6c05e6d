"""The SQL store against bare SQL on the same database, measured in the same run.

Each ratio is ledger throughput / bare throughput (higher is better): one event appended against
an INSERT + COMMIT of the same row into a table with the same keys, and a 100-event append against
the same rows written by executemany in one transaction: 100 messages against 100 event rows, 100
tool calls against their event rows and the open-attempt row each one adds. Both sides go through
the same driver and engine, in alternating rounds (bench.compare). Then a tail of 20 at a large
session against a small one, and the SQL store's single append beside the Redis store's. Never
part of the tests: wall-clock numbers depend on the machine.

    python scripts/bench_sql.py            # SQLite and a private PostgreSQL (fsync on)
    python scripts/bench_sql.py --quick    # smaller sizes, for a smoke run
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    insert,
)

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer
from ledger_bus.model.ids import format_cursor
from ledger_bus.store.sql import SqlStore
from tests.support.pgserver import LocalPostgres

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import PAYLOAD, compare, timed, tool_call


def bare_tables(store: SqlStore) -> tuple[Table, Table]:
    """Tables with the keys of the store's events and open-attempts tables, and nothing around
    them."""
    metadata = MetaData()
    events = Table(
        f"{store.prefix}_bare",
        metadata,
        Column("session_id", String(200), primary_key=True),
        Column("cursor", String(20), primary_key=True),
        Column("stream", String(200), nullable=False),
        Column("version", BigInteger, nullable=False),
        Column("payload", LargeBinary, nullable=False),
    )
    Index(
        f"{store.prefix}_bare_by_stream",
        events.c.session_id,
        events.c.stream,
        events.c.version,
        unique=True,
    )
    attempts = Table(
        f"{store.prefix}_bare_attempts",
        metadata,
        Column("session_id", String(200), primary_key=True),
        Column("attempt_id", Text, primary_key=True),
        Column("run_id", Text, nullable=False),
        Column("tool", Text, nullable=False),
        Column("stream", String(200), nullable=False),
        Column("cursor", String(20), nullable=False),
    )
    metadata.create_all(store.engine)
    return events, attempts


def message(i: int) -> dict[str, Any]:
    """A message of the tool call's size: an event that opens no attempt."""
    return {"type": "message", "agent": "backend-dev", "body": f"{i:08d} " + "x" * 240}


def bench(name: str, store: SqlStore, n: int, big: int) -> float:
    """Print the comparisons on one database; return the store's single appends per second."""
    bare, bare_attempts = bare_tables(store)
    engine = store.engine
    # Every call writes new keys: compare runs each side over and over.
    rows, appends = itertools.count(), itertools.count()

    def bare_one(i: int) -> None:
        k = next(rows)
        row = {"session_id": "s", "cursor": format_cursor(k, 0), "stream": "m", "version": k + 1}
        with engine.begin() as conn:
            conn.execute(insert(bare), {**row, "payload": PAYLOAD})

    def ledger_one(i: int) -> None:
        store.append(lb.StreamId("one", "main"), lb.ANY, f"a{next(appends)}", [tool_call(i)])

    compare(
        f"{name}: 1 event vs INSERT + COMMIT",
        ledger_one,
        bare_one,
        n,
        1,
        "events/s",
        ">= 0.6x",
        rounds=5,
    )
    single = n / timed(ledger_one, n)

    def hundred(label: str, make: Callable[[int], dict[str, Any]], opens: bool) -> None:
        """100 events of one kind against the same rows written by one executemany each."""
        events = [make(j) for j in range(100)]
        payloads = [msgpack.packb(event) for event in events]

        def bare_hundred(i: int) -> None:
            k = next(rows)
            cursors = [format_cursor(k, j) for j in range(100)]
            batch = [
                {
                    "session_id": label,
                    "cursor": at,
                    "stream": "m",
                    "version": k * 100 + j + 1,
                    "payload": payload,
                }
                for j, (at, payload) in enumerate(zip(cursors, payloads, strict=True))
            ]
            with engine.begin() as conn:
                conn.execute(insert(bare), batch)
                if opens:
                    conn.execute(
                        insert(bare_attempts),
                        [
                            {
                                "session_id": label,
                                "attempt_id": f"{k}-{j}",
                                "run_id": "run-0001",
                                "tool": "code_search",
                                "stream": "m",
                                "cursor": at,
                            }
                            for j, at in enumerate(cursors)
                        ],
                    )

        def ledger_hundred(i: int) -> None:
            store.append(lb.StreamId(label, "main"), lb.ANY, f"{label}{next(appends)}", events)

        compare(
            f"{name}: 100 {label} vs the same rows",
            ledger_hundred,
            bare_hundred,
            max(10, n // 10),
            100,
            "events/s",
            ">= 0.6x",
            rounds=5,
        )

    hundred("messages", message, opens=False)
    # Each tool call opens an attempt: a row the append writes in its own transaction, and the
    # bare side writes too, by a second executemany.
    hundred("tool-calls", tool_call, opens=True)

    batch = [tool_call(j) for j in range(1000)]
    for session, size in (("small", 1000), ("large", big)):
        for k in range(size // 1000):
            store.append(lb.StreamId(session, "main"), lb.ANY, f"b{k}", batch)
    small = timed(lambda i: store.tail("small", 20), 200)
    large = timed(lambda i: store.tail("large", 20), 200)
    print(
        f"{name}: tail -n 20 at {big:,} events vs at 1,000: time ratio {large / small:.2f}x"
        f"  ({200 / large:,.0f} vs {200 / small:,.0f} tails/s, target <= 1.2x)"
    )
    return single


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, big = (100, 20_000) if args.quick else (1000, 1_000_000)
    with tempfile.TemporaryDirectory() as folder:
        sqlite = lb.connect(f"sqlite:///{Path(folder) / 'bench.db'}")
        assert isinstance(sqlite, SqlStore)
        sqlite_rate = bench("sqlite", sqlite, n, big)
        sqlite.close()
    with LocalPostgres(fsync=True) as pg:
        postgres = lb.connect(pg.url)
        assert isinstance(postgres, SqlStore)
        pg_rate = bench("postgresql", postgres, n, big)
        postgres.close()
    with LocalServer(appendonly=False) as server, lb.connect(server.url) as redis_store:
        counter = itertools.count()

        def redis_one(i: int) -> None:
            append_id = f"a{next(counter)}"
            redis_store.append(lb.StreamId("one", "main"), lb.ANY, append_id, [tool_call(i)])

        redis_rate = n / timed(redis_one, n)
    print(
        f"single-event appends/s: redis {redis_rate:,.0f} (no AOF), postgresql {pg_rate:,.0f},"
        f" sqlite {sqlite_rate:,.0f}"
    )


if __name__ == "__main__":
    main()
