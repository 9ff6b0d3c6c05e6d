"""Agents on a shared Redis: consumer groups, takeover, dead letters, the recorder and its lease.

Consumers and runs are real processes, killed with SIGKILL where the test says so.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import ledger_bus as lb
from ledger_bus.agent.recorder import Recorder, RequestNotRecorded, UnresolvedAttempt
from ledger_bus.agent.tailer import Tailer, TailerOptions, render_context
from ledger_bus.demo.server import LocalServer
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import EventStore
from ledger_bus.store.steps import Op
from tests.support.events import msg
from tests.support.helpers import kill, kill_when_ready, start_recorded

ROOT = Path(__file__).resolve().parent.parent


def append_bodies(store: EventStore, session: str, bodies: list[str]) -> None:
    ref = lb.StreamId(session, "feed")
    for start in range(0, len(bodies), 100):
        chunk = bodies[start : start + 100]
        store.append(ref, lb.ANY, f"feed-{start}", [msg(b, "writer") for b in chunk])


def wait_for(condition: Callable[[], bool], timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def run_until_dead_letter(tailer: Tailer, handle: Callable[[RecordedEvent], None]) -> None:
    """Run the tailer in a thread until some event has been moved to its dead-letter stream."""
    stop = threading.Event()
    worker = threading.Thread(target=tailer.run, args=(handle, stop))
    worker.start()
    try:
        wait_for(lambda: bool(tailer.dead_letters()), timeout=30, what="a dead letter")
    finally:
        stop.set()
        worker.join()


class Consumers:
    """Consumer processes of one group, each logging what it handled and acked to its own file."""

    def __init__(self, url: str, prefix: str, session: str, folder: Path):
        self.url, self.prefix, self.session, self.folder = url, prefix, session, folder
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: set[str] = set()

    def start(self, name: str, claim_idle_ms: int = 0, handle_ms: int = 0) -> None:
        args = [
            sys.executable,
            "-m",
            "tests.support.workers",
            "consume",
            self.url,
            self.prefix,
            self.session,
            name,
            str(self.folder / f"{name}.log"),
            str(claim_idle_ms),
            str(handle_ms),
        ]
        self.procs[name] = subprocess.Popen(args, cwd=ROOT)

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()
        self.killed.add(name)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            proc.wait(timeout=30)

    def log(self, name: str) -> tuple[list[str], list[str]]:
        path = self.folder / f"{name}.log"
        handled: list[str] = []
        acked: list[str] = []
        for line in path.read_text().splitlines() if path.exists() else []:
            kind, _, rest = line.partition(" ")
            (handled if kind == "H" else acked).extend(rest.split())
        return handled, acked

    def handled(self) -> Counter[str]:
        return Counter(body for name in self.procs for body in self.log(name)[0])


@pytest.fixture
def consumers(redis_url: str, prefix: str, tmp_path: Path) -> Iterator[Consumers]:
    """Consumer processes for one session (`ses`); whatever happens, none outlives the test."""
    started = Consumers(redis_url, prefix, "ses", tmp_path)
    yield started
    for proc in started.procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def pending(store: EventStore, session: str) -> int:
    return Tailer(store, session, "group", "probe").stats().pending


def test_two_consumers_share_the_events_with_none_lost_and_none_handled_twice(
    consumers: Consumers, redis_store: EventStore
) -> None:
    store = redis_store  # other processes share it: a real server
    Tailer(store, "ses", "group", "setup").join(0)
    consumers.start("a", handle_ms=1)
    consumers.start("b", handle_ms=1)
    probe = Tailer(store, "ses", "group", "probe")
    wait_for(lambda: probe.stats().consumers >= 2, what="both consumers to join")
    bodies = [f"e{i}" for i in range(600)]
    append_bodies(store, "ses", bodies)

    wait_for(lambda: sum(consumers.handled().values()) >= 600, what="600 deliveries")
    consumers.stop()

    handled = consumers.handled()
    assert set(handled) == set(bodies)
    assert set(handled.values()) == {1}
    assert all(consumers.log(name)[0] for name in ("a", "b")), "both consumers took a share"
    assert pending(store, "ses") == 0


def test_a_consumer_killed_before_acking_has_its_events_taken_over(
    consumers: Consumers, redis_store: EventStore
) -> None:
    store = redis_store  # other processes share it: a real server
    Tailer(store, "ses", "group", "setup").join(0)
    consumers.start("slow", handle_ms=60_000)  # reads a batch, then never gets to ack it
    append_bodies(store, "ses", [f"e{i}" for i in range(50)])
    wait_for(
        lambda: Tailer(store, "ses", "group", "probe").stats().pending > 0,
        what="the slow consumer to read",
    )
    consumers.kill("slow")

    consumers.start("rescuer", claim_idle_ms=300)
    wait_for(lambda: len(consumers.handled()) == 50, what="all 50 handled")
    consumers.stop()

    rescued, acked = consumers.log("rescuer")
    assert sorted(rescued, key=lambda b: int(b[1:])) == [f"e{i}" for i in range(50)]
    assert sorted(acked) == sorted(rescued)
    assert pending(store, "ses") == 0


@pytest.mark.slow
def test_ten_thousand_events_through_four_consumers_with_random_sigkills(
    consumers: Consumers, redis_store: EventStore
) -> None:
    store = redis_store  # other processes share it: a real server
    Tailer(store, "ses", "group", "setup").join(0)
    live = [f"c{i}" for i in range(4)]
    for name in live:
        consumers.start(name, claim_idle_ms=500, handle_ms=2)
    bodies = [f"e{i}" for i in range(10_000)]
    writer = threading.Thread(target=append_bodies, args=(store, "ses", bodies))
    writer.start()

    chance = random.Random(20261129)
    started = len(live)
    deadline = time.monotonic() + 240
    caught_mid_batch = 0  # kills that left handled events unacked: the case under test
    while len(consumers.handled()) < len(bodies) and time.monotonic() < deadline:
        time.sleep(chance.uniform(0.1, 0.4))
        # Kills go on until one is seen to cost a redelivery: a kill whose handled events were
        # unacked in the log may still have had its ack reach Redis first.
        redelivered = any(n > 1 for n in consumers.handled().values())
        if len(consumers.killed) < 8 or not caught_mid_batch or not redelivered:
            victim = live.pop(chance.randrange(len(live)))
            consumers.kill(victim)
            seen_by, acked_by = consumers.log(victim)
            caught_mid_batch += bool(Counter(seen_by) - Counter(acked_by))
            name = f"c{started}"
            started += 1
            consumers.start(name, claim_idle_ms=500, handle_ms=2)
            live.append(name)
    writer.join()
    wait_for(lambda: len(consumers.handled()) == len(bodies), timeout=120, what="every event")
    wait_for(lambda: pending(store, "ses") == 0, timeout=60, what="every event acked")
    consumers.stop()

    handled = consumers.handled()
    assert set(handled) == set(bodies), "every event reached the group at least once"
    unacked_handlings: Counter[str] = Counter()
    acks: Counter[str] = Counter()
    for name in consumers.procs:
        seen, acked = consumers.log(name)
        acks.update(acked)
        unacked = Counter(seen) - Counter(acked)
        if name not in consumers.killed:
            assert not unacked, f"{name} lived and acked all it handled"
        unacked_handlings.update(unacked)
    assert max(acks.values()) == 1, "no acked event was ever delivered again"
    duplicates = handled - Counter(set(bodies))
    # Every duplicate is an earlier handling by a killed consumer that never acked it...
    assert not duplicates - unacked_handlings
    # ...and every such handling was delivered again, but for at most one batch per kill whose
    # ack reached Redis just before the kill and never reached the log file.
    unlogged = unacked_handlings - duplicates
    assert sum(unlogged.values()) <= 20 * len(consumers.killed)
    assert caught_mid_batch, "no kill landed between a handle and its ack: nothing was proved"
    assert sum(duplicates.values()) > 0


def test_a_poison_event_lands_in_the_dead_letter_stream_after_the_configured_deliveries(
    store: EventStore,
) -> None:
    options = TailerOptions(block_ms=50, claim_idle_ms=50, max_deliveries=3)
    tailer = Tailer(store, "poison", "group", "c1", options)
    tailer.join(0)
    append_bodies(store, "poison", ["good-1", "poison", "good-2"])
    handled: list[str] = []
    attempts = Counter[str]()

    def handle(event: RecordedEvent) -> None:
        attempts[event["body"]] += 1
        if event["body"] == "poison":
            raise ValueError("cannot handle this one")
        handled.append(event["body"])

    run_until_dead_letter(tailer, handle)

    dead = tailer.dead_letters()
    assert [d["reason"] for d in dead] == ["not acked after 3 deliveries"]
    assert dead[0]["stream"] == "feed"
    assert attempts["poison"] == 3
    assert sorted(handled) == ["good-1", "good-2"]
    assert tailer.stats().pending == 0


def test_a_new_group_starts_at_the_end_of_the_session(store: EventStore) -> None:
    append_bodies(store, "late", ["old-1", "old-2"])
    tailer = Tailer(store, "late", "newcomers", "c1", TailerOptions(block_ms=50))

    context = tailer.join(5)
    assert [e["body"] for e in context] == ["old-1", "old-2"]
    assert tailer.poll() == []
    store.append(lb.StreamId("late", "feed"), lb.ANY, "new", [msg("new-1", "writer")])
    assert [d.event["body"] for d in tailer.poll()] == ["new-1"]


def test_an_event_committed_while_a_tailer_joins_an_empty_session_is_delivered(
    store: EventStore,
) -> None:
    class Joining(Tailer):
        def context_op(self, n: int = 20) -> Op[list[RecordedEvent]]:
            events = yield from super().context_op(n)
            # Another agent commits between the context read and the group's creation.
            feed = lb.StreamId("fresh", "feed")
            yield from store.append_op(feed, lb.ANY, "between", [msg("between")])
            return events

    tailer = Joining(store, "fresh", "g", "c1", TailerOptions(block_ms=50))
    assert tailer.join(5) == []
    assert [d.event["body"] for d in tailer.poll()] == ["between"]


def test_tailer_filters_skip_its_own_agent_and_unwanted_types(store: EventStore) -> None:
    tailer = Tailer(
        store, "filtered", "g", "me", TailerOptions(block_ms=50, skip_agent="me", types={"message"})
    )
    tailer.join(0)
    ref = lb.StreamId("filtered", "feed")
    store.append(
        ref,
        lb.ANY,
        "1",
        [
            msg("mine", agent="me"),
            msg("theirs", agent="them"),
            {"type": "mutation", "agent": "them", "kind": "k"},
        ],
    )
    assert [d.event["body"] for d in tailer.poll()] == ["theirs"]
    assert tailer.stats().pending == 1  # the two filtered ones were acked on the spot


def test_tail_shows_no_event_of_another_session_while_sessions_interleave(
    store: EventStore,
) -> None:
    def write(session: str) -> None:
        for i in range(100):
            event = msg(f"{session}-{i}", "writer")
            store.append(lb.StreamId(session, "feed"), lb.ANY, str(i), [event])

    writers = [threading.Thread(target=write, args=(s,)) for s in ("left", "right")]
    for thread in writers:
        thread.start()
    seen = []
    while any(t.is_alive() for t in writers):
        seen += store.tail("left", 20)
    for thread in writers:
        thread.join()
    seen += store.tail("left", 20)
    assert {e["body"].split("-")[0] for e in seen} == {"left"}
    assert [e["body"] for e in store.tail("left", 3)] == ["left-97", "left-98", "left-99"]


def test_context_renders_compact_lines_for_a_model(store: EventStore) -> None:
    from ledger_bus.agent.tailer import render_context

    append_bodies(store, "ctx", ["first line\nsecond line"])
    text = render_context(store.tail("ctx", 5))
    assert text.endswith("writer message: first line second line")
    assert "\n" not in text


# -- the recorder -----------------------------------------------------------------------------


def test_a_recorded_call_writes_its_request_first_and_its_result_linked_to_it(
    store: EventStore,
) -> None:
    recorder = Recorder(store, "rec", "agent")
    with recorder.run("r1") as run:
        assert store.lease_alive("rec", "run-r1")
        result = run.call("add", {"a": 2, "b": 3}, lambda a, b: a + b)
        with pytest.raises(ZeroDivisionError):
            run.call("divide", {"a": 1, "b": 0}, lambda a, b: a / b)
        run.mutate("task.done", task_id="jwt")
    assert result == 5
    assert not store.lease_alive("rec", "run-r1")

    events = store.read_stream(lb.StreamId("rec", "run-r1"))
    kinds = [(e.type, e.get("kind") or e.get("tool")) for e in events]
    assert kinds == [
        ("mutation", "run.started"),
        ("tool_call", "add"),
        ("tool_result", "add"),
        ("tool_call", "divide"),
        ("tool_result", "divide"),
        ("mutation", "task.done"),
        ("mutation", "run.finished"),
    ]
    add_call, add_result = events[1], events[2]
    assert add_result.parents == [add_call.event_id]
    assert add_result.attempt_id == add_call.attempt_id
    assert events[4]["status"] == "error"
    assert events[4]["result"]["error"] == "ZeroDivisionError"
    assert events[0]["capabilities"]["request_before_call"] == "strict"


def test_a_recorder_whose_request_write_fails_never_runs_the_tool(own_server: LocalServer) -> None:
    store = lb.connect(own_server.url, timeout=0.5)
    recorder = Recorder(store, "down", "agent")
    ran: list[str] = []
    failure: list[BaseException] = []
    try:
        with recorder.run("r1") as run:
            own_server.kill()
            try:
                run.call("deploy", {"env": "prod"}, ran.append)
            except RequestNotRecorded as err:
                failure.append(err)
                raise
    except lb.LedgerError:
        pass
    finally:
        store.close()
    assert ran == []
    assert failure, "the call must fail with RequestNotRecorded"
    own_server.start()
    with lb.connect(own_server.url) as again:
        calls = [
            e for e in again.read_stream(lb.StreamId("down", "run-r1")) if e.type == "tool_call"
        ]
    assert calls == []


def test_telemetry_only_recorders_claim_no_recovery(store: EventStore) -> None:
    recorder = Recorder(store, "tele", "agent", durable=False)
    assert recorder.capabilities.to_dict()["recovery"] == "unsupported"
    with pytest.raises(lb.LedgerError):
        recorder.run("r1", resume=True)


def test_a_resumed_run_finds_its_delegations_instead_of_asking_again(store: EventStore) -> None:
    recorder = Recorder(store, "deleg-resume", "orchestrator")
    with recorder.run("o1") as run:
        first = run.delegate("writer", "draft the post")
        done = run.delegate("editor", "review it")
        run.finish_delegation(done, "ok", {"review": "fine"})
    with recorder.run("o1", resume=True) as run:
        again = run.delegate("writer", "draft the post")
        redone = run.delegate("editor", "review it")
        run.finish_delegation(again, "ok", {"draft": "v1"})
        run.finish_delegation(redone, "ok", {"review": "fine"})
    assert (again.child_run_id, again.call_event_id) == (first.child_run_id, first.call_event_id)
    events = store.read_stream(lb.StreamId("deleg-resume", "run-o1"))
    calls = Counter(e.attempt_id for e in events if e.type == "tool_call")
    results = Counter(e.attempt_id for e in events if e.type == "tool_result")
    assert calls == {first.attempt_id: 1, done.attempt_id: 1}
    assert results == {first.attempt_id: 1, done.attempt_id: 1}


def test_a_run_resumed_twice_after_kills_says_each_thing_once(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    # Given a run killed inside its last call, twice, each time after saying what it says
    marker = tmp_path / "ran"
    args = ["tests.support.workers", "chatty", redis_url, prefix, "chat", str(marker)]
    for _ in range(2):
        marker.unlink(missing_ok=True)
        kill_when_ready(
            [*args, "hang"],
            lambda: marker.exists() and "prod started" in marker.read_text(),
            "the run",
        )
    # When it is resumed a third time and finishes
    finished = subprocess.run(
        [sys.executable, "-m", *args, "finish"], cwd=ROOT, timeout=60, check=False
    )
    assert finished.returncode == 0
    # Then every message and mutation it said is in the session once, as the context shows it
    store = lb.connect(redis_url, prefix=prefix)
    said = [
        e.get("body") or e.get("kind")
        for e in store.scan_session("chat")
        if e.type == "message" or e.get("kind") in ("task.claimed", "task.done")
    ]
    assert said == ["w3 starting 30 lookups", "task.claimed", "halfway", "task.done"]
    assert render_context(store.tail("chat", 50)).count("w3 starting 30 lookups") == 1
    store.close()


def test_a_resumed_run_that_says_something_else_writes_it(store: EventStore) -> None:
    # Given a run that said two things and crashed
    recorder = Recorder(store, "diverge", "agent")
    run = recorder.run("r1")
    run.__enter__()
    run.message("plan A")
    run.message("step 1")
    run._let_go()  # as a crash leaves it: no run.finished
    # When its resume says the first the same and the second otherwise
    with recorder.run("r1", resume=True) as again:
        same = again.message("plan A")
        other = again.message("step 1, the other way")
    # Then the first is the one recorded, the second written
    bodies = [e.get("body") for e in store.read_stream(lb.StreamId("diverge", "run-r1"))]
    assert [b for b in bodies if b] == ["plan A", "step 1", "step 1, the other way"]
    first = next(e for e in store.read_stream(lb.StreamId("diverge", "run-r1")) if e.get("body"))
    assert same == first.event_id
    assert other != same


def test_resume_restores_the_last_checkpoint(store: EventStore) -> None:
    recorder = Recorder(store, "checkpoints", "agent")
    with recorder.run("r1") as run:
        for turn in range(3):
            run.message(f"turn {turn}")
            run.snapshot({"turn": turn})
    with recorder.run("r1", resume=True) as run:
        assert run.restored_state == {"turn": 2}
        run.snapshot({"turn": 3})
        run.snapshot({"turn": 4})  # nothing written in between: a second snapshot all the same
    with recorder.run("r1", resume=True) as run:
        assert run.restored_state == {"turn": 4}
    with recorder.run("r2", resume=True) as run:
        assert run.restored_state is None


def test_delegation_links_the_child_run_to_the_call_that_asked_for_it(store: EventStore) -> None:
    orchestrator = Recorder(store, "deleg", "orchestrator")
    lead = Recorder(store, "deleg", "engineering-lead")
    with orchestrator.run("o1") as run:
        asked = run.delegate("engineering-lead", "rotate the JWT keys")
        with lead.run(asked.child_run_id, parents=[asked.call_event_id]) as child:
            child.message("backend-dev will handle")
        run.finish_delegation(asked, "ok", {"accepted": True})

    started = store.read_stream(lb.StreamId("deleg", f"run-{asked.child_run_id}"))[0]
    assert started.parents == [asked.call_event_id]
    calls = store.read_stream(lb.StreamId("deleg", "run-o1"))
    result = next(e for e in calls if e.type == "tool_result")
    assert (result["tool"], result.attempt_id, result.parents) == (
        "delegate",
        asked.attempt_id,
        [asked.call_event_id],
    )


def test_a_killed_runs_lease_disappears_and_resume_skips_done_calls_and_stops_at_unresolved(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    store = redis_store  # other processes share it: a real server
    proc, marker = start_recorded(redis_url, prefix, tmp_path, "unsafe")
    assert store.lease_alive("crash", "run-r1")

    kill(proc)
    wait_for(
        lambda: not store.lease_alive("crash", "run-r1"), timeout=10, what="the lease to expire"
    )

    recorder = Recorder(store, "crash", "agent")
    calls: list[str] = []
    with recorder.run("r1", resume=True) as run:
        assert run.restored_state == {"turn": 1, "notes": ["looked up the ticket"]}
        looked_up = run.call("lookup", {"ticket": 7}, lambda ticket: calls.append("lookup"))
        assert looked_up == {"done": "lookup 7"}
        with pytest.raises(UnresolvedAttempt) as raised:
            run.call("deploy", {"env": "prod"}, lambda env: calls.append("deploy"))
    assert calls == [], "nothing ran again: one result was recorded, the other is unresolved"
    assert raised.value.attempt_id == "r1/c2#1"
    assert marker.read_text().splitlines() == ["lookup 7", "deploy prod started"]


def test_resume_replays_a_call_declared_safe_under_a_new_attempt(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    store = redis_store  # other processes share it: a real server
    proc, _ = start_recorded(redis_url, prefix, tmp_path, "safe")
    kill(proc)

    recorder = Recorder(store, "crash", "agent")
    with recorder.run("r1", resume=True, lease_wait_ms=10_000) as run:
        run.call("lookup", {"ticket": 7}, lambda ticket: pytest.fail("must not run again"))
        assert (
            run.call("deploy", {"env": "prod"}, lambda env: f"deployed {env}", safe_to_replay=True)
            == "deployed prod"
        )

    events = store.read_stream(lb.StreamId("crash", "run-r1"))
    results = {e.attempt_id: e for e in events if e.type == "tool_result"}
    assert results["r1/c2#1"]["result"]["outcome"] == "unknown"
    assert results["r1/c2#2"]["result"] == "deployed prod"
    assert any(e.get("kind") == "tool.declared" and e["safe_to_replay"] for e in events)


@pytest.mark.slow
def test_the_demo_runs_to_completion_and_a_killed_worker_is_taken_over() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LEDGER_BUS_URL", "LEDGER_BUS_PREFIX")}
    done = subprocess.run(
        [sys.executable, "-m", "ledger_bus", "demo", "--no-live", "--private"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "8/8 tasks done" in done.stdout
    assert "SIGKILL" in done.stdout
    assert "was killed mid-call; another worker took over its task" in done.stdout
    assert "the reconciler flagged" in done.stdout
    assert done.stdout.count("reconcile.unresolved") == 1


def test_the_tailer_works_on_a_redis_cluster(cluster_store: EventStore) -> None:
    tailer = Tailer(
        cluster_store,
        "clustered",
        "g",
        "c1",
        TailerOptions(block_ms=50, claim_idle_ms=50, max_deliveries=2),
    )
    tailer.join(0)
    append_bodies(cluster_store, "clustered", ["one", "poison", "two"])

    def handle(event: RecordedEvent) -> None:
        if event["body"] == "poison":
            raise ValueError("cannot")

    run_until_dead_letter(tailer, handle)
    assert [d["event_id"] for d in tailer.dead_letters()] == [
        e.event_id for e in cluster_store.scan_session("clustered") if e["body"] == "poison"
    ]
    assert tailer.stats().pending == 0
    assert tailer.stats().lag == 0


def test_a_loop_killed_anywhere_rebuilds_its_state_from_a_snapshot_and_the_tail(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    """examples/snapshot_loop.py, SIGKILLed mid-run and started again: its state is the
    newest snapshot plus the turns after it, and it goes on from the next turn, each turn
    recorded once."""
    env = {**os.environ, "LEDGER_BUS_PREFIX": prefix}
    example = [sys.executable, str(ROOT / "examples" / "snapshot_loop.py"), redis_url]
    first = subprocess.Popen(
        [*example, "loop-1", "run-1", "1000000"], stdout=subprocess.PIPE, text=True, env=env
    )
    assert first.stdout is not None
    while int(first.stdout.readline().split()[0]) < 12:
        pass
    kill(first)
    recorder = Recorder(redis_store, "loop-1", "looper")
    recovered = recorder.recover("run-1")
    assert recovered.state is not None
    assert recovered.state["turn"] % 5 == 0
    assert recovered.state["turn"] >= 10
    replayed = [e["turn"] for e in recovered.events]
    assert replayed == list(
        range(recovered.state["turn"] + 1, recovered.state["turn"] + 1 + len(replayed))
    )
    last = recovered.state["turn"] + len(replayed)

    second = subprocess.run(
        [*example, "loop-1", "run-1", str(last + 7)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    printed = [line.split() for line in second.stdout.splitlines()]
    assert int(printed[0][0]) == last + 1
    assert printed[-1] == [str(last + 7), str(sum(t * t for t in range(1, last + 8)))]
    done = [
        e["turn"]
        for e in redis_store.read_stream(lb.StreamId("loop-1", "run-run-1"))
        if e.get("kind") == "turn.done"
    ]
    assert done == list(range(1, last + 8))


def test_a_snapshot_of_an_earlier_run_under_the_same_id_is_not_recovered(
    store: EventStore,
) -> None:
    recorder = Recorder(store, "snapshots", "agent")
    with recorder.run("r1") as run:
        run.snapshot({"turn": 1})
        run.mutate("turn.done", turn=2)
    assert recorder.recover("r1").state == {"turn": 1}
    assert [e["turn"] for e in recorder.recover("r1").events] == [2]
    with recorder.run("r1") as run:  # started afresh, not resumed: another execution
        run.mutate("turn.done", turn=1)
    recovered = recorder.recover("r1")
    assert recovered.state is None
    assert [e["turn"] for e in recovered.events] == [1]
