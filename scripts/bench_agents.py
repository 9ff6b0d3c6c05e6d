"""Agents' view of speed: append-to-delivery latency, and consumer throughput against raw redis-py.

    python scripts/bench_agents.py            # 5 s at 1,000 events/s, 20,000 events of throughput
    python scripts/bench_agents.py --quick

Latency: one producer appends single events at a fixed rate, each carrying its send time; four
consumer processes in one group record when each arrives. Throughput: one consumer drains a
session through the tailer (read, decode, ack) against a raw XREADGROUP + msgpack + XACK loop on
the same payloads, in alternating rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import msgpack
import redis

import ledger_bus as lb
from ledger_bus.agent.tailer import Tailer, TailerOptions
from ledger_bus.demo.server import LocalServer
from ledger_bus.model.ids import CURSOR_ZERO
from ledger_bus.store.redis import Entries

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import compare, tool_call  # noqa: E402


def consumer(url: str, session: str, name: str, out: str, seconds: float) -> None:
    """A consumer process: record arrival latency of every event until the time is up."""
    store = lb.connect(url, prefix="bench")
    tailer = Tailer(store, session, "latency", name, TailerOptions(count=50, block_ms=100))
    tailer.join(0)
    print("ready", flush=True)
    latencies = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch = tailer.poll()
        now = time.time_ns() // 1000
        latencies += [(now - d.event["args"]["sent_us"]) / 1e3 for d in batch]
        tailer.ack(batch)
    Path(out).write_text(json.dumps(latencies))
    store.close()


def bench_latency(server: LocalServer, rate: int, seconds: float) -> None:
    session = "bench-latency"
    folder = Path(tempfile.mkdtemp())
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "consumer",
                server.url,
                session,
                f"c{i}",
                str(folder / f"c{i}.json"),
                str(seconds + 3),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    store = lb.connect(server.url, prefix="bench")
    ref = lb.StreamId(session, "producer")
    interval = 1 / rate
    start = time.perf_counter()
    sent = 0
    while sent < rate * seconds:
        target = start + sent * interval
        while time.perf_counter() < target:
            pass
        event = tool_call(sent)
        event["args"] = {**event["args"], "sent_us": time.time_ns() // 1000}
        store.append(ref, lb.ANY, f"p{sent}", [event])
        sent += 1
    achieved = sent / (time.perf_counter() - start)
    for proc in procs:
        proc.wait()
        if proc.stdout:
            proc.stdout.close()
    latencies = sorted(v for i in range(4) for v in json.loads((folder / f"c{i}.json").read_text()))
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(
        f"append-to-delivery, 4 consumers, {achieved:,.0f} events/s for {seconds:g}s:"
        f" {len(latencies):,} delivered, p50 {p50:.2f} ms, p99 {p99:.2f} ms"
        "  (target p99 < 5 ms)"
    )
    store.close()


def bench_throughput(server: LocalServer, events: int) -> None:
    store = lb.connect(server.url, prefix="bench")
    raw = redis.Redis(port=server.port, protocol=2)
    session = "bench-drain"
    ref = lb.StreamId(session, "producer")
    for start in range(0, events, 1000):
        store.append(ref, lb.ANY, f"d{start}", [tool_call(start + i) for i in range(1000)])
    payload = msgpack.packb(tool_call(0))
    for _ in range(0, events, 1000):
        pipe = raw.pipeline(transaction=False)
        for _ in range(1000):
            pipe.xadd("raw:drain", {"p": payload})
        pipe.execute()
    rounds = [0]

    def ours(_: int) -> None:
        rounds[0] += 1
        tailer = Tailer(store, session, f"g{rounds[0]}", "c", TailerOptions(count=100, block_ms=0))
        store.group_create(session, f"g{rounds[0]}", CURSOR_ZERO)
        done = 0
        while done < events:
            batch = tailer.poll()
            done += len(batch)
            tailer.ack(batch)

    def theirs(_: int) -> None:
        group = f"g{rounds[0]}"
        raw.xgroup_create("raw:drain", group, id="0")
        done = 0
        while done < events:
            reply = cast(list[Any], raw.xreadgroup(group, "c", {"raw:drain": ">"}, count=100))
            entries = cast(Entries, reply[0][1])
            decoded = [msgpack.unpackb(fields[b"p"]) for _, fields in entries]
            raw.xack("raw:drain", group, *[entry_id for entry_id, _ in entries])
            done += len(decoded)

    compare(
        f"consumer drain of {events:,} vs raw XREADGROUP",
        ours,
        theirs,
        1,
        events,
        "events/s",
        ">= 0.7x",
        rounds=7,
    )
    store.close()
    raw.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    with LocalServer(appendonly=False) as server:
        bench_latency(server, 1000, 2 if options.quick else 5)
        bench_throughput(server, 5000 if options.quick else 20_000)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "consumer":
        consumer(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6]))
    else:
        main()
