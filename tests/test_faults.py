"""Real faults: rival processes, lost replies, a Redis killed and restarted."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import ledger_bus as lb
from ledger_bus.server import LocalServer
from tests.proxy import DropProxy

ROOT = Path(__file__).resolve().parent.parent


def msg(body: str) -> dict[str, str]:
    return {"type": "message", "agent": "a", "body": body}


@pytest.mark.slow
def test_four_processes_appending_to_one_stream_get_contiguous_versions_exactly_once(
    redis_url: str, prefix: str
) -> None:
    per_worker = 150
    start_at = time.time() + 3  # every process has started and connected by then
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.workers",
                "race",
                redis_url,
                prefix,
                f"w{i}",
                str(per_worker),
                str(start_at),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    conflicts = [int(p.communicate(timeout=120)[0]) for p in workers]
    assert [p.returncode for p in workers] == [0, 0, 0, 0]

    with lb.connect(redis_url, prefix=prefix) as store:
        events = store.read_stream(lb.StreamId("race", "shared"))

    assert [e.version for e in events] == list(range(1, 4 * per_worker + 1))
    bodies = Counter(e["body"] for e in events)
    assert set(bodies.values()) == {1}
    assert set(bodies) == {f"w{i}-{n}" for i in range(4) for n in range(per_worker)}
    # Each worker's own appends keep their order.
    for i in range(4):
        mine = [int(e["body"].split("-")[1]) for e in events if e.agent == f"w{i}"]
        assert mine == list(range(per_worker))
    assert sum(conflicts) > 0, "the workers never raced; the test proved nothing"


def test_an_append_whose_reply_is_lost_is_retried_and_lands_exactly_once(
    redis_server: LocalServer, prefix: str
) -> None:
    proxy = DropProxy(redis_server.port)
    store = lb.connect(f"redis://127.0.0.1:{proxy.port}/0", prefix=prefix, timeout=5)
    direct = lb.connect(redis_server.url, prefix=prefix)
    try:
        ref = lb.StreamId("lost", "main")
        store.append(ref, 0, "warm-up", [msg("loads the script")])

        proxy.drop_next_reply_to(b"EVALSHA")
        result = store.append(ref, 1, "a1", [msg("sent once, answered twice")])

        assert proxy.dropped == 1
        assert result.deduplicated, "the first attempt committed; the retry must find it"
        assert (result.first_version, result.last_version) == (2, 2)
        assert [e["body"] for e in direct.read_stream(ref)] == [
            "loads the script",
            "sent once, answered twice",
        ]
        assert len(direct.scan_session("lost")) == 2
    finally:
        store.close()
        direct.close()
        proxy.close()


def test_a_killed_redis_with_aof_keeps_every_acknowledged_append(
    own_server: LocalServer, request: pytest.FixtureRequest
) -> None:
    store = lb.connect(own_server.url, timeout=10)
    request.addfinalizer(store.close)
    ref = lb.StreamId("crash", "main")
    for i in range(50):
        store.append(ref, i, f"a{i}", [msg(str(i))])

    own_server.kill()
    own_server.start()

    assert [e["body"] for e in store.read_stream(ref)] == [str(i) for i in range(50)]
    assert store.append(ref, 49, "a49", [msg("49")]).deduplicated
    assert store.append(ref, 50, "a50", [msg("50")]).first_version == 51


def test_an_append_during_a_short_outage_waits_for_the_server_and_lands_once(
    own_server: LocalServer, request: pytest.FixtureRequest
) -> None:
    store = lb.connect(own_server.url, timeout=15)
    request.addfinalizer(store.close)
    ref = lb.StreamId("outage", "main")
    store.append(ref, 0, "a0", [msg("before")])
    own_server.kill()
    restart = threading.Timer(1.0, own_server.start)
    restart.start()
    try:
        result = store.append(ref, 1, "a1", [msg("during")])
    finally:
        restart.join()
    assert result.first_version == 2
    assert [e["body"] for e in store.read_stream(ref)] == ["before", "during"]


@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_an_append_after_the_server_lost_its_scripts_loads_them_and_lands_once(
    backend: str, request: pytest.FixtureRequest
) -> None:
    store = request.getfixturevalue(f"{backend}_store")
    ref = lb.StreamId("flushed", "main")
    store.append(ref, 0, "a0", [msg("before")])
    store.client.script_flush()  # as after a restart, or a failover to a replica
    assert store.append(ref, 1, "a1", [msg("after")]).first_version == 2
    assert store.append(ref, 1, "a1", [msg("after")]).deduplicated
    assert [e["body"] for e in store.read_stream(ref)] == ["before", "after"]


def test_an_unreachable_backend_is_reported_within_the_deadline() -> None:
    from ledger_bus.server import free_port

    with (
        lb.connect(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5) as store,
        pytest.raises(lb.BackendUnavailable, match=r"did not answer within 0\.5s"),
    ):
        store.append(lb.StreamId("x", "y"), 0, "a", [msg("nowhere")])
