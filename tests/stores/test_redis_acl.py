"""Least privilege against a real server with ACLs: each role does its whole job and no more,
tenants under their own prefixes see nothing of each other, and an append refused by an ACL
writes nothing at all."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import ledger_bus as lb
from ledger_bus.agent.recorder import Recorder
from ledger_bus.agent.tailer import Tailer, TailerOptions
from ledger_bus.demo.server import LocalServer
from ledger_bus.operations.archiving import archive_session
from ledger_bus.operations.doctor import examine
from ledger_bus.operations.probes import Probed
from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig
from ledger_bus.operations.resolve import resolve_attempt
from ledger_bus.store.base import EventStore
from ledger_bus.store.redis import RedisStore
from ledger_bus.store.redis.acl import ROLES, acl_file
from ledger_bus.store.sql import SqlStore
from tests.support.events import call, msg, result
from tests.support.helpers import ROOT

DEPLOY = ROOT / "deploy"
PASSWORDS = {role: f"secret-{role}" for role in ROLES}


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """A server whose users are the roles under `lb`, and writers of two tenants."""
    path = tmp_path_factory.mktemp("acl") / "users.acl"
    tenants = {"writer": "secret"}
    path.write_text(
        acl_file("lb", PASSWORDS)
        + acl_file("tenantA", tenants, names="tenantA")
        + acl_file("tenantB", tenants, names="tenantB")
        + "user default on nopass ~* &* +@all\n"
    )
    with LocalServer(appendonly=False, extra=["--aclfile", str(path)]) as server:
        yield server


@pytest.fixture
def admin(acl_server: LocalServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=acl_server.port)
    client.flushall()  # this server is the module's own
    yield client
    client.close()


def url(server: LocalServer, user: str, password: str) -> str:
    return f"redis://{user}:{password}@127.0.0.1:{server.port}/0"


@pytest.fixture
def as_role(acl_server: LocalServer, admin: redis.Redis) -> Iterator[Callable[[str], EventStore]]:
    opened: list[EventStore] = []

    def connect(role: str, prefix: str = "lb") -> EventStore:
        user, password = (
            (f"ledger-{role}", PASSWORDS[role])
            if prefix == "lb"
            else (f"{prefix}-writer", "secret")
        )
        store = lb.connect(url(acl_server, user, password), prefix=prefix, timeout=3)
        opened.append(store)
        return store

    yield connect
    for store in opened:
        store.close()


def refused(action: Callable[[], object]) -> str:
    with pytest.raises(lb.BackendRefused) as raised:
        action()
    text = str(raised.value)
    assert "permission" in text, text
    return text


def raw(acl_server: LocalServer, role: str) -> redis.Redis:
    return redis.Redis(port=acl_server.port, username=f"ledger-{role}", password=PASSWORDS[role])


def test_the_shipped_users_acl_is_the_role_table() -> None:
    assert (DEPLOY / "users.acl").read_text() == acl_file("lb")


# -- each role's whole job -----------------------------------------------------------------------


def test_a_writer_records_runs_reads_and_follows_through_a_group(
    as_role: Callable[..., EventStore], admin: redis.Redis
) -> None:
    store = as_role("writer")
    recorder = Recorder(store, "s", "agent", lease_ttl_ms=2000)
    with recorder.run("r1") as run:
        assert run.call("search", {"q": "x"}, lambda q: q.upper()) == "X"
        run.snapshot({"turn": 1})
        run.mutate("task.done", task_id="t1")
    with recorder.run("r1", resume=True) as run:
        assert run.call("search", {"q": "x"}, lambda q: "never called") == "X"
        assert run.restored_state == {"turn": 1}
    assert [e.type for e in store.tail("s", 3)][-1] == "mutation"
    assert store.scan_session("s", limit=2)
    assert store.session_info("s").events > 0
    assert store.open_attempts("s") == []
    assert [s for s, _ in store.sessions()] == ["s"]

    tailer = Tailer(store, "s", "workers", "w1", TailerOptions(block_ms=50, claim_idle_ms=0))
    tailer.join(0)
    store.append(lb.StreamId("s", "feed"), lb.ANY, "f1", [msg("one"), msg("two")])
    batch = tailer.poll()
    store.group_dead_letter("s", "workers", batch[0], "poison")
    tailer.ack(batch[1:])
    assert tailer.stats().pending == 0
    assert tailer.dead_letters()[0]["reason"] == "poison"
    assert store.group_prune("s", "workers", 3_600_000) == []

    admin.script_flush()  # a restarted server, as far as scripts go
    assert store.append(lb.StreamId("s", "feed"), lb.ANY, "f2", [msg("after flush")])
    assert store.acquire_lease("s", "run-r9", "me", 1000)

    # Large results as artifacts, checkpoints on a bounded stream (spec 3.11, 3.12).
    big = "r" * 200_000
    store.append(lb.StreamId("s", "feed"), lb.ANY, "f-big", [msg(big)])
    assert store.read_stream(lb.StreamId("s", "feed"))[-1]["body"] == big
    checkpoints = lb.StreamId("s", "checkpoints")
    store.bound_stream(checkpoints, keep=1)
    for n in range(3):
        store.append(checkpoints, lb.ANY, f"cp{n}", [msg(big + str(n))])
    assert [e["body"] for e in store.read_stream(checkpoints)] == [big + "2"]
    assert len(store.artifact_uses("s")) == 2

    # Frameworks delete their threads: a writer deletes a stream, then a session.
    assert store.delete_stream(lb.StreamId("s", "feed")).events == 4
    assert store.delete_session("s").events > 0
    assert store.scan_session("s") == []
    assert store.append(lb.StreamId("s", "feed"), 0, "f3", [msg("again")]).first_version == 1


def test_a_writer_may_not_list_the_keyspace_nor_administer(
    as_role: Callable[..., EventStore], acl_server: LocalServer
) -> None:
    store = as_role("writer")
    assert isinstance(store, RedisStore)
    refused(store.rebuild_index)
    client = raw(acl_server, "writer")
    for command in (["FLUSHALL"], ["CONFIG", "GET", "*"], ["KEYS", "*"], ["DEL", "lb:{s}:log"]):
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.execute_command(*command)  # type: ignore[no-untyped-call]
    client.close()


def test_a_reconciler_flags_an_orphan_settles_one_by_its_probe_and_forgets_idle_sessions(
    as_role: Callable[..., EventStore], admin: redis.Redis
) -> None:
    writer, reconciler_store = as_role("writer"), as_role("reconciler")
    writer.append(lb.StreamId("crash", "main"), 0, "c1", [call("att-1")])
    # a dead run's call whose tool has a probe: settled under the run's lease
    writer.append(lb.StreamId("paid", "run-r9"), 0, "c1", [call("att-9", "r9", "charge")])
    # an attempt opened by one append and closed by the next (in one append it is never open)
    writer.append(lb.StreamId("idle", "main"), 0, "c1", [call("x")])
    writer.append(lb.StreamId("idle", "main"), 1, "r1", [result("x")])

    reconciler = Reconciler(
        reconciler_store,
        ReconcilerConfig(grace_s=0, prune_after_s=0),
        on_action=lambda r: None,
        probes={"charge": lambda found: Probed.done("paid", "ch_9")},
    )
    time.sleep(0.01)
    admin.script_flush()  # its scripts are loaded again by the reconciler itself
    report = reconciler.run_pass()

    assert report.last_error is None
    assert (report.flagged, report.settled, report.pruned, report.errors) == (1, 1, 1, 0)
    assert reconciler_store.open_attempts("crash")[0].flagged_cursor is not None
    assert reconciler_store.open_attempts("paid") == []
    refused(lambda: reconciler_store.group_create("crash", "g", None))
    refused(lambda: reconciler_store.delete_session("crash"))


def test_an_inspector_reads_exports_and_follows_with_its_own_group_but_writes_nothing(
    as_role: Callable[..., EventStore], acl_server: LocalServer, admin: redis.Redis
) -> None:
    writer, inspector = as_role("writer"), as_role("inspector")
    ref = lb.StreamId("s", "main")
    writer.append(ref, 0, "a1", [msg("one")])
    assert [e["body"] for e in inspector.tail("s", 5)] == ["one"]
    assert inspector.read_stream(ref)[0].version == 1
    assert list(inspector.iter_session("s"))
    assert inspector.session_info("s").events == 1
    assert inspector.open_attempts("s") == []

    tailer = Tailer(inspector, "s", "audit", "i1", TailerOptions(block_ms=50, claim_idle_ms=0))
    tailer.join(0)
    writer.append(ref, 1, "a2", [msg("two"), msg("three")])
    batch = tailer.poll()
    assert [d.event["body"] for d in batch] == ["two", "three"]
    inspector.group_dead_letter("s", "audit", batch[0], "poison")
    tailer.ack(batch[1:])
    assert tailer.stats().pending == 0
    assert inspector.group_claim("s", "audit", "i2", 0, 10) == []
    admin.script_flush()
    assert inspector.group_prune("s", "audit", 3_600_000) == []

    refused(lambda: inspector.append(ref, lb.ANY, "a3", [msg("forged")]))
    refused(lambda: inspector.append(ref, lb.ANY, "a4", [call("att")]))
    refused(lambda: inspector.acquire_lease("s", "run-x", "me", 1000))
    refused(lambda: inspector.delete_session("s"))
    refused(lambda: inspector.delete_stream(ref))
    assert writer.stream_version(ref) == 3, "nothing was written"
    client = raw(acl_server, "inspector")
    for command in (["XADD", "lb:{s}:log", "*", "f", "v"], ["ZADD", "lb:sessions:{lb-00}", 1, "x"]):
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.execute_command(*command)  # type: ignore[no-untyped-call]
    client.close()


def test_an_operator_runs_doctor_rebuilds_resolves_and_archives_but_cannot_wreck_the_server(
    as_role: Callable[..., EventStore], acl_server: LocalServer, admin: redis.Redis, tmp_path: Path
) -> None:
    operator = as_role("operator")
    operator.append(lb.StreamId("ops", "main"), 0, "c1", [call("att-1")])
    admin.delete(*admin.keys("lb:sessions:*"))
    assert isinstance(operator, RedisStore)
    assert operator.rebuild_index() == 1
    assert [s for s, _ in operator.sessions()] == ["ops"]
    resolve_attempt(operator, "ops", "att-1", "unknown")
    assert operator.open_attempts("ops") == []
    with lb.connect(f"sqlite:///{tmp_path / 'archive.db'}") as cold:
        assert isinstance(cold, SqlStore)
        assert archive_session(operator, cold, "ops").events == 2
        assert cold.session_info("ops").events == 2

    client = raw(acl_server, "operator")
    findings = examine(client, "strict", "lb")
    assert {f.topic for f in findings} >= {"version", "memory", "persistence", "cluster"}
    assert "permissions" not in {f.topic for f in findings}
    for command in (
        ["FLUSHALL"],
        ["CONFIG", "SET", "appendonly", "no"],
        ["ACL", "SETUSER", "x", "on"],
        ["FLUSHDB"],
        ["SWAPDB", "0", "1"],
        ["KEYS", "*"],
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.execute_command(*command)  # type: ignore[no-untyped-call]
    client.close()


def test_doctor_without_info_rights_reports_what_it_can(acl_server: LocalServer) -> None:
    client = raw(acl_server, "writer")
    findings = examine(client, "strict", "lb")
    client.close()
    topics = {f.topic: f for f in findings}
    assert topics["permissions"].level == "warn"
    assert "INFO is refused" in topics["permissions"].detail
    assert topics["config"].level == "warn"  # CONFIG GET is refused too, and said so


# -- tenants -------------------------------------------------------------------------------------


def test_a_tenant_cannot_read_write_or_list_another_tenants_sessions(
    as_role: Callable[..., EventStore], acl_server: LocalServer
) -> None:
    a, b = as_role("writer", "tenantA"), as_role("writer", "tenantB")
    a.append(lb.StreamId("secret-plan", "main"), 0, "a1", [msg("A's")])
    b.append(lb.StreamId("b-work", "main"), 0, "b1", [msg("B's")])

    assert [s for s, _ in a.sessions()] == ["secret-plan"]
    assert [s for s, _ in b.sessions()] == ["b-work"]
    assert b.tail("secret-plan", 5) == [], "B's prefix holds no such session"

    # B's credentials with A's prefix: every read, write and listing is refused.
    b_in_a = lb.connect(url(acl_server, "tenantB-writer", "secret"), prefix="tenantA", timeout=3)
    try:
        refused(lambda: b_in_a.tail("secret-plan", 5))
        refused(b_in_a.sessions)
        refused(lambda: b_in_a.append(lb.StreamId("secret-plan", "main"), lb.ANY, "x", [msg("B")]))
        refused(lambda: b_in_a.open_attempts("secret-plan"))
        refused(b_in_a.sessions_with_open_attempts)
    finally:
        b_in_a.close()
    assert a.stream_version(lb.StreamId("secret-plan", "main")) == 1


# -- an append refused by an ACL writes nothing --------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "events"),
    [
        ("~* +@all -xadd", [msg("a"), msg("b"), msg("c")]),
        ("~* +@all -hset", [msg("a"), msg("b"), msg("c")]),
        ("~* +@all -hdel", [result("att-0")]),
        ("~* +@all -hget", [msg("a")]),
        (
            "~lb:{s}:log ~lb:{s}:meta ~lb:{s}:s:* ~lb:{s}:idem:* %R~lb:{s}:open +@all",
            [call("att-1")],
        ),
        ("~lb:{s}:log ~lb:{s}:meta %R~lb:{s}:s:* ~lb:{s}:idem:* +@all", [msg("a"), msg("b")]),
    ],
)
def test_an_append_refused_by_any_acl_rule_writes_nothing_and_a_full_retry_lands_once(
    acl_server: LocalServer, admin: redis.Redis, rules: str, events: list[dict[str, object]]
) -> None:
    admin.execute_command("ACL", "SETUSER", "narrow", "reset", "on", ">pw", *rules.split())  # type: ignore[no-untyped-call]
    full = lb.connect(f"redis://127.0.0.1:{acl_server.port}/0", timeout=3)
    narrow = lb.connect(url(acl_server, "narrow", "pw"), timeout=3)
    ref = lb.StreamId("s", "main")
    full.append(lb.StreamId("s", "setup"), 0, "setup", [call("att-0")])
    before = admin.xlen("lb:{s}:log")
    try:
        said = refused(lambda: narrow.append(ref, 0, "a1", events))
        if "-xadd" in rules:  # refused by the script's own check, which names what and where
            assert "may not XADD lb:{s}:log" in said
        assert admin.xlen("lb:{s}:log") == before, "no event of a refused append was written"
        assert full.stream_version(ref) == 0

        result = full.append(ref, 0, "a1", events)

        assert (result.first_version, result.last_version) == (1, len(events))
        assert [e.version for e in full.read_stream(ref)] == list(range(1, len(events) + 1))
    finally:
        full.close()
        narrow.close()
        admin.execute_command("ACL", "DELUSER", "narrow")  # type: ignore[no-untyped-call]


def test_the_acl_command_prints_the_file_with_passwords_from_the_environment(
    acl_server: LocalServer, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "LEDGER_BUS_PASSWORD_INSPECTOR": "peek"}
    done = subprocess.run(
        [sys.executable, "-m", "ledger_bus", "--prefix", "t9", "acl", "--names", "t9"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == acl_file("t9", {"inspector": "peek"}, names="t9")
    path = tmp_path / "users.acl"
    path.write_text(done.stdout)
    with LocalServer(appendonly=False, extra=["--aclfile", str(path)]) as server:
        store = lb.connect(url(server, "t9-inspector", "peek"), prefix="t9", timeout=3)
        assert store.tail("s", 1) == []
        refused(lambda: store.append(lb.StreamId("s", "m"), 0, "a", [msg("x")]))
        store.close()
        with pytest.raises(lb.BackendRefused, match="credentials"):
            lb.connect(url(server, "t9-writer", "anything"), prefix="t9", timeout=3).tail("s", 1)
