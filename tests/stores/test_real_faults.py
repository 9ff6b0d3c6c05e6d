"""Real faults: rival processes, lost replies, a Redis killed and restarted."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer
from tests.support.events import msg
from tests.support.helpers import ROOT
from tests.support.proxy import DropProxy


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
                "tests.support.workers",
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
    from ledger_bus.demo.server import free_port

    with (
        lb.connect(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5) as store,
        pytest.raises(lb.BackendUnavailable, match=r"did not answer within 0\.5s"),
    ):
        store.append(lb.StreamId("x", "y"), 0, "a", [msg("nowhere")])


def test_an_append_crossing_maxmemory_is_reported_as_what_happened_at_every_step(
    tmp_path: Path,
) -> None:
    import redis

    with LocalServer(appendonly=False, extra=["--maxmemory-policy", "noeviction"]) as server:
        admin = redis.Redis(port=server.port)
        store = lb.connect(server.url, timeout=2)
        call = {"type": "tool_call", "agent": "a", "tool": "t", "args": {"x": "y" * 200}}
        store.append(lb.StreamId("warm", "main"), 0, "w", [{**call, "attempt_id": "w"}])
        outcomes: Counter[str] = Counter()
        try:
            for step, delta in enumerate(range(-1024, 32768, 128)):  # 128 bytes a step
                admin.config_set("maxmemory", int(admin.info("memory")["used_memory"]) + delta)
                ref = lb.StreamId(f"m{step}", "main")
                said = ""
                try:
                    result = store.append(ref, 0, "a", [{**call, "attempt_id": f"a{step}"}])
                    outcome = "committed" if result.last_version == 1 else "wrong"
                except lb.BackendRefused as err:
                    said, outcome = str(err), "refused"
                assert outcome != "refused" or "memory is full" in said, said
                admin.config_set("maxmemory", 0)
                written = store.stream_version(ref)
                assert written == (1 if outcome == "committed" else 0), (delta, outcome)
                if outcome == "committed" and ref.session_id not in dict(store.sessions()):
                    outcome += ", index deferred"
                outcomes[outcome] += 1
        finally:
            store.close()
            admin.close()
    # The limit was crossed in every way: refused whole, committed with room to spare, and
    # committed by the append that filled the memory, its index refresh deferred.
    assert outcomes["refused"], outcomes
    assert outcomes["committed"], outcomes
    assert outcomes["committed, index deferred"], outcomes


def test_a_reconciler_that_cannot_flag_for_a_full_memory_fails_its_pass_and_its_check(
    tmp_path: Path,
) -> None:
    import redis

    from tests.support.helpers import ledger_cli

    heartbeat = str(tmp_path / "heartbeat")
    with LocalServer(appendonly=False, extra=["--maxmemory-policy", "noeviction"]) as server:
        store = lb.connect(server.url)
        orphan = {"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "a1"}
        store.append(lb.StreamId("full", "main"), 0, "a", [orphan])
        admin = redis.Redis(port=server.port)
        admin.config_set("maxmemory", 1)
        try:
            once = ledger_cli(
                server.url, "lb", "reconcile", "--once", "--grace", "0", "--heartbeat", heartbeat
            )
            check = ledger_cli(server.url, "lb", "reconcile", "--check", "--heartbeat", heartbeat)
            doctor = ledger_cli(server.url, "lb", "--output", "jsonl", "doctor")
        finally:
            admin.config_set("maxmemory", 0)
            admin.close()
            store.close()
    assert once.returncode == 8, once.stderr
    assert "memory is full" in once.stderr.splitlines()[-1]
    assert check.returncode == 1
    assert "could not read or flag 1 session" in check.stderr
    findings = [json.loads(line) for line in doctor.stdout.splitlines()]
    memory = next(f for f in findings if f["topic"] == "memory")
    assert {"level": "fail", "topic": "memory"}.items() <= memory.items()
    assert "ledger-bus du" in memory["detail"]
    assert "ledger-bus archive" in memory["detail"]
