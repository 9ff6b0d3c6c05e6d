"""The SQL store against bare SQL on the same database, measured in the same run.

Each ratio is ledger throughput / bare throughput (higher is better): one event appended against
an INSERT + COMMIT of the same row into a table with the same keys, and a 100-event append against
a 100-row executemany in one transaction, both through the same driver and engine. Then a tail of
20 at a large session against a small one, and the SQL store's single append beside the Redis
store's. Never part of the tests: wall-clock numbers depend on the machine.

    python scripts/bench_sql.py            # SQLite and a private PostgreSQL (fsync on)
    python scripts/bench_sql.py --quick    # smaller sizes, for a smoke run
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
from sqlalchemy import BigInteger, Column, Index, LargeBinary, MetaData, String, Table, insert

import ledger_bus as lb
from ledger_bus.ids import format_cursor
from ledger_bus.pgserver import LocalPostgres
from ledger_bus.server import LocalServer
from ledger_bus.store.sql import SqlStore

ARGS = {
    "query": "jwt rotation policy for the auth service",
    "path": "/srv/app/auth/tokens.py",
    "limit": 20,
    "flags": ["recursive", "follow-symlinks"],
    "context": "x" * 120,
}


def tool_call(i: int) -> dict[str, Any]:
    """A ~300-byte tool_call, the payload every comparison uses."""
    return {
        "type": "tool_call",
        "agent": "backend-dev",
        "tool": "code_search",
        "args": ARGS,
        "attempt_id": f"att-{i:08d}",
        "run_id": "run-0001",
    }


PAYLOAD = msgpack.packb(tool_call(0))


def rate(fn: Callable[[int], object], n: int, rounds: int = 3) -> float:
    """Calls per second of fn(0..n-1), the median of `rounds` runs."""
    found = []
    offset = 0
    for _ in range(rounds):
        gc.collect()
        start = time.perf_counter()
        for i in range(n):
            fn(offset + i)
        found.append(n / (time.perf_counter() - start))
        offset += n
    return statistics.median(found)


def paired(
    ledger: Callable[[int], object], bare: Callable[[int], object], n: int, rounds: int = 5
) -> tuple[float, float]:
    """(ledger calls/s, bare calls/s), medians of rounds run in turn, so that a machine that
    slows down or speeds up during the run weighs on both sides alike."""
    ours, theirs = [], []
    for round_ in range(rounds):
        offset = round_ * n
        theirs.append(rate(lambda i: bare(offset + i), n, rounds=1))  # noqa: B023
        ours.append(rate(lambda i: ledger(offset + i), n, rounds=1))  # noqa: B023
    return statistics.median(ours), statistics.median(theirs)


def bare_table(store: SqlStore) -> Table:
    """A table with the keys of the store's events table, and nothing around it."""
    metadata = MetaData()
    table = Table(
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
        table.c.session_id,
        table.c.stream,
        table.c.version,
        unique=True,
    )
    metadata.create_all(store.engine)
    return table


def bench(name: str, store: SqlStore, n: int, big: int) -> float:
    table = bare_table(store)
    engine = store.engine

    def bare_one(i: int) -> None:
        row = {"session_id": "s", "cursor": format_cursor(i, 0), "stream": "m", "version": i + 1}
        with engine.begin() as conn:
            conn.execute(insert(table), {**row, "payload": PAYLOAD})

    def ledger_one(i: int) -> None:
        store.append(lb.StreamId("one", "main"), lb.ANY, f"a{i}", [tool_call(i)])

    ledger, bare = paired(ledger_one, bare_one, n)
    single = ledger
    print(
        f"{name:<10} 1 event    ledger {ledger:8.0f}/s  bare INSERT+COMMIT {bare:8.0f}/s"
        f"  ratio {ledger / bare:.2f}x  (target >= 0.6x)"
    )

    def bare_hundred(i: int) -> None:
        rows = [
            {
                "session_id": "h",
                "cursor": format_cursor(i, j),
                "stream": "m",
                "version": i * 100 + j + 1,
                "payload": PAYLOAD,
            }
            for j in range(100)
        ]
        with engine.begin() as conn:
            conn.execute(insert(table), rows)

    events = [tool_call(j) for j in range(100)]

    def ledger_hundred(i: int) -> None:
        store.append(lb.StreamId("hundred", "main"), lb.ANY, f"h{i}", events)

    ledger, bare = paired(ledger_hundred, bare_hundred, max(10, n // 10))
    print(
        f"{name:<10} 100 events ledger {ledger:8.0f}/s  bare executemany  {bare:8.0f}/s"
        f"  ratio {ledger / bare:.2f}x  (target >= 0.6x)"
    )

    for session, size in (("small", 1000), ("large", big)):
        batch = [tool_call(j) for j in range(1000)]
        for k in range(size // 1000):
            store.append(lb.StreamId(session, "main"), lb.ANY, f"b{k}", batch)
    small = rate(lambda i: store.tail("small", 20), 200)
    large = rate(lambda i: store.tail("large", 20), 200)
    print(
        f"{name:<10} tail -n 20 at {big:,} events: {large:6.0f}/s, at 1,000: {small:6.0f}/s"
        f"  time ratio {small / large:.2f}x  (target <= 1.2x)"
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
        redis_rate = rate(
            lambda i: redis_store.append(
                lb.StreamId("one", "main"), lb.ANY, f"a{i}", [tool_call(i)]
            ),
            n,
        )
    print(
        f"single-event appends/s: redis {redis_rate:.0f}, postgresql {pg_rate:.0f},"
        f" sqlite {sqlite_rate:.0f}"
    )


if __name__ == "__main__":
    main()
