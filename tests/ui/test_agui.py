"""A session as an AG-UI event stream (`/s/<session>/ag-ui`, ledger_bus/exports/agui.py): each
adapter's sessions validated event by event against ag-ui-protocol's models and consumed by
AG-UI's own client (`@ag-ui/client`, whose schema and order checks refuse a bad stream), a run
another process is doing watched live, cut off and resumed with no event missed or doubled, and
the web view's tokens held."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("ag_ui.core")

from ag_ui.core import Event
from pydantic import TypeAdapter

import ledger_bus as lb
from ledger_bus.access.identity import Identity
from ledger_bus.access.tokens import add_token
from ledger_bus.agent.filters import is_native
from ledger_bus.agent.recorder import Recorder
from ledger_bus.demo.server import free_port
from ledger_bus.store.base import EventStore
from ledger_bus.ui.app import session_path
from tests.support import adapter_sessions
from tests.support.events import msg
from tests.support.helpers import ledger_serving
from tests.support.node import TYPESCRIPT, need_node
from tests.support.ui import served, view_app
from tests.ui.test_http_revocation import bearer, revoke, to_the_end, until

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)
ROOT = Path(__file__).resolve().parents[2]


Wire = list[tuple[str | None, dict[str, Any]]]


def read_stream(url: str, headers: dict[str, str] | None = None, idle_s: float = 1.5) -> Wire:
    """The stream's events as the wire has them, (SSE id, JSON), until none came for `idle_s`."""
    got: Wire = []
    timeout = httpx.Timeout(10, read=idle_s)
    try:
        with httpx.stream("GET", url, headers=headers or {}, timeout=timeout) as response:
            assert response.status_code == 200, response.read()
            assert response.headers["content-type"].startswith("text/event-stream")
            ident: str | None = None
            for line in response.iter_lines():
                if line.startswith("id:"):
                    ident = line[3:].strip()
                elif line.startswith("data:"):
                    got.append((ident, json.loads(line[5:])))
                    ident = None
    except httpx.ReadTimeout:
        pass
    return got


def valid(event: dict[str, Any]) -> Any:
    """The event as ag-ui-protocol's models take it: by its camelCase names alone, no field
    they do not know."""
    model = EVENTS.validate_python(event, by_alias=True, by_name=False)
    assert not model.model_extra, (event["type"], model.model_extra)
    return model


def watch(url: str, *options: str, token: str | None = None) -> list[dict[str, Any]]:
    """What AG-UI's own client hands a front end of the stream at `url` (its events, in order);
    it fails the test when the client refused the stream."""
    command = ["node", "--import", "tsx", "test/support/agui-watch.ts", url, *options]
    if token:
        command += ["--token", token]
    ran = subprocess.run(
        command, cwd=TYPESCRIPT, capture_output=True, text=True, timeout=60, check=False
    )
    lines = [json.loads(line) for line in ran.stdout.splitlines() if line.startswith("{")]
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert lines, ran.stderr
    assert "end" in lines[-1], ran.stdout + ran.stderr
    return lines[:-1]


def ident(event: dict[str, Any]) -> str | None:
    ledger = (event.get("metadata") or {}).get("ledger") or {}
    return None if ledger.get("reopened") else ledger.get("id")


