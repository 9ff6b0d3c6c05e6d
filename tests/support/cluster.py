"""A Redis Cluster of private servers on loopback, for tests and benchmarks: three primaries
sharing the 16384 slots, each node on a free port whose bus port is free too."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from pathlib import Path

import redis

from ledger_bus.demo.server import LocalServer
from ledger_bus.model.errors import BackendUnavailable


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to connections that bind none (Linux default 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too, as cluster nodes need.

    Both ports come from below the kernel's ephemeral range: a port in that range can be taken
    by any outgoing connection between this check and the node's bind, and a node that cannot
    bind its bus port exits.
    """
    top = max(_ephemeral_low() - 10001, 10001)
    for _ in range(1000):
        port = random.randint(10000, top)
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise BackendUnavailable("no free pair of loopback ports for a cluster node")


class LocalCluster:
    """A Redis Cluster of `size` primaries on loopback ports, each with its own directory, and
    `replicas` replicas for each primary."""

    SLOTS = 16384

    def __init__(self, size: int = 3, replicas: int = 0):
        def node() -> LocalServer:
            return LocalServer(
                pick_port=free_cluster_port,
                appendonly=False,
                extra=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"],
            )

        self.nodes = [node() for _ in range(size)]
        self.replicas = [[node() for _ in range(replicas)] for _ in range(size)]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}/0"

    def start(self, wait: float = 30.0) -> LocalCluster:
        try:
            return self._start(wait)
        except BaseException:
            self.close()
            raise

    def _start(self, wait: float) -> LocalCluster:
        everyone = [*self.nodes, *(r for group in self.replicas for r in group)]
        for server in everyone:
            server.start()
        clients = [redis.Redis(port=n.port, socket_timeout=5) for n in everyone]
        try:
            share = self.SLOTS // len(self.nodes)
            for index, client in enumerate(clients[: len(self.nodes)]):
                first = index * share
                last = self.SLOTS - 1 if index == len(self.nodes) - 1 else first + share - 1
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)  # type: ignore[no-untyped-call]
            met = 0.0

            def known() -> bool:
                nonlocal met
                if all(_known(c, len(everyone)) for c in clients):
                    return True
                # A handshake that did not complete is dropped by the node after a while; a
                # MEET again (which changes nothing for a node already known) starts it over.
                if time.monotonic() - met > 5:
                    for server in everyone[1:]:
                        clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", server.port)  # type: ignore[no-untyped-call]
                    met = time.monotonic()
                return False

            deadline = time.monotonic() + wait
            self._wait(
                known,
                deadline,
                lambda: (
                    "nodes known to each, by port: "
                    + ", ".join(
                        f"{n.port}: {_count(c)}" for n, c in zip(everyone, clients, strict=True)
                    )
                ),
            )
            for primary, group in zip(self.nodes, self.replicas, strict=True):
                primary_id = _command(redis.Redis(port=primary.port), "CLUSTER", "MYID")
                for replica in group:
                    _command(redis.Redis(port=replica.port), "CLUSTER", "REPLICATE", primary_id)
            self._wait(lambda: all(_ok(c) for c in clients), deadline)
            for group in self.replicas:
                for replica in group:
                    self._wait(lambda r=replica: _linked(r.port), deadline)  # type: ignore[misc]
        finally:
            for client in clients:
                client.close()
        return self

    @staticmethod
    def _wait(
        condition: Callable[[], bool], deadline: float, state: Callable[[], str] | None = None
    ) -> None:
        while not condition():
            if time.monotonic() > deadline:
                found = f" ({state()})" if state is not None else ""
                raise BackendUnavailable(f"the cluster did not reach state ok{found}")
            time.sleep(0.1)

    def close(self) -> None:
        for server in [*self.nodes, *(r for group in self.replicas for r in group)]:
            server.close()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _command(client: redis.Redis, *args: object) -> str:
    try:
        found = client.execute_command(*args)  # type: ignore[no-untyped-call]
    finally:
        client.close()
    return found.decode() if isinstance(found, bytes) else str(found)


def _count(client: redis.Redis) -> int:
    return int(client.cluster("INFO").get("cluster_known_nodes", 0))


def _known(client: redis.Redis, count: int) -> bool:
    return _count(client) >= count


def _ok(client: redis.Redis) -> bool:
    return bool(client.cluster("INFO").get("cluster_state") == "ok")


def _linked(port: int) -> bool:
    client = redis.Redis(port=port)
    try:
        return bool(client.info("replication").get("master_link_status") == "up")
    finally:
        client.close()
