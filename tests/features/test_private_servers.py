"""The private servers the tests, the demo and the benchmarks start: a lost race for a port."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
import redis

from ledger_bus.demo.server import LocalServer, free_port
from ledger_bus.model.errors import BackendUnavailable
from tests.support.cluster import _ephemeral_low, free_cluster_port
from tests.support.pgserver import LocalPostgres

CLUSTER = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]


@contextmanager
def taken(port: int) -> Iterator[None]:
    """Hold `port` on loopback as another process would."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield


def test_a_cluster_node_whose_bus_port_was_taken_after_the_pick_starts_on_another() -> None:
    # The race CI lost: the pair was free when picked, then something bound port + 10000.
    first = free_cluster_port()
    picks = iter([first])
    with taken(first + 10000):
        server = LocalServer(
            appendonly=False,
            extra=CLUSTER,
            pick_port=lambda: next(picks, None) or free_cluster_port(),
        )
        assert server.port == first
        with server:
            assert server.port != first
            assert redis.Redis(port=server.port).ping()


def test_a_postgres_whose_port_was_taken_after_the_pick_starts_on_another() -> None:
    first = free_port()
    picks = iter([first])
    with taken(first):
        server = LocalPostgres(fsync=False, pick_port=lambda: next(picks, None) or free_port())
        with server:
            assert server.port != first
            with psycopg.connect(server.url) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_port_the_caller_named_is_not_swapped_for_another() -> None:
    first = free_cluster_port()
    with taken(first + 10000):
        server = LocalServer(port=first, appendonly=False, extra=CLUSTER)
        with pytest.raises(BackendUnavailable, match="Address already in use"):
            server.start()
        server.close()


def test_a_restart_keeps_the_port_it_first_bound() -> None:
    with LocalServer(appendonly=True) as server:
        port = server.port
        redis.Redis(port=port).set("k", "v")
        server.stop()
        server.start()
        assert server.port == port
        assert redis.Redis(port=port).get("k") == b"v"


def test_cluster_ports_and_their_bus_ports_stay_below_the_ephemeral_range() -> None:
    # Outgoing connections take ports from that range at any moment; below it, only binds do.
    low = _ephemeral_low()
    for _ in range(50):
        port = free_cluster_port()
        assert port >= 10000
        assert port + 10000 < low
