"""ledger-bus against raw redis-py, measured in the same run on the same private server.

Prints one line per comparison with the ratio (ledger / raw throughput, or latency ratios) and the
target it is held to. Never part of the tests: wall-clock numbers depend on the machine.

    python scripts/bench.py            # everything (builds a 1e6-event session: about a minute)
    python scripts/bench.py --quick    # smaller sizes, for a smoke run
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import msgpack
import redis

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer
from ledger_bus.store.redis import Entries, RedisStore

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
        "step_id": f"step-{i:06d}",
    }


PAYLOAD = msgpack.packb(tool_call(0))


def pipelined_xadds(client: redis.Redis, key: str = "raw:batch", count: int = 100) -> None:
    """The raw side of a many-event append: `count` XADDs of PAYLOAD in one round trip."""
    pipe = client.pipeline(transaction=False)
    for _ in range(count):
        pipe.xadd(key, {"p": PAYLOAD})
    pipe.execute()


def timed(fn: Callable[[int], object], n: int) -> float:
    """Seconds for fn(0..n-1)."""
    gc.collect()  # each side starts from the same heap state, and pays for its own garbage
    start = time.perf_counter()
    for i in range(n):
        fn(i)
    return time.perf_counter() - start


def compare(
    name: str,
    ours: Callable[[int], object],
    raw: Callable[[int], object],
    n: int,
    per_call: int,
    unit: str,
    target: str,
    rounds: int = 15,
) -> float:
    """Run raw and ours in alternating rounds and print the median rates and the median ratio.

    This machine's speed drifts by 2x within a minute; alternating short rounds measures both
    sides under the same conditions, and the median of the per-round ratios ignores the outliers.
    """
    ratios, ours_rates, raw_rates = [], [], []
    timed(raw, max(1, n // 10))
    timed(ours, max(1, n // 10))
    for _ in range(rounds):
        theirs = n * per_call / timed(raw, n)
        mine = n * per_call / timed(ours, n)
        raw_rates.append(theirs)
        ours_rates.append(mine)
        ratios.append(mine / theirs)
    ratio = statistics.median(ratios)
    print(
        f"{name:<44} ledger {statistics.median(ours_rates):>10,.0f} {unit:<9}"
        f" raw {statistics.median(raw_rates):>10,.0f} {unit:<9}"
        f" ratio {ratio:5.2f}x  (target {target})"
    )
    return ratio


def bench_single(store: RedisStore, raw: redis.Redis, n: int) -> None:
    ref = lb.StreamId("bench-single", "run")
    version = [0]

    def ours(i: int) -> None:
        store.append(ref, version[0], f"s{version[0]}", [tool_call(i)])
        version[0] += 1

    def theirs(_: int) -> None:
        raw.xadd("raw:single", {"p": PAYLOAD})

    compare("single append, expected version vs XADD", ours, theirs, n, 1, "ops/s", ">= 0.7x")


def bench_fenced(store: RedisStore, raw: redis.Redis, n: int) -> None:
    """A recorder's write: a single append made under its run's lease (the script reads the
    lease and its token before anything else)."""
    ref = lb.StreamId("bench-fenced", "run")
    fence = lb.Fence(
        "run-bench", "bench", store.acquire_lease(ref.session_id, "run-bench", "bench", 600_000)
    )
    version = [0]

    def ours(i: int) -> None:
        store.append(ref, version[0], f"s{version[0]}", [tool_call(i)], fence=fence)
        version[0] += 1

    def theirs(_: int) -> None:
        raw.xadd("raw:fenced", {"p": PAYLOAD})

    compare("single append under a lease vs XADD", ours, theirs, n, 1, "ops/s", ">= 0.7x")


def bench_batch(store: RedisStore, raw: redis.Redis, n: int, rounds: int = 15) -> None:
    ref = lb.StreamId("bench-batch", "run")
    # Fresh attempt ids in every append, as agents' calls have them: the open-attempts hash
    # grows as it does in use (one batch appended again would only overwrite its 100 entries).
    # Made beforehand: the raw side is timed with its payload made too.
    batches = [
        [tool_call(k * 100 + i) for i in range(100)] for k in range(max(1, n // 10) + rounds * n)
    ]
    counter = [0]

    def ours(_: int) -> None:
        store.append(ref, lb.ANY, f"b{counter[0]}", batches[counter[0]])
        counter[0] += 1

    def theirs(_: int) -> None:
        pipelined_xadds(raw)

    compare(
        "100-event append vs 100 pipelined XADDs",
        ours,
        theirs,
        n,
        100,
        "events/s",
        ">= 0.8x",
        rounds,
    )


def server_usec(raw: redis.Redis, command: str, run: Callable[[int], object], n: int) -> float:
    """Microseconds of server time per call of `command` while `run` runs n times, from INFO
    commandstats (what the server spent executing it, without the network or the client)."""
    raw.config_resetstat()
    timed(run, n)
    stats = raw.info("commandstats").get(f"cmdstat_{command}", {})
    return float(stats.get("usec", 0)) / max(1, int(stats.get("calls", 0)))


def bench_server_time(n: int) -> None:
    """Server time of a single append (one EVALSHA) against a plain XADD of its payload, on a
    server of their own: what ran before (a 100-event append's garbage in Lua's heap) moves it."""
    with LocalServer(appendonly=False, extra=deployed_settings()) as server:
        store = lb.connect(server.url, prefix="bench")
        raw = redis.Redis(port=server.port, protocol=2)
        ref = lb.StreamId("bench-server", "run")
        version = [0]

        def ours(i: int) -> None:
            store.append(ref, version[0], f"v{version[0]}", [tool_call(i)])
            version[0] += 1

        samples = []
        for _ in range(5):
            xadd = server_usec(raw, "xadd", lambda _: raw.xadd("raw:server", {"p": PAYLOAD}), n)
            script = server_usec(raw, "evalsha", ours, n)
            samples.append((script, xadd))
        store.close()
        raw.close()
    script, xadd = (statistics.median(side) for side in zip(*samples, strict=True))
    print(
        f"{'server time, single append vs XADD':<44} ledger {script:7.2f} us"
        f"       raw {xadd:7.2f} us       ratio {script / xadd:5.2f}x"
        "  (target: 10% below the script before, docs/performance.md)"
    )


def fill(store: RedisStore, session: str, stream: str, events: int, batch: int = 1000) -> None:
    ref = lb.StreamId(session, stream)
    for start in range(0, events, batch):
        size = min(batch, events - start)
        store.append(ref, lb.ANY, f"fill-{start}", [tool_call(start + i) for i in range(size)])


def bench_read(store: RedisStore, raw: redis.Redis, events: int) -> None:
    session = "bench-read"
    fill(store, session, "run", events)
    for i in range(0, events, 1000):
        pipelined_xadds(raw, "raw:read", min(1000, events - i))
    ref = lb.StreamId("bench-read", "run")

    def raw_read(_: int) -> list[Any]:
        # What a reader has to do to return the events: page through XRANGE, decode, keep.
        out: list[Any] = []
        last = "-"
        while len(out) < events:
            page = cast(Entries, raw.xrange("raw:read", last, "+", count=1000))
            out += [msgpack.unpackb(fields[b"p"]) for _entry_id, fields in page]
            last = "(" + page[-1][0].decode()
        return out

    compare(
        f"read_stream of {events:,} vs XRANGE+msgpack",
        lambda _: store.read_stream(ref),
        raw_read,
        1,
        events,
        "events/s",
        ">= 0.5x",
    )
    compare(
        f"scan_session of {events:,} vs XRANGE+msgpack",
        lambda _: store.scan_session(session),
        raw_read,
        1,
        events,
        "events/s",
        ">= 0.5x",
    )


def bench_tail(store: RedisStore, sizes: list[int]) -> None:
    for size in sizes:
        fill(store, f"bench-tail-{size}", "run", size)
    samples: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(300):  # alternate the sessions, so drift in machine speed hits all alike
        for size in sizes:
            start = time.perf_counter()
            store.tail(f"bench-tail-{size}", 20)
            samples[size].append(time.perf_counter() - start)
    latency = {size: statistics.median(found) * 1e6 for size, found in samples.items()}
    for size in sizes:
        print(f"tail -n 20 on a session of {size:>9,} events: median {latency[size]:7.1f} us")
    ratio = latency[sizes[-1]] / latency[sizes[0]]
    print(f"{'tail at largest / tail at smallest':<44} ratio {ratio:5.2f}x  (target <= 1.2x)")


MEMORY_SETTINGS = ("stream-node-max-bytes", "stream-node-max-entries")


def deployed_settings() -> list[str]:
    """The settings of deploy/redis.conf that shape memory, as redis-server arguments."""
    conf = Path(__file__).resolve().parent.parent / "deploy" / "redis.conf"
    out: list[str] = []
    for line in conf.read_text().splitlines():
        name, _, value = line.strip().partition(" ")
        if name in MEMORY_SETTINGS:
            out += [f"--{name}", value.strip()]
    return out


def bench_memory(prefix: str, events: int = 10_000) -> None:
    """Bytes Redis uses per event, over every key the ledger wrote, against the stored payload:
    on a server as deploy/redis.conf sets it up, and on one with Redis's defaults."""
    for settings in (deployed_settings(), []):
        where = " ".join(settings) or "redis defaults"
        with LocalServer(appendonly=False, extra=settings) as server:
            client = redis.Redis(port=server.port)
            for label, batch in (("single-event appends", 1), ("100-event appends", 100)):
                with lb.connect(server.url, prefix=f"{prefix}{batch}") as store:
                    ref = lb.StreamId(f"mem-{batch}", "run")
                    for start in range(0, events, batch):
                        chunk = [tool_call(start + i) for i in range(batch)]
                        store.append(ref, lb.ANY, f"m-{start:08d}", chunk)
                    payload = sum(len(msgpack.packb(e.fields)) for e in store.read_stream(ref))
                keys = list(client.scan_iter(match=f"{prefix}{batch}:*", count=1000))
                used = sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)
                print(
                    f"redis bytes per event, {label:<21}: {used / events:6.1f} for a"
                    f" {payload / events:.0f}-byte msgpack payload; ratio {used / payload:4.2f}x"
                    f"  (target <= 1.8x; {where})"
                )
            client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--url", help="an existing server (default: a private one per run)")
    options = parser.parse_args()
    n = 200 if options.quick else 1000
    tail_sizes = [1_000, 10_000] if options.quick else [1_000, 100_000, 1_000_000]
    # Set up as deploy/redis.conf sets a server up: stream nodes shape reads as well as memory.
    with LocalServer(appendonly=False, extra=deployed_settings()) as server:
        store = lb.connect(server.url, prefix="bench")
        assert isinstance(store, RedisStore)
        raw = redis.Redis(port=server.port, protocol=2)
        print(
            f"server: {server.binary} on port {server.port}; payload {len(PAYLOAD)} bytes msgpack"
        )
        bench_single(store, raw, n)
        bench_fenced(store, raw, n)
        bench_batch(store, raw, max(5, n // 50))
        bench_server_time(n)
        bench_read(store, raw, 10_000)
        bench_tail(store, tail_sizes)
        bench_memory("mem")
        store.close()
        raw.close()


if __name__ == "__main__":
    main()
