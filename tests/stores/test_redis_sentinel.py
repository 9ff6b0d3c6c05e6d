"""Redis Sentinel: a primary, a replica and three sentinels, real processes; the primary killed
under writers, and the store following Sentinel to the promoted replica."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.demo.server import LocalServer
from ledger_bus.store.redis import RedisStore
from tests.support.events import msg
from tests.support.helpers import Writers, redis_client


class Watched:
    """A primary, its replica, and three sentinels watching them as `ledger`."""

    def __init__(self, folder: Path):
        self.primary = LocalServer(appendonly=True, extra=["--appendfsync", "always"]).start()
        self.replica = LocalServer(
            appendonly=True,
            extra=["--appendfsync", "always", "--replicaof", "127.0.0.1", str(self.primary.port)],
        ).start()
        self.sentinels = []
        for n in range(3):
            conf = folder / f"sentinel-{n}.conf"
            conf.write_text(
                f"sentinel monitor ledger 127.0.0.1 {self.primary.port} 2\n"
                "sentinel down-after-milliseconds ledger 1000\n"
                "sentinel failover-timeout ledger 5000\n"
                "sentinel parallel-syncs ledger 1\n"
            )
            sentinel = LocalServer(appendonly=False, config_file=str(conf), extra=["--sentinel"])
            self.sentinels.append(sentinel.start())
        deadline = time.monotonic() + 30
        while not self.ready():
            assert time.monotonic() < deadline, "the sentinels never saw the replica"
            time.sleep(0.1)

    def ready(self) -> bool:
        info = redis.Redis(port=self.replica.port).info("replication")
        if info.get("master_link_status") != "up" or info.get("master_sync_in_progress"):
            return False
        for sentinel in self.sentinels:
            found = redis.Redis(port=sentinel.port).sentinel_master("ledger")
            assert isinstance(found, dict)
            if int(found.get("num-other-sentinels", 0)) < 2 or int(found["num-slaves"]) < 1:
                return False
        return True

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/ledger/0"

    def close(self) -> None:
        for server in [*self.sentinels, self.replica, self.primary]:
            server.close()


def primary_port(sentinel: redis.Redis) -> int:
    found = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "ledger")  # type: ignore[no-untyped-call]
    return int(found[1])


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[Watched]:
    made = Watched(tmp_path)
    yield made
    made.close()


def test_a_sentinel_url_reaches_the_primary_it_names(watched: Watched) -> None:
    with lb.connect(watched.url + "?durability=replicas:1&max_connections=7") as store:
        result = store.append(lb.StreamId("s", "main"), 0, "a1", [msg("via sentinel")])
        assert isinstance(store, RedisStore)
        # docs/deploy.md, "Connections": the URL's cap reaches the primary's pool here too.
        assert redis_client(store).connection_pool.max_connections == 7
    assert result.replicas == 1

    async def main() -> int:
        async with await aio.connect(watched.url + "?max_connections=9") as opened:
            await opened.append(lb.StreamId("s", "main"), 1, "a2", [msg("via sentinel, async")])
            assert opened.client is not None
            return int(opened.client.connection_pool.max_connections)

    assert asyncio.run(main()) == 9
    with lb.connect(watched.primary.url) as direct:
        assert direct.stream_version(lb.StreamId("s", "main")) == 2


def test_a_bad_sentinel_url_is_invalid_input() -> None:
    for url in (
        "redis+sentinel://127.0.0.1:1/",
        "redis+sentinel://nohost/ledger/0",
        "redis+sentinel://127.0.0.1:1/ledger/db",
    ):
        with pytest.raises(lb.InvalidInput):
            lb.connect(url)


@pytest.mark.slow
def test_writers_go_on_through_a_sentinel_failover_and_lose_nothing_acknowledged(
    watched: Watched,
) -> None:
    # Given two writers appending with replicas:1 through Sentinel
    url = watched.url + "?durability=replicas:1&durability_timeout_ms=500"
    with Writers(url, "failover") as writers:
        writers.wait_for(10)
        before = writers.counts()

        # When the primary dies, Sentinel promotes the replica, and the old primary returns
        watched.primary.kill()
        deadline = time.monotonic() + 60
        sentinel = redis.Redis(port=watched.sentinels[0].port)
        while primary_port(sentinel) != watched.replica.port:
            assert time.monotonic() < deadline, "Sentinel never promoted the replica"
            time.sleep(0.2)
        watched.primary.start()  # Sentinel turns it into a replica of the new primary
        writers.wait_for(20, than=before)

    # Then every acknowledged event is on the new primary, once, in order
    with lb.connect(watched.replica.url) as promoted:
        writers.assert_kept_in(promoted)
    assert writers.unconfirmed > 0, "no append met the moment with no replica attached"


def test_closing_a_store_closes_its_connections_to_the_sentinels(watched: Watched) -> None:
    """A process that opens and closes stores (a CLI call each, a web request each) leaves
    nothing open on the sentinels, with either driver."""

    def on_sentinels() -> int:
        total = 0
        for sentinel in watched.sentinels:
            with redis.Redis(port=sentinel.port) as client:
                total += int(client.info("clients")["connected_clients"])
        return total

    def settles_at(count: int) -> bool:
        deadline = time.monotonic() + 5
        while on_sentinels() != count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    before = on_sentinels()
    store = lb.connect(watched.url)
    store.append(lb.StreamId("s", "main"), lb.ANY, "b1", [msg("blocking")])
    assert on_sentinels() > before
    store.close()
    assert settles_at(before)

    async def main() -> None:
        opened = await aio.connect(watched.url)
        await opened.append(lb.StreamId("s", "main"), lb.ANY, "b2", [msg("asyncio")])
        assert on_sentinels() > before
        await opened.aclose()
        assert settles_at(before)

    asyncio.run(main())
