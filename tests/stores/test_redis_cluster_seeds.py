"""Redis Cluster URLs that name several seed nodes, `redis+cluster://H:P,H2:P2/0`: a client starts
as long as one of them answers, so a deployment outlives the node its URL names first."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import redis

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.model.durability import Durability
from ledger_bus.store.redis import RedisStore
from tests.support.cluster import LocalCluster, free_cluster_port
from tests.support.events import msg
from tests.support.helpers import cluster_client, ledger_here

LINE = '{"type":"message","agent":"a","body":"through a seed that answers"}\n'


@pytest.fixture
def dead() -> int:
    """A port where nothing listens: a seed node that is down."""
    return free_cluster_port()


def seeds(*ports: int, credentials: str = "", query: str = "") -> str:
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    return f"redis+cluster://{credentials}{hosts}/0{query}"


def test_connect_reaches_the_cluster_when_the_first_seed_is_down(
    redis_cluster: LocalCluster, dead: int, prefix: str
) -> None:
    # Given a URL whose first seed is down and whose second is a node of the cluster
    url = seeds(dead, redis_cluster.nodes[1].port)
    # When a store connects through it, appends and reads
    with lb.connect(url, prefix=prefix, timeout=5) as store:
        ref = lb.StreamId("seeded", "main")
        store.append(ref, 0, "a1", [msg("one")])
        store.append(ref, 1, "a2", [msg("two")])
        read = [e.fields["body"] for e in store.read_stream(ref)]
    # Then it wrote to the cluster, as a client of another node sees it
    assert read == ["one", "two"]
    with lb.connect(seeds(redis_cluster.nodes[2].port), prefix=prefix) as other:
        assert [e.fields["body"] for e in other.tail("seeded", 5)] == ["one", "two"]


def test_aio_connect_reaches_the_cluster_when_the_first_seed_is_down(
    redis_cluster: LocalCluster, dead: int, prefix: str
) -> None:
    # Given a URL whose first seed is down
    url = seeds(dead, redis_cluster.nodes[2].port)

    # When the asyncio store connects through it, appends and reads
    async def main() -> list[str]:
        async with await aio.connect(url, prefix=prefix, timeout=5) as store:
            ref = lb.StreamId("seeded-aio", "main")
            await store.append(ref, 0, "a1", [msg("async")])
            return [e.fields["body"] for e in await store.scan_session("seeded-aio")]

    # Then what it appended is there
    assert asyncio.run(main()) == ["async"]


def test_the_command_appends_and_tails_through_the_seed_that_answers(
    redis_cluster: LocalCluster, dead: int, prefix: str
) -> None:
    # Given LEDGER_BUS_URL naming a seed that is down before one that answers
    url = seeds(dead, redis_cluster.nodes[0].port)
    # When ledger-bus appends, then tails
    appended = ledger_here(url, prefix, "append", "s1", "main", "--append-id", "1", stdin=LINE)
    tailed = ledger_here(url, prefix, "tail", "s1")
    # Then both work, as with a URL of one live node
    assert appended.returncode == 0, appended.stderr
    assert json.loads(appended.stdout)["first_version"] == 1
    assert tailed.returncode == 0, tailed.stderr
    assert [json.loads(line)["body"] for line in tailed.stdout.splitlines()] == [
        "through a seed that answers"
    ]


def test_a_database_other_than_0_is_bad_input_naming_the_url(redis_cluster: LocalCluster) -> None:
    # A cluster has one database: /3 is a mistake said at once, not a timeout (exit 5) later.
    url = f"redis+cluster://127.0.0.1:{redis_cluster.nodes[0].port}/3"
    with pytest.raises(lb.InvalidInput, match="one database, 0"):
        lb.connect(url)


def test_doctor_inspects_the_first_seed_of_several(
    redis_cluster: LocalCluster, prefix: str
) -> None:
    # Given a URL of several seeds, the first a live node
    url = seeds(redis_cluster.nodes[0].port, redis_cluster.nodes[1].port)
    # When doctor runs on it
    done = ledger_here(url, prefix, "doctor", "-o", "jsonl")
    # Then it reports on that node (0: nothing at risk, 9: data can be lost), not an internal error
    assert done.returncode in (0, 9), done.stderr
    assert done.stdout.strip(), done.stderr


def test_every_seed_down_is_exit_5_in_one_line_naming_them(dead: int, prefix: str) -> None:
    # Given a URL of two seeds, neither of which answers
    other = free_cluster_port()
    url = seeds(dead, other)
    # When a command runs on it
    done = ledger_here(url, prefix, "--timeout", "1", "tail", "s1")
    # Then it is unavailable (exit 5), said in one line that names both seeds
    assert done.returncode == 5, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"127.0.0.1:{dead},127.0.0.1:{other}" in done.stderr


@pytest.mark.parametrize(
    "hosts",
    [
        "127.0.0.1:seven,127.0.0.1:{port}",  # a port that is not a number
        ":7001,127.0.0.1:{port}",  # an empty host
        "127.0.0.1:{port},",  # an empty seed
        "127.0.0.1:{port},127.0.0.1:99999",  # a port out of range
        "::1:7001,127.0.0.1:{port}",  # an IPv6 address without its brackets
        "127.0.0.1:\u00b2,127.0.0.1:{port}",  # a digit that is no ASCII digit
    ],
)
def test_a_malformed_seed_list_is_exit_2_in_one_line_naming_the_url(
    redis_cluster: LocalCluster, prefix: str, hosts: str
) -> None:
    # Given a URL whose list of seeds is malformed (besides a node that would answer)
    url = f"redis+cluster://{hosts.format(port=redis_cluster.nodes[0].port)}/0"
    # When a command, the store and the asyncio store are given it
    done = ledger_here(url, prefix, "append", "s1", "main", "--append-id", "1", stdin=LINE)
    with pytest.raises(lb.InvalidInput, match="a cluster seed is host:port"):
        lb.connect(url)

    async def main() -> None:
        await aio.connect(url)

    with pytest.raises(lb.InvalidInput, match="a cluster seed is host:port"):
        asyncio.run(main())
    # Then it is bad input (exit 2), one line naming the URL, and nothing was written
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert url in done.stderr
    with lb.connect(redis_cluster.url, prefix=prefix) as store:
        assert store.sessions() == []


@pytest.fixture
def seeder(redis_cluster: LocalCluster) -> Iterator[str]:
    """A user with a password on every node of the cluster (each node keeps its own ACL)."""
    for node in redis_cluster.nodes:
        client = redis.Redis(port=node.port)
        client.acl_setuser(
            "seeder",
            enabled=True,
            passwords=["+s3cret"],
            keys=["*"],
            channels=["*"],
            commands=["+@all"],
        )
        client.close()
    yield "seeder"
    for node in redis_cluster.nodes:
        client = redis.Redis(port=node.port)
        client.acl_deluser("seeder")
        client.close()


def test_the_urls_credentials_are_every_seeds(
    redis_cluster: LocalCluster, seeder: str, dead: int, prefix: str
) -> None:
    # Given a user known to the cluster, named with its password in a URL of several seeds
    live = redis_cluster.nodes[1].port
    right = seeds(dead, live, credentials=f"{seeder}:s3cret@")
    wrong = seeds(dead, live, credentials=f"{seeder}:guessed@")
    # When commands run with the right password, and with a wrong one
    appended = ledger_here(right, prefix, "append", "s1", "main", "--append-id", "1", stdin=LINE)
    refused = ledger_here(wrong, prefix, "--timeout", "5", "tail", "s1")
    # Then the right one appends; the wrong one is refused (exit 8), in one line that shows no
    # password
    assert appended.returncode == 0, appended.stderr
    assert refused.returncode == 8, refused.stderr
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "credentials" in refused.stderr
    assert "guessed" not in refused.stderr


def test_the_urls_options_are_kept_with_several_seeds(
    redis_cluster: LocalCluster, dead: int, prefix: str
) -> None:
    # Given a URL of several seeds with a cap on connections and a durability
    query = "?max_connections=7&durability=replicas:1&durability_timeout_ms=300"
    url = seeds(dead, redis_cluster.nodes[1].port, query=query)
    # When a store connects through it
    with lb.connect(url, prefix=prefix) as store:
        assert isinstance(store, RedisStore)
        nodes = cluster_client(store).get_nodes()
        # Then every node's pool has the URL's cap, and appends ask the URL's durability
        assert {n.redis_connection.connection_pool.max_connections for n in nodes} == {7}
        assert store.durability == Durability(replicas=1, timeout_ms=300)
        with pytest.raises(lb.DurabilityNotConfirmed):  # the test cluster has no replicas
            store.append(lb.StreamId("opts", "main"), 0, "a1", [msg("kept")])


@pytest.mark.parametrize(
    ("url", "first", "nodes"),
    [
        (
            "rediss+cluster://u:p%40ss@10.0.0.5:7001,10.0.0.6:7002/0?ssl_ca_certs=/ca.pem",
            "rediss://u:p%40ss@10.0.0.5:7001/0?ssl_ca_certs=/ca.pem",
            [("10.0.0.5", 7001), ("10.0.0.6", 7002)],
        ),
        (
            "redis+cluster://[::1]:7001,[::1],db.internal/0",
            "redis://[::1]:7001/0",
            [("::1", 7001), ("::1", 6379), ("db.internal", 6379)],
        ),
        ("redis+cluster://10.0.0.5:7001/0", "redis://10.0.0.5:7001/0", [("10.0.0.5", 7001)]),
    ],
)
def test_a_seed_list_is_read_as_redis_py_takes_it(
    url: str, first: str, nodes: list[tuple[str, int]]
) -> None:
    # Given a cluster URL of TLS, credentials and options, IPv6 hosts or seeds without a port
    # When it is read
    from ledger_bus.store.redis.connection import cluster_seeds

    # Then the driver is given the first seed with everything else of the URL, and every seed
    assert cluster_seeds(url) == (first, nodes)
