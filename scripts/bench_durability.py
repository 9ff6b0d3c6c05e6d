"""What durability costs: single-event appends per second under each AOF setting, and appends
waiting for a replica (durability replicas:1) against the same appends with local durability.

    python scripts/bench_durability.py [--appends N]

Each setting gets its own private server in a temp dir on this machine's disk; the replica is a
second private server on loopback.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import redis

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import tool_call

SETTINGS = {
    "appendonly no": (False, []),
    "appendfsync everysec": (True, ["--appendfsync", "everysec"]),
    "appendfsync always": (True, ["--appendfsync", "always"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=2000)
    options = parser.parse_args()
    for name, (aof, extra) in SETTINGS.items():
        with LocalServer(appendonly=aof, extra=extra) as server, lb.connect(server.url) as store:
            ref = lb.StreamId("durability", "run")
            best = 0.0
            for attempt in range(3):
                start = time.perf_counter()
                for i in range(options.appends):
                    n = attempt * options.appends + i
                    store.append(ref, n, f"a{n}", [tool_call(n)])
                best = max(best, options.appends / (time.perf_counter() - start))
        print(f"{name:<22} {best:8,.0f} single-event appends/s")
    replicas(options.appends)


def replicas(appends: int) -> None:
    """replicas:1 against local on one primary with one replica, alternating rounds; the median
    ratio of events per second, for single-event and 100-event appends."""
    with (
        LocalServer(appendonly=False) as primary,
        LocalServer(
            appendonly=False, extra=["--replicaof", "127.0.0.1", str(primary.port)]
        ) as replica,
    ):
        while redis.Redis(port=replica.port).info("replication")["master_link_status"] != "up":
            time.sleep(0.05)
        stores = {
            level: lb.connect(primary.url, durability=level) for level in ("local", "replicas:1")
        }
        for size in (1, 100):
            rates: dict[str, list[float]] = {level: [] for level in stores}
            for round_ in range(6):
                for level, store in stores.items():
                    ref = lb.StreamId(f"rep-{size}", level)
                    count = max(1, appends // size // 4)
                    gc.collect()
                    start = time.perf_counter()
                    for i in range(count):
                        events = [tool_call(i * size + j) for j in range(size)]
                        store.append(ref, lb.ANY, f"r{round_}-{i}", events)
                    rates[level].append(count * size / (time.perf_counter() - start))
            local, waited = (statistics.median(rates[k]) for k in ("local", "replicas:1"))
            target = "  (target <= 1.3x)" if size == 100 else ""
            print(
                f"{size:>3}-event appends, replicas:1 vs local   local {local:9,.0f} events/s"
                f"  replicas:1 {waited:9,.0f} events/s  cost {local / waited:.2f}x{target}"
            )
        for store in stores.values():
            store.close()


if __name__ == "__main__":
    main()
