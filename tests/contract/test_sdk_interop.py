"""Python and each other SDK (TypeScript, Go) on one Redis, every test once per SDK: each reads
the other's events as its own (event ids, digests, versions, cursors), an append retried from
the other language deduplicates, the command line and the web view show its events, a run
killed inside a tool is flagged by the Python reconciler and resumes with what `ledger-bus
resolve` decided; and the three languages appending to one session at once. The SDKs' own tests
are vitest's (typescript/) and `go test`'s (go/); make test runs them. What only the TypeScript
SDK has (Pi, TLS settings) is in test_typescript_interop.py."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
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
from tests.support.gopeer import GoPeer, need_go
from tests.support.helpers import ledger_cli
from tests.support.node import NodePeer, need_node
from tests.support.peer import LinePeer, PeerError
from tests.support.proxy import DropProxy
from tests.support.ui import view_app

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


PEERS: dict[str, tuple[Callable[[], None], Callable[[str, str], LinePeer]]] = {
    "node": (need_node, NodePeer),
    "go": (need_go, GoPeer),
}


@pytest.fixture(params=sorted(PEERS))
def sdk(request: pytest.FixtureRequest) -> Callable[[str, str], LinePeer]:
    """How to start a peer of the SDK under test (skipped, saying why, where it cannot run)."""
    need, start = PEERS[request.param]
    need()
    return start


@pytest.fixture
def peer(sdk: Callable[[str, str], LinePeer], redis_url: str, prefix: str) -> Iterator[LinePeer]:
    with sdk(redis_url, prefix) as started:
        yield started


def _lines(events: list[lb.RecordedEvent]) -> list[dict[str, Any]]:
    return [e.to_dict() for e in events]


def _same(python: list[lb.RecordedEvent], other: list[dict[str, Any]]) -> None:
    assert _lines(python) == [json.loads(json.dumps(line)) for line in other]


def test_each_reads_the_others_events_identically(redis_store: EventStore, peer: LinePeer) -> None:
    from_sdk = peer.ask(
        "append", session="x", stream="sdk", expected=0, append_id="o1", events=EVENTS
    )
    from_python = redis_store.append(lb.StreamId("x", "py"), 0, "p1", EVENTS)

    python_view = redis_store.scan_session("x")
    _same(python_view, peer.ask("scan", session="x"))
    _same(python_view[-3:], peer.ask("tail", session="x", n=3))
    assert [e.version for e in python_view] == [1, 2, 3, 4] * 2
    assert from_sdk["cursor"] == python_view[3].cursor
    assert from_python.cursor == python_view[-1].cursor
    # The event ids Go generated are the ones Python derives, and the reverse.
    for event in python_view:
        append_id = "o1" if event.stream.name == "sdk" else "p1"
        assert event.event_id == derive_event_id(
            "x", event.stream.name, append_id, event.version - 1
        )
    # Go's digest of the events is Python's, and the one the store recorded for its append.
    digest = prepare_append("x", "sdk", "o1", EVENTS, Limits()).digest
    assert peer.ask("digest", events=EVENTS) == digest
    recorded = {r.append_id: r.digest for r in redis_store.iter_append_ids("x")}
    assert recorded == {"o1": digest, "p1": digest}


def test_python_node_and_go_append_to_one_session_at_once(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    need_node()
    need_go()
    count = 600
    ref = lb.StreamId("all", "py")
    started = threading.Event()

    def python_writes() -> None:
        for i in range(count):
            event = {"type": "message", "agent": "py", "body": f"py {i}"}
            redis_store.append(ref, i, f"py-{i}", [event])
            if i == 20:
                started.set()

    with NodePeer(redis_url, prefix) as node, GoPeer(redis_url, prefix) as go:
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


def test_a_retry_from_the_sdk_of_a_python_append_deduplicates(
    redis_store: EventStore, peer: LinePeer
) -> None:
    original = redis_store.append(lb.StreamId("r", "main"), 0, "a1", EVENTS)
    redis_store.append(
        lb.StreamId("r", "main"), 4, "a2", [{"type": "message", "agent": "p", "body": "later"}]
    )
    # Spelled otherwise (keys in another order, defaults given): the same content.
    respelled = [dict(reversed(list(e.items()))) for e in EVENTS]
    retried = peer.ask(
        "append", session="r", stream="main", expected=0, append_id="a1", events=respelled
    )
    assert retried == {**original.to_dict(), "deduplicated": True}

    with pytest.raises(PeerError) as raised:
        peer.ask(
            "append", session="r", stream="main", expected="any", append_id="a1", events=EVENTS[:1]
        )
    assert raised.value.name == "IdempotencyConflict"
    with pytest.raises(PeerError) as raised:
        peer.ask(
            "append", session="r", stream="main", expected=3, append_id="a3", events=EVENTS[:1]
        )
    assert raised.value.name == "VersionConflict"
    assert "expected version 3, actual 5" in raised.value.message
    # And the other way round: Go first, Python's retry.
    first = peer.ask(
        "append", session="r", stream="side", expected=0, append_id="b1", events=EVENTS
    )
    again = redis_store.append(lb.StreamId("r", "side"), 0, "b1", EVENTS)
    assert again.deduplicated
    assert again.cursor == first["cursor"]
    with pytest.raises(lb.IdempotencyConflict):
        redis_store.append(lb.StreamId("r", "side"), lb.ANY, "b1", EVENTS[1:])
    assert redis_store.stream_version(lb.StreamId("r", "main")) == 5


def test_an_event_the_sdk_refuses_python_refuses_and_nothing_is_written(
    redis_store: EventStore, peer: LinePeer
) -> None:
    bad = [{"type": "message", "agent": "a", "body": "ok"}, {"type": "message", "agent": "a"}]
    with pytest.raises(PeerError) as raised:
        peer.ask("append", session="bad", stream="s", expected=0, append_id="a1", events=bad)
    assert raised.value.name == "InvalidEvent"
    assert raised.value.message.startswith("event 1, field 'body'")
    with pytest.raises(lb.InvalidEvent):
        redis_store.append(lb.StreamId("bad", "s"), 0, "a1", bad)
    assert not redis_store.session_exists("bad")


def test_the_command_line_and_the_web_view_show_the_sdks_events(
    redis_url: str, prefix: str, peer: LinePeer
) -> None:
    peer.ask("append", session="seen", stream="sdk", expected=0, append_id="o1", events=EVENTS)

    shown = ledger_cli(redis_url, prefix, "--output", "jsonl", "tail", "seen")
    assert shown.returncode == 0, shown.stderr
    lines = [json.loads(line) for line in shown.stdout.splitlines()]
    assert lines == [json.loads(json.dumps(line)) for line in peer.ask("scan", session="seen")]
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


def test_a_run_killed_inside_a_tool_is_flagged_and_resumes_with_the_resolved_outcome(
    sdk: Callable[[str, str], LinePeer], redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    args = {"env": "prod"}
    crashed = sdk(redis_url, prefix)
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
    with sdk(redis_url, prefix) as peer, pytest.raises(PeerError) as raised:
        peer.ask("resume_call", session="k", run_id="r1", tool="deploy", args=args, lease_ms=300)
    assert raised.value.name == "UnresolvedAttempt"

    resolved = ledger_cli(redis_url, prefix, "resolve", "k", attempt, "--ok", '{"deployed": true}')
    assert resolved.returncode == 0, resolved.stderr
    with sdk(redis_url, prefix) as peer:
        outcome = peer.ask(
            "resume_call", session="k", run_id="r1", tool="deploy", args=args, lease_ms=300
        )
    assert outcome == {"value": {"deployed": True}, "ran": False}
    assert redis_store.open_attempts("k") == []


def test_fields_kept_as_artifacts_cross_the_language_boundary_both_ways(
    redis_store: EventStore, peer: LinePeer
) -> None:
    rows = {"rows": [{"n": n, "label": f"row {n}"} for n in range(3_000)]}
    peer.ask(
        "append",
        session="big",
        stream="sdk",
        expected=0,
        append_id="o1",
        events=[
            {"type": "message", "agent": "sdk", "body": BIG},
            {"type": "mutation", "agent": "sdk", "kind": "table", "data": rows},
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
    _same(python_view, peer.ask("scan", session="big"))


def test_an_append_whose_reply_is_lost_is_retried_and_lands_once(
    sdk: Callable[[str, str], LinePeer],
    redis_server: LocalServer,
    prefix: str,
    redis_store: EventStore,
) -> None:
    proxy = DropProxy(redis_server.port)
    try:
        with sdk(f"redis://127.0.0.1:{proxy.port}/0", prefix) as peer:
            proxy.drop_next_reply_to(b"lost-1")
            done = peer.ask(
                "append",
                session="lost",
                stream="main",
                expected=0,
                append_id="lost-1",
                events=[{"type": "message", "agent": "sdk", "body": "once"}],
            )
    finally:
        proxy.close()
    assert proxy.dropped == 1
    # The server committed the first try; the retry with the same append_id found it.
    assert done["deduplicated"] is True
    assert (done["first_version"], done["last_version"]) == (1, 1)
    assert [e["body"] for e in redis_store.scan_session("lost")] == ["once"]
