"""Python, Node and the Go SDK on one Redis: each reads the others' events as its own (event
ids, digests, versions, cursors), an append retried from another language deduplicates, the
command line and the web view show Go's events, and a Go run killed inside a tool is flagged by
the Python reconciler and resumes with what `ledger-bus resolve` decided. The Go SDK's own tests
are `go test`'s, in go/ (make test runs them)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer
from ledger_bus.model.artifacts import ArtifactRef
from ledger_bus.model.batch import Limits, prepare_append
from ledger_bus.model.ids import derive_event_id
from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig
from ledger_bus.store.base import EventStore
from tests.support.gopeer import GoError, GoPeer, need_go
from tests.support.helpers import ledger_cli
from tests.support.node import NodePeer, need_node
from tests.support.proxy import DropProxy
from tests.support.ui import view_app

pytestmark = pytest.mark.usefixtures("go_available")

EVENTS: list[dict[str, Any]] = [
    {"type": "message", "agent": "planner", "body": "héllo 😀", "parents": []},
    {
        "type": "tool_call",
        "agent": "coder",
        "tool": "search",
        "attempt_id": "c1",
        "run_id": "r1",
        "args": {"q": "x", "n": [1, 2.5, None, True, 1e21], "€": {"z": 1, "a": -0.0}},
    },
    {"type": "tool_result", "agent": "coder", "tool": "search", "attempt_id": "c1", "status": "ok"},
    {"type": "mutation", "agent": "coder", "kind": "task.done", "result": None, "deep": [[[1]]]},
]
BIG = "0123456789abcdef" * 8_192  # 128 KiB: above the artifact threshold


@pytest.fixture(scope="module")
def go_available() -> None:
    need_go()


@pytest.fixture
def go(redis_url: str, prefix: str) -> Iterator[GoPeer]:
    with GoPeer(redis_url, prefix) as peer:
        yield peer


def _lines(events: list[lb.RecordedEvent]) -> list[dict[str, Any]]:
    return [e.to_dict() for e in events]


def _same(python: list[lb.RecordedEvent], other: list[dict[str, Any]]) -> None:
    assert _lines(python) == [json.loads(json.dumps(line)) for line in other]


def test_each_reads_the_others_events_identically(redis_store: EventStore, go: GoPeer) -> None:
    from_go = go.ask("append", session="x", stream="go", expected=0, append_id="g1", events=EVENTS)
    from_python = redis_store.append(lb.StreamId("x", "py"), 0, "p1", EVENTS)

    python_view = redis_store.scan_session("x")
    _same(python_view, go.ask("scan", session="x"))
    _same(python_view[-3:], go.ask("tail", session="x", n=3))
    assert [e.version for e in python_view] == [1, 2, 3, 4] * 2
    assert from_go["cursor"] == python_view[3].cursor
    assert from_python.cursor == python_view[-1].cursor
    # The event ids Go generated are the ones Python derives, and the reverse.
    for event in python_view:
        append_id = "g1" if event.stream.name == "go" else "p1"
        assert event.event_id == derive_event_id(
            "x", event.stream.name, append_id, event.version - 1
        )
    # Go's digest of the events is Python's, and the one the store recorded for its append.
    digest = prepare_append("x", "go", "g1", EVENTS, Limits()).digest
    assert go.ask("digest", events=EVENTS) == digest
    recorded = {r.append_id: r.digest for r in redis_store.iter_append_ids("x")}
    assert recorded == {"g1": digest, "p1": digest}


def test_python_node_and_go_append_to_one_session_at_once(
    redis_url: str, prefix: str, redis_store: EventStore, go: GoPeer
) -> None:
    need_node()
    count = 600
    ref = lb.StreamId("all", "py")
    started = threading.Event()

    def python_writes() -> None:
        for i in range(count):
            event = {"type": "message", "agent": "py", "body": f"py {i}"}
            redis_store.append(ref, i, f"py-{i}", [event])
            if i == 20:
                started.set()

    with NodePeer(redis_url, prefix) as node:
        appended = threading.Thread(target=python_writes)
        appended.start()
        # Node and Go start once Python is well under way, and write a third of Python's count
        # each: the three overlap whichever is fastest here.
        assert started.wait(30)
        node.send("burst", session="all", stream="node", count=count // 3)
        go.send("burst", session="all", stream="go", count=count // 3)
        node_results, go_results = node.reply(), go.reply()
        appended.join()

        events = redis_store.scan_session("all")
        assert len(events) == count + 2 * (count // 3)
        cursors = [e.cursor for e in events]
        assert cursors == sorted(set(cursors))
        for name, written in (("node", count // 3), ("go", count // 3), ("py", count)):
            mine = [e for e in events if e.stream.name == name]
            assert [e.version for e in mine] == list(range(1, written + 1))
            assert [e["body"] for e in mine] == [f"{name} {i}" for i in range(written)]
        for name, results in (("node", node_results), ("go", go_results)):
            assert [r["cursor"] for r in results] == [
                e.cursor for e in events if e.stream.name == name
            ]
        # Interleaved, not one writer after the other.
        streams = [e.stream.name for e in events]
        assert sum(a != b for a, b in itertools.pairwise(streams)) > 10
        # Each language reads the whole session as Python does.
        _same(events, go.ask("scan", session="all"))
        _same(events, node.ask("scan", session="all"))


def test_a_retry_from_go_of_a_python_append_deduplicates(
    redis_store: EventStore, go: GoPeer
) -> None:
    original = redis_store.append(lb.StreamId("r", "main"), 0, "a1", EVENTS)
    redis_store.append(
        lb.StreamId("r", "main"), 4, "a2", [{"type": "message", "agent": "p", "body": "later"}]
    )
    # Spelled otherwise (keys in another order, defaults given): the same content.
    respelled = [dict(reversed(list(e.items()))) for e in EVENTS]
    retried = go.ask(
        "append", session="r", stream="main", expected=0, append_id="a1", events=respelled
    )
    assert retried == {**original.to_dict(), "deduplicated": True}

    with pytest.raises(GoError) as raised:
        go.ask(
            "append", session="r", stream="main", expected="any", append_id="a1", events=EVENTS[:1]
        )
    assert raised.value.name == "IdempotencyConflict"
    with pytest.raises(GoError) as raised:
        go.ask("append", session="r", stream="main", expected=3, append_id="a3", events=EVENTS[:1])
    assert raised.value.name == "VersionConflict"
    assert "expected version 3, actual 5" in raised.value.message
    # And the other way round: Go first, Python's retry.
    first = go.ask("append", session="r", stream="side", expected=0, append_id="b1", events=EVENTS)
    again = redis_store.append(lb.StreamId("r", "side"), 0, "b1", EVENTS)
    assert again.deduplicated
    assert again.cursor == first["cursor"]
    with pytest.raises(lb.IdempotencyConflict):
        redis_store.append(lb.StreamId("r", "side"), lb.ANY, "b1", EVENTS[1:])
    assert redis_store.stream_version(lb.StreamId("r", "main")) == 5


def test_an_event_go_refuses_python_refuses_and_nothing_is_written(
    redis_store: EventStore, go: GoPeer
) -> None:
    bad = [{"type": "message", "agent": "a", "body": "ok"}, {"type": "message", "agent": "a"}]
    with pytest.raises(GoError) as raised:
        go.ask("append", session="bad", stream="s", expected=0, append_id="a1", events=bad)
    assert raised.value.name == "InvalidEvent"
    assert raised.value.message.startswith("event 1, field 'body'")
    with pytest.raises(lb.InvalidEvent):
        redis_store.append(lb.StreamId("bad", "s"), 0, "a1", bad)
    assert not redis_store.session_exists("bad")


def test_the_command_line_and_the_web_view_show_gos_events(
    redis_url: str, prefix: str, go: GoPeer
) -> None:
    go.ask("append", session="seen", stream="go", expected=0, append_id="g1", events=EVENTS)

    shown = ledger_cli(redis_url, prefix, "--output", "jsonl", "tail", "seen")
    assert shown.returncode == 0, shown.stderr
    lines = [json.loads(line) for line in shown.stdout.splitlines()]
    assert lines == [json.loads(json.dumps(line)) for line in go.ask("scan", session="seen")]
    assert "seen" in ledger_cli(redis_url, prefix, "--output", "jsonl", "sessions").stdout

    with TestClient(view_app(redis_url, prefix)) as client:
        page = client.get("/s/seen")
        assert page.status_code == 200
        assert "héllo 😀" in page.text
        assert "search" in page.text
        exported = client.get("/s/seen?format=json").json()["events"]
        shown_ids = [e["event_id"] for e in exported]
        assert len(shown_ids) >= 3
        assert set(shown_ids) <= {line["event_id"] for line in lines}


def test_a_go_run_killed_inside_a_tool_is_flagged_and_resumes_with_the_resolved_outcome(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    args = {"env": "prod"}
    crashed = GoPeer(redis_url, prefix)
    try:
        attempt = crashed.ask(
            "hang_in_tool", session="k", run_id="r1", tool="deploy", args=args, lease_ms=300
        )
        crashed.process.kill()  # SIGKILL, inside the tool
        crashed.process.wait()
    finally:
        crashed.close()
    assert [a.attempt_id for a in redis_store.open_attempts("k")] == [attempt]

    actions: list[dict[str, Any]] = []
    reconciler = Reconciler(redis_store, ReconcilerConfig(grace_s=0), on_action=actions.append)
    deadline = time.monotonic() + 10
    flags: list[dict[str, Any]] = []
    while not flags and time.monotonic() < deadline:  # once the dead run's lease is gone
        reconciler.run_pass()
        flags = [a for a in actions if a["action"] == "flag"]
        time.sleep(0.1)
    assert [a["attempt_id"] for a in flags] == [attempt]
    (flagged,) = redis_store.open_attempts("k")
    assert flagged.flagged_cursor is not None

    # Unresolved, the resumed run stops at the call rather than deploying twice.
    with GoPeer(redis_url, prefix) as go, pytest.raises(GoError) as raised:
        go.ask("resume_call", session="k", run_id="r1", tool="deploy", args=args, lease_ms=300)
    assert raised.value.name == "UnresolvedAttempt"

    resolved = ledger_cli(redis_url, prefix, "resolve", "k", attempt, "--ok", '{"deployed": true}')
    assert resolved.returncode == 0, resolved.stderr
    with GoPeer(redis_url, prefix) as go:
        outcome = go.ask(
            "resume_call", session="k", run_id="r1", tool="deploy", args=args, lease_ms=300
        )
    assert outcome == {"value": {"deployed": True}, "ran": False}
    assert redis_store.open_attempts("k") == []


def test_fields_kept_as_artifacts_cross_the_language_boundary_both_ways(
    redis_store: EventStore, go: GoPeer
) -> None:
    rows = {"rows": [{"n": n, "label": f"row {n}"} for n in range(3_000)]}
    go.ask(
        "append",
        session="big",
        stream="go",
        expected=0,
        append_id="g1",
        events=[
            {"type": "message", "agent": "go", "body": BIG},
            {"type": "mutation", "agent": "go", "kind": "table", "data": rows},
        ],
    )
    redis_store.append(
        lb.StreamId("big", "py"), 0, "p1", [{"type": "message", "agent": "py", "body": BIG[::-1]}]
    )

    python_view = redis_store.scan_session("big")
    assert [e.get("body") for e in python_view] == [BIG, None, BIG[::-1]]
    assert python_view[1]["data"] == rows
    # Kept apart by both writers alike: a reference in the event, the bytes once in the session.
    refs = redis_store.scan_session("big", resolve_artifacts=False)
    assert all(isinstance(e.get("body") or e.get("data"), ArtifactRef) for e in refs)
    assert len(redis_store.artifact_uses("big")) == 3
    _same(python_view, go.ask("scan", session="big"))


def test_a_go_append_whose_reply_is_lost_is_retried_and_lands_once(
    redis_server: LocalServer, prefix: str, redis_store: EventStore
) -> None:
    proxy = DropProxy(redis_server.port)
    try:
        with GoPeer(f"redis://127.0.0.1:{proxy.port}/0", prefix) as go:
            proxy.drop_next_reply_to(b"lost-1")
            done = go.ask(
                "append",
                session="lost",
                stream="main",
                expected=0,
                append_id="lost-1",
                events=[{"type": "message", "agent": "go", "body": "once"}],
            )
    finally:
        proxy.close()
    assert proxy.dropped == 1
    # The server committed the first try; the retry with the same append_id found it.
    assert done["deduplicated"] is True
    assert (done["first_version"], done["last_version"]) == (1, 1)
    assert [e["body"] for e in redis_store.scan_session("lost")] == ["once"]
