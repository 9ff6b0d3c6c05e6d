"""`ledger-bus doctor` on a Redis that can lose data, on the shipped configuration (the
reconciler's flag surviving a crash there), and on a cluster."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer
from ledger_bus.store.redis import RedisStore
from tests.support.cluster import LocalCluster
from tests.support.events import call
from tests.support.helpers import (
    ROOT,
    ledger_cli,
    reconciler_flags,
    reconciler_now,
)

SHIPPED_CONF = ROOT / "deploy" / "redis.conf"


def doctor(url: str) -> subprocess.CompletedProcess[str]:
    return ledger_cli(url, "lb", "--url", url, "doctor")


def test_doctor_fails_on_a_redis_that_can_lose_data() -> None:
    with LocalServer(appendonly=False, extra=["--maxmemory-policy", "allkeys-lru"]) as server:
        found = doctor(server.url)
    # Its own exit code: not "refused by a rule" (1), which it is not.
    assert found.returncode == 9
    findings = {f["topic"]: f for f in map(json.loads, found.stdout.splitlines())}
    assert findings["persistence"]["level"] == "fail"
    assert findings["eviction"]["level"] == "fail"
    assert "allkeys-lru" in findings["eviction"]["detail"]


def test_doctor_passes_on_the_shipped_config_and_the_reconciler_runs_against_it(
    tmp_path: Path,
) -> None:
    server = LocalServer(
        config_file=str(SHIPPED_CONF),
        appendonly=True,
        directory=str(tmp_path),
        extra=["--appendfsync", "always"],
    )
    with server:
        found = doctor(server.url)
        assert found.returncode == 0, found.stdout + found.stderr
        levels = {f["topic"]: f["level"] for f in map(json.loads, found.stdout.splitlines())}
        assert levels["persistence"] == levels["fsync"] == levels["eviction"] == "ok"

        with lb.connect(server.url) as store:
            store.append(lb.StreamId("prod", "main"), 0, "1", [call("a1")])
            assert reconciler_now(store).run_pass().flagged == 1
        server.kill()
        server.start()
        with lb.connect(server.url) as store:
            assert reconciler_flags(store, "prod") == Counter({"a1": 1}), (
                "the flag survived a crash (AOF)"
            )


def test_doctor_checks_the_slot_coverage_of_a_cluster(redis_cluster: LocalCluster) -> None:
    found = doctor(redis_cluster.url)
    findings = {f["topic"]: f for f in map(json.loads, found.stdout.splitlines())}
    assert findings["cluster"]["level"] == "ok"
    assert "16384/16384 slots assigned" in findings["cluster"]["detail"]
    assert findings["memory"]["detail"].startswith("no maxmemory set (")


def test_doctor_and_du_see_the_cluster_primary_nearest_its_maxmemory(
    redis_cluster: LocalCluster,
) -> None:
    from redis.cluster import RedisCluster

    client = RedisCluster.from_url(redis_cluster.url.replace("redis+cluster", "redis"))
    # Not the node a cluster client asks by default: each primary fills on its own.
    default = client.get_default_node()  # type: ignore[no-untyped-call]
    node = next(n for n in client.get_primaries() if n != default)  # type: ignore[no-untyped-call]
    used = int(client.info("memory", target_nodes=node)["used_memory"])
    client.config_set("maxmemory", str(used + used // 10), target_nodes=node)
    try:
        found = doctor(redis_cluster.url)
        findings = {f["topic"]: f for f in map(json.loads, found.stdout.splitlines())}
        assert findings["memory"]["level"] == "warn", findings["memory"]
        assert "ledger-bus du" in findings["memory"]["detail"]
        with lb.connect(redis_cluster.url) as store:
            assert isinstance(store, RedisStore)
            assert store.memory_info()[1] == used + used // 10
    finally:
        client.config_set("maxmemory", "0", target_nodes=node)
        client.close()