MAKERS: dict[str, Callable[..., str]] = {
    "recorder": lambda s, **_: adapter_sessions.recorder_session(s, "rec"),
    "langgraph": lambda s, tmp, **_: adapter_sessions.langgraph_session(s, tmp, "lg"),
    "agents-sdk": lambda s, **_: adapter_sessions.agents_sdk_session(s, "oa"),
    "adk": lambda s, **_: adapter_sessions.adk_session(s),
    "a2a": lambda s, **_: adapter_sessions.a2a_session(s),
    "agentgo": lambda s, tmp, url, prefix: adapter_sessions.agentgo_session(url, prefix, tmp, "go"),
    "pi": lambda s, url, prefix, **_: adapter_sessions.pi_session(url, prefix, s, "pi")[0],
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("adapter", list(MAKERS))
def test_each_adapter_s_session_is_an_ag_ui_stream_its_models_and_its_client_take(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path, adapter: str
) -> None:
    need_node()
    # Given a session that adapter recorded
    session = MAKERS[adapter](redis_store, tmp=tmp_path, url=redis_url, prefix=prefix)
    recorded = list(redis_store.scan_session(session))
    with served(view_app(redis_url, prefix)) as base:
        url = f"{base}{session_path(session)}/ag-ui"
        # When its AG-UI stream is read
        wire = read_stream(url)
        # and AG-UI's client reads it as a front end does
        client = watch(url, "--stop-after", str(len(wire)))
    # Then every event is one of AG-UI's, as its models have it, the SSE id its ledger id
    models = [valid(data) for _, data in wire]
    assert models[0].type.value == "RUN_STARTED"
    assert [i for i, _ in wire] == [ident(d) for _, d in wire]
    # and the client took every one, in order, as sent
    assert client == [data for _, data in wire]
    # and each of the session's own events is there: every message with its words, every call
    # with its tool and its arguments, every result with its call
    ids = [i for i, _ in wire if i]
    assert len(ids) == len(set(ids)), "no event twice"
    by_cursor: dict[str, list[dict[str, Any]]] = {}
    for i, data in wire:
        if i:
            by_cursor.setdefault(i.split("/")[0], []).append(data)
    own = [e for e in recorded if not is_native(e)]
    assert own, "the adapter wrote events of the ledger's own"
    for e in own:
        made = by_cursor.get(e.cursor, [])
        kinds = [d["type"] for d in made]
        if e.type == "message":
            assert kinds == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]
            assert made[1]["delta"] == e.fields["body"]
            assert made[1]["messageId"] == e.event_id
        elif e.type == "tool_call":
            assert kinds == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
            assert made[0]["toolCallName"] == e.fields["tool"]
            assert json.loads(made[1]["delta"]) == e.fields.get("args", {})
        elif e.type == "tool_result":
            assert kinds == ["TOOL_CALL_RESULT"]
            assert made[0]["toolCallId"] == e.fields["attempt_id"]
        else:
            assert made, e.fields
    # and nothing of a framework's own records
    assert not any(e.cursor in by_cursor for e in recorded if is_native(e))


WRITER = """
import os, sys, time
import ledger_bus
from ledger_bus.agent.recorder import Recorder

store = ledger_bus.connect(sys.argv[1], prefix=sys.argv[2])
with Recorder(store, "live", "worker").run("job") as run:
    for n in range(int(sys.argv[3])):
        if n == 3:  # the rest once the test says so: the run is still going when it is cut off
            while not os.path.exists(sys.argv[4]):
                time.sleep(0.02)
        time.sleep(0.05)
        run.call("step", {"n": n}, lambda n: n * n)
"""


@pytest.mark.timeout(120)
def test_a_front_end_watches_another_process_s_run_live_and_resumes_after_a_cut_without_a_gap(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    need_node()
    redis_store.append(lb.StreamId("live", "main"), 0, "a0", [msg("the job is about to start")])
    with served(view_app(redis_url, prefix)) as base:
        url = f"{base}/s/live/ag-ui"
        # Given another process doing a run of 12 calls, 3 made so far
        go_on = tmp_path / "go-on"
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, redis_url, prefix, "12", str(go_on)], cwd=ROOT
        )
        try:
            # When a front end watches it with AG-UI's client, and its connection drops in the
            # middle of a call: the stream's RUN_STARTED, 3 events of the message, the run, two
            # calls of 4 events, and 2 of the third's
            first = watch(url, "--stop-after", "15")
            assert writer.poll() is None, "the run was still going when the connection dropped"
            last = ident(first[-1])
            assert first[-1]["type"] == "TOOL_CALL_ARGS"
            assert last is not None
            # and it comes back after the last event it had while the run goes on, until it ends
            go_on.touch()
            rest = watch(f"{url}?after={last}", "--until", "SUBAGENT_FINISHED")
        finally:
            writer.wait(timeout=30)
        assert writer.returncode == 0
        whole = read_stream(url)
    # Then the resumed stream opens by saying again what was open where it resumed: the run,
    # and the call cut in the middle, each marked and with the id it had
    assert [e["type"] for e in rest[:3]] == ["RUN_STARTED", "SUBAGENT_STARTED", "TOOL_CALL_START"]
    assert all(e["metadata"]["ledger"]["reopened"] for e in rest[1:3])
    reopened = {e["metadata"]["ledger"]["id"] for e in rest[1:3]}
    assert reopened <= {ident(e) for e in first}
    # and the two watches hold every event of the session once, in its order
    ids = [ident(e) for e in first + rest if ident(e)]
    assert len(ids) == len(set(ids))
    assert ids == [i for i, _ in whole if i]
    assert sum(e["type"] == "TOOL_CALL_RESULT" for e in first + rest) == 12


