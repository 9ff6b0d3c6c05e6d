"""Archiving, measured in one run: a large session archived from a private Redis to a private
PostgreSQL against exporting the same session to a JSONL file; Redis `used_memory` before the
session was written and after it was archived; `tail -n 20` of the archived session (read
through) against the same tail while it was on Redis; `du` over thousands of sessions; and a
10 MiB tool result appended (its result kept as an artifact) against one SET of the same bytes.
Never part of the tests: wall-clock numbers depend on the machine.

    python scripts/bench_lifecycle.py            # a 1e6-event session (a few minutes)
    python scripts/bench_lifecycle.py --quick    # 1e5 events, for a smoke run
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer
from ledger_bus.exports.conversation import export_session
from ledger_bus.operations.archiving import archive_session
from ledger_bus.store.redis.tiered import TieredStore
from tests.support.pgserver import LocalPostgres

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import tool_call

SESSION = "big"


def used_memory(client: redis.Redis) -> int:
    """Redis's used_memory once what UNLINK handed to the background is freed, and client
    buffers grown by large appends are shrunk again (Redis does so for clients idle 2 s)."""
    time.sleep(3)
    for _ in range(100):
        info = client.info("memory")
        if not int(info.get("lazyfree_pending_objects", 0)):
            break
        time.sleep(0.05)
    return int(info["used_memory"])


def median_tail(store: lb.EventStore, rounds: int = 300) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        store.tail(SESSION, 20)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    events = 100_000 if args.quick else 1_000_000
    with LocalServer(appendonly=False) as server, LocalPostgres(fsync=True) as pg:
        client = redis.Redis(port=server.port)
        store = lb.connect(server.url, prefix="life", archive=pg.url)
        assert isinstance(store, TieredStore)
        # Connections made and scripts loaded first: "before" is the server without the session.
        store.append(lb.StreamId("warm", "main"), lb.ANY, "w", [tool_call(0)])
        archive_session(store, store.archive, "warm", force=True)
        before = used_memory(client)
        for k in range(events // 2000):  # each call requested, then closed: a finished session
            ref = lb.StreamId(SESSION, f"run-{k % 8}")
            calls = [tool_call(k * 1000 + j) for j in range(1000)]
            results = [
                {
                    "type": "tool_result",
                    "agent": "backend-dev",
                    "tool": "code_search",
                    "attempt_id": call["attempt_id"],
                    "status": "ok",
                    "result": {"hits": 3},
                }
                for call in calls
            ]
            store.append(ref, lb.ANY, f"c{k}", calls)
            store.append(ref, lb.ANY, f"r{k}", results)
        written = used_memory(client)
        on_redis = median_tail(store)

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "big.jsonl"
            start = time.perf_counter()
            with path.open("w") as out:
                exported = export_session(store, SESSION, out)
            export_s = time.perf_counter() - start

        start = time.perf_counter()
        done = archive_session(store, store.archive, SESSION)
        archive_s = time.perf_counter() - start
        assert done.events == exported == events
        after = used_memory(client)
        archived = median_tail(store)

        print(
            f"archive {events:,} events to PostgreSQL vs export to JSONL: "
            f"{events / archive_s:,.0f} vs {events / export_s:,.0f} events/s,"
            f" ratio {export_s / archive_s:.2f}x  (target >= 0.5x)"
        )
        print(
            f"redis used_memory: {before:,} before writing, {written:,} written,"
            f" {after:,} archived: {100 * (after - before) / before:+.2f}% of before,"
            f" {100 * (after - before) / (written - before):.2f}% of what the session took"
            "  (target within 1% of before)"
        )
        print(
            f"tail -n 20: archived {archived:,.0f} us vs on redis {on_redis:,.0f} us,"
            f" ratio {archived / on_redis:.2f}x  (target <= 3x)"
        )

        sessions = 2_000 if args.quick else 10_000
        for k in range(sessions):
            store.append(lb.StreamId(f"s-{k:05d}", "main"), lb.ANY, "a", [tool_call(k)])
        start = time.perf_counter()
        names = [s for s, _ in store.sessions()]
        for first in range(0, len(names), 200):
            store.memory_of(names[first : first + 200])
        print(
            f"du over {len(names):,} sessions (as `ledger-bus du` measures them):"
            f" {time.perf_counter() - start:.2f} s"
        )
        artifact_vs_set(store, client)
        store.close()
        client.close()


def artifact_vs_set(store: lb.EventStore, client: redis.Redis, rounds: int = 15) -> None:
    """A tool result of 10 MiB appended (validated, digested, its result written as an artifact
    a MiB per command, then the append script) against redis-py's SET of the same bytes; each
    round new bytes, so no artifact is found stored already. Medians."""
    size = 10 * 1024 * 1024
    appends, sets, reads = [], [], []
    for n in range(rounds):
        text = os.urandom(size // 2).hex()
        event = {
            "type": "tool_result",
            "agent": "backend-dev",
            "tool": "fetch",
            "attempt_id": f"big-{n}",
            "status": "ok",
            "result": text,
        }
        start = time.perf_counter()
        client.set(f"raw-{n % 2}", text.encode())
        sets.append(time.perf_counter() - start)
        start = time.perf_counter()
        store.append(lb.StreamId("artifacts", "main"), lb.ANY, f"a{n}", [event])
        appends.append(time.perf_counter() - start)
        start = time.perf_counter()
        [read] = store.tail("artifacts", 1)
        reads.append(time.perf_counter() - start)
        assert read["result"] == text
    client.delete("raw-0", "raw-1")
    append_ms, set_ms = statistics.median(appends) * 1e3, statistics.median(sets) * 1e3
    print(
        f"10 MiB tool result: append {append_ms:.1f} ms vs SET {set_ms:.1f} ms,"
        f" ratio {append_ms / set_ms:.2f}x  (target <= 2x);"
        f" read back whole {statistics.median(reads) * 1e3:.1f} ms"
    )
    largest = "y" * (64 * 1024 * 1024)
    ref = lb.StreamId("artifacts", "largest")
    held_append = longest_ping(
        client, lambda: store.append(ref, lb.ANY, "big", [{**event, "result": largest}])
    )
    held_read = longest_ping(client, lambda: store.read_stream(ref))
    held_set = longest_ping(client, lambda: client.set("raw-big", largest.encode()))
    client.delete("raw-big")
    print(
        f"64 MiB artifact: the longest PING from another client waited {held_append:.1f} ms"
        f" during its append, {held_read:.1f} ms during its read, {held_set:.1f} ms during"
        " one SET of the same bytes"
    )


def longest_ping(client: redis.Redis, action: Callable[[], object]) -> float:
    """The longest round trip of PINGs sent one after another, from another process (this one's
    GIL would time itself), while `action` runs: how long the server was held at a stretch."""
    where = client.connection_pool.connection_kwargs
    done, longest = multiprocessing.Event(), multiprocessing.Value("d", 0.0)
    ready = multiprocessing.Event()
    pinger = multiprocessing.Process(
        target=_ping, args=(where.get("host", "127.0.0.1"), where.get("port"), ready, done, longest)
    )
    pinger.start()
    ready.wait()
    try:
        action()
    finally:
        done.set()
        pinger.join()
    return float(longest.value) * 1e3


def _ping(host: str, port: int, ready: Any, done: Any, longest: Any) -> None:
    other = redis.Redis(host=host, port=port)
    other.ping()
    ready.set()
    while not done.is_set():
        start = time.perf_counter()
        other.ping()
        longest.value = max(longest.value, time.perf_counter() - start)


if __name__ == "__main__":
    main()
