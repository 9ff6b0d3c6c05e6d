"""Durability on Redis Cluster: the WAIT goes to the shard that holds the session, and writers go
on through a replica promoted with CLUSTER FAILOVER, losing nothing acknowledged."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer
from ledger_bus.store.redis import RedisStore
from tests.support.cluster import LocalCluster
from tests.support.events import msg
from tests.support.helpers import Writers, cluster_client


@pytest.fixture
def replicated() -> Iterator[LocalCluster]:
    """Three primaries with a replica each, for one test: a failover changes the topology."""
    with LocalCluster(3, replicas=1) as cluster:
        yield cluster


def shard_of(cluster: LocalCluster, store: RedisStore, session: str) -> tuple[int, LocalServer]:
    """The index of the primary that holds `session`'s slot, and that primary's replica."""
    node = cluster_client(store).get_node_from_key(store.keys.log(session))
    index = next(i for i, n in enumerate(cluster.nodes) if n.port == node.port)
    return index, cluster.replicas[index][0]


def test_replicas_1_waits_on_the_shard_of_each_session(replicated: LocalCluster) -> None:
    with lb.connect(replicated.url, durability="replicas:1") as store:
        assert isinstance(store, RedisStore)
        shards = set()
        for session in [f"s{n}" for n in range(12)]:
            result = store.append(lb.StreamId(session, "main"), 0, "a1", [msg(session)])
            assert result.replicas == 1, session
            shards.add(shard_of(replicated, store, session)[0])
        assert shards == {0, 1, 2}, "the sessions were spread over every shard"


@pytest.mark.slow
def test_writers_go_on_through_a_cluster_failover_and_lose_nothing_acknowledged(
    replicated: LocalCluster,
) -> None:
    store = lb.connect(replicated.url, durability="replicas:1", timeout=30)
    assert isinstance(store, RedisStore)
    _, replica = shard_of(replicated, store, "moving")
    with Writers(replicated.url + "?durability=replicas:1", "moving") as writers:
        writers.wait_for(10)
        before = writers.counts()
        # The replica of the session's shard takes over, as an operator's CLUSTER FAILOVER
        # does (asked again if the primary's pause ran out before the replica caught up: Redis
        # then drops the attempt without a word)
        client = redis.Redis(port=replica.port)
        deadline = time.monotonic() + 60
        while client.info("replication")["role"] != "master":
            assert time.monotonic() < deadline, "the replica never took over"
            client.execute_command("CLUSTER", "FAILOVER")  # type: ignore[no-untyped-call]
            asked = time.monotonic()
            while client.info("replication")["role"] != "master" and time.monotonic() < asked + 6:
                time.sleep(0.1)
        client.close()
        writers.wait_for(50, than=before)
    writers.assert_kept_in(store)
    # The promoted replica now holds the session, and its old primary follows it
    assert cluster_client(store).get_node_from_key(store.keys.log("moving")).port == replica.port
    store.close()


def test_a_local_writer_goes_on_when_its_shards_primary_dies(replicated: LocalCluster) -> None:
    """The held connection (store/redis/held.py) is to a primary that is gone: the cluster client
    learns the new map, and the next try goes to the promoted replica."""
    store = lb.connect(replicated.url, timeout=30)
    assert isinstance(store, RedisStore)
    index, replica = shard_of(replicated, store, "dying")
    ref = lb.StreamId("dying", "main")
    for version in range(5):
        store.append(ref, version, f"a{version}", [msg(f"before {version}")])
    primary = redis.Redis(port=replicated.nodes[index].port)
    assert primary.wait(1, 5000) == 1  # the replica has all five: nothing acknowledged is lost
    primary.close()
    replicated.nodes[index].kill()
    client = redis.Redis(port=replica.port)
    client.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")  # type: ignore[no-untyped-call]
    deadline = time.monotonic() + 30
    while client.info("replication")["role"] != "master":
        assert time.monotonic() < deadline, "the replica never took over"
        time.sleep(0.1)
    client.close()
    result = store.append(ref, 5, "a5", [msg("after")])
    assert (result.first_version, result.deduplicated) == (6, False)
    assert [e.version for e in store.read_stream(ref)] == [1, 2, 3, 4, 5, 6]
    store.close()
