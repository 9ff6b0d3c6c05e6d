"""What only the TypeScript SDK has, beside Python on one Redis: a Pi agent killed inside a tool,
flagged, resolved and resumed; two Pi processes on one session; the TLS settings of a
rediss:// URL. What every SDK shares with Python (identical reads, retries, the command line and
the web view, a run killed inside a tool, artifacts, lost replies) is test_sdk_interop.py's,
once per SDK. The SDK's own tests are vitest's, in typescript/ (make test runs both)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import ledger_bus as lb
from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig
from ledger_bus.store.base import EventStore
from tests.support.harbor import harbor_errors
from tests.support.helpers import ledger_cli
from tests.support.node import NodePeer, need_node, node22
from tests.support.peer import PeerError
from tests.support.tls import tls_server

pytestmark = pytest.mark.usefixtures("node_available")


@pytest.fixture(scope="module")
def node_available() -> None:
    need_node()


@pytest.fixture(scope="module")
def pi_node() -> str:
    """The Node 22.19+ Pi 1.x needs (tests/node22's, which `make test` installs)."""
    found = node22()
    if found is None:
        pytest.fail("Pi 1.x needs Node 22.19 or newer: `make test` installs it into tests/node22")
    return found


def test_a_pi_agent_killed_inside_a_tool_is_flagged_and_its_session_resumes_with_the_resolution(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path, pi_node: str
) -> None:
    crashed = NodePeer(redis_url, prefix, pi_node)
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

    with NodePeer(redis_url, prefix, pi_node) as node, pytest.raises(PeerError) as raised:
        node.ask("pi_resume", session="pi", pi_session=pi_session)
    assert raised.value.name == "UnresolvedAttempt"

    resolved = ledger_cli(redis_url, prefix, "resolve", "pi", "call-7", "--ok", '{"deployed": 1}')
    assert resolved.returncode == 0, resolved.stderr
    with NodePeer(redis_url, prefix, pi_node) as node:
        outcome = node.ask("pi_resume", session="pi", pi_session=pi_session)
    assert outcome == {
        "completed": ["call-7"],
        "ran": 0,
        "roles": ["system", "user", "assistant", "toolResult", "assistant"],
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


def test_two_pi_processes_on_one_session_never_interleave_it(
    redis_url: str, prefix: str, redis_store: EventStore, pi_node: str
) -> None:
    # Pi's own files take two writers' lines interleaved; on the ledger the second process is
    # refused while the first lives, and a first one stopped past its lease and taken over is
    # told at its next write, having written nothing into the other's turn.
    first = NodePeer(redis_url, prefix, pi_node)
    second = NodePeer(redis_url, prefix, pi_node)
    try:
        pi_session = first.ask("pi_open", session="two", lease_ms=600)
        first.ask("pi_turn", pi_session=pi_session, prompt="one", answer="first's answer")
        with pytest.raises(PeerError) as refused:
            second.ask("pi_open", session="two", pi_session=pi_session, lease_ms=600)
        assert refused.value.message == f"Pi session {pi_session} is open in another live process"

        os.kill(first.process.pid, signal.SIGSTOP)  # a process stopped: its lease lapses
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    second.ask("pi_open", session="two", pi_session=pi_session, lease_ms=600)
                    break
                except PeerError:
                    assert time.monotonic() < deadline, "the stopped process's lease never lapsed"
                    time.sleep(0.2)
            second.ask("pi_turn", pi_session=pi_session, prompt="two", answer="second's answer")
        finally:
            os.kill(first.process.pid, signal.SIGCONT)
        with pytest.raises(PeerError) as told:
            first.ask("pi_turn", pi_session=pi_session, prompt="three", answer="never kept")
        assert told.value.name == "PiSessionTaken"
        assert "\n" not in told.value.message
        assert told.value.message.startswith(f"Pi session {pi_session} was taken over by another")
        second.ask("pi_close", pi_session=pi_session)
    finally:
        first.close()
        second.close()

    # One tree: every entry's parent before it, the turns one after another, nothing of "three".
    stream = lb.StreamId("two", f"pi.{pi_session}")
    entries = [
        e.fields["entry"]
        for e in redis_store.read_stream(stream)
        if e.fields.get("kind") == "pi.entry"
    ]
    seen: set[str] = set()
    for entry in entries:
        assert entry["parentId"] is None or entry["parentId"] in seen
        seen.add(entry["id"])
    said = [
        e["message"]["content"]
        for e in entries
        if e["type"] == "message" and e["message"]["role"] in ("user", "assistant")
    ]
    texts = [c if isinstance(c, str) else c[0]["text"] for c in said]
    assert texts == ["one", "first's answer", "two", "second's answer"]


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