def test_a_resume_point_that_is_not_one_is_refused_in_one_line(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    redis_store.append(lb.StreamId("s", "main"), 0, "a0", [msg("hi")])
    with served(view_app(redis_url, prefix)) as base:
        for bad in ("yesterday", "1-2/x", "1796601770522-000000/1234567"):
            answer = httpx.get(f"{base}/s/s/ag-ui", params={"after": bad}, timeout=5)
            assert answer.status_code == 400
            assert answer.json()["error"].startswith("not an AG-UI event id or a cursor")
        missing = httpx.get(f"{base}/s/nothing-here/ag-ui", timeout=5)
        assert missing.status_code == 404


def test_a_state_snapshot_first_says_what_runs_at_the_session_s_end(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    # Given a session whose runs have finished, but one still going
    session = adapter_sessions.recorder_session(redis_store, "snap")
    open_run = Recorder(redis_store, session, "late").run("late-run")
    open_run.__enter__()
    try:
        end = redis_store.tail(session, 1)[0].cursor
        with served(view_app(redis_url, prefix)) as base:
            events = read_stream(f"{base}/s/{session}/ag-ui?snapshot=1", idle_s=1.0)
    finally:
        open_run.__exit__(None, None, None)
    kinds = [d["type"] for _, d in events]
    assert kinds[:3] == ["RUN_STARTED", "STATE_SNAPSHOT", "SUBAGENT_STARTED"]
    snapshot = events[1][1]["snapshot"]
    assert list(snapshot["runs"]) == ["late-run"]
    assert snapshot["at"] == end
    assert events[2][1]["metadata"]["ledger"]["reopened"] is True
    assert len(events) == 3, "from the session's end: nothing before it is sent again"


def test_tokens_hold_the_ag_ui_stream_as_they_hold_the_web_view(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    need_node()
    ref = lb.StreamId("team-a-1", "main")
    redis_store.append(ref, 0, "a0", [msg("start")])
    redis_store.append(lb.StreamId("team-b-1", "main"), 0, "a0", [msg("theirs")])
    file = str(tmp_path / "tokens.json")
    viewer = add_token(file, Identity("viewer", "reader", "team-a-*"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    stream = f"{base}/s/team-a-1/ag-ui"
    command = ("ui", "--port", str(port), "--tokens", file)
    with ledger_serving(redis_url, prefix, port, tmp_path / "ui.log", *command):
        # No token, or one for another team's sessions: refused, before any event
        assert httpx.get(stream, timeout=5).status_code == 401
        theirs = httpx.get(f"{base}/s/team-b-1/ag-ui", headers=bearer(viewer), timeout=5)
        assert theirs.status_code == 403
        # AG-UI's client with the token reads the session
        seen = watch(stream, "--stop-after", "4", token=viewer)
        assert seen[2]["delta"] == "start"
        # and a stream open when its token is taken out of the file ends at the next event
        with httpx.stream("GET", stream, headers=bearer(viewer), timeout=10) as response:
            lines = response.iter_lines()
            redis_store.append(ref, 1, "a1", [msg("before revocation")])
            until(lines, "before revocation")
            revoke(file, "viewer")
            redis_store.append(ref, 2, "a2", [msg("secret after revocation")])
            rest, ended = to_the_end(lines, 8)
        assert ended, rest
        assert not any("secret" in line for line in rest)


def test_a_view_without_the_extra_says_which_to_install(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['ag_ui'] = None\n"
        "from starlette.testclient import TestClient\n"
        "import ledger_bus as lb\n"
        "from ledger_bus import aio\n"
        "from ledger_bus.ui.app import create_app\n"
        "app = create_app(lambda: aio.connect('memory://'), 'memory://')\n"
        "with TestClient(app) as c:\n"
        "    r = c.get('/s/x/ag-ui')\n"
        "    print(r.status_code, r.json()['error'])\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
        check=False,
    )  # fmt: skip
    assert ran.stdout.startswith("501 the AG-UI stream needs ag_ui"), ran.stdout + ran.stderr
    assert "pip install 'ledger-bus[ag-ui]'" in ran.stdout


def lifecycle(store: EventStore, session: str, steps: list[tuple[str, dict[str, Any]]]) -> None:
    """Events appended to their runs' streams, one append each, in order (run id, fields)."""
    for n, (run, fields) in enumerate(steps):
        event = {"type": "mutation", "agent": "w", "run_id": run, **fields}
        store.append(lb.StreamId(session, f"run-{run}"), lb.ANY, f"e{n}", [event])


def test_a_resume_inside_a_run_started_again_sends_its_new_start_once(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    need_node()
    # Given a run started again before it finished (a crashed run resumed: run.resumed, no
    # run.finished), which the stream says as the first one's end and the second one's start
    lifecycle(redis_store, "again", [
        ("R", {"kind": "run.started"}),
        ("R", {"kind": "step.done", "n": 1}),
        ("R", {"kind": "run.resumed"}),
        ("R", {"kind": "step.done", "n": 2}),
        ("R", {"kind": "run.finished", "status": "ok"}),
    ])  # fmt: skip
    resumed = list(redis_store.scan_session("again"))[2].cursor
    with served(view_app(redis_url, prefix)) as base:
        url = f"{base}/s/again/ag-ui"
        whole = [i for i, _ in read_stream(url, idle_s=1.0)]
        # When a front end cut off between the two resumes after the first
        rest = watch(f"{url}?after={resumed}/0", "--stop-after", "4")
        # (the same with the cursor written unpadded, as a client may keep it)
        ms, seq = resumed.split("-")
        unpadded = watch(f"{url}?after={ms}-{int(seq)}/0", "--stop-after", "4")
    # Then AG-UI's client takes it, and it holds the second start once, the rest after it
    kinds = ["RUN_STARTED", "SUBAGENT_STARTED", "CUSTOM", "SUBAGENT_FINISHED"]
    assert [e["type"] for e in rest] == kinds
    assert rest[1]["subagentRunId"] == "R#2"
    assert unpadded == rest
    assert "reopened" not in rest[1]["metadata"]["ledger"]
    assert [ident(e) for e in rest[1:]] == whole[whole.index(f"{resumed}/0") + 1 :]


def test_a_run_still_open_under_a_parent_that_finished_is_said_again_without_it(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    need_node()
    # Given a planner that delegated to a writer and finished, the writer's run still going
    lifecycle(redis_store, "orphan", [
        ("P", {"kind": "run.started"}),
        ("C", {"kind": "run.started", "parent_run": "P"}),
        ("P", {"kind": "run.finished", "status": "ok"}),
        ("C", {"kind": "step.done", "n": 1}),
    ])  # fmt: skip
    last = redis_store.tail("orphan", 1)[0].cursor
    with served(view_app(redis_url, prefix)) as base:
        url = f"{base}/s/orphan/ag-ui"
        # When a front end resumes after the last event, or asks for a snapshot first
        resumed = watch(f"{url}?after={last}", "--stop-after", "2")
        snapped = watch(f"{url}?snapshot=1", "--stop-after", "3")
    # Then AG-UI's client takes both: the writer's run said again, with no parent it never saw
    for got in (resumed, snapped[0:1] + snapped[2:]):
        assert [e["type"] for e in got] == ["RUN_STARTED", "SUBAGENT_STARTED"]
        assert got[1]["subagentRunId"] == "C"
        assert "parentSubagentRunId" not in got[1]
    assert snapped[1]["type"] == "STATE_SNAPSHOT"


def test_a_run_whose_parent_started_again_is_said_again_without_that_parent(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    need_node()
    # Given a writer delegated by a planner that then started again (run.resumed), the
    # writer's run still going
    lifecycle(redis_store, "restarted", [
        ("P", {"kind": "run.started"}),
        ("C", {"kind": "run.started", "parent_run": "P"}),
        ("P", {"kind": "run.resumed"}),
        ("C", {"kind": "step.done", "n": 1}),
    ])  # fmt: skip
    last = redis_store.tail("restarted", 1)[0].cursor
    with served(view_app(redis_url, prefix)) as base:
        live = watch(f"{base}/s/restarted/ag-ui", "--stop-after", "6")
        resumed = watch(f"{base}/s/restarted/ag-ui?after={last}", "--stop-after", "3")
    # Then the resumed stream names the planner's new run, and no parent for the writer: the
    # live stream never said the writer was the new run's
    started = {e["subagentRunId"]: e for e in live if e["type"] == "SUBAGENT_STARTED"}
    assert started["C"]["parentSubagentRunId"] == "P"
    again = {e["subagentRunId"]: e for e in resumed if e["type"] == "SUBAGENT_STARTED"}
    assert set(again) == {"P#2", "C"}
    assert "parentSubagentRunId" not in again["C"]
