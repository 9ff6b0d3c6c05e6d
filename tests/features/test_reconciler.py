"""Open attempts, the reconciler and resolve, against real servers and processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ledger_bus as lb
from ledger_bus.demo.server import free_port
from ledger_bus.operations.reconciler import FLAG_KIND, Reconciler, ReconcilerConfig
from ledger_bus.operations.resolve import resolve_attempt
from ledger_bus.store.base import EventStore
from ledger_bus.store.memory import MemoryStore
from tests.support.events import call, result
from tests.support.helpers import (
    ROOT,
    cli_env,
    kill,
    ledger_cli,
    reconciler_flags,
    reconciler_now,
    start_recorded,
)

SHIPPED_CONF = ROOT / "deploy" / "redis.conf"


# -- open attempts: every backend ---------------------------------------------------------------


def test_the_append_script_keeps_open_attempts(store: EventStore) -> None:
    ref = lb.StreamId("s1", "run-r1")
    store.append(ref, 0, "1", [call("a1", "r1"), call("a2", "r1", tool="search")])
    store.append(ref, 2, "2", [result("a1")])
    store.append(ref, 3, "2", [result("a1")])  # a retry: deduplicated, changes nothing

    open_now = store.open_attempts("s1")
    assert [(a.attempt_id, a.run_id, a.tool, a.stream) for a in open_now] == [
        ("a2", "r1", "search", "run-r1")
    ]
    assert open_now[0].flagged_cursor is None
    assert open_now[0].cursor == store.read_stream(ref)[1].cursor
    assert [s for s, _ in store.sessions_with_open_attempts()] == ["s1"]


def test_a_flag_and_a_declaration_are_kept_too(store: EventStore) -> None:
    ref = lb.StreamId("s1", "run-r1")
    store.append(
        ref,
        0,
        "1",
        [
            {
                "type": "mutation",
                "agent": "a",
                "kind": "tool.declared",
                "run_id": "r1",
                "tool": "lint",
                "safe_to_replay": True,
            },
            call("a1", "r1", tool="lint"),
        ],
    )
    assert store.safe_to_replay("s1", "r1", "lint")
    assert not store.safe_to_replay("s1", "r1", "deploy")
    assert not store.safe_to_replay("s1", None, "lint")

    reconciler = reconciler_now(store)
    assert reconciler.run_pass().flagged == 1
    (attempt,) = store.open_attempts("s1")
    assert attempt.flagged_cursor is not None
    (flag,) = list(store.read_stream(lb.StreamId("s1", "reconciler")))
    assert (flag["kind"], flag["attempt_id"], flag["tool"], flag["safe_to_replay"]) == (
        FLAG_KIND,
        "a1",
        "lint",
        True,
    )
    assert flag.run_id == "r1"
    assert flag["call_cursor"] == attempt.cursor


# Random appends of calls, results, flags and declarations, several events to an append: the
# append script must keep the same bookkeeping as the reference store, event for event.
_attempts = st.sampled_from(["a1", "a2", "a3"])
_runs = st.sampled_from(["r1", "r2"])
_tools = st.sampled_from(["t1", "t2"])
_streams = st.sampled_from(["run-1", "run-2"])
_operations = st.one_of(
    st.tuples(st.just("call"), _attempts, st.none() | _runs, _tools),
    st.tuples(st.just("result"), _attempts),
    st.tuples(st.just("flag"), _attempts),
    # A declared tool may be any string: one holding the byte that separates the notes sent to
    # the append script (\x1e) can match no call, and must not disturb the notes after it.
    st.tuples(st.just("declare"), _runs, _tools | st.just("t\x1e1"), st.booleans()),
)


def _event(operation: tuple[Any, ...]) -> dict[str, object]:
    match operation:
        case ("call", attempt, run_id, tool):
            return call(attempt, run_id, tool)
        case ("result", attempt):
            return result(attempt)
        case ("flag", attempt):
            return {"type": "mutation", "agent": "r", "kind": FLAG_KIND, "attempt_id": attempt}
        case ("declare", run_id, tool, safe):
            return {
                "type": "mutation",
                "agent": "a",
                "kind": "tool.declared",
                "run_id": run_id,
                "tool": tool,
                "safe_to_replay": safe,
            }
    raise AssertionError(operation)


def _bookkeeping(store: EventStore, session: str) -> tuple[list[Any], list[bool]]:
    """Open attempts with cursors replaced by positions in the session, and what is safe."""
    position = {e.cursor: i for i, e in enumerate(store.scan_session(session))}
    attempts = [
        (
            a.attempt_id,
            a.run_id,
            a.tool,
            a.stream,
            position[a.cursor],
            None if a.flagged_cursor is None else position[a.flagged_cursor],
        )
        for a in store.open_attempts(session)
    ]
    safe = [store.safe_to_replay(session, r, t) for r in ("r1", "r2") for t in ("t1", "t2")]
    return attempts, safe


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(_streams, st.lists(_operations, min_size=1, max_size=4)),
        min_size=1,
        max_size=6,
    )
)
def test_the_append_script_keeps_the_same_books_as_the_reference(
    redis_store: EventStore, appends: list[tuple[str, list[tuple[Any, ...]]]]
) -> None:
    reference = MemoryStore()
    session = f"books-{uuid.uuid4().hex[:8]}"
    for number, (stream, operations) in enumerate(appends):
        events = [_event(op) for op in operations]
        for store in (reference, redis_store):
            store.append(lb.StreamId(session, stream), lb.ANY, f"x{number}", events)
    assert _bookkeeping(redis_store, session) == _bookkeeping(reference, session)


def test_a_completed_call_is_never_flagged(store: EventStore) -> None:
    store.append(lb.StreamId("s1", "main"), 0, "1", [call("a1"), result("a1")])
    report = reconciler_now(store).run_pass()
    assert (report.flagged, report.open_attempts) == (0, 0)
    assert reconciler_flags(store, "s1") == Counter()


def test_a_call_without_a_lease_is_flagged_after_the_grace_period_only(store: EventStore) -> None:
    store.append(lb.StreamId("s1", "main"), 0, "1", [call("a1")])
    assert reconciler_now(store, grace=3600).run_pass().flagged == 0
    assert reconciler_now(store, grace=0).run_pass().flagged == 1
    assert reconciler_now(store, grace=0).run_pass().flagged == 0
    assert reconciler_flags(store, "s1") == Counter({"a1": 1})


def test_a_resolved_attempt_leaves_the_open_set(store: EventStore) -> None:
    store.append(lb.StreamId("s1", "run-r1"), 0, "1", [call("a1", "r1"), call("a2", "r1")])
    resolve_attempt(store, "s1", "a1", "unknown")
    resolve_attempt(store, "s1", "a2", "retried", retry_attempt="a2-again")
    assert store.open_attempts("s1") == []
    results = [e for e in store.read_stream(lb.StreamId("s1", "run-r1")) if e.type == "tool_result"]
    assert [r["result"]["outcome"] for r in results] == ["unknown", "retried"]
    with pytest.raises(lb.Refused, match="closed already"):
        resolve_attempt(store, "s1", "a1", "unknown")
    with pytest.raises(lb.NotFound, match="no attempt 'a9' was requested"):
        resolve_attempt(store, "s1", "a9", "unknown")


def test_an_idle_session_leaves_the_index_only_after_the_prune_window(store: EventStore) -> None:
    # an attempt opened by one append and closed by the next (in one append it is never open)
    store.append(lb.StreamId("s1", "main"), 0, "1", [call("a1")])
    store.append(lb.StreamId("s1", "main"), 1, "2", [result("a1")])
    keep = Reconciler(store, ReconcilerConfig(grace_s=0, prune_after_s=3600), lambda r: None)
    assert keep.run_pass().pruned == 0
    assert store.sessions_with_open_attempts()
    drop = Reconciler(store, ReconcilerConfig(grace_s=0, prune_after_s=0), lambda r: None)
    time.sleep(0.01)
    assert drop.run_pass().pruned == 1
    assert store.sessions_with_open_attempts() == []


# -- real processes ------------------------------------------------------------------------------


@pytest.fixture
def redis_store(redis_url: str, prefix: str) -> Iterator[EventStore]:
    with lb.connect(redis_url, prefix=prefix) as opened:
        yield opened


def test_a_killed_caller_is_flagged_once_its_lease_expires_and_not_before(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    proc, _ = start_recorded(redis_url, prefix, tmp_path, "unsafe")
    reconciler = reconciler_now(redis_store, grace=0)
    assert reconciler.run_pass().flagged == 0, "the run is alive: its call is not unresolved"

    kill(proc)
    flagged = 0
    while True:
        found = reconciler.run_pass().flagged
        alive = redis_store.lease_alive("crash", "run-r1")
        assert not (found and alive), "flagged while the run still held its lease"
        flagged += found
        if not alive:
            break
        time.sleep(0.05)
    flagged += reconciler.run_pass().flagged
    assert flagged == 1
    assert reconciler.run_pass().flagged == 0
    assert reconciler_flags(redis_store, "crash") == Counter({"r1/c2#1": 1})


def _reconcile(url: str, prefix: str, *args: str) -> subprocess.Popen[str]:
    env = cli_env(url, prefix)
    return subprocess.Popen(
        [sys.executable, "-m", "ledger_bus", "reconcile", "--grace", "0", *args],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )


def _open_many(store: EventStore, sessions: int, per_session: int) -> set[tuple[str, str]]:
    opened = set()
    for s in range(sessions):
        session = f"many-{s}"
        events = [call(f"a{i}") for i in range(per_session)]
        store.append(lb.StreamId(session, "main"), lb.ANY, "open", events)
        opened |= {(session, f"a{i}") for i in range(per_session)}
    return opened


def _all_flags(store: EventStore, sessions: int) -> Counter[tuple[str, str]]:
    found: Counter[tuple[str, str]] = Counter()
    for s in range(sessions):
        for attempt, count in reconciler_flags(store, f"many-{s}").items():
            found[(f"many-{s}", attempt)] += count
    return found


def test_three_reconcilers_at_once_flag_each_attempt_exactly_once(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    opened = _open_many(redis_store, sessions=20, per_session=15)
    workers = [
        _reconcile(redis_url, prefix, "--once", "--heartbeat", f"/tmp/{prefix}-{i}")
        for i in range(3)
    ]
    outputs = [w.communicate(timeout=120)[1] for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0]

    found = _all_flags(redis_store, 20)
    assert set(found) == opened
    assert set(found.values()) == {1}
    passes = [
        json.loads(line)
        for out in outputs
        for line in out.splitlines()
        if '"action":"pass"' in line
    ]
    assert sum(p["flagged"] for p in passes) == len(opened)


def test_sigterm_during_a_pass_loses_nothing_and_doubles_nothing(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    opened = _open_many(redis_store, sessions=100, per_session=20)
    worker = _reconcile(redis_url, prefix, "--heartbeat", f"/tmp/{prefix}-term")
    assert worker.stderr is not None
    first = worker.stderr.readline()  # the first flag: the pass is under way
    assert '"action":"flag"' in first
    worker.send_signal(signal.SIGTERM)
    rest = worker.communicate(timeout=60)[1]
    assert worker.returncode == 0
    interrupted = [json.loads(line) for line in rest.splitlines() if '"action":"pass"' in line]
    assert interrupted
    assert interrupted[0]["interrupted"], "the signal landed mid-pass"
    partial = _all_flags(redis_store, 100)
    assert 0 < sum(partial.values()) < len(opened)

    again = _reconcile(redis_url, prefix, "--once", "--heartbeat", f"/tmp/{prefix}-again")
    again.communicate(timeout=120)
    found = _all_flags(redis_store, 100)
    assert set(found) == opened
    assert set(found.values()) == {1}


def test_reconcile_check_turns_the_heartbeat_into_an_exit_code(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    heartbeat = str(tmp_path / "hb")

    def check() -> int:
        return ledger_cli(
            redis_url, prefix, "reconcile", "--check", "--heartbeat", heartbeat
        ).returncode

    assert check() == 1, "no heartbeat yet: the worker never finished a pass"
    done = _reconcile(redis_url, prefix, "--once", "--heartbeat", heartbeat)
    done.communicate(timeout=60)
    assert check() == 0
    healthy = ledger_cli(redis_url, prefix, "reconcile", "--check", "--heartbeat", heartbeat)
    report = json.loads(healthy.stdout)  # the output rule: one JSON line when piped
    assert report["ok"] is True
    assert report["errors"] == 0
    old = time.time() - 3600
    os.utime(heartbeat, (old, old))
    assert check() == 1


def test_metrics_are_served_for_prometheus(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    _open_many(redis_store, sessions=1, per_session=2)
    port = free_port()
    worker = _reconcile(
        redis_url,
        prefix,
        "--metrics-port",
        str(port),
        "--interval",
        "0.2",
        "--heartbeat",
        f"/tmp/{prefix}-m",
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
                if b"ledger_reconciler_flagged_total 2.0" in page:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "metrics never showed the two flags"
            time.sleep(0.1)
        assert b"ledger_reconciler_open_attempts 2.0" in page
        assert b"ledger_reconciler_pass_seconds" in page
        assert b'ledger_sessions{tier="redis"} 1.0' in page
        assert b"ledger_redis_used_memory_bytes" in page
        assert b"ledger_redis_maxmemory_bytes" in page
    finally:
        worker.terminate()
        worker.communicate(timeout=30)


def test_resolve_and_unresolved_from_the_command_line(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    redis_store.append(lb.StreamId("ops", "main"), 0, "1", [call("a1"), call("a2")])

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return ledger_cli(redis_url, prefix, *args)

    listed = [json.loads(line) for line in run("unresolved", "ops").stdout.splitlines()]
    assert [(r["attempt_id"], r["run_alive"], r["flagged"]) for r in listed] == [
        ("a1", False, False),
        ("a2", False, False),
    ]
    assert run("resolve", "ops", "a1", "--unknown").returncode == 0
    assert run("resolve", "ops", "a2", "--ok", '{"deployed": true}').returncode == 0
    assert run("unresolved", "ops").stdout == ""
    before = redis_store.session_info("ops").events
    refused = run("resolve", "ops", "a2", "--unknown")
    assert refused.returncode == 1, "a2 is closed: refused by the rule, nothing written"
    assert refused.stderr.startswith("ledger-bus: attempt 'a2' of session 'ops' is closed already")
    assert "tool_result (ok)" in refused.stderr
    unknown = run("resolve", "ops", "a7", "--unknown")
    assert unknown.returncode == 6, "never requested: not found"
    assert unknown.stderr == "ledger-bus: no attempt 'a7' was requested in session 'ops'\n"
    assert run("resolve", "nowhere", "a1", "--unknown").returncode == 6
    assert redis_store.session_info("ops").events == before
    assert run("resolve", "ops", "a9").returncode == 2
