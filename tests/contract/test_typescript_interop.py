"""Python and the TypeScript SDK on one Redis: each reads the other's events as its own (event
ids, digests, versions, cursors), an append retried from the other language deduplicates, and
the command line and the web view show Node's events. The SDK's own tests are vitest's, in
typescript/ (make test runs both)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
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
from tests.support.harbor import harbor_errors
from tests.support.helpers import ledger_cli
from tests.support.node import NodeError, NodePeer, need_node
from tests.support.proxy import DropProxy
from tests.support.tls import tls_server
from tests.support.ui import view_app

pytestmark = pytest.mark.usefixtures("node_available")

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


@pytest.fixture(scope="module")
def node_available() -> None:
    need_node()


@pytest.fixture
def node(redis_url: str, prefix: str) -> Iterator[NodePeer]:
    with NodePeer(redis_url, prefix) as peer:
        yield peer


def _same(python: list[lb.RecordedEvent], node: list[dict[str, object]]) -> None:
    assert [e.to_dict() for e in python] == [json.loads(json.dumps(line)) for line in node]


def test_each_reads_the_others_events_identically(redis_store: EventStore, node: NodePeer) -> None:
    from_node = node.ask(
        "append", session="x", stream="node", expected=0, append_id="n1", events=EVENTS
    )
    from_python = redis_store.append(lb.StreamId("x", "py"), 0, "p1", EVENTS)

    python_view = redis_store.scan_session("x")
    _same(python_view, node.ask("scan", session="x"))
    assert [e.version for e in python_view] == [1, 2, 3, 4] * 2
    assert from_node["cursor"] == python_view[3].cursor
    assert from_python.cursor == python_view[-1].cursor
    # The event ids Node generated are the ones Python derives, and the reverse.
    for event in python_view:
        assert event.event_id == derive_event_id(
            "x", event.stream.name, "n1" if event.stream.name == "node" else "p1", event.version - 1
        )
    # Node's digest of the events is Python's, and the one the store recorded for its append.
    digest = prepare_append("x", "node", "n1", EVENTS, Limits()).digest
    assert node.ask("digest", events=EVENTS) == digest
    recorded = {r.append_id: r.digest for r in redis_store.iter_append_ids("x")}
    assert recorded == {"n1": digest, "p1": digest}


def test_python_and_node_append_to_one_session_at_once(
    redis_store: EventStore, node: NodePeer
) -> None:
    count = 600
    ref = lb.StreamId("both", "py")
    started = threading.Event()

    def python_writes() -> None:
        for i in range(count):
            event = {"type": "message", "agent": "py", "body": f"py {i}"}
            redis_store.append(ref, i, f"py-{i}", [event])
            if i == 20:
                started.set()

    appended = threading.Thread(target=python_writes)
    appended.start()
    # Node starts once Python is well under way, and writes a third of Python's count: the
    # two overlap whichever is faster here.
    assert started.wait(30)
    node.send("burst", session="both", stream="node", count=count // 3)
    node_results = node.reply()
    appended.join()

    events = redis_store.scan_session("both")
    assert len(events) == count + count // 3
    cursors = [e.cursor for e in events]
    assert cursors == sorted(set(cursors))
    for name, written in (("node", count // 3), ("py", count)):
        mine = [e for e in events if e.stream.name == name]
        assert [e.version for e in mine] == list(range(1, written + 1))
        assert [e["body"] for e in mine] == [f"{name} {i}" for i in range(written)]
    assert [r["cursor"] for r in node_results] == [
        e.cursor for e in events if e.stream.name == "node"
    ]
    # Interleaved, not one writer after the other.
    streams = [e.stream.name for e in events]
    assert sum(a != b for a, b in itertools.pairwise(streams)) > 10
    _same(events, node.ask("scan", session="both"))


def test_a_retry_from_node_of_a_python_append_deduplicates(
    redis_store: EventStore, node: NodePeer
) -> None:
    original = redis_store.append(lb.StreamId("r", "main"), 0, "a1", EVENTS)
    redis_store.append(
        lb.StreamId("r", "main"), 4, "a2", [{"type": "message", "agent": "p", "body": "later"}]
    )
    # Spelled otherwise (keys in another order, defaults given): the same content.
    respelled = [dict(reversed(list(e.items()))) for e in EVENTS]
    retried = node.ask(
        "append", session="r", stream="main", expected=0, append_id="a1", events=respelled
    )
    assert retried == {**original.to_dict(), "deduplicated": True}

    with pytest.raises(NodeError) as raised:
        node.ask(
            "append", session="r", stream="main", expected="any", append_id="a1", events=EVENTS[:1]
        )
    assert raised.value.name == "IdempotencyConflict"
    # And the other way round: Node first, Python's retry.
    first = node.ask(
        "append", session="r", stream="side", expected=0, append_id="b1", events=EVENTS
    )
    again = redis_store.append(lb.StreamId("r", "side"), 0, "b1", EVENTS)
    assert again.deduplicated
    assert again.cursor == first["cursor"]
    with pytest.raises(lb.IdempotencyConflict):
        redis_store.append(lb.StreamId("r", "side"), lb.ANY, "b1", EVENTS[1:])
    assert redis_store.stream_version(lb.StreamId("r", "main")) == 5


def test_the_command_line_and_the_web_view_show_nodes_events(
    redis_url: str, prefix: str, node: NodePeer
) -> None:
    node.ask("append", session="seen", stream="node", expected=0, append_id="n1", events=EVENTS)

    shown = ledger_cli(redis_url, prefix, "--output", "jsonl", "tail", "seen")
    assert shown.returncode == 0, shown.stderr
    lines = [json.loads(line) for line in shown.stdout.splitlines()]
    assert lines == [json.loads(json.dumps(line)) for line in node.ask("scan", session="seen")]
    assert "seen" in ledger_cli(redis_url, prefix, "--output", "jsonl", "sessions").stdout

    with TestClient(view_app(redis_url, prefix)) as client:
        page = client.get("/s/seen")
        assert page.status_code == 200
        assert "héllo 😀" in page.text
        assert "search" in page.text
        exported = client.get("/s/seen?format=json").json()["events"]
        # The view joins a result to its call's row; every row is one of Node's events.
        shown_ids = [e["event_id"] for e in exported]
        assert len(shown_ids) >= 3
        assert set(shown_ids) <= {line["event_id"] for line in lines}


def test_a_node_run_killed_inside_a_tool_is_flagged_and_resumes_with_the_resolved_outcome(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    args = {"env": "prod"}
    crashed = NodePeer(redis_url, prefix)
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
    with NodePeer(redis_url, prefix) as node, pytest.raises(NodeError) as raised:
        node.ask("resume_call", session="k", run_id="r1", tool="deploy", args=args, lease_ms=300)
    assert raised.value.name == "UnresolvedAttempt"

    resolved = ledger_cli(redis_url, prefix, "resolve", "k", attempt, "--ok", '{"deployed": true}')
    assert resolved.returncode == 0, resolved.stderr
    with NodePeer(redis_url, prefix) as node:
        outcome = node.ask(
            "resume_call", session="k", run_id="r1", tool="deploy", args=args, lease_ms=300
        )
    assert outcome == {"value": {"deployed": True}, "ran": False}
    assert redis_store.open_attempts("k") == []


def test_a_pi_agent_killed_inside_a_tool_is_flagged_and_its_session_resumes_with_the_resolution(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    crashed = NodePeer(redis_url, prefix)
    try:
        pi_session = crashed.ask("pi_hang", session="pi", call_id="call-7", lease_ms=300)
        crashed.process.kill()  # SIGKILL, inside Pi's tool
        crashed.process.wait()
    finally:
        crashed.close()

    actions: list[dict[str, Any]] = []
    reconciler = Reconciler(redis_store, ReconcilerConfig(grace_s=0), on_action=actions.append)
    deadline = time.monotonic() + 10
    while not any(a["action"] == "flag" for a in actions) and time.monotonic() < deadline:
        reconciler.run_pass()
        time.sleep(0.1)
    assert [a["attempt_id"] for a in actions if a["action"] == "flag"] == ["call-7"]

    with NodePeer(redis_url, prefix) as node, pytest.raises(NodeError) as raised:
        node.ask("pi_resume", session="pi", pi_session=pi_session)
    assert raised.value.name == "UnresolvedAttempt"

    resolved = ledger_cli(redis_url, prefix, "resolve", "pi", "call-7", "--ok", '{"deployed": 1}')
    assert resolved.returncode == 0, resolved.stderr
    with NodePeer(redis_url, prefix) as node:
        outcome = node.ask("pi_resume", session="pi", pi_session=pi_session)
    assert outcome == {
        "completed": ["call-7"],
        "ran": 0,
        "roles": ["user", "assistant", "toolResult", "assistant"],
        "told": [{"type": "text", "text": '{"deployed":1}'}],
    }
    assert redis_store.open_attempts("pi") == []
    # The conversation reads in the ledger's own terms too.
    shown = ledger_cli(redis_url, prefix, "--output", "jsonl", "tail", "pi", "-n", "100")
    said = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [e["body"] for e in said if e["type"] == "message"] == ["deploy it", "", "done"]
    # Pi's native records stay out of sight unless asked for (--native).
    assert not [e for e in said if str(e.get("kind", "")).startswith("pi.")]
    native = ledger_cli(
        redis_url, prefix, "--output", "jsonl", "tail", "pi", "-n", "100", "--native"
    )
    assert any(json.loads(line).get("kind") == "pi.entry" for line in native.stdout.splitlines())
    # And as a trajectory Harbor accepts: the model's call with its model, the tool call with
    # the outcome it was given.
    exported = ledger_cli(redis_url, prefix, "export", "pi", "--format", "atif")
    assert exported.returncode == 0, exported.stderr
    document = json.loads(exported.stdout)
    steps = document["steps"]
    assert [s["source"] for s in steps] == ["user", "agent", "agent"]
    assert steps[1]["model_name"] == "faux-1"
    assert steps[1]["tool_calls"][0]["function_name"] == "deploy"
    assert steps[1]["observation"]["results"][0]["source_call_id"] == "call-7"
    assert harbor_errors({"pi": document}, tmp_path) == {"pi": []}


BIG = "a large tool output " * 4_000  # 80 KB: above the 64 KiB threshold, kept as an artifact


def test_fields_kept_as_artifacts_cross_the_language_boundary_both_ways(
    redis_store: EventStore, node: NodePeer
) -> None:
    rows = {"rows": [{"n": n, "label": f"row {n}"} for n in range(3_000)]}
    node.ask(
        "append",
        session="big",
        stream="node",
        expected=0,
        append_id="n1",
        events=[
            {"type": "message", "agent": "node", "body": BIG},
            {"type": "mutation", "agent": "node", "kind": "table", "data": rows},
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
    _same(python_view, node.ask("scan", session="big"))


def test_a_node_append_whose_reply_is_lost_is_retried_and_lands_once(
    redis_server: LocalServer, prefix: str, redis_store: EventStore
) -> None:
    proxy = DropProxy(redis_server.port)
    try:
        with NodePeer(f"redis://127.0.0.1:{proxy.port}/0", prefix) as node:
            proxy.drop_next_reply_to(b"lost-1")
            done = node.ask(
                "append",
                session="lost",
                stream="main",
                expected=0,
                append_id="lost-1",
                events=[{"type": "message", "agent": "node", "body": "once"}],
            )
    finally:
        proxy.close()
    assert proxy.dropped == 1
    # The server committed the first try; the retry with the same append_id found it.
    assert done["deduplicated"] is True
    assert (done["first_version"], done["last_version"]) == (1, 1)
    assert [e["body"] for e in redis_store.scan_session("lost")] == ["once"]


def _tls_url(port: int, pki: Path, client: bool = False) -> str:
    """A rediss:// URL with the settings the Python package reads from it, as both SDKs do."""
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={pki / 'ca.pem'}"
    if client:
        url += f"&ssl_certfile={pki / 'client.pem'}&ssl_keyfile={pki / 'client.key'}"
    return url


def test_node_appends_over_tls_with_the_urls_certificate_settings(
    pki: Path, redis_store: EventStore
) -> None:
    event = {"type": "message", "agent": "node", "body": "sealed"}
    with tls_server(pki) as port:
        with NodePeer(_tls_url(port, pki), "tls") as node:
            node.ask("append", session="s", stream="n", expected=0, append_id="a", events=[event])
        with lb.connect(_tls_url(port, pki), prefix="tls") as store:
            assert [e["body"] for e in store.scan_session("s")] == ["sealed"]
    # A server that asks for a client certificate gets the one the URL names.
    with tls_server(pki, clients="yes") as port, NodePeer(_tls_url(port, pki, True), "t") as node:
        assert node.ask("append", session="s", stream="n", expected=0, append_id="a",
                        events=[event])["first_version"] == 1  # fmt: skip
