"""The recorder: a call's request written first, its lease, resume after SIGKILL (checkpoints,
delegations, calls declared safe), and a loop rebuilt from its snapshot and the tail."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import ledger_bus as lb
from ledger_bus.agent.recorder import Recorder, RequestNotRecorded, UnresolvedAttempt
from ledger_bus.agent.tailer import render_context
from ledger_bus.demo.server import LocalServer
from ledger_bus.store.base import EventStore
from tests.support.helpers import ROOT, kill, kill_when_ready, start_recorded, wait_for


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
    run._stop_renewing_and_release()  # as a crash leaves it: no run.finished
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
