"""ledger_bus.aio against raw redis.asyncio, measured in the same run on the same private server.

64 coroutines in one process each append single events (with expected versions, to a stream of
their own) as fast as they can, against 64 coroutines each sending XADDs of the same payload on
a redis.asyncio client. Alternating rounds, the median of the per-round ratios. Beside them, for
what each part is worth: the store without coalescing (each EVALSHA sent alone,
store/autopipe.py), the appends by hand (prepare_append and one EVALSHA each, no store
machinery), and the blocking store's single appends from one thread.

    python scripts/bench_async.py            # 15 rounds
    python scripts/bench_async.py --quick    # 5 short rounds
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgpack
from redis.asyncio import Redis

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.demo.server import LocalServer
from ledger_bus.model.batch import prepare_append
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.store.redis import APPEND, RedisStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import tool_call

WORKERS = 64
PAYLOAD = msgpack.packb(tool_call(0))


async def timed(worker: Callable[[int, int], Awaitable[None]], per_worker: int) -> float:
    """Seconds for WORKERS coroutines, each making `per_worker` calls."""
    gc.collect()
    start = time.perf_counter()
    await asyncio.gather(*(worker(w, per_worker) for w in range(WORKERS)))
    return time.perf_counter() - start


def appends(store: AsyncStore, tag: str) -> Callable[[int, int], Awaitable[None]]:
    """A worker making single appends with expected versions, a stream of its own each."""
    versions = [0] * WORKERS

    async def worker(w: int, n: int) -> None:
        ref = lb.StreamId(f"{tag}-{w}", "run")
        for i in range(n):
            v = versions[w]
            await store.append(ref, v, f"a{v}", [tool_call(i)])
            versions[w] = v + 1

    return worker


async def main(rounds: int, per_worker: int) -> None:
    with LocalServer(appendonly=False) as server:
        store: AsyncStore = await aio.connect(server.url, prefix="bench")
        raw = Redis.from_url(server.url, protocol=2, max_connections=WORKERS * 2)
        ours = appends(store, "async")
        core, client = store.core, store.client
        assert isinstance(core, RedisStore)
        assert client is not None
        uncoalesced = appends(AsyncStore(core, client), "alone")  # each EVALSHA sent alone

        floor_versions = [0] * WORKERS

        async def by_hand(w: int, n: int) -> None:
            # What an append cannot do without: the event prepared, the script called directly.
            ref = lb.StreamId(f"hand-{w}", "run")
            keys = core._keys_of(ref)
            for i in range(n):
                v = floor_versions[w]
                prepared = prepare_append(
                    ref.session_id, "run", f"a{v}", [tool_call(i)], core.limits
                )
                args = core.append_args(ref, v, f"a{v}", prepared)
                await client.evalsha(APPEND.sha, len(keys), *keys, *args)
                floor_versions[w] = v + 1

        async def theirs(w: int, n: int) -> None:
            key = f"raw:{{async-{w}}}:log"
            for _ in range(n):
                await raw.xadd(key, {"p": PAYLOAD})

        await client.script_load(APPEND.text)
        await timed(theirs, max(1, per_worker // 10))
        await timed(ours, max(1, per_worker // 10))
        await timed(by_hand, max(1, per_worker // 10))
        await timed(uncoalesced, max(1, per_worker // 10))
        ratios, mine, raws, hand_ratios, alone_ratios = [], [], [], [], []
        for _ in range(rounds):
            theirs_rate = WORKERS * per_worker / await timed(theirs, per_worker)
            ours_rate = WORKERS * per_worker / await timed(ours, per_worker)
            hand_rate = WORKERS * per_worker / await timed(by_hand, per_worker)
            alone_rate = WORKERS * per_worker / await timed(uncoalesced, per_worker)
            alone_ratios.append(alone_rate / theirs_rate)
            raws.append(theirs_rate)
            mine.append(ours_rate)
            ratios.append(ours_rate / theirs_rate)
            hand_ratios.append(hand_rate / theirs_rate)

        blocking = lb.connect(server.url, prefix="bench")
        ref = lb.StreamId("sync", "run")
        n = WORKERS * per_worker // 8
        start = time.perf_counter()
        for i in range(n):
            blocking.append(ref, i, f"s{i}", [tool_call(i)])
        sync_rate = n / (time.perf_counter() - start)
        blocking.close()
        await store.aclose()
        await raw.aclose()

    print(f"server: {server.binary} ({WORKERS} coroutines, {per_worker} appends each a round)")
    print(
        f"{WORKERS} concurrent single appends vs {WORKERS} concurrent XADDs"
        f"   ledger {statistics.median(mine):>8,.0f} ops/s"
        f"   raw {statistics.median(raws):>8,.0f} ops/s"
        f"   ratio {statistics.median(ratios):4.2f}x  (target >= 0.6x)"
    )
    print(
        f"the store with each EVALSHA sent alone (no coalescing)"
        f"   ratio {statistics.median(alone_ratios):4.2f}x"
    )
    print(
        f"the appends by hand (prepare_append + one EVALSHA each, no store machinery)"
        f"   ratio {statistics.median(hand_ratios):4.2f}x"
    )
    print(f"blocking store, one thread, single appends: {sync_rate:>8,.0f} ops/s (for scale)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 short rounds")
    args = parser.parse_args()
    asyncio.run(main(5 if args.quick else 15, 20 if args.quick else 50))
